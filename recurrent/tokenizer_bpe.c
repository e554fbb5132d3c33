/* recurrent/tokenizer_bpe.c — the "bpe" kind: byte-level BPE read from a
 * Hugging Face tokenizer.json (GPT-2, GPT-NeoX, Llama-3 and alike).
 *
 * Supported (anything else is refused, naming the file and the field):
 *   model        type "BPE", vocab {string: id}, merges ["a b", ...] or
 *                [["a","b"], ...] (rank = index), ignore_merges; no dropout,
 *                no continuing_subword_prefix / end_of_word_suffix, no
 *                byte_fallback.
 *   normalizer   null, NFC (libutf8proc), or a Sequence of those.
 *   pre_tokenizer ByteLevel (use_regex: the GPT-2 regex; add_prefix_space),
 *                or a Sequence of one Split (Regex or String pattern,
 *                behavior Isolated, or Removed with invert true) and
 *                ByteLevel with use_regex false (Llama-3, Qwen, GPT-4o style).
 *   added_tokens matched as literal strings in the raw text before anything
 *                else, leftmost-longest (tokenizer_encode_literals); those
 *                marked special are the tokenizer's specials. lstrip, rstrip
 *                and single_word are refused.
 * The decoder is not used (a token decodes to its bytes), nor is the
 * post-processor in encoding (nothing is added around the text); what it
 * would put first is reported (tokenizer_bos) for the model's BOS rule.
 *
 * Text → tokens: the stretch between added tokens is NFC-normalized (when
 * asked), gets a leading space (add_prefix_space, when it lacks one), is cut
 * into pieces by the regex (PCRE2, UTF mode with PCRE2_MATCH_INVALID_UTF: an
 * invalid UTF-8 byte is never matched, so a run of them between matches is a
 * piece of its own, as Isolated splitting makes of any gap), and each piece's
 * bytes are merged by rank (lowest rank first, leftmost on ties, as HF).
 *
 * Streaming (final == 0): a piece is decided when its regex search did not
 * reach the end of the text: the search runs with PCRE2_PARTIAL_HARD, which
 * reports a partial match as soon as matching touches the end of the subject
 * (a greedy run, a lookahead or an alternative needing one more character),
 * and a gap that reaches the end could still grow. Everything from the start
 * of that search on is held back. Besides: an incomplete UTF-8 character at
 * the end is held back; with NFC, the last normalization chunk (from the last
 * character that cannot combine with what precedes it) is held back, since a
 * following combining mark could change it; with add_prefix_space, the text
 * is cut only before a space or where an added token ended, so that the next
 * call's text (which gets a prefix space when it lacks one) needs none; a
 * suffix that is a proper prefix of an added token is held back
 * (tokenizer_encode_literals). Patterns with lookbehind (\b included) are
 * refused: a cut would hide the text they look back at. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "recurrent/bytebuf.h"
#include "recurrent/errmsg.h"
#include "recurrent/tokenizer.h"

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Open-addressing map from a byte string (in the tokenizer's pool) to an id. */
typedef struct strmap {
    int32_t *slot;   /* [cap] id or -1 */
    size_t cap;
} strmap;

/* Map from a pair of ids to (rank, merged id). */
typedef struct pairmap {
    uint64_t *key;   /* [cap] (a << 32 | b) + 1, 0 = empty */
    int32_t *rank, *id;
    size_t cap;
} pairmap;

typedef struct bpe {
    int vocab;             /* max id + 1 */
    bytebuf  pool;         /* every token's bytes */
    size_t *off;           /* [vocab] */
    uint32_t *len;         /* [vocab]; with has[] below */
    uint8_t *has;          /* [vocab] 1 when the id exists */
    strmap bytes2id;       /* byte-level vocab entries by their bytes */
    pairmap merges;
    int32_t byte_id[256];  /* the token of each single byte */
    int ignore_merges, nfc, add_prefix_space;
    int lossy;             /* some byte has no token: invalid UTF-8 becomes U+FFFD */
    int post_bos;          /* post_processor: 1 puts post_bos_id first, 0 nothing, -1 unsaid */
    int32_t post_bos_id;
    pcre2_code *re;
    /* added tokens */
    int nadded, nspecial;
    uint8_t **added_text;
    size_t *added_len;
    int32_t *added_id;
    int *special_idx;      /* [nspecial] index into added_* */
    char **special_cstr;   /* [nspecial] NUL-terminated copies */
    tokenizer_literals lits;
} bpe;

/* ---- the GPT-2 byte ↔ unicode table ------------------------------------ */
static void byte_level_table(uint32_t b2u[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        b2u[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* ---- maps ------------------------------------------------------------------ */
static uint64_t hbytes(const uint8_t *s, size_t n) { return XXH3_64bits(s, n); }

static int32_t strmap_get(const bpe *t, const uint8_t *s, size_t n)
{
    const strmap *m = &t->bytes2id;
    for (size_t i = hbytes(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        if (t->len[id] == n && !memcmp(t->pool.p + t->off[id], s, n)) return id;
    }
}

static void strmap_put(bpe *t, int32_t id)
{
    strmap *m = &t->bytes2id;
    size_t i = hbytes((const uint8_t *)t->pool.p + t->off[id], t->len[id]) & (m->cap - 1);
    while (m->slot[i] >= 0) i = (i + 1) & (m->cap - 1);
    m->slot[i] = id;
}

static inline size_t phash(uint64_t k, size_t cap)
{
    k ^= k >> 29;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 32;
    return (size_t)k & (cap - 1);
}

static int pair_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = phash(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->key[i] == k) { *rank = m->rank[i]; *id = m->id[i]; return 1; }
        if (!m->key[i]) return 0;
    }
}

/* A later merge of the same pair replaces the earlier (as HF's HashMap). */
static void pair_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t i = phash(k, m->cap);
    while (m->key[i] && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    m->key[i] = k;
    m->rank[i] = rank;
    m->id[i] = id;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static void bpe_free(void *priv)
{
    bpe *t = priv;
    if (!t) return;
    bytebuf_free(&t->pool); free(t->off); free(t->len); free(t->has);
    free(t->bytes2id.slot);
    free(t->merges.key); free(t->merges.rank); free(t->merges.id);
    if (t->re) pcre2_code_free(t->re);
    for (int i = 0; i < t->nadded; i++) free(t->added_text[i]);
    free(t->added_text); free(t->added_len); free(t->added_id);
    for (int i = 0; i < t->nspecial; i++) free(t->special_cstr[i]);
    free(t->special_idx); free(t->special_cstr);
    free(t);
}

/* ---- loading ----------------------------------------------------------------- */

/* Decode a vocab string from the byte-level alphabet into bytes (out has room
 * for strlen(s)); -1 when a character is outside the alphabet. */
static long byte_level_decode(const int16_t *u2b, const char *s, uint8_t *out)
{
    const uint8_t *p = (const uint8_t *)s;
    long o = 0;
    size_t n = strlen(s);
    while (n) {
        int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate(p, (utf8proc_ssize_t)n, &cp);
        if (l <= 0 || cp >= 324 || u2b[cp] < 0) return -1;
        out[o++] = (uint8_t)u2b[cp];
        p += l;
        n -= (size_t)l;
    }
    return o;
}

static int is_null_or(json_t *v, const char *s)
{
    return !v || json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), s));
}

/* normalizer: null, NFC, or a Sequence of those. */
static int load_normalizer(bpe *t, const char *path, json_t *n, char *err, size_t errlen)
{
    if (!n || json_is_null(n)) return 0;
    const char *ty = json_string_value(json_object_get(n, "type"));
    if (!json_is_object(n) || !ty)
        return errmsg_set(-EINVAL, err, errlen, "%s: normalizer: expected null or an object with a \"type\"", path);
    if (!strcmp(ty, "NFC")) {
        t->nfc = 1;
        return 0;
    }
    if (!strcmp(ty, "Sequence")) {
        json_t *a = json_object_get(n, "normalizers");
        if (!json_is_array(a))
            return errmsg_set(-EINVAL, err, errlen, "%s: normalizer.normalizers: expected an array", path);
        for (size_t i = 0; i < json_array_size(a); i++) {
            int rc = load_normalizer(t, path, json_array_get(a, i), err, errlen);
            if (rc < 0) return rc;
        }
        return 0;
    }
    return errmsg_set(-EINVAL, err, errlen, "%s: normalizer.type \"%s\" is not supported (null, NFC or a Sequence of NFC)", path, ty);
}

static int compile_regex(bpe *t, const char *path, const char *pat, int literal, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
    t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[200];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer pattern \"%s\": %s at offset %zu", path, pat, (char *)msg, (size_t)eo);
    }
    uint32_t lb = 0;
    pcre2_pattern_info(t->re, PCRE2_INFO_MAXLOOKBEHIND, &lb);
    if (lb)
        return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer pattern \"%s\" looks behind (lookbehind or \\b), which streaming cannot support", path, pat);
    /* JIT when available (interpreted otherwise: same results). */
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    return 0;
}

/* One ByteLevel entry; *use_regex receives its use_regex (default true). */
static int load_byte_level(bpe *t, const char *path, const char *where, json_t *o, int *use_regex,
                           char *err, size_t errlen)
{
    json_t *v = json_object_get(o, "use_regex");
    if (v && !json_is_boolean(v)) return errmsg_set(-EINVAL, err, errlen, "%s: %s.use_regex: expected true or false", path, where);
    *use_regex = v ? json_is_true(v) : 1;
    v = json_object_get(o, "add_prefix_space");
    if (v && !json_is_boolean(v)) return errmsg_set(-EINVAL, err, errlen, "%s: %s.add_prefix_space: expected true or false", path, where);
    t->add_prefix_space = v ? json_is_true(v) : 0;
    return 0;
}

static int load_pre_tokenizer(bpe *t, const char *path, json_t *p, char *err, size_t errlen)
{
    const char *ty = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
    if (!ty)
        return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer: expected an object with a \"type\" (ByteLevel or Sequence)", path);
    int rc, use_regex;
    if (!strcmp(ty, "ByteLevel")) {
        if ((rc = load_byte_level(t, path, "pre_tokenizer", p, &use_regex, err, errlen)) < 0) return rc;
        return use_regex ? compile_regex(t, path, GPT2_REGEX, 0, err, errlen) : 0;
    }
    if (strcmp(ty, "Sequence"))
        return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer.type \"%s\" is not supported (ByteLevel, or a Sequence of Split and ByteLevel)", path, ty);
    json_t *a = json_object_get(p, "pretokenizers");
    if (!json_is_array(a))
        return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer.pretokenizers: expected an array", path);
    int have_split = 0, have_bl = 0;
    char where[64];
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        const char *et = json_is_object(e) ? json_string_value(json_object_get(e, "type")) : NULL;
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        if (!et) return errmsg_set(-EINVAL, err, errlen, "%s: %s: expected an object with a \"type\"", path, where);
        if (!strcmp(et, "Split")) {
            if (have_split || have_bl)
                return errmsg_set(-EINVAL, err, errlen, "%s: %s: only one Split, before the ByteLevel, is supported", path, where);
            json_t *pat = json_object_get(e, "pattern");
            const char *rx = json_string_value(json_object_get(pat, "Regex"));
            const char *str = json_string_value(json_object_get(pat, "String"));
            if (!rx && !str)
                return errmsg_set(-EINVAL, err, errlen, "%s: %s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path, where);
            /* Isolated: matches and the gaps between them are pieces (invert
             * changes nothing). Removed + invert: the matches are the pieces
             * and the gaps are dropped; the GPT-4o-style patterns match all
             * valid text, so gaps only come from invalid UTF-8, which is kept
             * as pieces here so that every byte still encodes. */
            json_t *beh = json_object_get(e, "behavior");
            int inv = json_is_true(json_object_get(e, "invert"));
            if (!is_null_or(beh, "Isolated") && !(inv && is_null_or(beh, "Removed")))
                return errmsg_set(-EINVAL, err, errlen, "%s: %s.behavior: only \"Isolated\", or \"Removed\" with invert true, is supported",
                                  path, where);
            if ((rc = compile_regex(t, path, rx ? rx : str, !rx, err, errlen)) < 0) return rc;
            have_split = 1;
        } else if (!strcmp(et, "ByteLevel")) {
            if (have_bl) return errmsg_set(-EINVAL, err, errlen, "%s: %s: a second ByteLevel", path, where);
            if ((rc = load_byte_level(t, path, where, e, &use_regex, err, errlen)) < 0) return rc;
            if (use_regex && have_split)
                return errmsg_set(-EINVAL, err, errlen, "%s: %s.use_regex: true after a Split (two regex splits) is not supported", path, where);
            if (t->add_prefix_space && have_split)
                return errmsg_set(-EINVAL, err, errlen, "%s: %s.add_prefix_space: true after a Split is not supported", path, where);
            if (use_regex && (rc = compile_regex(t, path, GPT2_REGEX, 0, err, errlen)) < 0) return rc;
            have_bl = 1;
        } else {
            return errmsg_set(-EINVAL, err, errlen, "%s: %s.type \"%s\" is not supported (Split, ByteLevel)", path, where, et);
        }
    }
    if (!have_bl) return errmsg_set(-EINVAL, err, errlen, "%s: pre_tokenizer: a Sequence without ByteLevel is not byte-level BPE", path);
    return 0;
}

/* Record id → bytes (the id must be new). */
static int set_token(bpe *t, const char *path, const char *what, int32_t id, const uint8_t *b, size_t n,
                     char *err, size_t errlen)
{
    if (t->has[id]) return errmsg_set(-EINVAL, err, errlen, "%s: %s: id %d is given twice", path, what, id);
    t->off[id] = t->pool.n;
    if (bytebuf_put(&t->pool, b, n))   /* allocated even for an empty first token */
        return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    t->len[id] = (uint32_t)n;
    t->has[id] = 1;
    return 0;
}

/* What the post-processor puts before a single text (Hugging Face applies
 * it when asked for special tokens): nothing (null, ByteLevel, a template
 * starting with the text), or the id a template's leading SpecialToken or
 * Roberta/Bert's cls names. Anything else leaves it unsaid (-1): lind does
 * not add tokens after the text, so it is never a reason to refuse. */
static void read_post_processor(bpe *t, json_t *pp)
{
    t->post_bos = -1;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!pp || json_is_null(pp) || (type && !strcmp(type, "ByteLevel"))) { t->post_bos = 0; return; }
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        json_t *ps = json_object_get(pp, "processors"), *q;
        size_t i;
        int said = 0;
        json_array_foreach(ps, i, q) {
            read_post_processor(t, q);
            if (t->post_bos == 1) return;
            if (t->post_bos < 0) said = -1;
        }
        t->post_bos = json_is_array(ps) ? (said < 0 ? -1 : 0) : -1;
        return;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        json_t *cls = json_object_get(pp, "cls");
        json_t *id = json_array_get(cls, 1);
        if (json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) < t->vocab) {
            t->post_bos = 1;
            t->post_bos_id = (int32_t)json_integer_value(id);
        }
        return;
    }
    if (strcmp(type, "TemplateProcessing")) return;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    if (!json_is_object(first)) return;
    if (json_object_get(first, "Sequence")) { t->post_bos = 0; return; }
    const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    json_t *st = name ? json_object_get(json_object_get(pp, "special_tokens"), name) : NULL;
    json_t *id = json_array_get(json_object_get(st, "ids"), 0);
    if (json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) < t->vocab) {
        t->post_bos = 1;
        t->post_bos_id = (int32_t)json_integer_value(id);
    }
}

static int bpe_load(const char *path, void **priv, char *err, size_t errlen)
{
    *priv = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &je);
    if (!root) {
        if (je.line < 0) return errmsg_set(-ENOENT, err, errlen, "%s: cannot read: %s", path, je.text);
        return errmsg_set(-EINVAL, err, errlen, "%s:%d:%d: bad JSON: %s", path, je.line, je.column, je.text);
    }
    bpe *t = calloc(1, sizeof *t);
    uint8_t *buf = NULL;
    int rc = 0;
    if (!t) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
    if (!json_is_object(root)) { rc = errmsg_set(-EINVAL, err, errlen, "%s: expected a JSON object at the top", path); goto out; }
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) { rc = errmsg_set(-EINVAL, err, errlen, "%s: field \"model\" missing or not an object", path); goto out; }
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (!mt) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.type missing or not a string", path); goto out; }
    if (strcmp(mt, "BPE")) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.type \"%s\" is not supported (only \"BPE\")", path, mt); goto out; }
    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0)) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: model.dropout: only null is supported", path);
        goto out;
    }
    static const char *const no_affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(model, no_affix[i]);
        if (v && !is_null_or(v, "")) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: model.%s: only null or \"\" is supported", path, no_affix[i]);
            goto out;
        }
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: model.byte_fallback: true is not supported (byte-level BPE needs none)", path);
        goto out;
    }
    v = json_object_get(model, "ignore_merges");
    if (v && !json_is_boolean(v)) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.ignore_merges: expected true or false", path); goto out; }
    t->ignore_merges = json_is_true(v);
    if ((rc = load_normalizer(t, path, json_object_get(root, "normalizer"), err, errlen)) < 0) goto out;
    if ((rc = load_pre_tokenizer(t, path, json_object_get(root, "pre_tokenizer"), err, errlen)) < 0) goto out;

    /* Ids: the largest over vocab and added tokens. */
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.vocab missing or not an object", path); goto out; }
    if (added && !json_is_null(added) && !json_is_array(added)) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens: expected an array", path);
        goto out;
    }
    const char *key;
    json_int_t maxid = -1;
    size_t maxkey = 0;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7FFFFFF) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: model.vocab[\"%s\"]: expected an id (an integer from 0)", path, key);
            goto out;
        }
        if (json_integer_value(v) > maxid) maxid = json_integer_value(v);
        if (strlen(key) > maxkey) maxkey = strlen(key);
    }
    for (size_t i = 0; added && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
        if (!json_is_object(a) || !json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > 0x7FFFFFF ||
            !json_is_string(c) || !json_string_length(c)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%zu]: expected {\"id\": integer from 0, \"content\": non-empty string, ...}", path, i);
            goto out;
        }
        static const char *const unsup[] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (json_is_true(json_object_get(a, unsup[k]))) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%zu] (\"%s\").%s: true is not supported", path, i, json_string_value(c), unsup[k]);
                goto out;
            }
        if (json_integer_value(id) > maxid) maxid = json_integer_value(id);
    }
    if (maxid < 0) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.vocab is empty", path); goto out; }
    t->vocab = (int)maxid + 1;
    t->off = calloc((size_t)t->vocab, sizeof *t->off);
    t->len = calloc((size_t)t->vocab, sizeof *t->len);
    t->has = calloc((size_t)t->vocab, 1);
    t->bytes2id.cap = pow2_at_least(2 * json_object_size(vocab) + 2);
    t->bytes2id.slot = malloc(t->bytes2id.cap * sizeof(int32_t));
    buf = malloc(maxkey + 1);
    if (!t->off || !t->len || !t->has || !t->bytes2id.slot || !buf) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
    memset(t->bytes2id.slot, 0xFF, t->bytes2id.cap * sizeof(int32_t));

    uint32_t b2u[256];
    int16_t u2b[324];
    byte_level_table(b2u);
    memset(u2b, 0xFF, sizeof u2b);
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (int16_t)b;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        long n = byte_level_decode(u2b, key, buf);
        /* A string outside the byte-level alphabet can only be reached as an
         * added token; its bytes are its UTF-8. */
        int mapped = n >= 0;
        if (!mapped) n = (long)strlen(key);
        if ((rc = set_token(t, path, "model.vocab", id, mapped ? buf : (const uint8_t *)key, (size_t)n, err, errlen)) < 0) {
            if (rc == -EINVAL) {   /* name the other string with that id */
                const char *k2, *other = "?";
                json_t *v2;
                json_object_foreach(vocab, k2, v2)
                    if (json_integer_value(v2) == id && strcmp(k2, key)) { other = k2; break; }
                errmsg_set(-EINVAL, err, errlen, "%s: model.vocab: id %d is given to both \"%s\" and \"%s\"", path, id, other, key);
            }
            goto out;
        }
        if (mapped) {
            if (strmap_get(t, buf, (size_t)n) >= 0) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: model.vocab: \"%s\" decodes to the same bytes as another entry", path, key);
                goto out;
            }
            strmap_put(t, id);
        }
    }
    /* A byte that never occurs in valid UTF-8 (0xC0, 0xC1, 0xF5-0xFF) may
     * lack a token (GPT-NeoX-20B's file has none for those 13): invalid
     * UTF-8 is then replaced as Hugging Face's string input would see it
     * (bpe_encode). Any other byte can occur in valid text and must have one. */
    for (int b = 0; b < 256; b++) {
        uint8_t one = (uint8_t)b;
        if ((t->byte_id[b] = strmap_get(t, &one, 1)) >= 0) continue;
        if (b == 0xC0 || b == 0xC1 || b >= 0xF5) {
            t->lossy = 1;
            continue;
        }
        rc = errmsg_set(-EINVAL, err, errlen, "%s: model.vocab has no token for byte 0x%02X (byte-level character U+%04X), "
                        "which valid UTF-8 text can contain", path, b, b2u[b]);
        goto out;
    }

    /* Merges: rank = index; both sides and their concatenation in the vocab. */
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) { rc = errmsg_set(-EINVAL, err, errlen, "%s: model.merges missing or not an array", path); goto out; }
    size_t nm = json_array_size(merges);
    pairmap *pm = &t->merges;
    pm->cap = pow2_at_least(2 * nm + 2);
    pm->key = calloc(pm->cap, sizeof *pm->key);
    pm->rank = malloc(pm->cap * sizeof *pm->rank);
    pm->id = malloc(pm->cap * sizeof *pm->id);
    if (!pm->key || !pm->rank || !pm->id) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
    char *cat = NULL;
    size_t catcap = 0;
    for (size_t i = 0; i < nm; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (sp && !strchr(sp + 1, ' ') && sp != a && sp[1]) { al = (size_t)(sp - a); b = sp + 1; bl = strlen(b); }
            else a = NULL;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)); al = strlen(a);
            b = json_string_value(json_array_get(m, 1)); bl = strlen(b);
        }
        if (!a) {
            free(cat);
            rc = errmsg_set(-EINVAL, err, errlen, "%s: model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"]", path, i);
            goto out;
        }
        if (al + bl + 1 > catcap) {
            catcap = 2 * (al + bl + 1);
            char *nc = realloc(cat, catcap);
            if (!nc) { free(cat); rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
            cat = nc;
        }
        memcpy(cat, a, al); cat[al] = 0;
        json_t *ia = json_object_get(vocab, cat);
        json_t *ib = json_object_get(vocab, b);
        memcpy(cat + al, b, bl); cat[al + bl] = 0;
        json_t *ic = json_object_get(vocab, cat);
        if (!ia || !ib || !ic) {
            char side[256];
            if (!ia) snprintf(side, sizeof side, "\"%.*s\"", (int)(al > 200 ? 200 : al), a);
            else if (!ib) snprintf(side, sizeof side, "\"%.200s\"", b);
            else snprintf(side, sizeof side, "the merged \"%.200s\"", cat);
            free(cat);
            rc = errmsg_set(-EINVAL, err, errlen, "%s: model.merges[%zu]: %s is not in model.vocab", path, i, side);
            goto out;
        }
        pair_put(pm, (int32_t)json_integer_value(ia), (int32_t)json_integer_value(ib), (int32_t)i,
                 (int32_t)json_integer_value(ic));
    }
    free(cat);

    /* Added tokens: literal strings; a vocab id they share must have their bytes. */
    t->nadded = added ? (int)json_array_size(added) : 0;
    t->added_text = calloc((size_t)t->nadded + 1, sizeof *t->added_text);
    t->added_len = calloc((size_t)t->nadded + 1, sizeof *t->added_len);
    t->added_id = calloc((size_t)t->nadded + 1, sizeof *t->added_id);
    t->special_idx = calloc((size_t)t->nadded + 1, sizeof *t->special_idx);
    t->special_cstr = calloc((size_t)t->nadded + 1, sizeof *t->special_cstr);
    if (!t->added_text || !t->added_len || !t->added_id || !t->special_idx || !t->special_cstr) {
        rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < t->nadded; i++) {
        json_t *a = json_array_get(added, (size_t)i), *c = json_object_get(a, "content");
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        size_t n = json_string_length(c);
        const uint8_t *s = (const uint8_t *)json_string_value(c);
        if (!(t->added_text[i] = malloc(n + 1))) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
        memcpy(t->added_text[i], s, n);
        t->added_text[i][n] = 0;
        t->added_len[i] = n;
        t->added_id[i] = id;
        for (int j = 0; j < i; j++)
            if (t->added_len[j] == n && !memcmp(t->added_text[j], s, n)) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%d]: \"%s\" is also added_tokens[%d]", path, i, (const char *)s, j);
                goto out;
            } else if (t->added_id[j] == id) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%d]: id %d is also added_tokens[%d]", path, i, id, j);
                goto out;
            }
        if (t->has[id]) {
            if (t->len[id] != n || memcmp(t->pool.p + t->off[id], s, n)) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%d] (\"%s\"): id %d is another string in model.vocab", path, i, (const char *)s, id);
                goto out;
            }
        } else if ((rc = set_token(t, path, "added_tokens", id, s, n, err, errlen)) < 0) {
            goto out;
        }
        json_t *sp = json_object_get(a, "special");
        if (sp && !json_is_boolean(sp)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: added_tokens[%d].special: expected true or false", path, i);
            goto out;
        }
        if (json_is_true(sp)) {
            t->special_idx[t->nspecial] = i;
            if (!(t->special_cstr[t->nspecial] = strdup((const char *)t->added_text[i]))) {
                rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
                goto out;
            }
            t->nspecial++;
        }
        t->lits.first[s[0]] = 1;
        if (n > t->lits.maxlen) t->lits.maxlen = n;
    }
    t->lits.n = t->nadded;
    t->lits.text = (const uint8_t *const *)t->added_text;
    t->lits.len = t->added_len;
    t->lits.id = t->added_id;
    read_post_processor(t, json_object_get(root, "post_processor"));
out:
    free(buf);
    json_decref(root);
    if (rc < 0) bpe_free(t);
    else *priv = t;
    return rc;
}

/* ---- encoding ------------------------------------------------------------------ */

/* Per-call scratch: merge buffers and a cache of piece → tokens. */
typedef struct scratch {
    int32_t *sym, *prev, *next;
    uint32_t *slen;
    size_t symcap;
    struct hent { int32_t rank, pos; } *heap;
    size_t hn, hcap;
    /* cache: open addressing over entries; keys and tokens in pools */
    struct centry { uint64_t h; uint32_t koff, klen, toff, tn; } *ce;
    size_t ccap, cn;
    uint8_t *kpool; size_t kn, kcap;
    int32_t *tpool; size_t tn, tcap;
    uint8_t *w; size_t wcap;          /* working text (normalized, prefixed) */
    size_t *wmap; size_t wmapcap;     /* NFC: raw offset of each working position, or SIZE_MAX */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
} scratch;

#define CACHE_MAX_PIECE 64
#define CACHE_MAX_ENTRIES 32768

static void scratch_free(scratch *s)
{
    free(s->sym); free(s->prev); free(s->next); free(s->slen); free(s->heap);
    free(s->ce); free(s->kpool); free(s->tpool); free(s->w); free(s->wmap);
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jstack) pcre2_jit_stack_free(s->jstack);
}

static int grow(void **p, size_t *cap, size_t need, size_t elt)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elt);
    if (!np) return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static inline int hless(struct hent a, struct hent b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void hpush(scratch *s, struct hent e)
{
    size_t i = s->hn++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!hless(e, s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static struct hent hpop(scratch *s)
{
    struct hent top = s->heap[0], e = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->hn) break;
        if (c + 1 < s->hn && hless(s->heap[c + 1], s->heap[c])) c++;
        if (!hless(s->heap[c], e)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->hn) s->heap[i] = e;
    return top;
}

static void try_pair(const bpe *t, scratch *s, int32_t pos)
{
    int32_t nx = s->next[pos], rank, id;
    if (nx >= 0 && pair_get(&t->merges, s->sym[pos], s->sym[nx], &rank, &id)) hpush(s, (struct hent){rank, pos});
}

/* The tokens of one piece (bytes b[0..n)), appended. */
static int encode_piece(const bpe *t, scratch *s, const uint8_t *b, size_t n, int32_t **toks, size_t *ntoks, size_t *cap)
{
    if (n == 1) return tokenizer_push(toks, ntoks, cap, t->byte_id[b[0]]);
    if (t->ignore_merges) {
        int32_t id = strmap_get(t, b, n);
        if (id >= 0) return tokenizer_push(toks, ntoks, cap, id);
    }
    uint64_t h = 0;
    size_t ci = 0;
    int cacheable = n <= CACHE_MAX_PIECE;
    if (cacheable) {
        h = hbytes(b, n);
        if (!s->ce) {
            s->ccap = 2 * CACHE_MAX_ENTRIES;
            if (!(s->ce = calloc(s->ccap, sizeof *s->ce))) return -ENOMEM;
        }
        for (ci = h & (s->ccap - 1); s->ce[ci].klen; ci = (ci + 1) & (s->ccap - 1)) {
            struct centry *e = &s->ce[ci];
            if (e->h == h && e->klen == n && !memcmp(s->kpool + e->koff, b, n)) {
                for (uint32_t k = 0; k < e->tn; k++)
                    if (tokenizer_push(toks, ntoks, cap, s->tpool[e->toff + k]) < 0) return -ENOMEM;
                return 0;
            }
        }
    }
    if (n > s->symcap) {   /* the four per-symbol arrays share one capacity */
        size_t c[4] = {s->symcap, s->symcap, s->symcap, s->symcap};
        if (grow((void **)&s->sym, &c[0], n, sizeof *s->sym) < 0 || grow((void **)&s->prev, &c[1], n, sizeof *s->prev) < 0 ||
            grow((void **)&s->next, &c[2], n, sizeof *s->next) < 0 || grow((void **)&s->slen, &c[3], n, sizeof *s->slen) < 0)
            return -ENOMEM;
        s->symcap = c[0];
    }
    if (grow((void **)&s->heap, &s->hcap, 2 * n + 2, sizeof *s->heap) < 0) return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_id[b[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        s->slen[i] = 1;
    }
    s->hn = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, s, (int32_t)i);
    while (s->hn) {
        struct hent top = hpop(s);
        int32_t pos = top.pos, nx, rank, id;
        if (!s->slen[pos] || (nx = s->next[pos]) < 0) continue;
        if (!pair_get(&t->merges, s->sym[pos], s->sym[nx], &rank, &id) || rank != top.rank) continue;
        s->sym[pos] = id;
        s->slen[pos] += s->slen[nx];
        s->slen[nx] = 0;
        s->next[pos] = s->next[nx];
        if (s->next[nx] >= 0) s->prev[s->next[nx]] = pos;
        if (s->prev[pos] >= 0) try_pair(t, s, s->prev[pos]);
        try_pair(t, s, pos);
        /* The heap can hold at most one live entry per pair plus stale ones:
         * keep room for the two pushes of the next merge. */
        if (grow((void **)&s->heap, &s->hcap, s->hn + 2, sizeof *s->heap) < 0) return -ENOMEM;
    }
    size_t first = *ntoks;
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (tokenizer_push(toks, ntoks, cap, s->sym[i]) < 0) return -ENOMEM;
    if (cacheable) {
        size_t tn = *ntoks - first;
        if (s->cn >= CACHE_MAX_ENTRIES) {   /* full: start over */
            memset(s->ce, 0, s->ccap * sizeof *s->ce);
            s->cn = s->kn = s->tn = 0;
            for (ci = h & (s->ccap - 1); s->ce[ci].klen; ci = (ci + 1) & (s->ccap - 1)) {}
        }
        if (grow((void **)&s->kpool, &s->kcap, s->kn + n, 1) < 0 ||
            grow((void **)&s->tpool, &s->tcap, s->tn + tn, sizeof *s->tpool) < 0)
            return -ENOMEM;
        memcpy(s->kpool + s->kn, b, n);
        memcpy(s->tpool + s->tn, *toks + first, tn * sizeof **toks);
        s->ce[ci] = (struct centry){h, (uint32_t)s->kn, (uint32_t)n, (uint32_t)s->tn, (uint32_t)tn};
        s->kn += n;
        s->tn += tn;
        s->cn++;
    }
    return 0;
}

/* Length of the valid UTF-8 character at p (n bytes left) and its code
 * point, or 0 for an invalid byte. */
static size_t utf8_char(const uint8_t *p, size_t n, int32_t *cp)
{
    utf8proc_ssize_t l = utf8proc_iterate(p, (utf8proc_ssize_t)(n > 4 ? 4 : n), cp);
    return l > 0 ? (size_t)l : 0;
}

/* Bytes at the end of text[0..n) that begin a UTF-8 character still missing
 * its last bytes (0 when the text ends on a character boundary or on bytes
 * that can never become valid). PCRE2's partial matching would report such
 * a character too; cutting it off keeps the NFC chunking on whole ones. */
static size_t incomplete_tail(const uint8_t *text, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = text[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (need <= k) return 0;
        if (k >= 2) {   /* the second byte's range depends on the first */
            uint8_t c1 = text[n - k + 1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
                return 0;
        }
        return k;
    }
    return 0;
}

/* A character that NFC never merges into what precedes it: a starter that
 * is neither a mark nor a Hangul medial vowel / final consonant (the second
 * halves of canonical compositions are all marks or those jamo). Text may be
 * normalized in chunks cut before such characters. */
static int nfc_safe_start(int32_t cp)
{
    if (cp < 0x80) return 1;
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return 0;
    const utf8proc_property_t *pr = utf8proc_get_property(cp);
    if (pr->combining_class) return 0;
    return pr->category != UTF8PROC_CATEGORY_MN && pr->category != UTF8PROC_CATEGORY_MC &&
           pr->category != UTF8PROC_CATEGORY_ME;
}

/* NFC of text[0..n) into s->w from offset `at`, chunk by chunk: a chunk is
 * a character plus the characters after it that may combine with it (up to
 * the next nfc_safe_start), and the NFC of the whole is the NFC of the chunks
 * one after the other. s->wmap[i] is the raw offset at which working
 * position i starts a chunk, SIZE_MAX inside one. Invalid bytes are chunks
 * of their own, copied as they are. With final == 0 the last chunk is left
 * out (a combining mark could still join it); *wl receives the working
 * length, *used the raw bytes normalized. */
static int nfc_into(scratch *s, const uint8_t *text, size_t n, int final, size_t at, size_t *wl, size_t *used)
{
    size_t o = at, i = 0;
    if (grow((void **)&s->w, &s->wcap, at + n + 1, 1) < 0 || grow((void **)&s->wmap, &s->wmapcap, at + n + 1, sizeof *s->wmap) < 0)
        return -ENOMEM;
    while (i < n) {
        int32_t cp;
        size_t l = utf8_char(text + i, n - i, &cp), j = i + (l ? l : 1);
        if (l)
            while (j < n) {
                size_t l2 = utf8_char(text + j, n - j, &cp);
                if (!l2 || nfc_safe_start(cp)) break;
                j += l2;
            }
        if (!final && j == n) break;
        const uint8_t *src = text + i;
        size_t sl = j - i;
        utf8proc_uint8_t *res = NULL;
        if (l && sl > 1) {
            utf8proc_ssize_t rl = utf8proc_map(src, (utf8proc_ssize_t)sl, &res, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (rl >= 0) { src = res; sl = (size_t)rl; }   /* (valid UTF-8 always maps) */
        }
        if (grow((void **)&s->w, &s->wcap, o + sl + 1, 1) < 0 ||
            grow((void **)&s->wmap, &s->wmapcap, o + sl + 1, sizeof *s->wmap) < 0) {
            free(res);
            return -ENOMEM;
        }
        memcpy(s->w + o, src, sl);
        free(res);
        s->wmap[o] = i;
        for (size_t k = 1; k < sl; k++) s->wmap[o + k] = SIZE_MAX;
        o += sl;
        i = j;
    }
    s->wmap[o] = i;
    *wl = o;
    *used = i;
    return 0;
}

/* One encode call: the tokenizer and this call's scratch (a tokenizer is
 * shared between threads; the scratch is not). */
typedef struct call {
    const bpe *t;
    scratch s;
} call;

/* Encode one stretch between added tokens (see the top comment). */
static int bpe_segment(const void *priv, const uint8_t *text, size_t n, int final,
                       int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    call *c = (call *)priv;
    const bpe *t = c->t;
    scratch *s = &c->s;
    *consumed = 0;
    if (!n) return 0;
    size_t n_eff = final ? n : n - incomplete_tail(text, n);
    const uint8_t *w;
    const size_t *map = NULL;   /* NFC: working position → raw offset */
    size_t wl, prefix = 0;
    int rc;
    if (t->nfc) {
        size_t used;
        if ((rc = nfc_into(s, text, n_eff, final, 1, &wl, &used)) < 0) return rc;
        if (wl == 1) return 0;
        size_t start = 1;
        if (t->add_prefix_space && s->w[1] != ' ') {
            s->w[0] = ' ';
            s->wmap[0] = 0;
            start = 0;
            prefix = 1;
        }
        w = s->w + start;
        map = s->wmap + start;
        wl -= start;
    } else if (t->add_prefix_space && n_eff && text[0] != ' ') {
        if (grow((void **)&s->w, &s->wcap, n_eff + 1, 1) < 0) return -ENOMEM;
        s->w[0] = ' ';
        memcpy(s->w + 1, text, n_eff);
        w = s->w;
        wl = n_eff + 1;
        prefix = 1;
    } else {
        w = text;
        wl = n_eff;
    }
#define RAW(pos) (map ? map[pos] : (pos) < prefix ? 0 : (pos) - prefix)
    /* A cut at working position pos: it must map to raw text, and with
     * add_prefix_space the text after it must start with a space. */
#define CUT_OK(pos) ((pos) == 0 || (RAW(pos) != SIZE_MAX && (!t->add_prefix_space || ((pos) < wl && w[pos] == ' '))))
    size_t p = 0, ok_pos = 0, ok_ntoks = *ntoks;
    while (p < wl) {
        size_t ms = wl, me = wl;
        if (t->re) {
            rc = pcre2_match(t->re, w, wl, p, PCRE2_NOTEMPTY | (final ? 0 : PCRE2_PARTIAL_HARD), s->md, s->mctx);
            if (rc >= 0) {
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
                ms = ov[0];
                me = ov[1];
            } else if (rc != PCRE2_ERROR_NOMATCH || !final) {
                /* Partial: the search touched the end of the text. No match
                 * (not final): the gap to the end could still grow. Another
                 * error (a resource limit): the rest is one piece, decided
                 * when the text is final. */
                if (!final) break;
            }
        } else if (!final) {   /* no regex: the whole stretch is one piece */
            break;
        }
        size_t cut[2] = {p, ms}, end[2] = {ms, me};
        for (int k = 0; k < 2; k++) {
            if (end[k] <= cut[k]) continue;
            if (CUT_OK(cut[k])) { ok_pos = cut[k]; ok_ntoks = *ntoks; }
            if ((rc = encode_piece(t, s, w + cut[k], end[k] - cut[k], toks, ntoks, cap)) < 0) return rc;
        }
        p = me;
    }
    if (final) {
        *consumed = n;
        return 0;
    }
    /* p is where the first undecided search started, or the end. */
    if ((p < wl && CUT_OK(p)) || (p == wl && RAW(p) != SIZE_MAX && !t->add_prefix_space)) {
        ok_pos = p;
        ok_ntoks = *ntoks;
    }
    *ntoks = ok_ntoks;
    *consumed = RAW(ok_pos);
#undef RAW
#undef CUT_OK
    return 0;
}

/* Length of the maximal subpart of an ill-formed UTF-8 sequence at p (n
 * bytes left): the longest prefix of a valid character's bytes, at least 1
 * (Unicode's "substitution of maximal subparts", which Rust's
 * String::from_utf8_lossy, Python's errors="replace" and WHATWG's
 * TextDecoder all follow). 0 when a valid character starts at p; *need is
 * that character's length, or the length a valid prefix was heading for. */
static size_t utf8_bad_len(const uint8_t *p, size_t n, size_t *need)
{
    uint8_t c = p[0];
    size_t want = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    *need = want;
    if (want == 0) return 1;
    size_t k = 1;
    for (; k < want && k < n; k++) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (k == 1) {   /* the second byte's range depends on the first */
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            else if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
        }
        if (p[k] < lo || p[k] > hi) break;
    }
    return k == want ? 0 : k;
}

/* For a vocabulary without tokens for some bytes (lossy): text with each
 * maximal ill-formed subpart replaced by U+FFFD, as the string Hugging Face's
 * tokenizers would be handed. With final == 0 an incomplete character at the
 * end is left out (it may still complete). *out and *map (map[i] = the raw
 * offset of output byte i, map[*outlen] = the raw bytes covered) are
 * malloc'd; *out stays NULL when the text needs no change. 0 or -ENOMEM. */
static int lossy_utf8(const uint8_t *text, size_t len, int final, uint8_t **out, size_t **map, size_t *outlen)
{
    *out = NULL;
    *map = NULL;
    size_t i = 0, bad = 0, need = 0;
    while (i < len) {   /* the common case, valid text: no copy */
        size_t b = utf8_bad_len(text + i, len - i, &need);
        if (b) { bad = 1; break; }
        i += need;
    }
    if (!bad) {
        *outlen = len;
        return 0;
    }
    uint8_t *o = malloc(3 * len + 1);
    size_t *m = malloc((3 * len + 2) * sizeof *m);
    if (!o || !m) { free(o); free(m); return -ENOMEM; }
    size_t w = 0;
    for (i = 0; i < len;) {
        size_t b = utf8_bad_len(text + i, len - i, &need);
        if (!b) {
            for (size_t k = 0; k < need; k++) { m[w] = i + k; o[w++] = text[i + k]; }
            i += need;
            continue;
        }
        if (!final && i + b == len && b < need) break;   /* may still complete */
        static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
        for (size_t k = 0; k < 3; k++) { m[w] = i; o[w++] = fffd[k]; }
        i += b;
    }
    m[w] = i;
    *out = o;
    *map = m;
    *outlen = w;
    return 0;
}

static int bpe_encode(const void *priv, const uint8_t *text, size_t len, int final,
                      int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    const bpe *t = priv;
    call c = {.t = t};
    int rc = -ENOMEM;
    *consumed = 0;
    uint8_t *clean = NULL;
    size_t *map = NULL, clen = len;
    if (t->lossy) {
        if ((rc = lossy_utf8(text, len, final, &clean, &map, &clen)) < 0) return rc;
        rc = -ENOMEM;
    }
    if (t->re) {
        c.s.md = pcre2_match_data_create_from_pattern(t->re, NULL);
        c.s.mctx = pcre2_match_context_create(NULL);
        c.s.jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!c.s.md || !c.s.mctx || !c.s.jstack) goto out;
        pcre2_jit_stack_assign(c.s.mctx, NULL, c.s.jstack);
    }
    rc = tokenizer_encode_literals(&t->lits, bpe_segment, &c, clean ? clean : text, clean ? clen : len, final, toks,
                                   ntoks, cap, consumed);
    /* Cuts fall on character boundaries, so a cut maps to the raw offset
     * where its character (or replaced subpart) started. */
    if (rc == 0 && clean) *consumed = final ? len : map[*consumed];
out:
    scratch_free(&c.s);
    free(clean);
    free(map);
    return rc;
}

static int bpe_vocab_size(const void *priv) { return ((const bpe *)priv)->vocab; }

static const uint8_t *bpe_token_bytes(const void *priv, int32_t id, size_t *len)
{
    const bpe *t = priv;
    if (id < 0 || id >= t->vocab || !t->has[id]) { *len = 0; return NULL; }
    *len = t->len[id];
    return (const uint8_t *)t->pool.p + t->off[id];
}

static int bpe_special_count(const void *priv) { return ((const bpe *)priv)->nspecial; }

static int32_t bpe_special(const void *priv, int i, const char **text)
{
    const bpe *t = priv;
    if (text) *text = t->special_cstr[i];
    return t->added_id[t->special_idx[i]];
}

static int bpe_bos(const void *priv, int32_t *id)
{
    const bpe *t = priv;
    *id = t->post_bos == 1 ? t->post_bos_id : -1;
    return t->post_bos;
}

const tokenizer_kind tokenizer_kind_bpe = {
    "bpe", bpe_load, bpe_free, bpe_vocab_size, bpe_encode,
    bpe_token_bytes, bpe_special_count, bpe_special, bpe_bos,
};
