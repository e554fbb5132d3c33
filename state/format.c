/* state/format.c — encode and verify a session's state blob (format.h).
 *
 * Layout, version 2 (header integers little-endian; docs/STATE.md):
 *     0  magic "LINDST\0\1"
 *     8  u32 format version
 *    12  u32 byte-order mark 0x01020304 in the writer's order: the raw
 *        state below is the writer's numbers as they lie in memory
 *    16  u32 header bytes (where the raw state starts)
 *    20  u32 region count
 *    24  u64 model fingerprint
 *    32  u64 raw state bytes
 *    40  u64 tokens consumed
 *    48  i32 pending token (-1 = none)
 *    52  u32 n_layers, 56 u32 d_model (for messages)
 *    60  u32 header check: low 32 bits of xxh64 of bytes 0..59, so a
 *        damaged size field reads as damage, not as truncation
 *    64  sampler params: f32 temperature, i32 top_k, f32 top_p,
 *        f32 rep_penalty, i32 rep_window, u32 chat template (the
 *        hash of the template the session's chat turns are framed with,
 *        0 = none recorded; written as 0 before lind recorded it, and
 *        ignored by a lind that does not, so no version change), u64 seed
 *    96  sampler RNG: 4 × u64
 *   128  u32 window length, u32 window position
 *   136  window: 256 × i32 token ids
 *  1160  u32 tail length (<= TOKENIZER_TAIL_MAX)
 *  1164  tail bytes (tail length of them)
 *        region table, 48 bytes per region: i32 layer, u32 element bytes,
 *        16 name bytes, u64 offset, u64 count, u32 element type (lind_elem),
 *        u32 zero
 *        raw state
 *        u64 xxh64 of everything before it
 * Version 1 is the same up to byte 136, then 256 window bytes (one per
 * token), no tail, and 40-byte regions without the type (all float); it is
 * read, never written. */
#include "state/format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "recurrent/errmsg.h"
#include "state/le.h"

static const uint8_t state_magic[8] = { 'L', 'I', 'N', 'D', 'S', 'T', 0, 1 };

#define BOM          0x01020304u
#define WINDOW_AT    136

/* Where the version-dependent parts lie. */
typedef struct layout {
    uint32_t fixed;        /* bytes before the tail (v1: before the regions) */
    uint32_t region_bytes; /* per region-table entry */
    int      window_elem;  /* bytes per window entry: 1 (v1) or 4 */
    int      typed;        /* regions carry their element type */
    int      has_tail;
} layout;

static const layout layout_v1 = {WINDOW_AT + SAMPLER_WINDOW_MAX, 40, 1, 0, 0};
static const layout layout_v2 = {WINDOW_AT + 4 * SAMPLER_WINDOW_MAX + 4, 48, 4, 1, 1};
#define TAIL_LEN_AT (WINDOW_AT + 4 * SAMPLER_WINDOW_MAX)

static void putf(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    le_put32(p, v);
}

static float getf(const uint8_t *p)
{
    uint32_t v = le_get32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

const char *state_strerror(int code)
{
    switch (code) {
    case 0:                 return "ok";
    case STATE_E_MAGIC:     return "magic";
    case STATE_E_VERSION:   return "version";
    case STATE_E_ENDIAN:    return "endian";
    case STATE_E_MODEL:     return "model";
    case STATE_E_CHECKSUM:  return "checksum";
    case STATE_E_TRUNCATED: return "truncated";
    case STATE_E_NONFINITE: return "nonfinite";
    case STATE_E_INVALID:   return "invalid";
    case -ENOMEM:           return "nomem";
    case -EINVAL:           return "einval";
    default:                return "error";
    }
}

/* Index of the first NaN/Inf among `count` elements at p (elem 4 = float,
 * 8 = double), or -1. Exponent bits all ones means NaN or Inf. */
static long first_nonfinite(const uint8_t *p, size_t count, int elem)
{
    if (elem == 4) {
        uint32_t any = 0;
        for (size_t i = 0; i < count; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (!any)
            return -1;
        for (size_t i = 0; i < count; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) == 0x7f800000u)
                return (long)i;
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            uint64_t u;
            memcpy(&u, p + 8 * i, 8);
            if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
                return (long)i;
        }
    }
    return -1;
}

static int is_float(int type) { return type == LIND_EL_F32 || type == LIND_EL_F64; }

static const char *elem_name(int type)
{
    switch (type) {
    case LIND_EL_F32: return "f32";
    case LIND_EL_F64: return "f64";
    case LIND_EL_I32: return "i32";
    case LIND_EL_I64: return "i64";
    default:          return "unknown";
    }
}

/* Check every float region of raw (integer regions hold ring heads,
 * positions, counters: any bit pattern is theirs); fills the message naming
 * region and element. */
static int check_finite(const model_state_region *r, int nr, const uint8_t *raw,
                        const char *what, char *err, size_t errlen)
{
    for (int i = 0; i < nr; i++) {
        if (!is_float(r[i].type))
            continue;
        long at = first_nonfinite(raw + r[i].offset, r[i].count, r[i].elem_bytes);
        if (at >= 0) {
            const uint8_t *e = raw + r[i].offset + (size_t)at * (size_t)r[i].elem_bytes;
            double v;
            if (r[i].elem_bytes == 4) {
                float f;
                memcpy(&f, e, 4);
                v = f;
            } else {
                memcpy(&v, e, 8);
            }
            return errmsg_set(STATE_E_NONFINITE, err, errlen,
                        "%s: layer %d region %s holds %s at element %ld", what,
                        r[i].layer, r[i].name, v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf", at);
        }
    }
    return 0;
}

int state_check_finite(const model_state_region *r, int nr, const void *raw, char *err, size_t errlen)
{
    return check_finite(r, nr, raw, "state refused", err, errlen);
}

/* The model's region table (malloc'd, caller frees) and its count, checked:
 * a known element type of its size, inside the raw state. */
static int model_regions(const model *m, model_state_region **out, int *n, char *err, size_t errlen)
{
    int nr = model_state_regions(m, NULL, 0);
    if (nr < 0)
        return errmsg_set(nr, err, errlen, "cannot read the model's state layout");
    model_state_region *r = calloc((size_t)(nr ? nr : 1), sizeof *r);
    if (!r)
        return errmsg_set(-ENOMEM, err, errlen, "out of memory for the model's state layout");
    model_state_regions(m, r, nr);
    size_t sb = model_state_bytes(m);
    for (int i = 0; i < nr; i++) {
        int want = r[i].type == LIND_EL_F32 || r[i].type == LIND_EL_I32 ? 4
                 : r[i].type == LIND_EL_F64 || r[i].type == LIND_EL_I64 ? 8 : 0;
        if (want == 0 || r[i].elem_bytes != want || r[i].offset > sb ||
            r[i].count > (sb - r[i].offset) / (size_t)want) {
            int layer = r[i].layer, type = r[i].type, eb = r[i].elem_bytes;
            free(r);
            return errmsg_set(-EINVAL, err, errlen,
                        "the model's state region %d (layer %d) has element type %d of %d bytes"
                        " or lies outside its %zu-byte state", i, layer, type, eb, sb);
        }
    }
    *out = r;
    *n = nr;
    return 0;
}

/* The vocabulary token ids are checked against (model_vocab(m) once the
 * model exports it; the same value). */
static int vocab_of(const model *m) { return model_config(m)->vocab_size; }

/* Range checks shared by encode (what the caller passed) and decode (what
 * the blob holds); `who` starts the message. */
static int check_meta(const state_meta *mt, int vocab, const char *who, char *err, size_t errlen)
{
    const sampler *sp = &mt->sampler;
    char why[160];
    if (mt->pending_token < -1 || mt->pending_token >= vocab)
        return errmsg_set(STATE_E_INVALID, err, errlen,
                    "%s pending token %d is out of range (-1 or 0..%d)", who, mt->pending_token,
                    vocab - 1);
    if (sp->wlen > SAMPLER_WINDOW_MAX || sp->wpos >= SAMPLER_WINDOW_MAX)
        return errmsg_set(STATE_E_INVALID, err, errlen, "%s sampler window %u/%u is out of range",
                    who, sp->wlen, sp->wpos);
    for (int i = 0; i < SAMPLER_WINDOW_MAX; i++)
        if (sp->window[i] < 0 || sp->window[i] >= SAMPLER_VOCAB_MAX)
            return errmsg_set(STATE_E_INVALID, err, errlen,
                        "%s sampler window entry %d is token %d, outside 0..%d", who, i,
                        sp->window[i], SAMPLER_VOCAB_MAX - 1);
    if (mt->tail_len > TOKENIZER_TAIL_MAX)
        return errmsg_set(STATE_E_INVALID, err, errlen,
                    "%s text tail is %u bytes, more than the %d a stream holds back", who,
                    mt->tail_len, TOKENIZER_TAIL_MAX);
    if (sampler_params_check(&sp->p, why, sizeof why) < 0)
        return errmsg_set(STATE_E_INVALID, err, errlen, "%s sampler settings are invalid: %s", who, why);
    return 0;
}

int state_encode(const model *m, const state_meta *meta, const void *raw,
                 uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    if (!m || !meta || !raw || !out || !outlen)
        return errmsg_set(-EINVAL, err, errlen, "state_encode: missing argument");
    *out = NULL;
    *outlen = 0;
    int rc = check_meta(meta, vocab_of(m), "state_encode:", err, errlen);
    if (rc < 0)
        return rc;
    const sampler *sp = &meta->sampler;
    model_state_region *r;
    int nr;
    char why[200];
    if ((rc = model_regions(m, &r, &nr, why, sizeof why)) < 0)
        return errmsg_set(rc, err, errlen, "state_encode: %s", why);
    rc = check_finite(r, nr, raw, "state not saved", err, errlen);
    if (rc < 0) {
        free(r);
        return rc;
    }
    const layout *L = &layout_v2;
    const lind_config *c = model_config(m);
    size_t raw_bytes = model_state_bytes(m);
    size_t table = L->fixed + meta->tail_len;
    size_t hdr = table + (size_t)nr * L->region_bytes;
    size_t total = hdr + raw_bytes + 8;
    uint8_t *b = calloc(1, total);
    if (!b) {
        free(r);
        return errmsg_set(-ENOMEM, err, errlen, "state_encode: out of memory for %zu bytes", total);
    }
    memcpy(b, state_magic, 8);
    le_put32(b + 8, STATE_FORMAT_VERSION);
    uint32_t bom = BOM;
    memcpy(b + 12, &bom, 4);
    le_put32(b + 16, (uint32_t)hdr);
    le_put32(b + 20, (uint32_t)nr);
    le_put64(b + 24, model_fingerprint(m));
    le_put64(b + 32, raw_bytes);
    le_put64(b + 40, meta->tokens);
    le_put32(b + 48, (uint32_t)meta->pending_token);
    le_put32(b + 52, (uint32_t)c->n_layers);
    le_put32(b + 56, (uint32_t)c->d_model);
    le_put32(b + 60, (uint32_t)XXH64(b, 60, 0));
    putf(b + 64, sp->p.temperature);
    le_put32(b + 68, (uint32_t)sp->p.top_k);
    putf(b + 72, sp->p.top_p);
    putf(b + 76, sp->p.rep_penalty);
    le_put32(b + 80, (uint32_t)sp->p.rep_window);
    le_put32(b + 84, meta->chat_template);
    le_put64(b + 88, sp->p.seed);
    for (int i = 0; i < 4; i++)
        le_put64(b + 96 + 8 * i, sp->rng[i]);
    le_put32(b + 128, sp->wlen);
    le_put32(b + 132, sp->wpos);
    for (int i = 0; i < SAMPLER_WINDOW_MAX; i++)
        le_put32(b + WINDOW_AT + 4 * i, (uint32_t)sp->window[i]);
    le_put32(b + TAIL_LEN_AT, meta->tail_len);
    memcpy(b + L->fixed, meta->tail, meta->tail_len);
    for (int i = 0; i < nr; i++) {
        uint8_t *e = b + table + (size_t)i * L->region_bytes;
        le_put32(e, (uint32_t)r[i].layer);
        le_put32(e + 4, (uint32_t)r[i].elem_bytes);
        memcpy(e + 8, r[i].name, 16);
        le_put64(e + 24, r[i].offset);
        le_put64(e + 32, r[i].count);
        le_put32(e + 40, (uint32_t)r[i].type);
    }
    free(r);
    memcpy(b + hdr, raw, raw_bytes);
    le_put64(b + hdr + raw_bytes, XXH64(b, hdr + raw_bytes, 0));
    *out = b;
    *outlen = total;
    return 0;
}

/* The blob's region table entry e (layout L) as a model_state_region. */
static model_state_region blob_region(const uint8_t *e, const layout *L)
{
    model_state_region g;
    memset(&g, 0, sizeof g);
    g.layer = (int32_t)le_get32(e);
    g.elem_bytes = (int)le_get32(e + 4);
    memcpy(g.name, e + 8, 16);
    g.name[sizeof g.name - 1] = 0;
    g.offset = (size_t)le_get64(e + 24);
    g.count = (size_t)le_get64(e + 32);
    /* v1 regions were all float: their type follows from the size */
    g.type = L->typed ? (int)le_get32(e + 40) : g.elem_bytes == 8 ? LIND_EL_F64 : LIND_EL_F32;
    return g;
}

/* A state whose layout differs from the model's only in regions it holds
 * as fp64 where the model keeps fp32 — an AFT or RetNet state saved before
 * lind kept decaying states in fp32 (docs/NUMERICS.md) — is converted into
 * dst (the model's layout): each such element rounded once, as a step would
 * have stored it, every other region copied. Regions are matched by layer and
 * name, each once. 0 when converted, -1 when the layouts differ otherwise
 * or not at all (the caller then checks them region by region). */
static int convert_regions(const uint8_t *table, const layout *L, int n, const uint8_t *src, uint64_t src_bytes,
                           const model_state_region *r, uint8_t *dst)
{
    uint8_t *done = calloc((size_t)n + 1, 1);
    if (!done) return -1;
    int rc = 0, narrowed = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        model_state_region g = blob_region(table + (size_t)i * L->region_bytes, L);
        int j = 0;
        while (j < n && (r[j].layer != g.layer || strncmp(r[j].name, g.name, sizeof g.name) != 0)) j++;
        int narrow = g.type == LIND_EL_F64 && r[j < n ? j : 0].type == LIND_EL_F32;
        if (j == n || done[j] || g.count != r[j].count || (g.type != r[j].type && !narrow) ||
            g.elem_bytes != (g.type == LIND_EL_F64 || g.type == LIND_EL_I64 ? 8 : 4) ||
            (L->typed && le_get32(table + (size_t)i * L->region_bytes + 44) != 0) || g.offset > src_bytes ||
            g.count > (src_bytes - g.offset) / (uint64_t)g.elem_bytes) {
            rc = -1;
            break;
        }
        done[j] = 1;
        narrowed += narrow;
        if (!narrow) {
            memcpy(dst + r[j].offset, src + g.offset, g.count * (size_t)g.elem_bytes);
            continue;
        }
        for (size_t k = 0; k < g.count; k++) {
            double v;
            memcpy(&v, src + g.offset + 8 * k, 8);
            float f = (float)v;
            memcpy(dst + r[j].offset + 4 * k, &f, 4);
        }
    }
    free(done);
    return rc == 0 && narrowed ? 0 : -1;
}

int state_decode(const model *m, const uint8_t *blob, size_t len,
                 state_meta *meta, void *raw, char *err, size_t errlen)
{
    if (!m || !meta || !raw || (len && !blob))
        return errmsg_set(-EINVAL, err, errlen, "state_decode: missing argument");
    if (len == 0)
        return errmsg_set(STATE_E_TRUNCATED, err, errlen, "state is empty");
    size_t mlen = len < 8 ? len : 8;
    if (memcmp(blob, state_magic, mlen) != 0)
        return errmsg_set(STATE_E_MAGIC, err, errlen, "not a lind session state (bad magic)");
    if (len < 16)
        return errmsg_set(STATE_E_TRUNCATED, err, errlen, "state truncated: %zu bytes", len);
    uint32_t version = le_get32(blob + 8);
    if (version > STATE_FORMAT_VERSION)
        return errmsg_set(STATE_E_VERSION, err, errlen,
                    "state has format version %u, written by a newer lind (this one reads %d)",
                    version, STATE_FORMAT_VERSION);
    if (version == 0)
        return errmsg_set(STATE_E_VERSION, err, errlen, "state has unknown format version 0");
    const layout *L = version == 1 ? &layout_v1 : &layout_v2;
    uint32_t bom;
    memcpy(&bom, blob + 12, 4);
    if (bom != BOM)
        return errmsg_set(bom == __builtin_bswap32(BOM) ? STATE_E_ENDIAN : STATE_E_CHECKSUM, err, errlen,
                    bom == __builtin_bswap32(BOM)
                        ? "state was written on a machine of the other byte order"
                        : "state is damaged (bad byte-order mark)");
    if (len < L->fixed)
        return errmsg_set(STATE_E_TRUNCATED, err, errlen,
                    "state truncated: %zu bytes, its header alone is %u", len, L->fixed);
    if (le_get32(blob + 60) != (uint32_t)XXH64(blob, 60, 0))
        return errmsg_set(STATE_E_CHECKSUM, err, errlen,
                    "state checksum mismatch: its header changed after it was written");
    uint64_t hdr = le_get32(blob + 16), nr = le_get32(blob + 20), raw_bytes = le_get64(blob + 32);
    uint64_t tail_len = L->has_tail ? le_get32(blob + TAIL_LEN_AT) : 0;
    uint64_t table = L->fixed + tail_len;
    if (hdr != table + nr * L->region_bytes || raw_bytes > UINT64_MAX / 2)
        return errmsg_set(STATE_E_CHECKSUM, err, errlen, "state is damaged (inconsistent header sizes)");
    uint64_t total = hdr + raw_bytes + 8;
    if (len < total)
        return errmsg_set(STATE_E_TRUNCATED, err, errlen,
                    "state truncated: %zu bytes, its header says %llu", len,
                    (unsigned long long)total);
    if (len > total)
        return errmsg_set(STATE_E_CHECKSUM, err, errlen,
                    "state is damaged: %llu bytes after its end", (unsigned long long)(len - total));
    uint64_t sum = le_get64(blob + hdr + raw_bytes);
    if (XXH64(blob, (size_t)(hdr + raw_bytes), 0) != sum)
        return errmsg_set(STATE_E_CHECKSUM, err, errlen,
                    "state checksum mismatch: the bytes changed after they were written");

    /* Intact. Now: is it this model's? */
    const lind_config *c = model_config(m);
    uint64_t fp = le_get64(blob + 24);
    if (fp != model_fingerprint(m))
        return errmsg_set(STATE_E_MODEL, err, errlen,
                    "state belongs to another model (fingerprint %016llx, %u layers, d_model %u);"
                    " this model is %016llx (%d layers, d_model %d)",
                    (unsigned long long)fp, le_get32(blob + 52), le_get32(blob + 56),
                    (unsigned long long)model_fingerprint(m), c->n_layers, c->d_model);
    model_state_region *r;
    int mnr;
    char why[200];
    int rc = model_regions(m, &r, &mnr, why, sizeof why);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "state_decode: %s", why);
    size_t sb = model_state_bytes(m);
    uint8_t *conv = calloc(1, sb ? sb : 1);
    if (!conv) {
        free(r);
        return errmsg_set(-ENOMEM, err, errlen, "state_decode: out of memory");
    }
    int converted = nr == (uint64_t)mnr && convert_regions(blob + table, L, mnr, blob + hdr, raw_bytes, r, conv) == 0;
    if (!converted && (raw_bytes != sb || nr != (uint64_t)mnr)) {
        free(r);
        free(conv);
        return errmsg_set(STATE_E_MODEL, err, errlen,
                    "state layout differs from the model's: %llu bytes in %llu regions,"
                    " the model has %zu bytes in %d", (unsigned long long)raw_bytes,
                    (unsigned long long)nr, model_state_bytes(m), mnr);
    }
    for (int i = 0; i < mnr && !converted; i++) {
        const uint8_t *e = blob + table + (size_t)i * L->region_bytes;
        /* v1 regions were all float: their type follows from the size */
        int type = L->typed ? (int)le_get32(e + 40) : le_get32(e + 4) == 8 ? LIND_EL_F64 : LIND_EL_F32;
        if ((int32_t)le_get32(e) != r[i].layer || (int)le_get32(e + 4) != r[i].elem_bytes ||
            memcmp(e + 8, r[i].name, 16) != 0 || le_get64(e + 24) != r[i].offset ||
            le_get64(e + 32) != r[i].count || type != r[i].type || (L->typed && le_get32(e + 44) != 0)) {
            char nm[17];
            memcpy(nm, e + 8, 16);
            nm[16] = 0;
            rc = errmsg_set(STATE_E_MODEL, err, errlen,
                      "state layout differs from the model's at region %d: the state has layer %d %.16s"
                      " (%s, %u bytes at %llu), the model layer %d %s (%s, %zu bytes at %zu)%s", i,
                      (int32_t)le_get32(e), nm, elem_name(type), le_get32(e + 4),
                      (unsigned long long)le_get64(e + 24), r[i].layer, r[i].name, elem_name(r[i].type),
                      r[i].count * (size_t)r[i].elem_bytes, r[i].offset,
                      L->typed ? "" : " (a version-1 state: its regions are all float)");
            free(r);
            free(conv);
            return rc;
        }
    }

    /* Fields a hand-made blob could still get wrong. */
    state_meta *mt = calloc(1, sizeof *mt);
    if (!mt) {
        free(r);
        free(conv);
        return errmsg_set(-ENOMEM, err, errlen, "state_decode: out of memory");
    }
    mt->tokens = le_get64(blob + 40);
    mt->pending_token = (int32_t)le_get32(blob + 48);
    sampler *sp = &mt->sampler;
    sp->p.temperature = getf(blob + 64);
    sp->p.top_k = (int32_t)le_get32(blob + 68);
    sp->p.top_p = getf(blob + 72);
    sp->p.rep_penalty = getf(blob + 76);
    sp->p.rep_window = (int32_t)le_get32(blob + 80);
    mt->chat_template = le_get32(blob + 84);
    sp->p.seed = le_get64(blob + 88);
    for (int i = 0; i < 4; i++)
        sp->rng[i] = le_get64(blob + 96 + 8 * i);
    sp->wlen = le_get32(blob + 128);
    sp->wpos = le_get32(blob + 132);
    for (int i = 0; i < SAMPLER_WINDOW_MAX; i++)
        sp->window[i] = L->window_elem == 1 ? blob[WINDOW_AT + i]
                                            : (int32_t)le_get32(blob + WINDOW_AT + 4 * i);
    mt->tail_len = (uint32_t)tail_len;
    rc = check_meta(mt, vocab_of(m), "state's", err, errlen);
    if (rc == 0) {
        memcpy(mt->tail, blob + L->fixed, mt->tail_len);
        rc = check_finite(r, mnr, converted ? conv : blob + hdr, "state refused", err, errlen);
    }
    free(r);
    if (rc == 0) {
        memcpy(raw, converted ? conv : blob + hdr, sb);
        *meta = *mt;
    }
    free(conv);
    free(mt);
    return rc;
}

/* The checks of a peek: magic, version, header check. */
static int peek_ok(const uint8_t *blob, size_t len)
{
    if (len < 96 || memcmp(blob, state_magic, 8)) return len < 96 ? STATE_E_TRUNCATED : STATE_E_MAGIC;
    uint32_t version = le_get32(blob + 8);
    if (version == 0 || version > STATE_FORMAT_VERSION) return STATE_E_VERSION;
    if (le_get32(blob + 60) != (uint32_t)XXH64(blob, 60, 0)) return STATE_E_CHECKSUM;
    return 0;
}

int state_peek_seed(const uint8_t *blob, size_t len, uint64_t *seed)
{
    int rc = peek_ok(blob, len);
    if (rc == 0) *seed = le_get64(blob + 88);   /* sampler params: ..., u32 chat template, u64 seed */
    return rc;
}

int state_peek_chat_template(const uint8_t *blob, size_t len, uint32_t *hash)
{
    int rc = peek_ok(blob, len);
    if (rc == 0) *hash = le_get32(blob + 84);
    return rc;
}
