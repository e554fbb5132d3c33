/* tests/test_daemon_protocol.c — the request decoder and event encoder:
 * framing, every op's fields, every error code the decoder can give. */
#include <string.h>
#include <msgpack.h>
#include "tests/check.h"
#include "daemon/protocol.h"

static const proto_limits LIM = { .max_message = 1 << 20, .max_tokens = 4096, .max_top_k = 256 };

/* Build a request from alternating key/value specs:
 *   "s" str, "u" uint64, "i" int64, "f" double, "b" bin, "n" nil,
 *   "a" array of n strs (n, then the strs). */
static msgpack_sbuffer sb;
static msgpack_packer pk;
static void begin(int pairs)
{
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, pairs);
}
static void k(const char *s) { msgpack_pack_str(&pk, strlen(s)); msgpack_pack_str_body(&pk, s, strlen(s)); }
static void ks(const char *key, const char *v) { k(key); k(v); }
static void ku(const char *key, uint64_t v) { k(key); msgpack_pack_uint64(&pk, v); }

static proto_code parse(op_request *r, proto_error *e)
{
    proto_code c = proto_parse((const uint8_t *)sb.data, sb.size, &LIM, r, e);
    msgpack_sbuffer_destroy(&sb);
    return c;
}

static void scan_framing(void)
{
    begin(2); ks("op", "hello"); ku("id", 7);
    size_t n = sb.size;
    uint8_t buf[64];
    memcpy(buf, sb.data, n);
    memcpy(buf + n, sb.data, n);
    msgpack_sbuffer_destroy(&sb);
    CHECK(proto_scan(buf, 2 * n, 1 << 20) == (long)n, "first message found in two");
    for (size_t i = 0; i < n; i++)
        CHECK(proto_scan(buf, i, 1 << 20) == 0, "prefix of %zu bytes is incomplete", i);
    uint8_t bad[] = { 0xc1 };
    CHECK(proto_scan(bad, 1, 1 << 20) == -PE_DECODE, "0xc1 is refused");
    /* array32 declaring 4 billion elements: refused before allocation */
    uint8_t huge[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    CHECK(proto_scan(huge, 5, 1 << 20) == -PE_TOO_LARGE, "huge array header");
    uint8_t hmap[] = { 0xdf, 0x00, 0x10, 0x00, 0x00 };
    CHECK(proto_scan(hmap, 5, 1 << 20) == -PE_TOO_LARGE, "huge map header");
    uint8_t bigstr[] = { 0xdb, 0x00, 0x20, 0x00, 0x00 };
    CHECK(proto_scan(bigstr, 5, 1 << 20) == -PE_TOO_LARGE, "2 MiB string header");
    CHECK(proto_scan(bigstr, 5, 4 << 20) == 0, "same string under a 4 MiB limit is just incomplete");
    /* nested arrays scanned without recursion */
    uint8_t nest[200];
    memset(nest, 0x91, 199);
    nest[199] = 0x01;
    CHECK(proto_scan(nest, 200, 1 << 20) == 200, "deep nesting scans");
}

static void hello_and_ids(void)
{
    op_request r; proto_error e;
    begin(2); ks("op", "hello"); ku("id", 42);
    CHECK(parse(&r, &e) == PE_OK && r.op == OP_HELLO && r.id == 42, "hello: %s", e.msg);
    begin(1); ks("op", "hello");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "'id'"), "missing id: %s", e.msg);
    begin(2); ks("op", "hello"); ks("id", "x");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "unsigned"), "string id: %s", e.msg);
    begin(2); ks("op", "hello"); ku("id", 0);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && e.id == 0 && strstr(e.msg, "connection-level"),
          "id 0 (kept for connection-level errors) refused: %s", e.msg);
    begin(2); ks("op", "hello"); k("id"); msgpack_pack_int64(&pk, -3);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST, "negative id");
    begin(1); ku("id", 5);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && e.id == 5 && strstr(e.msg, "'op'"),
          "missing op keeps the id: %s", e.msg);
    begin(2); ks("op", "frobnicate"); ku("id", 9);
    CHECK(parse(&r, &e) == PE_UNKNOWN_OP && e.id == 9 && strstr(e.msg, "frobnicate"),
          "unknown op: %s", e.msg);
    begin(2); k("op"); msgpack_pack_int(&pk, 3); ku("id", 1);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "'op' must be a string"), "op int");
}

static void not_a_map(void)
{
    op_request r; proto_error e;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    CHECK(parse(&r, &e) == PE_DECODE && strstr(e.msg, "map"), "array request: %s", e.msg);
    uint8_t junk[] = { 'G', 'E', 'T', ' ' };
    CHECK(proto_parse(junk, 1, &LIM, &r, &e) == PE_DECODE, "a fixint alone is not a map");
    uint8_t trunc[] = { 0x82, 0xa2, 'o', 'p' };
    CHECK(proto_parse(trunc, sizeof trunc, &LIM, &r, &e) == PE_DECODE, "truncated message");
}

static void generate_fields(void)
{
    op_request r; proto_error e;
    begin(11); ks("op", "generate"); ku("id", 1); ks("session", "chat-1");
    k("text"); msgpack_pack_bin(&pk, 3); msgpack_pack_bin_body(&pk, "abc", 3);
    ku("max_tokens", 100); k("temperature"); msgpack_pack_double(&pk, 0.0);
    ku("top_k", 40); k("top_p"); msgpack_pack_float(&pk, 0.5f);
    k("repetition_penalty"); msgpack_pack_double(&pk, 1.3);
    ku("seed", 12345);
    k("stop"); msgpack_pack_array(&pk, 2); k("\n\n"); k("END");
    CHECK(parse(&r, &e) == PE_OK, "generate: %s", e.msg);
    CHECK(r.op == OP_GENERATE && !strcmp(r.session, "chat-1"), "session");
    CHECK(r.text_len == 3 && !memcmp(r.text, "abc", 3), "text");
    CHECK(r.max_tokens == 100 && r.sp.temperature == 0.0f && r.sp.top_k == 40, "numbers");
    CHECK(r.sp.top_p == 0.5f && r.sp.rep_penalty > 1.29f && r.has_seed && r.sp.seed == 12345, "sampler");
    CHECK(r.n_stop == 2 && r.stop_len[0] == 2 && !memcmp(r.stop[1], "END", 3), "stops");
    CHECK(r.sp.rep_window == 64, "default window");
    op_request_free(&r);

    begin(3); ks("op", "generate"); ku("id", 2); ks("session", "s");
    CHECK(parse(&r, &e) == PE_OK && r.max_tokens == 256 && !r.has_seed && r.text_len == 0
          && r.sp.temperature > 0.79f && r.sp.top_p == 1.0f, "defaults");
    op_request_free(&r);

    /* chat_template: the framing's hash, 1..2^32-1 (docs/PROTOCOL.md) */
    CHECK(r.chat_template == 0, "no chat template by default");
    begin(4); ks("op", "generate"); ku("id", 2); ks("session", "s"); ku("chat_template", 0xfeedbeefu);
    CHECK(parse(&r, &e) == PE_OK && r.chat_template == 0xfeedbeefu, "chat_template: %s", e.msg);
    op_request_free(&r);
    begin(4); ks("op", "generate"); ku("id", 2); ks("session", "s"); ku("chat_template", 0);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "chat_template"), "chat_template 0: %s", e.msg);
    begin(4); ks("op", "generate"); ku("id", 2); ks("session", "s"); ku("chat_template", 1ull << 32);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "chat_template"), "chat_template 2^32: %s", e.msg);

    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("max_tokens", 5000);
    CHECK(parse(&r, &e) == PE_LIMIT && e.id == 3, "max_tokens over limit: %s", e.msg);
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ks("max_tokens", "9");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "max_tokens"), "max_tokens str");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s");
    k("temperature"); msgpack_pack_double(&pk, -1);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "temperature"), "negative temperature");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s");
    k("top_p"); msgpack_pack_double(&pk, 0);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "top_p"), "top_p 0");
    /* top_k is bounded by the model's vocabulary (LIM: 256 ids) */
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("top_k", 300);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "0..256"), "top_k 300 over a 256 vocabulary: %s", e.msg);
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("top_k", 256);
    CHECK(parse(&r, &e) == PE_OK && r.sp.top_k == 256, "top_k 256 = the vocabulary: %s", e.msg);
    op_request_free(&r);
    proto_limits big = LIM;
    big.max_top_k = 50277;
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("top_k", 40000);
    CHECK(proto_parse((const uint8_t *)sb.data, sb.size, &big, &r, &e) == PE_OK && r.sp.top_k == 40000,
          "top_k 40000 with a 50277-token vocabulary: %s", e.msg);
    msgpack_sbuffer_destroy(&sb);
    op_request_free(&r);
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("repetition_window", 257);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST, "window 257");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s");
    k("stop"); msgpack_pack_array(&pk, 9); for (int i = 0; i < 9; i++) k("x");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "stop"), "nine stops");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s");
    k("stop"); msgpack_pack_array(&pk, 1); k("");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST, "empty stop");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ks("stop", "x");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST, "stop not array");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s");
    k("text"); msgpack_pack_str(&pk, 3); msgpack_pack_str_body(&pk, "a\0b", 3);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "BOS"), "NUL in text");
    begin(3); ks("op", "generate"); ku("id", 3); ku("text", 1);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "session"), "missing session");
    begin(4); ks("op", "generate"); ku("id", 3); ks("session", "s"); ku("seed", 1);
    CHECK(parse(&r, &e) == PE_OK && r.has_seed && r.sp.seed == 1, "seed");
    op_request_free(&r);
}

static void names(void)
{
    op_request r; proto_error e;
    char longname[200];
    memset(longname, 'a', 129);
    longname[129] = 0;
    begin(3); ks("op", "info"); ku("id", 1); ks("session", longname);
    CHECK(parse(&r, &e) == PE_BAD_NAME && strstr(e.msg, "129"), "129 bytes: %s", e.msg);
    longname[128] = 0;
    begin(3); ks("op", "info"); ku("id", 1); ks("session", longname);
    CHECK(parse(&r, &e) == PE_OK, "128 bytes ok");
    begin(3); ks("op", "info"); ku("id", 1); ks("session", "");
    CHECK(parse(&r, &e) == PE_BAD_NAME, "empty name");
    begin(3); ks("op", "info"); ku("id", 1); ks("session", "a\nb");
    CHECK(parse(&r, &e) == PE_BAD_NAME, "control char");
    begin(3); ks("op", "info"); ku("id", 1); ks("session", "caf\xc3");
    CHECK(parse(&r, &e) == PE_BAD_NAME, "bad utf-8");
    begin(3); ks("op", "info"); ku("id", 1); ks("session", "caf\xc3\xa9");
    CHECK(parse(&r, &e) == PE_OK && !strcmp(r.session, "caf\xc3\xa9"), "utf-8 ok");
    begin(3); ks("op", "info"); ku("id", 1); ku("session", 4);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST, "name not a string");
}

static void other_ops(void)
{
    op_request r; proto_error e;
    begin(3); ks("op", "cancel"); ku("id", 1); ku("target", 77);
    CHECK(parse(&r, &e) == PE_OK && r.op == OP_CANCEL && r.target == 77, "cancel");
    begin(2); ks("op", "cancel"); ku("id", 1);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "target"), "cancel without target");
    begin(3); ks("op", "cancel"); ku("id", 1); ks("session", "chat one");
    CHECK(parse(&r, &e) == PE_OK && r.op == OP_CANCEL && !strcmp(r.session, "chat one"), "cancel by session");
    begin(4); ks("op", "cancel"); ku("id", 1); ks("session", "a"); ku("target", 2);
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "not both"), "cancel with target and session");
    begin(3); ks("op", "cancel"); ku("id", 1); ks("session", "");
    CHECK(parse(&r, &e) == PE_BAD_NAME, "cancel by an empty name");
    begin(4); ks("op", "fork"); ku("id", 1); ks("session", "a"); ks("to", "b");
    CHECK(parse(&r, &e) == PE_OK && !strcmp(r.to, "b"), "fork");
    begin(3); ks("op", "fork"); ku("id", 1); ks("session", "a");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "'to'"), "fork without to");
    begin(4); ks("op", "import"); ku("id", 1); ks("session", "a");
    k("data"); msgpack_pack_bin(&pk, 2); msgpack_pack_bin_body(&pk, "\0\1", 2);
    CHECK(parse(&r, &e) == PE_OK && r.data_len == 2 && r.data[1] == 1, "import keeps NUL");
    op_request_free(&r);
    begin(3); ks("op", "append"); ku("id", 1); ks("session", "a");
    CHECK(parse(&r, &e) == PE_BAD_REQUEST && strstr(e.msg, "text"), "append needs text");
    begin(3); ks("op", "list"); ku("id", 1); ks("extra", "ignored");
    CHECK(parse(&r, &e) == PE_OK && r.op == OP_LIST, "unknown fields are ignored");
}

static void too_large(void)
{
    op_request r; proto_error e;
    proto_limits small = { .max_message = 64, .max_tokens = 10 };
    begin(3); ks("op", "append"); ku("id", 1);
    char t[100]; memset(t, 'x', 99); t[99] = 0; ks("text", t);
    CHECK(proto_parse((const uint8_t *)sb.data, sb.size, &small, &r, &e) == PE_TOO_LARGE, "over 64");
    CHECK(proto_scan((const uint8_t *)sb.data, 22, 64) == -PE_TOO_LARGE,
          "the scan refuses it from its header");
    msgpack_sbuffer_destroy(&sb);
}

static void encode_events(void)
{
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    proto_pack_token(&out, 5, (const uint8_t *)"x", 1);
    proto_pack_error(&out, 6, PE_BUSY, "session 's' has a turn in flight");
    proto_done d = { .id = 7, .reason = "stop", .tokens_in = 3, .fed_bytes = 11, .tokens_out = 4,
                     .session_tokens = 8, .stop = (const uint8_t *)"END", .stop_len = 3 };
    proto_pack_done(&out, &d);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int n = 0;
    while (msgpack_unpack_next(&up, out.data, out.size, &off) == MSGPACK_UNPACK_SUCCESS) {
        msgpack_object *o = &up.data;
        CHECK(o->type == MSGPACK_OBJECT_MAP, "event %d is a map", n);
        CHECK(o->via.map.ptr[0].val.via.u64 == (uint64_t)(5 + n), "event %d id", n);
        const char *ev[] = { "token", "error", "done" };
        msgpack_object *e = &o->via.map.ptr[1].val;
        CHECK(e->via.str.size == strlen(ev[n]) && !memcmp(e->via.str.ptr, ev[n], e->via.str.size),
              "event %d name", n);
        if (n == 1) {
            msgpack_object *c = &o->via.map.ptr[2].val;
            CHECK(c->via.str.size == 4 && !memcmp(c->via.str.ptr, "busy", 4), "error code");
        }
        if (n == 2) {
            CHECK(o->via.map.size == 9, "done has 9 fields, got %u", o->via.map.size);
            msgpack_object_kv *f = &o->via.map.ptr[4];
            CHECK(f->key.via.str.size == 9 && !memcmp(f->key.via.str.ptr, "fed_bytes", 9) &&
                  f->val.via.u64 == 11, "done carries fed_bytes");
        }
        n++;
    }
    CHECK(n == 3 && off == out.size, "three events, all bytes used");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&out);
}

int main(void)
{
    RUN(scan_framing);
    RUN(hello_and_ids);
    RUN(not_a_map);
    RUN(generate_fields);
    RUN(names);
    RUN(other_ops);
    RUN(too_large);
    RUN(encode_events);
    return check_exit();
}
