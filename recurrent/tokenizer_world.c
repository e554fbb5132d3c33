/* recurrent/tokenizer_world.c — the "world" kind: the RWKV World vocabulary
 * (rwkv_vocab_v20230424.txt). Each line is `ID REPR LEN`: a decimal id, a
 * Python str literal ('abc', "abc", escapes; the token is its UTF-8) or bytes
 * literal (b'\xe4...'), and the token's length in bytes, which must match.
 * Id 0 is <|endoftext|> (not in the file); it is the one special token and,
 * as the seam's contract says for specials, its literal text encodes to it.
 *
 * Encoding is greedy longest match through a byte trie. Streaming rule: the
 * match at q is decided once the trie walk from q stopped before the end of
 * the text (a byte with no child, or a node with no children); a walk that
 * reached the end of the text still inside the trie could become longer with
 * more text, so that match and everything after it is held back. A walk
 * never goes deeper than the longest token, so the tail is shorter than the
 * longest token (plus a pending "<|endoftext|>" prefix). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/bytebuf.h"
#include "recurrent/errmsg.h"
#include "recurrent/tokenizer.h"

static const char EOT[] = "<|endoftext|>";

typedef struct world {
    int vocab;            /* max id + 1 */
    bytebuf  pool;        /* token bytes, all ids back to back */
    size_t *off;          /* [vocab] offset of id's bytes in pool */
    uint32_t *len;        /* [vocab] their length; 0: unknown id */
    /* Trie: node 0 is the root; tok[node] is the id ending there or -1;
     * edges in an open-addressing table keyed by node*256+byte. */
    int32_t *tok;
    uint8_t *leaf;        /* [nodes] 1 when the node has no children */
    int nnodes, capnodes;
    uint64_t *ekey;       /* [ecap] key+1 (0 = empty) */
    int32_t *eval;        /* [ecap] child node */
    size_t ecap, nedges;
    tokenizer_literals lits;
    const uint8_t *lit_text[1];
    size_t lit_len[1];
    int32_t lit_id[1];
} world;

static inline size_t ehash(uint64_t k, size_t cap)
{
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k >> 17) & (cap - 1);
}

static int32_t child(const world *w, int32_t node, uint8_t b)
{
    uint64_t k = (uint64_t)node * 256 + b + 1;
    for (size_t i = ehash(k, w->ecap);; i = (i + 1) & (w->ecap - 1)) {
        if (w->ekey[i] == k) return w->eval[i];
        if (!w->ekey[i]) return -1;
    }
}

static int grow_edges(world *w)
{
    size_t nc = w->ecap ? w->ecap * 2 : 1024;
    uint64_t *nk = calloc(nc, sizeof *nk);
    int32_t *nv = malloc(nc * sizeof *nv);
    if (!nk || !nv) { free(nk); free(nv); return -ENOMEM; }
    for (size_t i = 0; i < w->ecap; i++)
        if (w->ekey[i]) {
            size_t j = ehash(w->ekey[i], nc);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = w->ekey[i];
            nv[j] = w->eval[i];
        }
    free(w->ekey); free(w->eval);
    w->ekey = nk; w->eval = nv; w->ecap = nc;
    return 0;
}

static int new_node(world *w)
{
    if (w->nnodes == w->capnodes) {
        int nc = w->capnodes ? w->capnodes * 2 : 4096;
        int32_t *t = realloc(w->tok, (size_t)nc * sizeof *t);
        if (!t) return -ENOMEM;
        w->tok = t;
        uint8_t *l = realloc(w->leaf, (size_t)nc);
        if (!l) return -ENOMEM;
        w->leaf = l;
        w->capnodes = nc;
    }
    w->tok[w->nnodes] = -1;
    w->leaf[w->nnodes] = 1;
    return w->nnodes++;
}

/* Insert bytes s as token id; the id already there if the bytes repeat. */
static int trie_add(world *w, const uint8_t *s, size_t n, int32_t id, int32_t *dup)
{
    int32_t node = 0;
    *dup = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t c = child(w, node, s[i]);
        if (c < 0) {
            if ((w->nedges + 1) * 2 > w->ecap && grow_edges(w) < 0) return -ENOMEM;
            if ((c = new_node(w)) < 0) return -ENOMEM;
            uint64_t k = (uint64_t)node * 256 + s[i] + 1;
            size_t j = ehash(k, w->ecap);
            while (w->ekey[j]) j = (j + 1) & (w->ecap - 1);
            w->ekey[j] = k;
            w->eval[j] = c;
            w->nedges++;
            w->leaf[node] = 0;
        }
        node = c;
    }
    if (w->tok[node] >= 0) *dup = w->tok[node];
    else w->tok[node] = id;
    return 0;
}

static void world_free(void *priv)
{
    world *w = priv;
    if (!w) return;
    bytebuf_free(&w->pool); free(w->off); free(w->len);
    free(w->tok); free(w->leaf); free(w->ekey); free(w->eval);
    free(w);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(uint8_t *o, uint32_t c)
{
    if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { o[0] = (uint8_t)(0xC0 | c >> 6); o[1] = (uint8_t)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12); o[1] = (uint8_t)(0x80 | ((c >> 6) & 63)); o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18); o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63)); o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* Length of the valid UTF-8 character at s (n bytes left), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t l;
    uint32_t cp;
    if (c < 0x80) return 1;
    else if (c >= 0xC2 && c <= 0xDF) { l = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { l = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { l = 4; cp = c & 0x07; }
    else return 0;
    if (n < l) return 0;
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 63);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return l;
}

/* Parse the Python literal at s[0..n) into out (room for 4*n bytes); *end
 * receives the index just past the closing quote. 0 or a message. */
static const char *parse_literal(const uint8_t *s, size_t n, uint8_t *out, size_t *outlen, size_t *end)
{
    size_t i = 0, o = 0;
    int bytes = 0;
    if (i < n && (s[i] == 'b' || s[i] == 'B')) { bytes = 1; i++; }
    if (i >= n || (s[i] != '\'' && s[i] != '"')) return "expected a Python string or bytes literal";
    uint8_t q = s[i++];
    for (;;) {
        if (i >= n) return "unterminated literal";
        uint8_t c = s[i];
        if (c == q) { i++; break; }
        if (c == '\n' || c == '\r') return "unterminated literal";
        if (c != '\\') {
            if (c >= 0x80) {
                if (bytes) return "non-ASCII character in a bytes literal";
                size_t l = utf8_len(s + i, n - i);
                if (!l) return "invalid UTF-8 in a string literal";
                memcpy(out + o, s + i, l);
                o += l; i += l;
                continue;
            }
            out[o++] = c; i++;
            continue;
        }
        if (++i >= n) return "unterminated literal";
        c = s[i++];
        uint32_t v;
        int digits;
        switch (c) {
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'a': out[o++] = 7; break;
        case 'b': out[o++] = 8; break;
        case 'f': out[o++] = 12; break;
        case 'v': out[o++] = 11; break;
        case 'x': case 'u': case 'U':
            digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            if (c != 'x' && bytes) { out[o++] = '\\'; out[o++] = c; break; }   /* as Python: kept */
            v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i < n ? hexval(s[i]) : -1;
                if (h < 0) return c == 'x' ? "bad \\x escape (needs 2 hex digits)" : "bad \\u/\\U escape";
                v = v << 4 | (uint32_t)h;
                i++;
            }
            if (bytes) out[o++] = (uint8_t)v;
            else {
                if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return "escape is not a Unicode scalar value";
                o += put_utf8(out + o, v);
            }
            break;
        default:
            if (c >= '0' && c <= '7') {
                v = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++) v = v * 8 + (uint32_t)(s[i++] - '0');
                if (bytes) out[o++] = (uint8_t)v;
                else o += put_utf8(out + o, v);
            } else if (c == 'N' && !bytes) {
                return "\\N{...} escapes are not supported";
            } else {   /* Python keeps an unknown escape as written */
                out[o++] = '\\';
                i--;
            }
        }
    }
    *outlen = o;
    *end = i;
    return NULL;
}

static int world_load(const char *path, void **priv, char *err, size_t errlen)
{
    *priv = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return errmsg_set(-errno, err, errlen, "%s: cannot open: %s", path, strerror(errno));
    world *w = calloc(1, sizeof *w);
    char *line = NULL;
    size_t lcap = 0, idcap = 0;
    uint8_t *buf = NULL;
    size_t bufcap = 0;
    int rc = 0;
    long lineno = 0;
    ssize_t n;
    if (!w || new_node(w) < 0 || grow_edges(w) < 0) { rc = -ENOMEM; goto oom; }
    while ((n = getline(&line, &lcap, f)) != -1) {
        lineno++;
        size_t L = (size_t)n;
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r')) L--;
        if (!L) continue;
        const uint8_t *s = (const uint8_t *)line;
        size_t i = 0;
        long id = 0;
        if (!(s[0] >= '0' && s[0] <= '9')) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: expected `ID REPR LEN`, line starts with '%c'", path, lineno, s[0]);
            goto out;
        }
        while (i < L && s[i] >= '0' && s[i] <= '9') {
            id = id * 10 + (s[i++] - '0');
            if (id > 0x7FFFFFF) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token id too large", path, lineno);
                goto out;
            }
        }
        if (i >= L || s[i] != ' ') {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: expected a space after the id", path, lineno);
            goto out;
        }
        while (i < L && s[i] == ' ') i++;
        if (bufcap < 4 * L) {
            bufcap = 4 * L;
            uint8_t *nb = realloc(buf, bufcap);
            if (!nb) { rc = -ENOMEM; goto oom; }
            buf = nb;
        }
        size_t tlen = 0, end = 0;
        const char *why = parse_literal(s + i, L - i, buf, &tlen, &end);
        if (why) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token %ld: %s", path, lineno, id, why);
            goto out;
        }
        i += end;
        if (i >= L || s[i] != ' ') {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: expected ' LEN' after the literal", path, lineno);
            goto out;
        }
        while (i < L && s[i] == ' ') i++;
        long blen = 0;
        size_t d0 = i;
        while (i < L && s[i] >= '0' && s[i] <= '9' && blen < 1000000) blen = blen * 10 + (s[i++] - '0');
        if (i == d0 || i != L) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: the length field must be a decimal number ending the line", path, lineno);
            goto out;
        }
        if ((size_t)blen != tlen) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token %ld is %zu bytes but the line says %ld", path, lineno, id, tlen, blen);
            goto out;
        }
        if (!tlen) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token %ld is empty", path, lineno, id);
            goto out;
        }
        if (id == 0) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: id 0 is reserved for %s", path, lineno, EOT);
            goto out;
        }
        if ((size_t)id >= idcap) {
            size_t nc = idcap ? idcap : 1024;
            while (nc <= (size_t)id) nc *= 2;
            size_t *no = realloc(w->off, nc * sizeof *no);
            if (!no) { rc = -ENOMEM; goto oom; }
            w->off = no;
            uint32_t *nl = realloc(w->len, nc * sizeof *nl);
            if (!nl) { rc = -ENOMEM; goto oom; }
            w->len = nl;
            memset(w->len + idcap, 0, (nc - idcap) * sizeof *nl);
            idcap = nc;
        }
        if (w->len[id]) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token id %ld appears twice", path, lineno, id);
            goto out;
        }
        int32_t dup;
        if (trie_add(w, buf, tlen, (int32_t)id, &dup) < 0) { rc = -ENOMEM; goto oom; }
        if (dup >= 0) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s:%ld: token %ld has the same bytes as token %d", path, lineno, id, dup);
            goto out;
        }
        w->off[id] = w->pool.n;
        if (bytebuf_put(&w->pool, buf, tlen)) { rc = -ENOMEM; goto oom; }
        w->len[id] = (uint32_t)tlen;
        if (id + 1 > w->vocab) w->vocab = (int)id + 1;
    }
    if (ferror(f)) {
        rc = errmsg_set(-EIO, err, errlen, "%s: read error", path);
        goto out;
    }
    if (w->vocab == 0) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: no tokens in the file", path);
        goto out;
    }
    /* Greedy matching always moves on only if every byte is a token. */
    for (int b = 0; b < 256; b++) {
        int32_t c = child(w, 0, (uint8_t)b);
        if (c < 0 || w->tok[c] < 0) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: no token for the single byte 0x%02X, so some text could not be encoded", path, b);
            goto out;
        }
    }
    /* Id 0: <|endoftext|>, outside the file. */
    {
        size_t el = sizeof EOT - 1;
        w->off[0] = w->pool.n;
        if (bytebuf_put(&w->pool, EOT, el)) { rc = -ENOMEM; goto oom; }
        w->len[0] = (uint32_t)el;
        w->lit_text[0] = (const uint8_t *)EOT;
        w->lit_len[0] = el;
        w->lit_id[0] = 0;
        w->lits = (tokenizer_literals){.n = 1, .text = w->lit_text, .len = w->lit_len, .id = w->lit_id, .maxlen = el};
        w->lits.first[(uint8_t)EOT[0]] = 1;
    }
    goto out;
oom:
    rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
out:
    free(line);
    free(buf);
    fclose(f);
    if (rc < 0) world_free(w);
    else *priv = w;
    return rc;
}

static int world_vocab_size(const void *priv) { return ((const world *)priv)->vocab; }

/* Greedy longest match over a stretch with no <|endoftext|> in it. */
static int world_segment(const void *priv, const uint8_t *text, size_t len, int final,
                         int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    const world *w = priv;
    size_t q = 0;
    int rc;
    while (q < len) {
        int32_t node = 0, best = -1;
        size_t bestlen = 0, k = 0;
        for (; q + k < len; k++) {
            int32_t c = child(w, node, text[q + k]);
            if (c < 0) break;
            node = c;
            if (w->tok[c] >= 0) { best = w->tok[c]; bestlen = k + 1; }
            if (w->leaf[c]) { k++; break; }
        }
        /* The walk ran off the end of the text still able to go deeper: more
         * text could give a longer match here. */
        if (!final && q + k == len && !w->leaf[node]) break;
        if ((rc = tokenizer_push(toks, ntoks, cap, best)) < 0) { *consumed = q; return rc; }
        q += bestlen;
    }
    *consumed = q;
    return 0;
}

static int world_encode(const void *priv, const uint8_t *text, size_t len, int final,
                        int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    const world *w = priv;
    return tokenizer_encode_literals(&w->lits, world_segment, priv, text, len, final, toks, ntoks, cap, consumed);
}

static const uint8_t *world_token_bytes(const void *priv, int32_t id, size_t *len)
{
    const world *w = priv;
    if (id < 0 || id >= w->vocab || !w->len[id]) { *len = 0; return NULL; }
    *len = w->len[id];
    return (const uint8_t *)w->pool.p + w->off[id];
}

static int world_special_count(const void *priv) { (void)priv; return 1; }
static int32_t world_special(const void *priv, int i, const char **text)
{
    (void)priv; (void)i;
    if (text) *text = EOT;
    return 0;
}

const tokenizer_kind tokenizer_kind_world = {
    "world", world_load, world_free, world_vocab_size, world_encode,
    world_token_bytes, world_special_count, world_special, NULL,
};
