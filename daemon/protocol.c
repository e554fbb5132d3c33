/* daemon/protocol.c — message framing, request decoding, event encoding.
 * See protocol.h for the contract and docs/PROTOCOL.md for the wire format. */
#include "daemon/protocol.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/model.h"

static const char *const code_names[] = {
    [PE_OK] = "ok", [PE_BAD_REQUEST] = "bad_request", [PE_UNKNOWN_OP] = "unknown_op",
    [PE_TOO_LARGE] = "too_large", [PE_DECODE] = "decode", [PE_BAD_NAME] = "bad_name",
    [PE_NOT_FOUND] = "not_found", [PE_EXISTS] = "exists", [PE_BUSY] = "busy",
    [PE_LIMIT] = "limit", [PE_BAD_STATE] = "bad_state", [PE_IO] = "io",
    [PE_SHUTTING_DOWN] = "shutting_down", [PE_INTERNAL] = "internal",
    [PE_UNAVAILABLE] = "unavailable",
    [PE_MOVED] = "moved", [PE_CONFLICT] = "conflict",
    [PE_INSUFFICIENT_STORAGE] = "insufficient_storage",
    [PE_UNAUTHORIZED] = "unauthorized",
};

const char *proto_code_name(proto_code c)
{
    if ((int)c < 0 || (size_t)c >= sizeof code_names / sizeof *code_names) return "internal";
    return code_names[c];
}

/* ---- framing -------------------------------------------------------------
 * msgpack is prefix-encoded, so a message is complete once every value that
 * a header announced has been seen: `need` counts values still owed. The
 * scan exists because msgpack-c allocates an array's or map's declared
 * element count up front: a 5-byte header could otherwise ask for gigabytes.
 * Every value takes at least one byte, so no honest message under the limit
 * declares more elements than the limit has bytes. */
static int be_len(const uint8_t *p, int n, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    *out = v;
    return 0;
}

long proto_scan(const uint8_t *buf, size_t len, size_t max_message)
{
    size_t pos = 0;
    uint64_t need = 1;
    while (need > 0) {
        if (pos > max_message) return -PE_TOO_LARGE;
        if (pos >= len) return 0;
        uint8_t b = buf[pos];
        size_t hdr = 1;          /* header bytes */
        uint64_t payload = 0;    /* raw bytes after the header */
        uint64_t items = 0;      /* values the header announces */
        int lenbytes = 0;        /* big-endian length field after the tag */
        int kind = 0;            /* 0 scalar/raw, 1 array, 2 map */
        if (b <= 0x7f || b >= 0xe0) {
            /* fixint */
        } else if (b <= 0x8f) { kind = 2; items = b & 0x0f;
        } else if (b <= 0x9f) { kind = 1; items = b & 0x0f;
        } else if (b <= 0xbf) { payload = b & 0x1f;
        } else switch (b) {
            case 0xc0: case 0xc2: case 0xc3: break;
            case 0xc1: return -PE_DECODE;
            case 0xc4: case 0xd9: lenbytes = 1; break;            /* bin8, str8 */
            case 0xc5: case 0xda: lenbytes = 2; break;
            case 0xc6: case 0xdb: lenbytes = 4; break;
            case 0xc7: lenbytes = 1; payload = 1; break;           /* ext: +type */
            case 0xc8: lenbytes = 2; payload = 1; break;
            case 0xc9: lenbytes = 4; payload = 1; break;
            case 0xca: payload = 4; break;
            case 0xcb: payload = 8; break;
            case 0xcc: case 0xd0: payload = 1; break;
            case 0xcd: case 0xd1: payload = 2; break;
            case 0xce: case 0xd2: payload = 4; break;
            case 0xcf: case 0xd3: payload = 8; break;
            case 0xd4: payload = 2; break;                         /* fixext */
            case 0xd5: payload = 3; break;
            case 0xd6: payload = 5; break;
            case 0xd7: payload = 9; break;
            case 0xd8: payload = 17; break;
            case 0xdc: kind = 1; lenbytes = 2; break;
            case 0xdd: kind = 1; lenbytes = 4; break;
            case 0xde: kind = 2; lenbytes = 2; break;
            case 0xdf: kind = 2; lenbytes = 4; break;
            default: return -PE_DECODE;
        }
        if (lenbytes) {
            if (len - pos < 1 + (size_t)lenbytes) {
                return (pos + 1 + lenbytes > max_message) ? -PE_TOO_LARGE : 0;
            }
            uint64_t v;
            be_len(buf + pos + 1, lenbytes, &v);
            hdr += lenbytes;
            if (kind) items = v; else payload += v;
        }
        if (kind == 2) items *= 2;
        need = need - 1 + items;
        if (need > max_message || payload > max_message) return -PE_TOO_LARGE;
        pos += hdr + payload;
    }
    if (pos > max_message) return -PE_TOO_LARGE;
    if (pos > len) return 0;
    return (long)pos;
}

/* ---- decoding ------------------------------------------------------------ */

static proto_code fail(proto_error *err, proto_code c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static proto_code fail(proto_error *err, proto_code c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = c;
    return c;
}

static const msgpack_object *field(const msgpack_object *map, const char *key)
{
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
            memcmp(k->via.str.ptr, key, kl) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static const char *type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER: case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "integer";
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "string";
    case MSGPACK_OBJECT_BIN: return "bin";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    default: return "ext";
    }
}

/* An unsigned integer field in [lo, hi]; absent leaves *out untouched. */
static proto_code get_uint(const msgpack_object *m, const char *key, uint64_t lo, uint64_t hi,
                           int required, uint64_t *out, int *present, proto_error *err)
{
    const msgpack_object *v = field(m, key);
    if (present) *present = v != NULL;
    if (!v) return required ? fail(err, PE_BAD_REQUEST, "missing field '%s'", key) : PE_OK;
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return fail(err, PE_BAD_REQUEST, "field '%s' must be >= %llu, got %lld", key,
                    (unsigned long long)lo, (long long)v->via.i64);
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return fail(err, PE_BAD_REQUEST, "field '%s' must be an unsigned integer, got %s",
                    key, type_name(v));
    if (v->via.u64 < lo || v->via.u64 > hi)
        return fail(err, PE_BAD_REQUEST, "field '%s' must be in %llu..%llu, got %llu", key,
                    (unsigned long long)lo, (unsigned long long)hi,
                    (unsigned long long)v->via.u64);
    *out = v->via.u64;
    return PE_OK;
}

static proto_code get_float(const msgpack_object *m, const char *key, double lo, double hi,
                            int lo_open, float *out, proto_error *err)
{
    const msgpack_object *v = field(m, key);
    if (!v) return PE_OK;
    double d;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64) d = v->via.f64;
    else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) d = (double)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) d = (double)v->via.i64;
    else return fail(err, PE_BAD_REQUEST, "field '%s' must be a number, got %s", key, type_name(v));
    if (!isfinite(d) || d > hi || d < lo || (lo_open && d == lo))
        return fail(err, PE_BAD_REQUEST, "field '%s' must be in %s%g..%g, got %g", key,
                    lo_open ? "(exclusive) " : "", lo, hi, d);
    *out = (float)d;
    return PE_OK;
}

/* Raw bytes from a str or bin field; copies into a malloc'd buffer. */
static proto_code get_bytes(const msgpack_object *m, const char *key, int required,
                            int allow_nul, uint8_t **out, size_t *outlen, proto_error *err)
{
    const msgpack_object *v = field(m, key);
    if (!v) return required ? fail(err, PE_BAD_REQUEST, "missing field '%s'", key) : PE_OK;
    const char *p; uint32_t n;
    if (v->type == MSGPACK_OBJECT_STR) { p = v->via.str.ptr; n = v->via.str.size; }
    else if (v->type == MSGPACK_OBJECT_BIN) { p = v->via.bin.ptr; n = v->via.bin.size; }
    else return fail(err, PE_BAD_REQUEST, "field '%s' must be a string or bin, got %s",
                     key, type_name(v));
    if (!allow_nul && n && memchr(p, 0, n))
        return fail(err, PE_BAD_REQUEST, "field '%s' contains byte 0 (reserved for BOS)", key);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return fail(err, PE_INTERNAL, "out of memory copying '%s'", key);
    if (n) memcpy(b, p, n);
    *out = b;
    *outlen = n;
    return PE_OK;
}

static proto_code get_name(const msgpack_object *m, const char *key, char *out, proto_error *err)
{
    const msgpack_object *v = field(m, key);
    if (!v) return fail(err, PE_BAD_REQUEST, "missing field '%s'", key);
    if (v->type != MSGPACK_OBJECT_STR && v->type != MSGPACK_OBJECT_BIN)
        return fail(err, PE_BAD_REQUEST, "field '%s' must be a string, got %s", key, type_name(v));
    const char *p = v->type == MSGPACK_OBJECT_STR ? v->via.str.ptr : v->via.bin.ptr;
    uint32_t n = v->type == MSGPACK_OBJECT_STR ? v->via.str.size : v->via.bin.size;
    if (n > STORE_NAME_MAX)
        return fail(err, PE_BAD_NAME, "session name in '%s' is %u bytes, the limit is %d",
                    key, n, STORE_NAME_MAX);
    if (memchr(p, 0, n))
        return fail(err, PE_BAD_NAME, "session name in '%s' contains a NUL byte", key);
    memcpy(out, p, n);
    out[n] = 0;
    char why[160];
    if (store_name_check(out, why, sizeof why) != 0)
        return fail(err, PE_BAD_NAME, "bad session name in '%s': %s", key, why);
    return PE_OK;
}

static proto_code decode_sampling(const msgpack_object *m, const proto_limits *lim,
                                  op_request *r, proto_error *err)
{
    proto_code c;
    uint64_t u;
    r->max_tokens = lim->max_tokens < 256 ? lim->max_tokens : 256;
    const msgpack_object *mt = field(m, "max_tokens");
    if (mt && mt->type == MSGPACK_OBJECT_POSITIVE_INTEGER && mt->via.u64 > lim->max_tokens)
        return fail(err, PE_LIMIT, "max_tokens %llu is over the server's limit of %u",
                    (unsigned long long)mt->via.u64, lim->max_tokens);
    if ((c = get_uint(m, "max_tokens", 0, lim->max_tokens, 0, &u, NULL, err))) return c;
    if (mt) r->max_tokens = (uint32_t)u;

    const msgpack_object *st = field(m, "stop");
    if (st) {
        if (st->type != MSGPACK_OBJECT_ARRAY)
            return fail(err, PE_BAD_REQUEST, "field 'stop' must be an array of strings, got %s",
                        type_name(st));
        if (st->via.array.size > STOP_MAX)
            return fail(err, PE_BAD_REQUEST, "field 'stop' has %u strings, at most %d allowed",
                        st->via.array.size, STOP_MAX);
        for (uint32_t i = 0; i < st->via.array.size; i++) {
            const msgpack_object *s = &st->via.array.ptr[i];
            const char *p; uint32_t n;
            if (s->type == MSGPACK_OBJECT_STR) { p = s->via.str.ptr; n = s->via.str.size; }
            else if (s->type == MSGPACK_OBJECT_BIN) { p = s->via.bin.ptr; n = s->via.bin.size; }
            else return fail(err, PE_BAD_REQUEST, "stop[%u] must be a string, got %s", i,
                             type_name(s));
            if (n < 1 || n > STOP_MAX_LEN)
                return fail(err, PE_BAD_REQUEST, "stop[%u] is %u bytes, must be 1..%d", i, n,
                            STOP_MAX_LEN);
            memcpy(r->stop[i], p, n);
            r->stop_len[i] = (uint8_t)n;
        }
        r->n_stop = (int)st->via.array.size;
    }
    if ((c = get_float(m, "temperature", 0, 100, 0, &r->sp.temperature, err))) return c;
    if ((c = get_uint(m, "top_k", 0, lim->max_top_k > 0 ? (uint64_t)lim->max_top_k : LIND_MAX_VOCAB, 0, &u,
                      NULL, err))) return c;
    if (field(m, "top_k")) r->sp.top_k = (int)u;
    if ((c = get_float(m, "top_p", 0, 1, 1, &r->sp.top_p, err))) return c;
    if ((c = get_float(m, "repetition_penalty", 1, 100, 0, &r->sp.rep_penalty, err))) return c;
    if ((c = get_uint(m, "repetition_window", 0, SAMPLER_WINDOW_MAX, 0, &u, NULL, err))) return c;
    if (field(m, "repetition_window")) r->sp.rep_window = (int)u;
    const msgpack_object *sd = field(m, "seed");
    if (sd) {
        if (sd->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return fail(err, PE_BAD_REQUEST, "field 'seed' must be an unsigned integer, got %s",
                        type_name(sd));
        r->sp.seed = sd->via.u64;
        r->has_seed = 1;
    }
    const msgpack_object *ie = field(m, "ignore_eos");
    if (ie) {
        if (ie->type != MSGPACK_OBJECT_BOOLEAN)
            return fail(err, PE_BAD_REQUEST, "field 'ignore_eos' must be a boolean, got %s", type_name(ie));
        r->has_ignore_eos = 1;
        r->ignore_eos = ie->via.boolean;
    }
    return PE_OK;
}

/* hello's optional `token` (str or bin, up to PROTO_MAX_TOKEN bytes): what
 * a TCP connection presents when the server has one (docs/PROTOCOL.md). */
static proto_code get_token(const msgpack_object *o, op_request *r, proto_error *err)
{
    const msgpack_object *v = field(o, "token");
    if (!v) return PE_OK;
    if (v->type != MSGPACK_OBJECT_STR && v->type != MSGPACK_OBJECT_BIN)
        return fail(err, PE_BAD_REQUEST, "field 'token' must be a string, got %s", type_name(v));
    const char *p = v->type == MSGPACK_OBJECT_STR ? v->via.str.ptr : v->via.bin.ptr;
    uint32_t n = v->type == MSGPACK_OBJECT_STR ? v->via.str.size : v->via.bin.size;
    if (n > PROTO_MAX_TOKEN)
        return fail(err, PE_BAD_REQUEST, "field 'token' is %u bytes, the limit is %d", n, PROTO_MAX_TOKEN);
    memcpy(r->token, p, n);
    r->token_len = n;
    return PE_OK;
}

/* The optional retry fields of generate/append: `request_id` (str or bin,
 * 1..64 bytes, UTF-8 without control characters) and `if_tokens`; and
 * `chat_template` (1..2^32-1: the hash of the chat template the text is
 * framed with, recurrent/chat.h). */
static proto_code get_retry(const msgpack_object *o, op_request *r, proto_error *err)
{
    const msgpack_object *v = field(o, "request_id");
    if (v) {
        if (v->type != MSGPACK_OBJECT_STR && v->type != MSGPACK_OBJECT_BIN)
            return fail(err, PE_BAD_REQUEST, "field 'request_id' must be a string, got %s", type_name(v));
        const char *p = v->type == MSGPACK_OBJECT_STR ? v->via.str.ptr : v->via.bin.ptr;
        uint32_t n = v->type == MSGPACK_OBJECT_STR ? v->via.str.size : v->via.bin.size;
        char why[160];
        if (n == 0 || n > STORE_REQUEST_ID_MAX)
            return fail(err, PE_BAD_REQUEST, "field 'request_id' must be 1..%d bytes, got %u",
                        STORE_REQUEST_ID_MAX, n);
        if (memchr(p, 0, n))
            return fail(err, PE_BAD_REQUEST, "field 'request_id' contains a NUL byte");
        memcpy(r->request_id, p, n);
        r->request_id[n] = 0;
        if (store_request_id_check(r->request_id, why, sizeof why) != 0) {
            r->request_id[0] = 0;
            return fail(err, PE_BAD_REQUEST, "field 'request_id': %s", why);
        }
    }
    uint64_t tpl = 0;
    proto_code c = get_uint(o, "chat_template", 1, UINT32_MAX, 0, &tpl, NULL, err);
    if (c) return c;
    r->chat_template = (uint32_t)tpl;
    return get_uint(o, "if_tokens", 0, UINT64_MAX, 0, &r->if_tokens, &r->has_if_tokens, err);
}

/* Optional boolean `progress` of generate/append. */
static proto_code get_progress(const msgpack_object *o, op_request *r, proto_error *err)
{
    const msgpack_object *p = field(o, "progress");
    if (!p) return PE_OK;
    if (p->type != MSGPACK_OBJECT_BOOLEAN)
        return fail(err, PE_BAD_REQUEST, "field 'progress' must be a boolean, got %s", type_name(p));
    r->progress = p->via.boolean;
    return PE_OK;
}

/* ---- each op's fields (the decode column of daemon/ops.h) ------------------ */

static proto_code decode_hello(const msgpack_object *o, const proto_limits *lim, op_request *r,
                               proto_error *err)
{
    (void)lim;
    return get_token(o, r, err);
}

static proto_code decode_none(const msgpack_object *o, const proto_limits *lim, op_request *r,
                              proto_error *err)
{
    (void)o; (void)lim; (void)r; (void)err;
    return PE_OK;
}

static proto_code decode_generate(const msgpack_object *o, const proto_limits *lim, op_request *r,
                                  proto_error *err)
{
    proto_code c;
    if ((c = get_name(o, "session", r->session, err))) return c;
    if ((c = get_bytes(o, "text", 0, 0, &r->text, &r->text_len, err))) return c;
    if ((c = get_progress(o, r, err))) return c;
    if ((c = get_retry(o, r, err))) return c;
    return decode_sampling(o, lim, r, err);
}

static proto_code decode_append(const msgpack_object *o, const proto_limits *lim, op_request *r,
                                proto_error *err)
{
    (void)lim;
    proto_code c;
    if ((c = get_name(o, "session", r->session, err))) return c;
    if ((c = get_progress(o, r, err))) return c;
    if ((c = get_retry(o, r, err))) return c;
    return get_bytes(o, "text", 1, 0, &r->text, &r->text_len, err);
}

/* By request id on this connection (target), or by session name. */
static proto_code decode_cancel(const msgpack_object *o, const proto_limits *lim, op_request *r,
                                proto_error *err)
{
    (void)lim;
    int has_target = 0;
    proto_code c;
    if ((c = get_uint(o, "target", 0, UINT64_MAX, 0, &r->target, &has_target, err))) return c;
    if (has_target && field(o, "session"))
        return fail(err, PE_BAD_REQUEST, "cancel takes 'target' or 'session', not both");
    if (has_target) return PE_OK;
    if (!field(o, "session")) return fail(err, PE_BAD_REQUEST, "missing field 'target' (or 'session')");
    return get_name(o, "session", r->session, err);
}

static proto_code decode_session(const msgpack_object *o, const proto_limits *lim, op_request *r,
                                 proto_error *err)
{
    (void)lim;
    return get_name(o, "session", r->session, err);
}

static proto_code decode_fork(const msgpack_object *o, const proto_limits *lim, op_request *r,
                              proto_error *err)
{
    (void)lim;
    proto_code c;
    if ((c = get_name(o, "session", r->session, err))) return c;
    return get_name(o, "to", r->to, err);
}

static proto_code decode_import(const msgpack_object *o, const proto_limits *lim, op_request *r,
                                proto_error *err)
{
    (void)lim;
    proto_code c;
    if ((c = get_name(o, "session", r->session, err))) return c;
    return get_bytes(o, "data", 1, 1, &r->data, &r->data_len, err);
}

typedef proto_code decoder(const msgpack_object *o, const proto_limits *lim, op_request *r,
                           proto_error *err);
static decoder *const decoders[OP_COUNT] = {
#define DECODER(E, name, decode, entry, compute, store, spread, nodev) [OP_##E] = decode,
    LIND_OPS(DECODER)
#undef DECODER
};

proto_code proto_decode(const msgpack_object *o, const proto_limits *lim,
                        op_request *r, proto_error *err)
{
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    if (o->type != MSGPACK_OBJECT_MAP)
        return fail(err, PE_DECODE, "a request must be a msgpack map, got %s", type_name(o));
    const msgpack_object *idv = field(o, "id");
    if (idv && idv->type == MSGPACK_OBJECT_POSITIVE_INTEGER) err->id = idv->via.u64;
    proto_code c = PE_OK;
    uint64_t u;
    if ((c = get_uint(o, "id", 0, UINT64_MAX, 1, &u, NULL, err))) goto out;
    if (u == 0) {   /* the id of connection-level errors: an answer on it would be ambiguous */
        c = fail(err, PE_BAD_REQUEST, "field 'id' is 0, which the server keeps for"
                 " connection-level errors; use 1 or more");
        goto out;
    }
    r->id = u;
    const msgpack_object *opv = field(o, "op");
    if (!opv) { c = fail(err, PE_BAD_REQUEST, "missing field 'op'"); goto out; }
    if (opv->type != MSGPACK_OBJECT_STR) {
        c = fail(err, PE_BAD_REQUEST, "field 'op' must be a string, got %s", type_name(opv));
        goto out;
    }
    r->op = op_by_name(opv->via.str.ptr, opv->via.str.size);
    if (!r->op) {
        char shown[40];
        size_t n = opv->via.str.size < 32 ? opv->via.str.size : 32;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)opv->via.str.ptr[i];
            shown[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        }
        shown[n] = 0;
        c = fail(err, PE_UNKNOWN_OP, "unknown op '%s%s'", shown, opv->via.str.size > 32 ? "..." : "");
        goto out;
    }
    r->sp = (sampler_params){ .temperature = 0.8f, .top_k = 0, .top_p = 1.0f,
                              .rep_penalty = 1.0f, .rep_window = 64, .seed = 0 };
    c = decoders[r->op](o, lim, r, err);
out:
    if (c != PE_OK) {
        op_request_free(r);
        memset(r, 0, sizeof *r);
    }
    return c;
}

proto_code proto_parse(const uint8_t *msg, size_t len, const proto_limits *lim,
                       op_request *req, proto_error *err)
{
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    if (len > lim->max_message)
        return fail(err, PE_TOO_LARGE, "message of %zu bytes is over the limit of %zu bytes",
                    len, lim->max_message);
    long n = proto_scan(msg, len, lim->max_message);
    if (n == -PE_TOO_LARGE)
        return fail(err, PE_TOO_LARGE, "message is over the limit of %zu bytes", lim->max_message);
    if (n <= 0 || (size_t)n != len)
        return fail(err, PE_DECODE, "bytes are not one msgpack message");
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, (const char *)msg, len, &off);
    proto_code c;
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        c = fail(err, PE_DECODE, "bytes do not decode as msgpack (%s)",
                 ur == MSGPACK_UNPACK_NOMEM_ERROR ? "nested too deeply or too large, or the server"
                 " is out of memory" : "malformed");
    else
        c = proto_decode(&up.data, lim, req, err);
    msgpack_unpacked_destroy(&up);
    return c;
}

/* ---- encoding ------------------------------------------------------------ */

void proto_pack_key(msgpack_packer *pk, const char *key)
{
    size_t n = strlen(key);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, key, n);
}

void proto_pack_str(msgpack_packer *pk, const char *s)
{
    proto_pack_key(pk, s);
}

void proto_pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static void head(msgpack_packer *pk, msgpack_sbuffer *sb, uint64_t id, const char *event, int extra)
{
    msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(pk, 2 + extra);
    proto_pack_key(pk, "id");
    msgpack_pack_uint64(pk, id);
    proto_pack_key(pk, "event");
    proto_pack_str(pk, event);
}

int proto_reserve(msgpack_sbuffer *sb, size_t n)
{
    if (sb->alloc - sb->size >= n) return 0;
    size_t want = sb->size + n;
    size_t cap = sb->alloc ? sb->alloc : MSGPACK_SBUFFER_INIT_SIZE;
    while (cap < want) cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) return -ENOMEM;
    sb->data = p;
    sb->alloc = cap;
    return 0;
}

void proto_pack_error(msgpack_sbuffer *sb, uint64_t id, proto_code code, const char *msg)
{
    msgpack_packer pk;
    head(&pk, sb, id, "error", 2);
    proto_pack_key(&pk, "code");
    proto_pack_str(&pk, proto_code_name(code));
    proto_pack_key(&pk, "message");
    proto_pack_str(&pk, msg ? msg : "");
}

void proto_pack_token(msgpack_sbuffer *sb, uint64_t id, const uint8_t *bytes, size_t n)
{
    msgpack_packer pk;
    head(&pk, sb, id, "token", 1);
    proto_pack_key(&pk, "data");
    proto_pack_bin(&pk, bytes, n);
}

void proto_pack_progress(msgpack_sbuffer *sb, uint64_t id, uint64_t fed, uint64_t total)
{
    msgpack_packer pk;
    head(&pk, sb, id, "progress", 2);
    proto_pack_key(&pk, "fed");
    msgpack_pack_uint64(&pk, fed);
    proto_pack_key(&pk, "total");
    msgpack_pack_uint64(&pk, total);
}

void proto_pack_done(msgpack_sbuffer *sb, const proto_done *d)
{
    msgpack_packer pk;
    int stop = d->stop && d->stop_len;
    head(&pk, sb, d->id, "done", 6 + stop + (d->has_stop_token ? 1 : 0) + (d->replayed ? 1 : 0));
    proto_pack_key(&pk, "reason");
    proto_pack_str(&pk, d->reason);
    proto_pack_key(&pk, "tokens_in");
    msgpack_pack_uint64(&pk, d->tokens_in);
    proto_pack_key(&pk, "fed_bytes");
    msgpack_pack_uint64(&pk, d->fed_bytes);
    proto_pack_key(&pk, "tokens_out");
    msgpack_pack_uint64(&pk, d->tokens_out);
    proto_pack_key(&pk, "session_tokens");
    msgpack_pack_uint64(&pk, d->session_tokens);
    proto_pack_key(&pk, "ms");
    msgpack_pack_map(&pk, 5);
    proto_pack_key(&pk, "queue");    msgpack_pack_double(&pk, d->ms_queue);
    proto_pack_key(&pk, "prompt");   msgpack_pack_double(&pk, d->ms_prompt);
    proto_pack_key(&pk, "generate"); msgpack_pack_double(&pk, d->ms_generate);
    proto_pack_key(&pk, "save");     msgpack_pack_double(&pk, d->ms_save);
    proto_pack_key(&pk, "total");    msgpack_pack_double(&pk, d->ms_total);
    if (stop) {
        proto_pack_key(&pk, "stop");
        proto_pack_bin(&pk, d->stop, d->stop_len);
    }
    if (d->has_stop_token) {
        proto_pack_key(&pk, "stop_token");
        msgpack_pack_uint32(&pk, d->stop_token);
    }
    if (d->replayed) {
        proto_pack_key(&pk, "replayed");
        msgpack_pack_true(&pk);
    }
}

void proto_result_begin(msgpack_packer *pk, msgpack_sbuffer *sb, uint64_t id, int n_fields)
{
    head(pk, sb, id, "result", n_fields);
}
