/* tests/fuzz_turnlog.c — libFuzzer driver for a recorded turn's answer
 * (turnlog_replay, daemon/turnlog.h): bytes read back from the store's turn
 * results, which a damaged database can hand back as anything.
 *
 * The expected parameters hash is the one the input carries (bytes 4..11),
 * so inputs get past that check; the first input byte picks whether it is
 * instead off by one (the "different turn" refusal). Invariants: no crash,
 * leak or UB; the result is 0, -EBADMSG, -EINVAL or -ENOMEM, and -EINVAL
 * only for the wrong hash; a refusal other than -ENOMEM appends nothing; an
 * accepted blob appends token events then exactly one final event (done or
 * appended) marked replayed, for the request id given, and every event
 * packs as msgpack. */
#include <errno.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "daemon/event.h"
#include "daemon/turnlog.h"
#include "state/le.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int wrong = data[0] & 1;
    const uint8_t *blob = data + 1;
    size_t len = size - 1;
    uint64_t hash = len >= 12 ? le_get64(blob + 4) : 0;
    if (wrong) hash++;
    evlist ev;
    evlist_init(&ev);
    int is_append = -1;
    int rc = turnlog_replay(blob, len, 77, hash, 1.5, &ev, &is_append);
    if (rc != 0 && rc != -EBADMSG && rc != -EINVAL && rc != -ENOMEM) abort();
    if (rc == -EINVAL && !(wrong && len >= 12 && !memcmp(blob, "LTR1", 4))) abort();
    if ((rc == -EBADMSG || rc == -EINVAL) && ev.n != 0) abort();
    if (rc == 0) {
        if (wrong || ev.n < 1 || (is_append != 0 && is_append != 1)) abort();
        for (size_t i = 0; i + 1 < ev.n; i++)
            if (ev.v[i].kind != EV_TOKEN || ev.v[i].id != 77) abort();
        const event *last = &ev.v[ev.n - 1];
        if (last->kind != (is_append ? EV_APPENDED : EV_DONE) || !last->done.replayed) abort();
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        for (size_t i = 0; i < ev.n; i++) event_pack_msgpack(&sb, &ev, &ev.v[i]);
        if (sb.size == 0) abort();
        msgpack_sbuffer_destroy(&sb);
    }
    evlist_free(&ev);
    return 0;
}
