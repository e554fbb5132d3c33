/* daemon/server.c — `lind serve`: options, start-up, the event loop, signals
 * and an orderly shutdown. See server.h for the threads and what they own. */
#include "daemon/server.h"
#include "recurrent/file.h"

#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "recurrent/chat.h"
#include "daemon/conn.h"
#include "daemon/lease.h"
#include "daemon/http.h"
#include "daemon/http_cors.h"
#include "daemon/msg.h"
#include "daemon/persist.h"
#include "daemon/scheduler.h"
#include "state/transcript.h"
#include "kernels/clock.h"

#define EXIT_FLUSH_MS 3000

server_options server_defaults(void)
{
    return (server_options){
        .model_dir = NULL, .socket_path = "./lind.sock", .db_path = "./lind.db",
        .backend = "auto", .be = {.cuda_device = -1}, .max_batch = 256, .max_resident = 0, .prompt_chunk = 64,
        .max_message = 1u << 20, .max_output = 256u << 10, .max_tokens = 65536,
        .max_inflight = 1024, .max_conn_bytes = 4u << 20, .max_total_bytes = 64u << 20,
        .max_waiting = 4096, .idle_timeout = 0, .write_timeout = 60, .pause_timeout = 60, .sync = STORE_SYNC_FULL, .transcript_bytes = 4096,
        .log_level = REQLOG_INFO,
        .db_lock_timeout_ms = 5000, .db_statement_timeout_ms = 30000, .db_idle_tx_timeout_ms = 10000,
        .db_reconnect_ms = 10000,
        .http_max_body = 1u << 20, .http_max_header = 16u << 10, .http_idle_timeout = 30, .http_stream_ms = 20,
        .response_ttl_ms = 30ll * 86400 * 1000, .undo = 1,
    };
}

static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        snprintf(err, errlen, "%s wants an integer in %lld..%lld, got '%s'", opt, lo, hi, v);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

/* A duration: a number and a unit, ms, s, m, h or d (a bare number is
 * seconds); 0 is off. */
static int parse_duration(const char *opt, const char *v, int64_t *ms, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    static const struct { const char *unit; long long ms; } units[] = {
        { "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "d", 86400000 },
    };
    for (size_t i = 0; !errno && end != v && x >= 0 && i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit) && x <= 3650ll * 86400000 / units[i].ms) {
            *ms = x * units[i].ms;
            return 0;
        }
    snprintf(err, errlen, "%s wants a duration up to 10 years such as 30d, 12h, 90m, 45s or 0 (off), "
             "got '%s'", opt, v);
    return -EINVAL;
}

static const char usage[] =
    "usage: lind serve [--config FILE] [--model DIR] [--socket PATH] [--db PATH] [--backend cpu|cuda|auto]\n"
    "                  [--max-batch N] [--max-resident N] [--max-message BYTES]\n"
    "                  [--max-tokens N] [--sync full|normal] [--transcript-bytes N]\n"
    "                  [--max-output BYTES] [--prompt-chunk N] [--max-inflight N]\n"
    "                  [--max-conn-bytes BYTES] [--max-total-bytes BYTES] [--max-waiting N]\n"
    "                  [--idle-timeout S] [--write-timeout S] [--pause-timeout S]\n"
    "                  [--dtype f32|bf16|f16|q8|q4] [--compute f32|bf16] [--threads N]\n"
    "                  [--log-level error|warn|info|debug] [--log-file PATH]\n"
    "                  [--node-id ID] [--lease-ms MS] [--lease-wait MS] [--store-conns N]\n"
    "                  [--db-wait S] [--db-lock-timeout MS] [--db-statement-timeout MS]\n"
    "                  [--db-idle-tx-timeout MS] [--db-reconnect MS]\n"
    "                  [--listen [ADDR:]PORT] [--http [ADDR:]PORT] [--http-token-file PATH]\n"
    "                  [--http-max-body BYTES]\n"
    "                  [--http-max-header BYTES] [--http-idle-timeout S]\n"
    "                  [--http-stream-interval MS] [--http-cors ORIGIN[,ORIGIN]] [--http2 on|off]\n"
    "                  [--template NAME|FILE] [--undo on|off]\n"
    "                  [--response-ttl D] [--session-ttl D] [--max-store-bytes BYTES]";

void server_usage(FILE *f)
{
    fprintf(f, "%s\n\n", usage);
    fprintf(f,
        "Serve a model to clients (lindctl, docs/PROTOCOL.md) on a Unix socket.\n"
        "\n"
        "options:\n"
        "  --model DIR            model directory (docs/MODEL.md); default ./models/default when\n"
        "                         there is one, else the installed PREFIX/share/lind/models/default.\n"
        "                         Its lind_chat.json, if any, is the chat template (see --template)\n"
        "  --template NAME|FILE   the chat template HTTP chat and lindctl chat frame turns with\n"
        "                         (docs/LINDCTL.md): a built-in (none, raven, world, g1-think) or a JSON\n"
        "                         file. Default: the model directory's lind_chat.json, else the\n"
        "                         family's built-in (raven for HF RWKV-4, world for RWKV-7 .pth),\n"
        "                         else none\n"
        "  --config FILE          read options from FILE first: lines 'key = value' whose keys are\n"
        "                         these long options without '--' (bos = true for a flag), '#'\n"
        "                         comments; options on the command line win\n"
        "  --socket PATH          socket (default $LIND_SOCKET, else ./lind.sock); a stale one\n"
        "                         left by a killed server is replaced, a live one refused\n"
        "  --db PATH              SQLite session store (default ./lind.db)\n"
        "  --backend B            cpu, cuda or auto (default: CUDA when built with it and a GPU is there)\n"
        "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every\n"
        "                         CPU; docs/CPU.md: on shared cores the pool falls back to one)\n"
        "  --max-batch N          sessions per model step (default 256)\n"
        "  --undo on|off          keep each resident session's state from before its last turn,\n"
        "                         for op undo and lindctl chat's /undo (default on; one more\n"
        "                         state in memory per session that had a turn)\n"
        "  --max-resident N       sessions kept in model slots (default 1024, fewer when\n"
        "                         their states would pass 1 GiB)\n"
        "  --max-message BYTES    request size limit (default 1048576)\n"
        "  --max-tokens N         tokens per generate (default 65536)\n"
        "  --sync full|normal     commit durability (default full)\n"
        "  --transcript-bytes N   transcript tail kept per session (default 4096)\n"
        "  --max-output BYTES     unsent bytes per connection before its turns pause (default 262144)\n"
        "  --prompt-chunk N       prompt tokens fed per session per step, as one run of the\n"
        "                         step's batched pass (default 64)\n"
        "  --max-inflight N       requests awaiting their final event, per connection (default 1024)\n"
        "  --max-conn-bytes BYTES request bytes awaiting their final event, per connection; more\n"
        "                         waits unread (default 4194304)\n"
        "  --max-total-bytes BYTES request bytes in flight plus read buffers, all connections,\n"
        "                         and HTTP bodies and buffered output; past it connections\n"
        "                         wait unread (default 67108864)\n"
        "  --max-waiting N        sessions waiting for a load or a model slot; more get limit\n"
        "                         (default 4096)\n"
        "  --idle-timeout S       close a connection with nothing in flight after S s without\n"
        "                         a request (default 0: never)\n"
        "  --write-timeout S      close a connection whose pending output has not moved for S s;\n"
        "                         its turns are cancelled (default 60; 0: never)\n"
        "  --pause-timeout S      cancel the turns of a connection paused by --max-output for\n"
        "                         S s, freeing their slots (default 60; 0: never)\n"
        "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
        "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (bf16 weights\n"
        "                         and activations, fp32 sums; CPU with AVX512_BF16 only; docs/CPU.md)\n"
        "  --bos, --no-bos        feed a new session the model's bos first, or nothing, whatever\n"
        "                         the model's files say (default: its convention, `lind info`)\n"
        "  --ignore-eos           turns go on past the model's end token (default: a turn ends\n"
        "                         there with reason stop, the token unsent; a request's\n"
        "                         ignore_eos decides for its own turn)\n"
        "  --log-level L          info (default): one line per finished turn: session,\n"
        "                         tokens in/out, time to first token, total time, outcome,\n"
        "                         and one 'access' line per HTTP request (method, path,\n"
        "                         status, bytes, duration, client, session, request id);\n"
        "                         debug: also the time split (queue, prompt, generate, save);\n"
        "                         warn, error: no request log\n"
        "  --log-file PATH        append the log there (default stderr): every line, the request\n"
        "                         log and the daemon's notices, is 'TIME LEVEL KIND key=value...'\n"
        "  --node-id ID           this node's name in session leases (default hostname:pid on\n"
        "                         PostgreSQL, local on SQLite); another node's `moved` error\n"
        "                         names it, so make it what clients use to reach this node\n"
        "  --lease-ms MS          a session's lease lasts MS ms, renewed every MS/3 while it is\n"
        "                         resident (default 10000 on PostgreSQL, 600000 on SQLite)\n"
        "  --lease-wait MS        a session leased by another node: wait up to MS ms for the\n"
        "                         lease before answering `moved` (default 0: answer at once)\n"
        "  --store-conns N        store connections, sessions spread over them by name\n"
        "                         (default 4 on PostgreSQL, 1 on SQLite; SQLite takes only 1)\n"
        "  --db-wait S            at start, an unreachable store is tried again for up to S s,\n"
        "                         a log line per attempt (default 0: exit at once)\n"
        "  --db-lock-timeout MS   PostgreSQL lock_timeout of every statement (default 5000;\n"
        "                         SQLite: its busy timeout)\n"
        "  --db-statement-timeout MS  PostgreSQL statement_timeout (default 30000, 0: none);\n"
        "                         no answer within MS + 5000 drops the connection\n"
        "  --db-idle-tx-timeout MS    PostgreSQL idle_in_transaction_session_timeout: a node\n"
        "                         paused inside a save loses it after MS (default 10000, 0: none)\n"
        "  --db-reconnect MS      a lost database connection is re-opened for up to MS before\n"
        "                         the operation fails (default 10000)\n"
        "  --listen [ADDR:]PORT   also serve the socket's protocol on TCP (lindctl --socket\n"
        "                         tcp://HOST:PORT); a bare PORT binds 127.0.0.1 only; another\n"
        "                         address needs --http-token-file, whose token each TCP\n"
        "                         client's first message (hello) must carry (default: off)\n"
        "  --http [ADDR:]PORT     also serve HTTP (OpenAI-compatible, docs/HTTP.md) on that port;\n"
        "                         a bare PORT binds 127.0.0.1 only (default: off)\n"
        "  --http-token-file PATH HTTP clients must send 'Authorization: Bearer' with the\n"
        "                         token this file holds (first line), and TCP clients\n"
        "                         (--listen) hello with it\n"
        "  --http-max-body BYTES  HTTP request body limit (default 1048576)\n"
        "  --http-max-header BYTES HTTP request header limit (default 16384)\n"
        "  --http-idle-timeout S  close an HTTP connection idle, or sending its request, for S s\n"
        "                         (default 30)\n"
        "  --http-stream-interval MS write a stream's chunks after its first at most every MS\n"
        "                         ms, together (default 20; 0 = a write per token)\n"
        "  --http-cors ORIGIN[,ORIGIN] browser pages of these origins (https://host[:port], or\n"
        "                         '*' for any) may call the API: CORS headers and preflights,\n"
        "                         credentials never allowed (default: off, OPTIONS gets 405)\n"
        "  --http2 on|off         also serve HTTP/2 cleartext (prior knowledge or Upgrade: h2c)\n"
        "                         (default off: HTTP/1.1 only; docs/HTTP.md, \"HTTP/2\")\n"
        "  --response-ttl D       resp- and chat- sessions (what each HTTP answer keeps) not\n"
        "                         saved for D are deleted: 30d, 12h, 90m, 45s (default 30d;\n"
        "                         0: kept); docs/STATE.md, Retention\n"
        "  --session-ttl D        named sessions not saved for D are deleted (default 0: kept)\n"
        "  --max-store-bytes BYTES past BYTES of sessions (state and transcript), resp- and\n"
        "                         chat- sessions least recently saved go first; named sessions\n"
        "                         are never deleted for it, and when only they are left new turns\n"
        "                         are refused (insufficient_storage) while reads go on (default 0:\n"
        "                         no quota)\n"
        "  -h, --help             this text\n"
        "\n"
        "SIGTERM or SIGINT stop it gracefully: turns end at a token boundary and every\n"
        "session is saved. SIGHUP reopens the --log-file (for log rotation) and serving\n"
        "goes on. Under systemd (NOTIFY_SOCKET) it reports READY=1 once it serves\n"
        "(Type=notify; tools/lind.service). Exit status: 0 after a clean stop, 1 when\n"
        "start-up failed (model, store, socket), 2 for a bad command line or config file.\n");
}

/* The model directory's chat template, lind_chat.json: reported in hello
 * when it is a JSON object with a "user" pattern; lindctl interprets it
 * (docs/LINDCTL.md). A broken one is reported here and not served. */
/* The template's full checks (recurrent/chat.h, which lindctl and the HTTP
 * front door parse it with): 1 if it passes, else the reason is printed. */
static int template_ok(const char *json, const char *path)
{
    chat_template t;
    char err[512];
    if (chat_template_parse(&t, json, err, sizeof err) != 0) {
        lind_log(REQLOG_WARN, "model", "ignoring %s: %s", path, err);
        return 0;
    }
    chat_template_free(&t);
    return 1;
}

static void load_chat_template(server *srv)
{
    snprintf(srv->chat_template_from, sizeof srv->chat_template_from, "lind_chat.json");
    char path[1100];
    snprintf(path, sizeof path, "%s/lind_chat.json", srv->opt.model_dir);
    char *buf = NULL, ferr[1200];
    size_t n = 0;
    int frc = file_read(path, CHAT_TEMPLATE_MAX, &buf, &n, ferr, sizeof ferr);
    if (frc == -ENOENT) return;
    json_error_t je;
    json_t *j = frc == 0 ? json_loadb(buf, n, 0, &je) : NULL;
    const char *user = json_string_value(json_object_get(j, "user"));
    if (frc)
        lind_log(REQLOG_WARN, "model", "ignoring %s", ferr);
    else if (!j)
        lind_log(REQLOG_WARN, "model", "ignoring %s: not JSON (line %d: %s)", path, je.line, je.text);
    else if (!user || !strstr(user, "{prompt}"))
        lind_log(REQLOG_WARN, "model", "ignoring %s: no \"user\" pattern holding {prompt}", path);
    else if (memchr(buf, 0, n))
        lind_log(REQLOG_WARN, "model", "ignoring %s: it holds a NUL byte", path);
    else if (!template_ok(buf, path)) {
        /* the reason is printed; what lindctl and HTTP would refuse is not served */
    } else {
        srv->chat_template = buf;
        buf = NULL;
    }
    json_decref(j);
    free(buf);
}

/* One option with its value: 0, -EINVAL with a message in err, or -ENOENT
 * for an option `lind serve` does not have. */
static int parse_one(const char *a, const char *v, server_options *o, char *err, size_t errlen)
{
    long long x = 0;
    int rc = 0;
    if (!strcmp(a, "--model")) o->model_dir = v;
    else if (!strcmp(a, "--socket")) o->socket_path = v;
    else if (!strcmp(a, "--db")) o->db_path = v;
    else if (!strcmp(a, "--backend")) {
        /* "harness": the CUDA backend's code emulated on the host (tests) */
        if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto") && strcmp(v, "harness")) {
            snprintf(err, errlen, "--backend wants cpu, cuda or auto, got '%s'", v);
            return -EINVAL;
        }
        o->backend = v;
    } else if (!strcmp(a, "--dtype")) {
        if (lind_dtype_parse(v, &o->dtype) < 0) {
            snprintf(err, errlen, "--dtype wants f32, bf16, f16, q8 or q4, got '%s'", v);
            return -EINVAL;
        }
    } else if (!strcmp(a, "--compute")) {
        if (!strcmp(v, "f32")) o->compute = LIND_COMPUTE_F32;
        else if (!strcmp(v, "bf16")) o->compute = LIND_COMPUTE_BF16;
        else { snprintf(err, errlen, "--compute wants f32 or bf16, got '%s'", v); return -EINVAL; }
    } else if (!strcmp(a, "--sync")) {
        if (!strcmp(v, "full")) o->sync = STORE_SYNC_FULL;
        else if (!strcmp(v, "normal")) o->sync = STORE_SYNC_NORMAL;
        else { snprintf(err, errlen, "--sync wants full or normal, got '%s'", v); return -EINVAL; }
    } else if (!strcmp(a, "--threads")) {
        if (!(rc = parse_num(a, v, 1, BACKEND_THREADS_MAX, &x, err, errlen))) o->be.threads = (int)x;
    } else if (!strcmp(a, "--max-batch")) {
        if (!(rc = parse_num(a, v, 1, 4096, &x, err, errlen))) o->max_batch = (int)x;
    } else if (!strcmp(a, "--max-resident")) {
        if (!(rc = parse_num(a, v, 1, 1 << 20, &x, err, errlen))) o->max_resident = (int)x;
    } else if (!strcmp(a, "--prompt-chunk")) {
        if (!(rc = parse_num(a, v, 1, 4096, &x, err, errlen))) o->prompt_chunk = (int)x;
    } else if (!strcmp(a, "--max-message")) {
        if (!(rc = parse_num(a, v, 64, 1ll << 30, &x, err, errlen))) o->max_message = (size_t)x;
    } else if (!strcmp(a, "--max-output")) {
        if (!(rc = parse_num(a, v, 1024, 1ll << 32, &x, err, errlen))) o->max_output = (size_t)x;
    } else if (!strcmp(a, "--max-tokens")) {
        if (!(rc = parse_num(a, v, 1, UINT32_MAX, &x, err, errlen))) o->max_tokens = (uint32_t)x;
    } else if (!strcmp(a, "--max-inflight")) {
        if (!(rc = parse_num(a, v, 1, 1 << 20, &x, err, errlen))) o->max_inflight = (int)x;
    } else if (!strcmp(a, "--max-conn-bytes")) {
        if (!(rc = parse_num(a, v, 1024, 1ll << 40, &x, err, errlen))) o->max_conn_bytes = (size_t)x;
    } else if (!strcmp(a, "--max-total-bytes")) {
        if (!(rc = parse_num(a, v, 1 << 20, 1ll << 40, &x, err, errlen))) o->max_total_bytes = (size_t)x;
    } else if (!strcmp(a, "--max-waiting")) {
        if (!(rc = parse_num(a, v, 1, 1 << 24, &x, err, errlen))) o->max_waiting = (int)x;
    } else if (!strcmp(a, "--idle-timeout")) {
        if (!(rc = parse_num(a, v, 0, 1 << 24, &x, err, errlen))) o->idle_timeout = (unsigned)x;
    } else if (!strcmp(a, "--write-timeout")) {
        if (!(rc = parse_num(a, v, 0, 1 << 24, &x, err, errlen))) o->write_timeout = (unsigned)x;
    } else if (!strcmp(a, "--pause-timeout")) {
        if (!(rc = parse_num(a, v, 0, 1 << 24, &x, err, errlen))) o->pause_timeout = (unsigned)x;
    } else if (!strcmp(a, "--http")) {
        struct sockaddr_storage sa;
        if ((rc = http_parse_addr("--http", v, &sa, err, errlen)) == 0) o->http_addr = v;
    } else if (!strcmp(a, "--listen")) {
        struct sockaddr_storage sa;
        if ((rc = http_parse_addr("--listen", v, &sa, err, errlen)) == 0) o->listen_addr = v;
    } else if (!strcmp(a, "--template")) {
        o->chat_template = v;
    } else if (!strcmp(a, "--http-token-file")) {
        o->http_token_file = v;
    } else if (!strcmp(a, "--http-max-body")) {
        if (!(rc = parse_num(a, v, 1024, 1ll << 30, &x, err, errlen))) o->http_max_body = (size_t)x;
    } else if (!strcmp(a, "--http-max-header")) {
        if (!(rc = parse_num(a, v, 1024, 1 << 20, &x, err, errlen))) o->http_max_header = (size_t)x;
    } else if (!strcmp(a, "--http-idle-timeout")) {
        if (!(rc = parse_num(a, v, 1, 1 << 20, &x, err, errlen))) o->http_idle_timeout = (unsigned)x;
    } else if (!strcmp(a, "--http-stream-interval")) {
        if (!(rc = parse_num(a, v, 0, 1000, &x, err, errlen))) o->http_stream_ms = (unsigned)x;
    } else if (!strcmp(a, "--http-cors")) {
        if ((rc = http_cors_parse(v, NULL, err, errlen)) == 0) o->http_cors = v;
    } else if (!strcmp(a, "--undo")) {
        if (!strcmp(v, "on")) o->undo = 1;
        else if (!strcmp(v, "off")) o->undo = 0;
        else { snprintf(err, errlen, "--undo wants on or off, got '%s'", v); return -EINVAL; }
    } else if (!strcmp(a, "--http2")) {
        if (!strcmp(v, "on")) o->http2 = 1;
        else if (!strcmp(v, "off")) o->http2 = 0;
        else { snprintf(err, errlen, "--http2 wants on or off, got '%s'", v); return -EINVAL; }
    } else if (!strcmp(a, "--log-file")) {
        o->log_file = v;
    } else if (!strcmp(a, "--log-level")) {
        reqlog_level lv;
        if (reqlog_parse_level(v, &lv)) {
            snprintf(err, errlen, "--log-level wants error, warn, info or debug, got '%s'", v);
            return -EINVAL;
        }
        o->log_level = (int)lv;
    } else if (!strcmp(a, "--node-id")) {
        char why[200];
        if (store_name_check(v, why, sizeof why) != 0) {
            snprintf(err, errlen, "--node-id '%s' is not usable as a lease owner: %s", v, why);
            return -EINVAL;
        }
        o->node_id = v;
    } else if (!strcmp(a, "--lease-ms")) {
        if (!(rc = parse_num(a, v, 100, 3600000, &x, err, errlen))) o->lease_ms = (int)x;
    } else if (!strcmp(a, "--lease-wait")) {
        if (!(rc = parse_num(a, v, 0, 3600000, &x, err, errlen))) o->lease_wait_ms = (int)x;
    } else if (!strcmp(a, "--db-wait")) {
        if (!(rc = parse_num(a, v, 0, 86400, &x, err, errlen))) o->db_wait_s = (int)x;
    } else if (!strcmp(a, "--db-lock-timeout")) {
        if (!(rc = parse_num(a, v, 1, 3600000, &x, err, errlen))) o->db_lock_timeout_ms = (int)x;
    } else if (!strcmp(a, "--db-statement-timeout")) {
        if (!(rc = parse_num(a, v, 0, 3600000, &x, err, errlen))) o->db_statement_timeout_ms = (int)x;
    } else if (!strcmp(a, "--db-idle-tx-timeout")) {
        if (!(rc = parse_num(a, v, 0, 3600000, &x, err, errlen))) o->db_idle_tx_timeout_ms = (int)x;
    } else if (!strcmp(a, "--db-reconnect")) {
        if (!(rc = parse_num(a, v, 0, 3600000, &x, err, errlen))) o->db_reconnect_ms = (int)x;
    } else if (!strcmp(a, "--store-conns")) {
        if (!(rc = parse_num(a, v, 1, 64, &x, err, errlen))) o->store_conns = (int)x;
    } else if (!strcmp(a, "--response-ttl")) {
        rc = parse_duration(a, v, &o->response_ttl_ms, err, errlen);
    } else if (!strcmp(a, "--session-ttl")) {
        rc = parse_duration(a, v, &o->session_ttl_ms, err, errlen);
    } else if (!strcmp(a, "--max-store-bytes")) {
        if (!(rc = parse_num(a, v, 0, 1ll << 50, &x, err, errlen))) o->max_store_bytes = (uint64_t)x;
    } else if (!strcmp(a, "--transcript-bytes")) {
        if (!(rc = parse_num(a, v, 0, TRANSCRIPT_LIMIT_MAX, &x, err, errlen)))
            o->transcript_bytes = (size_t)x;
    } else {
        return -ENOENT;
    }
    return rc;
}

/* The options without a value; 1 if a is one. */
static int parse_flag(const char *a, server_options *o)
{
    if (!strcmp(a, "--bos") || !strcmp(a, "--no-bos")) { o->bos = a[2] == 'b' ? 1 : -1; return 1; }
    if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = 1; return 1; }
    return 0;
}

int server_parse_args(int argc, char **argv, server_options *o, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            snprintf(err, errlen, "%s", usage);
            return -EINVAL;
        }
        if (parse_flag(a, o)) continue;
        if (i + 1 >= argc) {
            snprintf(err, errlen, "unknown option or missing value: '%s'\n%s", a, usage);
            return -EINVAL;
        }
        if (!strcmp(a, "--config")) { i++; continue; }   /* read before the others (server_read_config) */
        int rc = parse_one(a, argv[++i], o, err, errlen);
        if (rc == -ENOENT) {
            snprintf(err, errlen, "unknown option '%s'\n%s", a, usage);
            return -EINVAL;
        }
        if (rc) return rc;
    }
    return 0;
}

/* ---- the default model --------------------------------------------------------- */

static int is_model_dir(const char *dir)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return access(p, R_OK) == 0;
}

/* server.h; the order: ./models/default, PREFIX/share/lind/models/default
 * for PREFIX/bin/lind, then BUILD/../models/default for a lind run from its
 * source tree's build directory. */
int server_default_model(char *out, size_t cap, char *err, size_t errlen)
{
    if (is_model_dir("models/default")) {   /* a source tree (make run) */
        snprintf(out, cap, "models/default");
        return 0;
    }
    /* PREFIX/bin/lind → PREFIX/share/lind/models/default (make install);
     * a source tree's build/lind → models/default beside build/ */
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char installed[1100] = "";
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            static const char *const rel[2] = { "../share/lind/models/default", "../models/default" };
            for (int i = 0; i < 2; i++) {
                char cand[1100], real[PATH_MAX];
                snprintf(cand, sizeof cand, "%s/%s", exe, rel[i]);
                if (!i) snprintf(installed, sizeof installed, "%s", cand);
                if (realpath(cand, real) && is_model_dir(real) && strlen(real) < cap) {
                    snprintf(out, cap, "%s", real);
                    return 0;
                }
            }
        }
    }
    snprintf(err, errlen, "no --model given and no default model found: neither ./models/default nor %s "
             "holds a config.json (`make install` puts the shipped model there; or pass --model DIR)",
             *installed ? installed : "PREFIX/share/lind/models/default next to this program");
    return -ENOENT;
}

/* ---- the configuration file --------------------------------------------------- */

/* Its text, kept for the life of the process: options point into it. */
static char *config_text;

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    return s;
}

int server_read_config(const char *path, server_options *o, char *err, size_t errlen)
{
    enum { CONFIG_MAX = 1 << 16 };
    char *text, ferr[64];
    size_t n;
    int frc = file_read(path, CONFIG_MAX, &text, &n, ferr, sizeof ferr);
    if (frc == -ENOMEM) { snprintf(err, errlen, "--config %s: out of memory", path); return -ENOMEM; }
    if (frc == -EFBIG || (frc == 0 && memchr(text, 0, n))) {
        snprintf(err, errlen, "--config %s: %s", path, frc ? "over 65536 bytes" : "it holds a NUL byte");
        free(text);
        return -EINVAL;
    }
    if (frc) {
        snprintf(err, errlen, "--config %s: %s", path, strerror(-frc));
        return frc;
    }
    int line = 0, rc = 0;
    for (char *p = text, *next; p && *p && !rc; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next) *next++ = 0;
        char *l = trim(p);
        if (!*l || *l == '#') continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            snprintf(err, errlen, "--config %s line %d: not key = value: '%s'", path, line, l);
            rc = -EINVAL;
            break;
        }
        *eq = 0;
        char *key = trim(l), *val = trim(eq + 1);
        size_t vn = strlen(val);
        if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') { val[vn - 1] = 0; val++; }
        char opt[80];
        if (!*key || strlen(key) > 60 || key[0] == '-') {
            snprintf(err, errlen, "--config %s line %d: '%s' is not an option name (write the long option "
                     "without its dashes: model = DIR)", path, line, key);
            rc = -EINVAL;
            break;
        }
        snprintf(opt, sizeof opt, "--%s", key);
        if (!strcmp(key, "config") || !strcmp(key, "help") || !strcmp(key, "version")) {
            snprintf(err, errlen, "--config %s line %d: '%s' cannot be set in a configuration file", path, line, key);
            rc = -EINVAL;
            break;
        }
        server_options probe = *o;
        if (parse_flag(opt, &probe)) {   /* bos, no-bos, ignore-eos: a boolean */
            if (!strcmp(val, "true") || !strcmp(val, "yes") || !strcmp(val, "1")) parse_flag(opt, o);
            else if (strcmp(val, "false") && strcmp(val, "no") && strcmp(val, "0")) {
                snprintf(err, errlen, "--config %s line %d: %s wants true or false, got '%s'", path, line, key, val);
                rc = -EINVAL;
            }
            continue;
        }
        char why[900] = "";
        rc = parse_one(opt, val, o, why, sizeof why);
        if (rc == -ENOENT) snprintf(err, errlen, "--config %s line %d: unknown key '%s' (keys are the long "
                                    "options of `lind serve --help`)", path, line, key);
        else if (rc) snprintf(err, errlen, "--config %s line %d: %s", path, line, why);
    }
    if (rc) { free(text); return rc; }
    free(config_text);   /* server_main calls this once (--config twice is refused) */
    config_text = text;
    return 0;
}

/* ---- the socket ------------------------------------------------------------ */

/* A socket file left by a killed daemon is removed; one a live daemon
 * answers on, or a path that is not a socket, is refused. */
static int clear_stale_socket(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket; not touching it", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    if (live) {
        snprintf(err, errlen, "another server is listening on %s", path);
        return -EADDRINUSE;
    }
    unlink(path);
    return 0;
}

/* conn_accept failed (out of memory): the client is still queued, and
 * libuv accepts no other connection until it is taken. Take it into a
 * spare handle, tell it why (an `internal` error on id 0, packed without
 * allocating) and close it. */
typedef struct fixbuf { char b[200]; size_t n; } fixbuf;
static int fixbuf_write(void *d, const char *p, size_t n)
{
    fixbuf *f = d;
    if (n > sizeof f->b - f->n) return -1;
    memcpy(f->b + f->n, p, n);
    f->n += n;
    return 0;
}
static union { uv_pipe_t pipe; uv_tcp_t tcp; uv_stream_t stream; } spare;
static int spare_busy;
static void spare_closed(uv_handle_t *h) { (void)h; spare_busy = 0; }
static void refuse_unaccepted(server *srv, uv_stream_t *listener, int tcp)
{
    if (spare_busy || (tcp ? uv_tcp_init(srv->loop, &spare.tcp) : uv_pipe_init(srv->loop, &spare.pipe, 0)) != 0)
        return;
    spare_busy = 1;
    if (uv_accept(listener, &spare.stream) == 0) {
        static const char *const kv[6] = { "id", NULL, "event", "error", "code", "internal" };
        static const char msg[] = "the server is out of memory and cannot take this connection;"
                                  " try again later";
        fixbuf f = { .n = 0 };
        msgpack_packer pk;
        msgpack_packer_init(&pk, &f, fixbuf_write);
        msgpack_pack_map(&pk, 4);
        for (int i = 0; i < 6; i += 2) {
            msgpack_pack_str_with_body(&pk, kv[i], strlen(kv[i]));
            if (kv[i + 1]) msgpack_pack_str_with_body(&pk, kv[i + 1], strlen(kv[i + 1]));
            else msgpack_pack_uint64(&pk, 0);
        }
        msgpack_pack_str_with_body(&pk, "message", 7);
        msgpack_pack_str_with_body(&pk, msg, sizeof msg - 1);
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&spare.stream, &fd) == 0 &&
            send(fd, f.b, f.n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* the client left: nothing to tell */ }
    }
    uv_close((uv_handle_t *)&spare.stream, spare_closed);
}

static void on_connection(uv_stream_t *l, int status)
{
    server *srv = l->data;
    if (status < 0) {
        /* libuv accepted and closed the client itself (out of descriptors):
         * it got no answer, so at least the operator learns of it. */
        char why[200];
        struct rlimit rl = { 0, 0 };
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(why, sizeof why, "a connection was dropped unanswered: %s (open-file limit %lld)",
                 uv_strerror(status), (long long)rl.rlim_cur);
        conn_log_refusal(why);
        return;
    }
    if (srv->stopping) return;
    int tcp = l == (uv_stream_t *)&srv->tcp_listener;
    int rc = conn_accept(srv, l, tcp);
    if (rc < 0) {
        lind_log(REQLOG_WARN, "conn", "accepting a connection failed: %s", uv_strerror(rc));
        refuse_unaccepted(srv, l, tcp);
    }
}

/* bind() says "permission denied" for a missing directory too: name the
 * real reason before trying. */
static int socket_dir_check(const char *path, char *err, size_t errlen)
{
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path];   /* the path fits: checked before */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "socket %s: its directory %s %s", path, dir,
                 e == ENOENT ? "does not exist" : strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "socket %s: %s is not a directory", path, dir);
        return -ENOTDIR;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(err, errlen, "socket %s: cannot create it in %s: %s", path, dir, strerror(e));
        return -e;
    }
    return 0;
}

/* Connections are file descriptors: take the hard limit the system allows
 * rather than the (often 1024) soft default. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rlim_t old = rl.rlim_cur;
    /* An unlimited hard limit still stops at fs.nr_open: try less then. */
    const rlim_t tries[3] = { rl.rlim_max, 1u << 20, 65536 };
    for (int i = 0; i < 3; i++) {
        if (tries[i] <= old || tries[i] > rl.rlim_max) continue;
        rl.rlim_cur = tries[i];
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) return;
    }
    lind_log(REQLOG_WARN, "start", "cannot raise the open-file limit above %lld: %s",
            (long long)old, strerror(errno));
}

static int listen_on(server *srv, char *err, size_t errlen)
{
    const char *path = srv->opt.socket_path;
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path '%s' is longer than %zu bytes", path, sizeof sa.sun_path - 1);
        return -ENAMETOOLONG;
    }
    raise_fd_limit();   /* before the first connection: each is a descriptor */
    int rc = socket_dir_check(path, err, errlen);
    if (rc) return rc;
    rc = clear_stale_socket(path, err, errlen);
    if (rc) return rc;
    mode_t old = umask(0177);   /* the socket is born 0600: no window for others */
    rc = uv_pipe_bind(&srv->listener, path);
    umask(old);
    if (rc < 0) goto fail;
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection)) < 0) goto fail;
    return 0;
fail:
    snprintf(err, errlen, "listening on %s: %s", path, uv_strerror(rc));
    return rc;
}

static int is_loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return sa->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* --listen: a TCP client reaches the daemon from wherever the address
 * lets it, and the socket's file permissions no longer guard it; so an
 * address other than loopback needs the token. Checked before the model
 * loads, so a refused start is quick. */
static int check_listen(const server_options *o, char *err, size_t errlen)
{
    if (!o->listen_addr) return 0;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    int rc = http_parse_addr("--listen", o->listen_addr, &sa, err, errlen);
    if (rc) return rc;
    if (!is_loopback(&sa) && !o->http_token_file) {
        snprintf(err, errlen, "--listen %s is not a loopback address: anyone who can reach it could use "
                 "every session, so set --http-token-file PATH (TCP clients then send its token in "
                 "hello, docs/PROTOCOL.md) or listen on 127.0.0.1", o->listen_addr);
        return -EPERM;
    }
    return 0;
}

/* The msgpack protocol on TCP as well (--listen), behind the token when
 * there is one. */
static int listen_tcp(server *srv, char *err, size_t errlen)
{
    if (!srv->opt.listen_addr) return 0;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    int rc = http_parse_addr("--listen", srv->opt.listen_addr, &sa, err, errlen);
    if (rc) return rc;
    if (srv->opt.http_token_file &&
        (rc = http_read_token(srv->opt.http_token_file, srv->tcp_token, sizeof srv->tcp_token, err, errlen)))
        return rc;
    if ((rc = uv_tcp_init(srv->loop, &srv->tcp_listener)) < 0) goto fail;
    srv->tcp_on = 1;
    srv->tcp_listener.data = srv;
    if ((rc = uv_tcp_bind(&srv->tcp_listener, (const struct sockaddr *)&sa, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&srv->tcp_listener, 511, on_connection)) < 0)
        goto fail;
    struct sockaddr_storage got;
    int len = sizeof got;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&srv->tcp_listener, (struct sockaddr *)&got, &len) == 0) {
        if (got.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&got, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&got, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&got)->sin_port);
        }
    }
    lind_log(REQLOG_INFO, "start", "TCP on %s:%d%s", ip, port, srv->tcp_token[0] ? " (token)" : "");
    return 0;
fail:
    snprintf(err, errlen, "--listen %s: %s", srv->opt.listen_addr, uv_strerror(rc));
    return rc;
}

/* ---- shutdown ------------------------------------------------------------------ */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void close_everything(server *srv)
{
    conn_table *t = srv->conns;
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->v[i]) conn_close(t->v[i]);
    close_handle((uv_handle_t *)&srv->wake);
    close_handle((uv_handle_t *)&srv->sigterm);
    close_handle((uv_handle_t *)&srv->sigint);
    close_handle((uv_handle_t *)&srv->sighup);
    close_handle((uv_handle_t *)&srv->exit_timer);
    close_handle((uv_handle_t *)&srv->tick);
    close_handle((uv_handle_t *)&srv->listener);
    if (srv->tcp_on) close_handle((uv_handle_t *)&srv->tcp_listener);
    http_close(srv);
}

/* EXIT_FLUSH_MS after the last commit, clients that have not taken their
 * final events lose them (docs/DAEMON.md, "Shutdown"): say so. */
static void on_exit_timer(uv_timer_t *t)
{
    server *srv = t->data;
    conn_table *ct = srv->conns;
    unsigned slow = 0;
    size_t bytes = 0;
    for (uint32_t i = 0; i < ct->cap; i++)
        if (ct->v[i] && !ct->v[i]->closed) { slow++; bytes += conn_unsent(ct->v[i]); }
    if (slow)
        lind_log(REQLOG_WARN, "stop", "%u client(s) did not read their last %zu bytes within %d ms"
                 " of shutdown; dropping them (every turn is saved)", slow, bytes, EXIT_FLUSH_MS);
    close_everything(srv);
}

/* Every turn is saved and the store closed: write what is left, then end. */
static void finish_exit(server *srv)
{
    conn_table *t = srv->conns;
    int waiting = 0;
    for (uint32_t i = 0; i < t->cap; i++) {
        conn *c = t->v[i];
        if (!c) continue;
        if (conn_unsent(c)) { conn_close_after_flush(c, CONN_FLUSH_CLOSE); waiting = 1; }
        else conn_close(c);
    }
    if (!waiting) { close_everything(srv); return; }
    uv_timer_start(&srv->exit_timer, on_exit_timer, EXIT_FLUSH_MS, 0);
    close_handle((uv_handle_t *)&srv->sigterm);
    close_handle((uv_handle_t *)&srv->sigint);
    close_handle((uv_handle_t *)&srv->sighup);
}

static void on_tick(uv_timer_t *t)
{
    conn_tick((server *)t->data);
}

/* The shutdown message, allocated before serving: a signal must stop the
 * daemon even when memory has run out. */
static dmsg *shutdown_msg;

/* systemd's readiness protocol (sd_notify(3)): one datagram to the socket
 * $NOTIFY_SOCKET names (a path, or '@' for the abstract namespace), when
 * there is one. A failure is logged, never fatal. */
static void notify_systemd(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path) return;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) {
        lind_log(REQLOG_WARN, "notify", "NOTIFY_SOCKET=%s: not a socket path; systemd is not told '%s'", path, state);
        return;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@') sa.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
        lind_log(REQLOG_WARN, "notify", "NOTIFY_SOCKET=%s: %s; systemd is not told '%s'", path, strerror(errno), state);
    if (fd >= 0) close(fd);
}

/* SIGHUP: reopen the log file (after logrotate moved it); the daemon goes
 * on serving. Nothing else is reloaded: the model, the store and the limits
 * stay as started (docs/DAEMON.md). */
static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    server *srv = h->data;
    char err[600];
    int rc = reqlog_reopen(&srv->log, err, sizeof err);
    if (rc < 0) lind_log(REQLOG_ERROR, "signal", "SIGHUP: %s; still writing to the old file", err);
    else if (rc == 0) lind_log(REQLOG_INFO, "signal", "SIGHUP: the log is stderr, nothing to reopen; serving on");
    else lind_log(REQLOG_INFO, "signal", "SIGHUP: reopened the log file %s; serving on", srv->log.path);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server *srv = h->data;
    if (srv->stopping || !shutdown_msg) return;
    srv->stopping = 1;
    notify_systemd("STOPPING=1");
    lind_log(REQLOG_INFO, "signal", "%s: finishing turns at a token boundary and saving", strsignal(signum));
    close_handle((uv_handle_t *)&srv->listener);
    if (srv->tcp_on) close_handle((uv_handle_t *)&srv->tcp_listener);
    http_stop_listening(srv);
    uv_timer_stop(&srv->tick);   /* no timeouts while stopping: the exit timer bounds it */
    queue_push(&srv->schedq, &shutdown_msg->node);
    shutdown_msg = NULL;
}

static void on_wake(uv_async_t *a)
{
    server *srv = a->data;
    qnode *n = queue_take_all(&srv->loopq, 0);
    while (n) {
        qnode *next = n->next;
        outmsg *o = (outmsg *)n;
        if (o->exit) {
            srv->store_done = 1;
            outmsg_free(o);
            finish_exit(srv);
        } else if (o->conn & HTTP_CONN_BIT) {
            http_deliver(srv, o);
        } else {
            conn_deliver(srv, o);
        }
        n = next;
    }
}

/* The store found its database removed or replaced (store thread): every
 * later turn fails with `io` and this message; say it where operators look. */
static void store_lost_loudly(void *arg, const char *why)
{
    (void)arg;
    lind_log(REQLOG_ERROR, "store", "%s. Turns are no longer acknowledged; restart lind.", why);
}

store_options server_store_options(const server_options *o)
{
    store_options so = store_defaults();
    so.sync = o->sync;
    so.busy_timeout_ms = o->db_lock_timeout_ms;
    so.statement_timeout_ms = o->db_statement_timeout_ms;
    so.idle_tx_timeout_ms = o->db_idle_tx_timeout_ms;
    so.reconnect_ms = o->db_reconnect_ms;
    return so;
}

/* Open the store; an unreachable one (-EIO: the database is down or still
 * starting) is tried again for up to --db-wait seconds, once a second, with
 * a log line per failed attempt. */
static int open_store_waiting(server *srv, const store_options *so, store **st, char *err,
                              size_t errlen)
{
    int64_t start = (int64_t)(clock_mono_ns() / 1000000), limit = (int64_t)srv->opt.db_wait_s * 1000;
    for (int attempt = 1;; attempt++) {
        int rc = store_open(srv->opt.db_path, so, st, err, errlen);
        int64_t waited = (int64_t)(clock_mono_ns() / 1000000) - start;
        if (rc != -EIO || waited + 1000 > limit)
            return rc;
        lind_log(REQLOG_WARN, "store", "the store is not reachable (attempt %d, %lld of %d s waited,"
                 " --db-wait): %s; trying again in 1 s", attempt, (long long)(waited / 1000),
                 srv->opt.db_wait_s, err);
        sleep(1);
    }
}

/* A shared store: claim --node-id for this process (store_node_claim), so
 * a second live node with the same id is refused. A claim held by another
 * instance may be a predecessor that was killed: wait once for its expiry
 * (at most a lease), then a claim still held is a live duplicate. */
static int claim_node(server *srv, store *st, char *err, size_t errlen)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(srv->node_instance, sizeof srv->node_instance, "%.80s:%ld:%lld", host, (long)getpid(),
             (long long)clock_wall_ms());
    store_node h;
    int rc = store_node_claim(st, srv->node_id, srv->node_instance, srv->opt.lease_ms, &h, err, errlen);
    if (rc == -EADDRINUSE) {
        int64_t wait = h.expires_in_ms + 100;
        if (wait > srv->opt.lease_ms + 1000) wait = srv->opt.lease_ms + 1000;
        lind_log(REQLOG_WARN, "start", "node id '%s' is claimed by instance '%s' (last heartbeat %lld ms"
                 " ago); waiting %lld ms for the claim to expire, in case that node is gone",
                 srv->node_id, h.instance, (long long)h.heartbeat_age_ms, (long long)wait);
        usleep((useconds_t)(wait > 0 ? wait : 0) * 1000);
        rc = store_node_claim(st, srv->node_id, srv->node_instance, srv->opt.lease_ms, &h, err,
                              errlen);
    }
    if (rc == -EADDRINUSE) {
        char why[600];
        snprintf(why, sizeof why, "%.599s", err);
        snprintf(err, errlen, "--node-id '%s' is in use by another live node: %s; its heartbeat went"
                 " on while this node waited for the claim to expire. Give every node its own"
                 " --node-id", srv->node_id, why);
        return rc;
    }
    if (rc == 0) srv->node_claimed = 1;
    return rc;
}

/* ---- main ------------------------------------------------------------------------ */

int server_main(int argc, char **argv)
{
    server *srv = calloc(1, sizeof *srv);
    char err[1024] = "";
    if (!srv) { fprintf(stderr, "lind serve: out of memory\n"); return 1; }
    srv->opt = server_defaults();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            server_usage(stdout);
            free(srv);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("%s\n", LIND_SERVER_VERSION);
            free(srv);
            return 0;
        }
    }
    const char *env_sock = getenv("LIND_SOCKET");   /* as lindctl reads it */
    if (env_sock && *env_sock) srv->opt.socket_path = env_sock;
    if (backend_opts_from_env(&srv->opt.be, err, sizeof err) < 0) {   /* the compute thread passes them on */
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 2;
    }
    /* defaults < environment < --config FILE < the command line */
    const char *config = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--config")) continue;
        if (config) {
            fprintf(stderr, "lind serve: --config given twice (%s, %s); one file holds them all\n", config, argv[i + 1]);
            free(srv);
            return 2;
        }
        config = argv[++i];
    }
    if (config && server_read_config(config, &srv->opt, err, sizeof err) != 0) {
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 2;
    }
    if (server_parse_args(argc, argv, &srv->opt, err, sizeof err) != 0) {
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 2;
    }
    if (check_listen(&srv->opt, err, sizeof err) != 0) {
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 2;
    }
    if (!srv->opt.model_dir) {
        static char found[1100];
        if (server_default_model(found, sizeof found, err, sizeof err) != 0) {
            fprintf(stderr, "lind serve: %s\n", err);
            free(srv);
            return 1;
        }
        srv->opt.model_dir = found;
    }
    signal(SIGPIPE, SIG_IGN);
    if (reqlog_open(&srv->log, srv->opt.log_file, (reqlog_level)srv->opt.log_level, err, sizeof err)) {
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 1;
    }
    reqlog_use_for_notices(&srv->log);   /* from here every line is the log's (reqlog.h) */
    srv->limits = (proto_limits){ .max_message = srv->opt.max_message,
                                  .max_tokens = srv->opt.max_tokens };
    if (!realpath(srv->opt.model_dir, srv->model_path))
        snprintf(srv->model_path, sizeof srv->model_path, "%s", srv->opt.model_dir);
    if (srv->opt.chat_template) {
        if (chat_template_read(srv->opt.chat_template, &srv->chat_template, err, sizeof err) != 0) {
            lind_log(REQLOG_ERROR, "start", "--template: %s", err);
            reqlog_close(&srv->log);
            free(srv);
            return 2;
        }
        snprintf(srv->chat_template_from, sizeof srv->chat_template_from, "--template");
    } else {
        load_chat_template(srv);
    }

    uv_loop_t loop;
    conn_table conns;
    scheduler *sched = NULL;
    persist *pers = NULL;
    store *st = NULL;
    int code = 1, rc;
    if ((rc = uv_loop_init(&loop)) != 0) {   /* e.g. out of memory: nothing else is set up yet */
        lind_log(REQLOG_ERROR, "start", "cannot start the event loop: %s", uv_strerror(rc));
        free(srv->chat_template);
        reqlog_close(&srv->log);
        free(srv);
        return 1;
    }
    srv->loop = &loop;
    srv->conns = &conns;
    /* The wake-up (an eventfd) and the signal watchers (a pipe) take file
     * descriptors: without them the daemon could not hear its threads or a
     * SIGTERM, so it does not start. */
    uv_handle_t *made[4];
    int nmade = 0;
    if ((rc = uv_async_init(&loop, &srv->wake, on_wake)) == 0) made[nmade++] = (uv_handle_t *)&srv->wake;
    if (!rc && (rc = uv_signal_init(&loop, &srv->sigterm)) == 0) made[nmade++] = (uv_handle_t *)&srv->sigterm;
    if (!rc && (rc = uv_signal_init(&loop, &srv->sigint)) == 0) made[nmade++] = (uv_handle_t *)&srv->sigint;
    if (!rc && (rc = uv_signal_init(&loop, &srv->sighup)) == 0) made[nmade++] = (uv_handle_t *)&srv->sighup;
    if (rc != 0) {
        lind_log(REQLOG_ERROR, "start", "cannot start the event loop: %s", uv_strerror(rc));
        for (int i = 0; i < nmade; i++) uv_close(made[i], NULL);
        uv_run(&loop, UV_RUN_NOWAIT);
        uv_loop_close(&loop);
        free(srv->chat_template);
        reqlog_close(&srv->log);
        free(srv);
        return 1;
    }
    srv->wake.data = srv;
    uv_timer_init(&loop, &srv->exit_timer);
    uv_timer_init(&loop, &srv->tick);
    srv->tick.data = srv;
    uv_pipe_init(&loop, &srv->listener, 0);
    srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv->exit_timer.data = srv->listener.data = srv;
    if (conn_table_init(&conns) != 0 || stats_init(&srv->st) != 0 ||
        queue_init(&srv->loopq, &srv->wake) != 0 || queue_init(&srv->schedq, NULL) != 0 ||
        queue_init(&srv->persistq, NULL) != 0) {
        lind_log(REQLOG_ERROR, "start", "out of memory");
        goto out;
    }
    if (!(shutdown_msg = dmsg_new(M_SHUTDOWN, 0))) {
        lind_log(REQLOG_ERROR, "start", "out of memory");
        goto out;
    }
    if ((rc = scheduler_start(srv, &sched, err, sizeof err)) != 0) {
        lind_log(REQLOG_ERROR, "start", "cannot load model: %s", err);
        goto out;
    }
    if (!srv->chat_template) {   /* the family's built-in, now that the model says its family */
        const char *fam = model_config(srv->m)->format;
        const char *b = chat_template_for_family(fam);
        if (b && !(srv->chat_template = strdup(chat_template_builtin(b)))) {
            lind_log(REQLOG_ERROR, "start", "out of memory");
            goto out;
        }
        snprintf(srv->chat_template_from, sizeof srv->chat_template_from, "%s",
                 b ? "the model family's built-in" : "the default");
    }
    {
        chat_template t;
        char why[256];
        if (chat_template_parse(&t, srv->chat_template, why, sizeof why) == 0) {
            srv->chat_template_hash = t.hash;
            snprintf(srv->chat_template_name, sizeof srv->chat_template_name, "%s", t.name);
            lind_log(REQLOG_INFO, "model", "chat template %s (%s)", t.name, srv->chat_template_from);
            chat_template_free(&t);
        }
    }
    int shared = lease_store_shared(srv->opt.db_path);
    lease_node_id(srv->opt.node_id, shared, srv->node_id, sizeof srv->node_id);
    if (!shared && srv->opt.store_conns > 1) {
        lind_log(REQLOG_ERROR, "start", "--store-conns %d: an SQLite store takes one connection (it has one "
                "writer); more are for a PostgreSQL store", srv->opt.store_conns);
        goto out;
    }
    if (srv->opt.store_conns == 0) srv->opt.store_conns = shared ? 4 : 1;
    /* Each renewal round is a commit (an fsync on SQLite). On SQLite no other node
     * can take a lease (one daemon per file) and a restart reclaims its own
     * ("local"), so a long lease costs nothing and renews rarely. */
    if (srv->opt.lease_ms == 0) srv->opt.lease_ms = shared ? 10000 : 600000;
    store_options so = server_store_options(&srv->opt);
    so.exclusive = 1;   /* a second daemon on this database is refused, naming our pid */
    so.on_lost = store_lost_loudly;
    reserve_init(&srv->reserve, srv->opt.db_path, shared);
    rc = open_store_waiting(srv, &so, &st, err, sizeof err);
    if ((rc == -ENOSPC || (rc == -EIO && reserve_disk_full(&srv->reserve))) &&
        reserve_release(&srv->reserve)) {
        /* A full disk: the reserve makes room for the open's commit, and
         * the daemon serves reads and deletes, refusing turns until space
         * is freed (docs/STATE.md, "A full disk"). */
        lind_log(REQLOG_WARN, "store", "the disk holding the store is full (%s); released the %u-byte"
                 " reserve %s to open it. New turns are refused (insufficient_storage) until"
                 " sessions are deleted (lindctl sessions rm, sessions gc); reads go on", err,
                 RESERVE_BYTES, srv->reserve.path);
        atomic_store(&srv->store_nospace, 1);
        rc = open_store_waiting(srv, &so, &st, err, sizeof err);
    }
    if (rc != 0) {
        lind_log(REQLOG_ERROR, "start", "cannot open the store: %s", err);
        goto out;
    }
    if (!atomic_load(&srv->store_nospace) && (rc = reserve_fill(&srv->reserve)) != 0)
        lind_log(REQLOG_WARN, "store", "cannot keep the %u-byte disk reserve %s (%s): on a full disk"
                 " deleting sessions may fail", RESERVE_BYTES, srv->reserve.path, strerror(-rc));
    rc = 0;
    if (shared && (rc = claim_node(srv, st, err, sizeof err)) != 0) {
        lind_log(REQLOG_ERROR, "start", "%s", err);
        goto out;
    }
    char where[600];   /* the store as logs may show it: a URI without its password */
    snprintf(where, sizeof where, "%s", store_where(st));
    /* Signals are caught from before the socket exists: a client may connect
     * (into the backlog) as soon as it is bound and then send SIGTERM, which
     * must stop the daemon cleanly, not kill it. The callbacks run in
     * uv_run, after start-up; a failed start-up closes the handles first. */
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_start(&srv->sighup, on_hup, SIGHUP);   /* reopen the log, go on serving */
    if ((rc = listen_on(srv, err, sizeof err)) != 0) {
        lind_log(REQLOG_ERROR, "start", "%s", err);
        goto out;
    }
    if ((rc = listen_tcp(srv, err, sizeof err)) != 0) {
        lind_log(REQLOG_ERROR, "start", "%s", err);
        goto out;
    }
    if ((rc = http_start(srv, err, sizeof err)) != 0) {
        lind_log(REQLOG_ERROR, "start", "%s", err);
        goto out;
    }
    rc = persist_start(srv, st, &pers, err, sizeof err);
    st = NULL;   /* the store threads own it now (closed if they failed to start) */
    if (rc != 0) {
        lind_log(REQLOG_ERROR, "start", "cannot start the store threads: %s", err);
        goto out;
    }
    uv_timer_start(&srv->tick, on_tick, 250, 250);
    char q[4][1200];
    lind_log_kv(REQLOG_INFO, "start", "model=%s backend=%s params=%zu state_bytes=%zu socket=%s store=%s pid=%d",
                reqlog_value(q[0], sizeof q[0], srv->model_path), srv->backend, srv->params, srv->state_bytes,
                reqlog_value(q[1], sizeof q[1], srv->opt.socket_path), reqlog_value(q[2], sizeof q[2], where),
                (int)getpid());
    lind_log_kv(REQLOG_INFO, "start", "node=%s lease_ms=%d store_conns=%d log=%s",
                reqlog_value(q[3], sizeof q[3], srv->node_id), srv->opt.lease_ms, srv->opt.store_conns,
                reqlog_value(q[0], sizeof q[0], srv->opt.log_file ? srv->opt.log_file : "stderr"));
    char ready[1400];
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=serving %s on %s\nMAINPID=%d", srv->model_path,
             srv->opt.socket_path, (int)getpid());
    notify_systemd(ready);
    uv_run(&loop, UV_RUN_DEFAULT);
    scheduler_join(sched);
    sched = NULL;
    persist_join(pers);
    pers = NULL;
    unlink(srv->opt.socket_path);
    code = 0;
    lind_log(REQLOG_INFO, "stop", "stopped; every session saved");
out:
    if (sched) {   /* start-up failed after the model loaded: stop the compute thread */
        queue_push(&srv->schedq, &shutdown_msg->node);
        shutdown_msg = NULL;
        scheduler_join(sched);
    }
    dmsg_free(shutdown_msg);   /* unsent: start-up failed before the model loaded */
    shutdown_msg = NULL;
    if (st) {   /* start-up failed with the store open: give the node id back at once */
        char e2[256];
        if (srv->node_claimed) store_node_release(st, srv->node_id, srv->node_instance, e2, sizeof e2);
        store_close(st);
    }
    /* Drain what was left for threads that no longer run (e.g. the
     * connection-closed notes of the final close). */
    for (qnode *n = queue_take_all(&srv->loopq, 0); n; ) {
        qnode *next = n->next;
        outmsg_free((outmsg *)n);
        n = next;
    }
    queue *dq[2] = { &srv->schedq, &srv->persistq };
    for (int i = 0; i < 2; i++)
        for (qnode *n = queue_take_all(dq[i], 0); n; ) {
            qnode *next = n->next;
            dmsg_free((dmsg *)n);
            n = next;
        }
    if (uv_loop_alive(&loop)) { close_everything(srv); uv_run(&loop, UV_RUN_DEFAULT); }
    uv_loop_close(&loop);
    http_free(srv);
    conn_table_free(&conns);
    queue_destroy(&srv->loopq);
    queue_destroy(&srv->schedq);
    queue_destroy(&srv->persistq);
    stats_destroy(&srv->st);
    free(srv->chat_template);
    reqlog_close(&srv->log);
    free(srv);
    return code;
}
