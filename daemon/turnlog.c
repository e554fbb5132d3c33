/* daemon/turnlog.c — a turn's recorded answer (turnlog.h). */
#include "daemon/turnlog.h"
#include "recurrent/jsonfsm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "state/le.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    le_put64(b, v);
    return fnv(h, b, 8);
}

static uint64_t fnv_f32(uint64_t h, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return fnv_u64(h, u);
}

uint64_t turnlog_params_hash(const op_request *r)
{
    uint64_t h = 1469598103934665603ull;
    h = fnv_u64(h, (uint64_t)r->op);
    if (r->request_hash) return fnv_u64(h, r->request_hash);
    h = fnv_u64(h, r->text_len);
    h = fnv(h, r->text, r->text_len);
    if (r->op != OP_GENERATE) return h;
    h = fnv_u64(h, r->max_tokens);
    h = fnv_u64(h, (uint64_t)r->n_stop);
    for (int i = 0; i < r->n_stop; i++) {
        h = fnv_u64(h, r->stop_len[i]);
        h = fnv(h, r->stop[i], r->stop_len[i]);
    }
    h = fnv_f32(h, r->sp.temperature);
    h = fnv_u64(h, (uint64_t)r->sp.top_k);
    h = fnv_f32(h, r->sp.top_p);
    h = fnv_f32(h, r->sp.rep_penalty);
    h = fnv_u64(h, (uint64_t)r->sp.rep_window);
    h = fnv_u64(h, (uint64_t)r->has_seed);
    if (r->has_seed) h = fnv_u64(h, r->sp.seed);
    h = fnv_u64(h, (uint64_t)(r->has_ignore_eos ? 1 + r->ignore_eos : 0));
    h = fnv_f32(h, r->presence_penalty);
    h = fnv_f32(h, r->frequency_penalty);
    h = fnv_u64(h, (uint64_t)r->n_bias);
    for (int i = 0; i < r->n_bias; i++) {
        h = fnv_u64(h, (uint64_t)(uint32_t)r->bias_id[i]);
        h = fnv_f32(h, r->bias[i]);
    }
    h = fnv_u64(h, (uint64_t)r->logprobs);
    if (r->schema) h = fnv_u64(h, jsonfsm_schema_hash(r->schema));
    return h;
}

void turnlog_init(turnlog *t)
{
    memset(t, 0, sizeof *t);
}

void turnlog_free(turnlog *t)
{
    bytebuf_free(&t->bytes);
    free(t->lens);
    bytebuf_free(&t->lp);
    memset(t, 0, sizeof *t);
}

int turnlog_token(turnlog *t, const uint8_t *b, size_t n)
{
    if (t->failed) return -ENOMEM;
    if (t->n == t->ncap) {
        size_t nc = t->ncap ? t->ncap * 2 : 64;
        uint32_t *nl = realloc(t->lens, nc * sizeof *nl);
        if (!nl) { t->failed = 1; return -ENOMEM; }
        t->lens = nl;
        t->ncap = nc;
    }
    if (bytebuf_put(&t->bytes, b, n)) { t->failed = 1; return -ENOMEM; }
    t->lens[t->n++] = (uint32_t)n;
    return 0;
}

static int lp_put(turnlog *t, const void *p, size_t n)
{
    if (bytebuf_put(&t->lp, p, n)) { t->failed = 1; return -ENOMEM; }
    return 0;
}

static int lp_put_f32(turnlog *t, float f)
{
    uint32_t u;
    uint8_t b[4];
    memcpy(&u, &f, 4);
    le_put32(b, u);
    return lp_put(t, b, 4);
}

int turnlog_token_lp(turnlog *t, const uint8_t *b, size_t n, float lp, const ev_top *top, uint32_t ntop)
{
    if (turnlog_token(t, b, n) != 0) return -ENOMEM;
    if (ntop > EV_TOP_MAX) ntop = EV_TOP_MAX;
    t->has_lp = 1;
    uint8_t m = (uint8_t)ntop;
    if (lp_put_f32(t, lp) || lp_put(t, &m, 1)) return -ENOMEM;
    for (uint32_t i = 0; i < ntop; i++) {
        size_t k = top[i].len > 65535 ? 65535 : top[i].len;
        uint8_t kb[2] = { (uint8_t)k, (uint8_t)(k >> 8) };
        if (lp_put_f32(t, top[i].lp) || lp_put(t, kb, 2) || (k && lp_put(t, top[i].bytes, k))) return -ENOMEM;
    }
    return 0;
}

static float le_get_f32(const uint8_t *p)
{
    uint32_t u = le_get32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const char *const reasons[] = { "length", "stop", "cancelled", "max_length", "append" };
#define N_REASONS (sizeof reasons / sizeof *reasons)

#define FIXED (4 + 8 + 1 + 1 + 4 * 8 + 4 + 1 + 3 * 8 + 4)

int turnlog_encode(const turnlog *t, uint64_t params_hash, int is_append, int cancelled,
                   const proto_done *d, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (t->failed) return -EINVAL;
    size_t code = 0;
    while (code < N_REASONS && strcmp(reasons[code], d->reason)) code++;
    if (code == N_REASONS) return -EINVAL;
    size_t stop_len = d->stop ? d->stop_len : 0;
    size_t n = FIXED + stop_len + 4 * t->n + t->bytes.n + (t->has_lp ? t->lp.n : 0);
    uint8_t *b = malloc(n), *p = b;
    if (!b) return -ENOMEM;
    memcpy(p, "LTR1", 4); p += 4;
    le_put64(p, params_hash); p += 8;
    *p++ = (uint8_t)((is_append ? 1 : 0) | (cancelled ? 2 : 0) | (d->has_stop_token ? 4 : 0) |
                     (t->has_lp ? 8 : 0));
    *p++ = (uint8_t)code;
    le_put64(p, d->tokens_in); p += 8;
    le_put64(p, d->tokens_out); p += 8;
    le_put64(p, d->session_tokens); p += 8;
    le_put64(p, d->fed_bytes); p += 8;
    le_put32(p, d->stop_token); p += 4;
    *p++ = (uint8_t)stop_len;
    if (stop_len) memcpy(p, d->stop, stop_len);
    p += stop_len;
    double ms[3] = { d->ms_queue, d->ms_prompt, d->ms_generate };
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &ms[i], 8);
        le_put64(p, u);
        p += 8;
    }
    le_put32(p, (uint32_t)t->n); p += 4;
    for (size_t i = 0; i < t->n; i++, p += 4) le_put32(p, t->lens[i]);
    if (t->bytes.n) memcpy(p, t->bytes.p, t->bytes.n);
    p += t->bytes.n;
    if (t->has_lp && t->lp.n) memcpy(p, t->lp.p, t->lp.n);
    *out = b;
    *len = n;
    return 0;
}

int turnlog_replay(const uint8_t *blob, size_t len, uint64_t id, uint64_t params_hash,
                   double ms_total, evlist *ev, int *is_append)
{
    if (len < FIXED || memcmp(blob, "LTR1", 4)) return -EBADMSG;
    const uint8_t *p = blob + 4, *end = blob + len;
    if (le_get64(p) != params_hash) return -EINVAL;
    p += 8;
    int flags = *p++, code = *p++;
    if ((size_t)code >= N_REASONS) return -EBADMSG;
    proto_done d = { .id = id, .reason = reasons[code], .replayed = 1, .ms_total = ms_total };
    d.tokens_in = le_get64(p); p += 8;
    d.tokens_out = le_get64(p); p += 8;
    d.session_tokens = le_get64(p); p += 8;
    d.fed_bytes = le_get64(p); p += 8;
    d.stop_token = le_get32(p); p += 4;
    d.has_stop_token = (flags & 4) != 0;
    size_t stop_len = *p++;
    if (stop_len > STOP_MAX_LEN || (size_t)(end - p) < stop_len + 3 * 8 + 4) return -EBADMSG;
    d.stop = stop_len ? p : NULL;
    d.stop_len = stop_len;
    p += stop_len;
    double ms[3];
    for (int i = 0; i < 3; i++, p += 8) {
        uint64_t u = le_get64(p);
        memcpy(&ms[i], &u, 8);
    }
    d.ms_queue = ms[0];
    d.ms_prompt = ms[1];
    d.ms_generate = ms[2];
    size_t n = le_get32(p);
    p += 4;
    if ((size_t)(end - p) / 4 < n) return -EBADMSG;
    const uint8_t *lens = p, *bytes = p + 4 * n;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += le_get32(lens + 4 * i);
    if ((size_t)(end - bytes) < total) return -EBADMSG;
    /* the logprobs section: checked whole before anything is appended */
    const uint8_t *lps = bytes + total, *q = lps;
    size_t lp_extra = 0;
    if (flags & 8) {
        for (size_t i = 0; i < n; i++) {
            if (end - q < 5) return -EBADMSG;
            size_t m = q[4];
            q += 5;
            if (m > EV_TOP_MAX) return -EBADMSG;
            for (size_t a = 0; a < m; a++) {
                if (end - q < 6) return -EBADMSG;
                size_t k = (size_t)q[4] | (size_t)q[5] << 8;
                if ((size_t)(end - q - 6) < k) return -EBADMSG;
                q += 6 + k;
                lp_extra += sizeof(float) + 2 + k;
            }
        }
    }
    if (q != end) return -EBADMSG;
    if (evlist_reserve(ev, n + 1, total + stop_len + lp_extra) != 0) return -ENOMEM;
    q = lps;
    for (size_t i = 0, off = 0; i < n; i++) {
        size_t k = le_get32(lens + 4 * i);
        int erc;
        if (flags & 8) {
            ev_top top[EV_TOP_MAX];
            float lp = le_get_f32(q);
            uint32_t m = q[4];
            q += 5;
            for (uint32_t a = 0; a < m; a++) {
                top[a].lp = le_get_f32(q);
                top[a].len = (size_t)q[4] | (size_t)q[5] << 8;
                top[a].bytes = q + 6;
                q += 6 + top[a].len;
            }
            erc = evlist_token_lp(ev, id, bytes + off, k, lp, top, m);
        } else {
            erc = evlist_token(ev, id, bytes + off, k);
        }
        if (erc != 0) return -ENOMEM;
        off += k;
    }
    int rc;
    if (flags & 1) {
        rc = evlist_appended(ev, id, d.session_tokens, d.tokens_in, d.fed_bytes, (flags & 2) != 0);
        if (rc == 0) ev->v[ev->n - 1].done.replayed = 1;
    } else {
        rc = evlist_done(ev, &d);
    }
    if (is_append) *is_append = flags & 1;
    return rc;
}
