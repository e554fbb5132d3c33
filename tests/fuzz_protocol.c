/* tests/fuzz_protocol.c — libFuzzer target for the request decoder.
 *
 * Feeds arbitrary bytes through what a connection does with them: the frame
 * scan, then msgpack unpacking and request decoding of each complete frame.
 * Invariants checked: no crash, no leak, scan results within bounds and
 * independent of where reads split the bytes, every error carries a
 * message, and an accepted request always has a valid op, a session name
 * the store takes, max_tokens within the limit and no NUL in its text.
 * Built and run by `make fuzz` (clang -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "daemon/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_limits lim = { .max_message = 4096, .max_tokens = 1000 };
    size_t off = 0;
    while (off < size) {
        long n = proto_scan(data + off, size - off, lim.max_message);
        if (n <= 0) break;   /* incomplete, too large or undecodable: the connection ends */
        if ((size_t)n > size - off || (size_t)n > lim.max_message) abort();
        /* A frame found in full is "incomplete" in any shorter prefix: the
         * scan gives the same answer whatever the read boundaries were. */
        if (proto_scan(data + off, (size_t)n - 1, lim.max_message) != 0) abort();
        if (proto_scan(data + off, (size_t)n / 2, lim.max_message) != 0) abort();
        op_request r;
        proto_error e;
        proto_code c = proto_parse(data + off, (size_t)n, &lim, &r, &e);
        if (c == PE_OK) {
            if (r.op <= OP_NONE || r.op > OP_LAST) abort();
            if ((r.op == OP_GENERATE || r.op == OP_APPEND) && store_name_check(r.session, NULL, 0))
                abort();
            if (r.op == OP_GENERATE && r.max_tokens > lim.max_tokens) abort();
            if (r.text_len && memchr(r.text, 0, r.text_len)) abort();
            op_request_free(&r);
        } else if (!e.msg[0]) {
            abort();   /* every error carries a message */
        }
        off += (size_t)n;
    }
    return 0;
}
