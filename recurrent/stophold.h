/* recurrent/stophold.h — how much of a reply that streams in as it is
 * generated may be shown yet, when stop strings may end it: the one rule of
 * the HTTP front door's streamed text (daemon/http.c) and lindctl chat's
 * terminal (client/lindctl_chat.c).
 *
 * The daemon ends a turn on a stop string but sends every byte it made, the
 * stop string's too (docs/PROTOCOL.md, "generate"); a front end shows the
 * reply without it. So the bytes at the end that could still begin a stop
 * string wait until the next bytes tell (a whole stop string there waits
 * too: the reply is cut before it), and so do the bytes of a UTF-8
 * character not complete yet. What waits is at most STOP_MAX_LEN + 3
 * bytes; everything before it can never become part of a stop string.
 *
 * The stop strings are the caller's bytes (not copied: they must outlive
 * the stophold). No allocation; any thread. */
#ifndef LIND_RECURRENT_STOPHOLD_H
#define LIND_RECURRENT_STOPHOLD_H

#include <stddef.h>
#include <stdint.h>
#include "recurrent/stop.h"

typedef struct stophold {
    int            n;                 /* stop strings */
    const uint8_t *s[STOP_MAX];
    size_t         len[STOP_MAX];     /* 1..STOP_MAX_LEN each */
} stophold;

/* Add the stop string s[0..len). 0, or -EINVAL (len 0 or over
 * STOP_MAX_LEN, or STOP_MAX strings already). A zeroed stophold has none. */
int    stophold_add(stophold *h, const void *s, size_t len);
/* How many bytes at the end of p[0..n) could still begin a stop string
 * (the longest such end; 0 when none could). */
size_t stophold_tail(const stophold *h, const uint8_t *p, size_t n);
/* How many bytes of p[0..n) end on a UTF-8 boundary: an incomplete
 * sequence at the end waits for the rest (bytes that are not UTF-8 at all
 * do not wait). */
size_t stophold_utf8(const uint8_t *p, size_t n);
/* How many bytes of p[0..n), a reply not ended yet, may be shown now:
 * neither the stop tail nor a split UTF-8 character. */
size_t stophold_shown(const stophold *h, const uint8_t *p, size_t n);

#endif
