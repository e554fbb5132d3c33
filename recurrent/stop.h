/* recurrent/stop.h — the limits of a turn's stop strings, defined once for
 * every front end that takes them (the socket protocol, HTTP's `stop`, chat
 * templates' "stop", lindctl's --stop): at most STOP_MAX strings, each of
 * 1..STOP_MAX_LEN bytes. The daemon matches them against the output's last
 * STOP_MAX_LEN bytes (docs/PROTOCOL.md, "generate"). */
#ifndef LIND_RECURRENT_STOP_H
#define LIND_RECURRENT_STOP_H

#define STOP_MAX     8
#define STOP_MAX_LEN 64

#endif
