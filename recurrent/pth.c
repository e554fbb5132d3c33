/* recurrent/pth.c — see pth.h. Two parts: the zip container (central
 * directory, zip64, local headers; stored entries only) and a pickle
 * machine that builds values — never objects — for a whitelist of opcodes
 * and globals, then turns the resulting {name: tensor} dict into st_tensors
 * that point into the mapped file. */
#include "recurrent/pth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recurrent/errmsg.h"

static uint64_t rd16(const uint8_t *p) { return (uint64_t)p[0] | (uint64_t)p[1] << 8; }
static uint64_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | rd32(p + 4) << 32; }

/* ---- zip ------------------------------------------------------------------ */

typedef struct zentry {
    const uint8_t *name;
    size_t nlen;
    size_t off, size;      /* the entry's bytes in the file */
} zentry;

typedef struct zip {
    zentry *e;
    size_t n;
} zip;

static const zentry *zip_find(const zip *z, const char *prefix, size_t plen, const uint8_t *rest, size_t rlen)
{
    for (size_t i = 0; i < z->n; i++)
        if (z->e[i].nlen == plen + rlen && !memcmp(z->e[i].name, prefix, plen) &&
            !memcmp(z->e[i].name + plen, rest, rlen))
            return &z->e[i];
    return NULL;
}

static int zip_read(const uint8_t *m, size_t size, const char *path, zip *z, char *err, size_t errlen)
{
    memset(z, 0, sizeof *z);
    const char *notzip = "not a zip archive: lind reads torch.save's zip format (PyTorch ≥ 1.6), not the legacy "
                         "pickle-only format";
    if (size < 22) return errmsg_set(-EINVAL, err, errlen, "%s: %s", path, notzip);
    size_t eocd = 0;
    int found = 0;
    for (size_t i = size - 22 + 1; i-- > 0 && size - 22 - i <= 65535;)
        if (rd32(m + i) == 0x06054b50u) {
            eocd = i;
            found = 1;
            break;
        }
    if (!found) return errmsg_set(-EINVAL, err, errlen, "%s: %s", path, notzip);
    uint64_t n = rd16(m + eocd + 10), cdsize = rd32(m + eocd + 12), cdoff = rd32(m + eocd + 16);
    if (n == 0xFFFF || cdsize == 0xFFFFFFFFu || cdoff == 0xFFFFFFFFu) {   /* zip64 */
        if (eocd < 20 || rd32(m + eocd - 20) != 0x07064b50u)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip64 end-of-directory locator missing", path);
        uint64_t z64 = rd64(m + eocd - 20 + 8);
        if (z64 > size || size - z64 < 56 || rd32(m + z64) != 0x06064b50u)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip64 end-of-directory record out of bounds", path);
        n = rd64(m + z64 + 32);
        cdsize = rd64(m + z64 + 40);
        cdoff = rd64(m + z64 + 48);
    }
    if (cdoff > size || cdsize > size - cdoff || n > cdsize / 46)
        return errmsg_set(-EINVAL, err, errlen, "%s: zip central directory (%llu entries, %llu bytes at %llu) runs "
                          "past the end of the file (%zu bytes; truncated?)", path, (unsigned long long)n,
                          (unsigned long long)cdsize, (unsigned long long)cdoff, size);
    z->e = calloc(n ? n : 1, sizeof *z->e);
    if (!z->e) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    const uint8_t *p = m + cdoff, *end = m + cdoff + cdsize;
    for (uint64_t k = 0; k < n; k++) {
        if (end - p < 46 || rd32(p) != 0x02014b50u)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip central directory entry %llu is damaged", path,
                              (unsigned long long)k);
        uint64_t flags = rd16(p + 8), method = rd16(p + 10), csize = rd32(p + 20), usize = rd32(p + 24),
                 nl = rd16(p + 28), el = rd16(p + 30), cl = rd16(p + 32), loff = rd32(p + 42);
        if ((uint64_t)(end - p) - 46 < nl + el + cl)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip central directory entry %llu runs past the directory",
                              path, (unsigned long long)k);
        const uint8_t *name = p + 46, *x = name + nl, *xend = x + el;
        while (xend - x >= 4) {   /* the zip64 extra field: the sizes and offset that did not fit */
            uint64_t id = rd16(x), sz = rd16(x + 2);
            if ((uint64_t)(xend - x) - 4 < sz) break;
            if (id == 1) {
                const uint8_t *q = x + 4, *qe = q + sz;
                if (usize == 0xFFFFFFFFu && qe - q >= 8) { usize = rd64(q); q += 8; }
                if (csize == 0xFFFFFFFFu && qe - q >= 8) { csize = rd64(q); q += 8; }
                if (loff == 0xFFFFFFFFu && qe - q >= 8) { loff = rd64(q); q += 8; }
            }
            x += 4 + sz;
        }
        int nshow = nl > 200 ? 200 : (int)nl;
        if (flags & 1)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip entry '%.*s' is encrypted", path, nshow, (const char *)name);
        if (method != 0 || csize != usize)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip entry '%.*s' is compressed (method %llu); torch.save "
                              "stores entries uncompressed, and lind reads only those", path, nshow,
                              (const char *)name, (unsigned long long)method);
        if (loff > size || size - loff < 30 || rd32(m + loff) != 0x04034b50u)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip entry '%.*s': local header out of bounds or damaged",
                              path, nshow, (const char *)name);
        uint64_t data = loff + 30 + rd16(m + loff + 26) + rd16(m + loff + 28);
        if (data > size || usize > size - data)
            return errmsg_set(-EINVAL, err, errlen, "%s: zip entry '%.*s' (%llu bytes) runs past the end of the file "
                              "(truncated?)", path, nshow, (const char *)name, (unsigned long long)usize);
        z->e[z->n++] = (zentry){name, nl, (size_t)data, (size_t)usize};
        p += 46 + nl + el + cl;
    }
    return 0;
}

/* ---- pickle values -------------------------------------------------------- */

enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR };
enum { G_ODICT, G_REBUILD, G_FLOAT, G_HALF, G_BF16 };

typedef struct pval {
    int type;
    int64_t i;                /* INT, BOOL; GLOBAL: G_*; STORAGE: dtype; TENSOR: index into pm.t */
    int64_t numel;            /* STORAGE */
    size_t off;               /* STORAGE: its bytes in the file */
    const uint8_t *s;         /* STR (into data.pkl) */
    size_t slen;
    int *it, n, cap;          /* TUPLE, LIST: items; DICT: key, value pairs */
} pval;

typedef struct ptensor {
    int storage;              /* value index */
    int64_t offset, numel;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} ptensor;

typedef struct pm {
    const char *path;
    char *err;
    size_t errlen;
    const uint8_t *p;
    size_t n, pos, op_at;
    pval *v;
    int nv, capv;
    int *st, nst, capst;
    int *marks, nmarks, capm;
    int *memo;
    size_t nmemo, memo_len;   /* slots allocated; indices set (MEMOIZE's next) */
    const zip *z;
    const char *prefix;
    size_t plen;
    ptensor *t;
    int nt, capt;
} pm;

__attribute__((format(printf, 3, 4))) static int pm_fail(pm *m, int code, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return errmsg_set(code, m->err, m->errlen, "%s: %sdata.pkl, byte %zu: %s", m->path, m->prefix, m->op_at, msg);
}

static int grow(void **arr, int *cap, int need, size_t el)
{
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) {
        if (c > (1 << 28)) return -ENOMEM;
        c *= 2;
    }
    void *p = realloc(*arr, (size_t)c * el);
    if (!p) return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

static int newval(pm *m, int type)
{
    if (grow((void **)&m->v, &m->capv, m->nv + 1, sizeof *m->v) < 0) return pm_fail(m, -ENOMEM, "out of memory");
    memset(&m->v[m->nv], 0, sizeof *m->v);
    m->v[m->nv].type = type;
    return m->nv++;
}

static int push(pm *m, int vi)
{
    if (vi < 0) return vi;
    if (grow((void **)&m->st, &m->capst, m->nst + 1, sizeof *m->st) < 0) return pm_fail(m, -ENOMEM, "out of memory");
    m->st[m->nst++] = vi;
    return 0;
}

static int floor_(const pm *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

static int pop(pm *m, int *vi)
{
    if (m->nst <= floor_(m)) return pm_fail(m, -EINVAL, "stack underflow");
    *vi = m->st[--m->nst];
    return 0;
}

static int append(pm *m, int vi, int item)
{
    pval *x = &m->v[vi];
    if (grow((void **)&x->it, &x->cap, x->n + 1, sizeof *x->it) < 0) return pm_fail(m, -ENOMEM, "out of memory");
    x->it[x->n++] = item;
    return 0;
}

/* Items above the top mark into a new TUPLE (or appended to `into`), mark popped. */
static int take_mark(pm *m, int *k)
{
    if (!m->nmarks) return pm_fail(m, -EINVAL, "no MARK on the stack");
    *k = m->marks[--m->nmarks];
    return 0;
}

static int need(pm *m, size_t k)
{
    if (m->n - m->pos < k) return pm_fail(m, -EINVAL, "truncated (an opcode's argument runs past the end)");
    return 0;
}

static int new_str(pm *m, size_t len)
{
    int rc = need(m, len);
    if (rc < 0) return rc;
    int vi = newval(m, V_STR);
    if (vi < 0) return vi;
    m->v[vi].s = m->p + m->pos;
    m->v[vi].slen = len;
    m->pos += len;
    return push(m, vi);
}

static int str_is(const pval *v, const char *s)
{
    return v->type == V_STR && v->slen == strlen(s) && !memcmp(v->s, s, v->slen);
}

static int global(pm *m, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl)
{
    static const struct { const char *mod, *name; int g; } ok[] = {
        {"collections", "OrderedDict", G_ODICT},   {"torch._utils", "_rebuild_tensor_v2", G_REBUILD},
        {"torch", "FloatStorage", G_FLOAT},        {"torch", "HalfStorage", G_HALF},
        {"torch", "BFloat16Storage", G_BF16},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (ml == strlen(ok[i].mod) && nl == strlen(ok[i].name) && !memcmp(mod, ok[i].mod, ml) &&
            !memcmp(name, ok[i].name, nl)) {
            int vi = newval(m, V_GLOBAL);
            if (vi < 0) return vi;
            m->v[vi].i = ok[i].g;
            return push(m, vi);
        }
    return pm_fail(m, -EINVAL, "global '%.*s.%.*s' is not allowed: a checkpoint is read as a state dict of fp32/fp16/"
                   "bf16 tensors, and lind runs no code from it", (int)(ml > 100 ? 100 : ml), (const char *)mod,
                   (int)(nl > 100 ? 100 : nl), (const char *)name);
}

/* BINPERSID: ('storage', <Float|Half|BFloat16>Storage, key, location, numel). */
static int persid(pm *m)
{
    int vi = 0, rc;
    if ((rc = pop(m, &vi)) < 0) return rc;
    const pval *t = &m->v[vi];
    if (t->type != V_TUPLE || t->n != 5 || !str_is(&m->v[t->it[0]], "storage") || m->v[t->it[1]].type != V_GLOBAL ||
        m->v[t->it[1]].i < G_FLOAT || m->v[t->it[2]].type != V_STR || m->v[t->it[3]].type != V_STR ||
        m->v[t->it[4]].type != V_INT || m->v[t->it[4]].i < 0)
        return pm_fail(m, -EINVAL, "persistent id is not ('storage', <Float|Half|BFloat16>Storage, key, location, "
                       "numel)");
    int dt = m->v[t->it[1]].i == G_FLOAT ? ST_F32 : m->v[t->it[1]].i == G_HALF ? ST_F16 : ST_BF16;
    const pval *key = &m->v[t->it[2]];
    int64_t numel = m->v[t->it[4]].i;
    char rest[160];
    if (key->slen > 100) return pm_fail(m, -EINVAL, "storage key longer than 100 bytes");
    int rl = snprintf(rest, sizeof rest, "data/%.*s", (int)key->slen, (const char *)key->s);
    const zentry *e = zip_find(m->z, m->prefix, m->plen, (const uint8_t *)rest, (size_t)rl);
    if (!e) return pm_fail(m, -EINVAL, "storage '%s' has no zip entry %s%s", rest + 5, m->prefix, rest);
    size_t es = dt == ST_F32 ? 4 : 2;
    if ((uint64_t)numel > e->size / es || (size_t)numel * es != e->size)
        return pm_fail(m, -EINVAL, "storage '%s': %lld elements of %zu bytes, but its entry holds %zu bytes", rest + 5,
                       (long long)numel, es, e->size);
    int s = newval(m, V_STORAGE);
    if (s < 0) return s;
    m->v[s].i = dt;
    m->v[s].numel = numel;
    m->v[s].off = e->off;
    return push(m, s);
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static int rebuild(pm *m, const pval *a)
{
    if (a->n != 6 && a->n != 7) return pm_fail(m, -EINVAL, "_rebuild_tensor_v2 with %d arguments (6 or 7)", a->n);
    const pval *st = &m->v[a->it[0]], *off = &m->v[a->it[1]], *sz = &m->v[a->it[2]], *sd = &m->v[a->it[3]],
               *hooks = &m->v[a->it[5]];
    if (st->type != V_STORAGE || off->type != V_INT || off->i < 0 || sz->type != V_TUPLE || sd->type != V_TUPLE ||
        sz->n != sd->n || m->v[a->it[4]].type != V_BOOL || hooks->type != V_DICT || hooks->n != 0 ||
        (a->n == 7 && !(m->v[a->it[6]].type == V_NONE || (m->v[a->it[6]].type == V_DICT && m->v[a->it[6]].n == 0))))
        return pm_fail(m, -EINVAL, "_rebuild_tensor_v2's arguments are not (storage, offset, size, stride, "
                       "requires_grad, {} [, {}])");
    if (sz->n > ST_MAX_DIMS) return pm_fail(m, -EINVAL, "tensor of %d dimensions (at most %d)", sz->n, ST_MAX_DIMS);
    ptensor t = {.storage = a->it[0], .offset = off->i, .ndim = sz->n, .numel = 1};
    for (int i = 0; i < sz->n; i++) {
        const pval *d = &m->v[sz->it[i]];
        if (d->type != V_INT || d->i < 0 || m->v[sd->it[i]].type != V_INT)
            return pm_fail(m, -EINVAL, "tensor size or stride %d is not a non-negative integer", i);
        t.shape[i] = d->i;
        if (d->i && t.numel > INT64_MAX / 8 / d->i) return pm_fail(m, -EINVAL, "tensor too large");
        t.numel *= d->i;
    }
    int64_t want = 1;   /* contiguous: stride[i] = Π size[i+1..]; any stride where size is 1 */
    for (int i = sz->n - 1; i >= 0 && t.numel; i--) {
        if (t.shape[i] != 1 && m->v[sd->it[i]].i != want)
            return pm_fail(m, -EINVAL, "tensor is not contiguous (stride %lld in dimension %d, expected %lld)",
                           (long long)m->v[sd->it[i]].i, i, (long long)want);
        want *= t.shape[i];
    }
    if (t.offset > st->numel || t.numel > st->numel - t.offset)
        return pm_fail(m, -EINVAL, "tensor of %lld elements at offset %lld runs past its storage (%lld elements)",
                       (long long)t.numel, (long long)t.offset, (long long)st->numel);
    if (grow((void **)&m->t, &m->capt, m->nt + 1, sizeof *m->t) < 0) return pm_fail(m, -ENOMEM, "out of memory");
    m->t[m->nt] = t;
    int vi = newval(m, V_TENSOR);
    if (vi < 0) return vi;
    m->v[vi].i = m->nt++;
    return push(m, vi);
}

static int reduce(pm *m)
{
    int fi = 0, ai = 0, rc;
    if ((rc = pop(m, &ai)) < 0 || (rc = pop(m, &fi)) < 0) return rc;
    const pval *f = &m->v[fi], *a = &m->v[ai];
    if (f->type != V_GLOBAL || a->type != V_TUPLE || f->i >= G_FLOAT)
        return pm_fail(m, -EINVAL, "REDUCE of something other than OrderedDict() or _rebuild_tensor_v2(...)");
    if (f->i == G_REBUILD) return rebuild(m, a);
    if (a->n != 0) return pm_fail(m, -EINVAL, "OrderedDict called with arguments");
    return push(m, newval(m, V_DICT));
}

static int memo_put(pm *m, uint64_t idx)
{
    if (!m->nst) return pm_fail(m, -EINVAL, "memo put with an empty stack");
    if (idx > m->n) return pm_fail(m, -EINVAL, "memo index %llu out of range", (unsigned long long)idx);
    if (idx >= m->nmemo) {
        size_t nn = (size_t)idx + 1 > 2 * m->nmemo ? (size_t)idx + 1 : 2 * m->nmemo;
        int *p = realloc(m->memo, nn * sizeof *p);
        if (!p) return pm_fail(m, -ENOMEM, "out of memory");
        for (size_t i = m->nmemo; i < nn; i++) p[i] = -1;
        m->memo = p;
        m->nmemo = nn;
    }
    if (m->memo[idx] < 0) m->memo_len++;
    m->memo[idx] = m->st[m->nst - 1];
    return 0;
}

static int memo_get(pm *m, uint64_t idx)
{
    if (idx >= m->nmemo || m->memo[idx] < 0)
        return pm_fail(m, -EINVAL, "memo index %llu was never set", (unsigned long long)idx);
    return push(m, m->memo[idx]);
}

static const char *opname(int op)
{
    static const struct { int op; const char *name; } t[] = {
        {'i', "INST"}, {'o', "OBJ"}, {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"}, {'p', "PUT"}, {'g', "GET"},
        {'S', "STRING"}, {'V', "UNICODE"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"}, {'B', "BINBYTES"},
        {'C', "SHORT_BINBYTES"}, {'I', "INT"}, {'L', "LONG"}, {'F', "FLOAT"}, {'2', "DUP"}, {'0', "POP"},
        {'1', "POP_MARK"}, {'l', "LIST"}, {'d', "DICT"}, {'P', "PERSID"}, {0x82, "EXT1"}, {0x83, "EXT2"},
        {0x84, "EXT4"}, {0x8b, "LONG4"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"},
        {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
        {0x98, "READONLY_BUFFER"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].op == op) return t[i].name;
    return "unknown";
}

static int run(pm *m, int *result)
{
    int rc = 0, a = 0, b = 0, k = 0;
    while (rc == 0) {
        if (m->pos >= m->n) return pm_fail(m, -EINVAL, "ends without STOP");
        m->op_at = m->pos;
        int op = m->p[m->pos++];
        switch (op) {
        case 0x80:   /* PROTO */
            if ((rc = need(m, 1)) < 0) break;
            if (m->p[m->pos] < 2 || m->p[m->pos] > 5) rc = pm_fail(m, -EINVAL, "pickle protocol %d", m->p[m->pos]);
            m->pos++;
            break;
        case 0x95:   /* FRAME: a length hint only */
            if ((rc = need(m, 8)) == 0) m->pos += 8;
            break;
        case '}': rc = push(m, newval(m, V_DICT)); break;
        case ']': rc = push(m, newval(m, V_LIST)); break;
        case ')': rc = push(m, newval(m, V_TUPLE)); break;
        case 'N': rc = push(m, newval(m, V_NONE)); break;
        case 0x88: case 0x89:   /* NEWTRUE, NEWFALSE */
            if ((a = newval(m, V_BOOL)) >= 0) m->v[a].i = op == 0x88;
            rc = push(m, a);
            break;
        case 'K': case 'M': case 'J': {   /* BININT1, BININT2, BININT */
            size_t w = op == 'K' ? 1 : op == 'M' ? 2 : 4;
            if ((rc = need(m, w)) < 0) break;
            int64_t x = w == 1 ? m->p[m->pos] : w == 2 ? (int64_t)rd16(m->p + m->pos) : (int32_t)rd32(m->p + m->pos);
            m->pos += w;
            if ((a = newval(m, V_INT)) >= 0) m->v[a].i = x;
            rc = push(m, a);
            break;
        }
        case 0x8a: {   /* LONG1: n bytes, little-endian two's complement */
            if ((rc = need(m, 1)) < 0) break;
            size_t w = m->p[m->pos++];
            if (w > 8) { rc = pm_fail(m, -EINVAL, "LONG1 of %zu bytes (at most 8)", w); break; }
            if ((rc = need(m, w)) < 0) break;
            uint64_t x = 0;
            for (size_t i = 0; i < w; i++) x |= (uint64_t)m->p[m->pos + i] << (8 * i);
            if (w && w < 8 && (m->p[m->pos + w - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * w);
            m->pos += w;
            if ((a = newval(m, V_INT)) >= 0) m->v[a].i = (int64_t)x;
            rc = push(m, a);
            break;
        }
        case 'G':   /* BINFLOAT: big-endian double */
            if ((rc = need(m, 8)) < 0) break;
            m->pos += 8;
            rc = push(m, newval(m, V_FLOAT));
            break;
        case 'X':   /* BINUNICODE */
            if ((rc = need(m, 4)) == 0) {
                uint64_t len = rd32(m->p + m->pos);
                m->pos += 4;
                rc = new_str(m, (size_t)len);
            }
            break;
        case 0x8c:   /* SHORT_BINUNICODE */
            if ((rc = need(m, 1)) == 0) rc = new_str(m, m->p[m->pos++]);
            break;
        case 'c': {   /* GLOBAL "module\nname\n" */
            const uint8_t *s = m->p + m->pos, *e = m->p + m->n;
            const uint8_t *n1 = memchr(s, '\n', (size_t)(e - s)), *n2 = n1 ? memchr(n1 + 1, '\n', (size_t)(e - n1 - 1)) : NULL;
            if (!n2) { rc = pm_fail(m, -EINVAL, "GLOBAL without two newline-ended names"); break; }
            m->pos = (size_t)(n2 + 1 - m->p);
            rc = global(m, s, (size_t)(n1 - s), n1 + 1, (size_t)(n2 - n1 - 1));
            break;
        }
        case 0x93:   /* STACK_GLOBAL */
            if ((rc = pop(m, &b)) < 0 || (rc = pop(m, &a)) < 0) break;
            if (m->v[a].type != V_STR || m->v[b].type != V_STR) {
                rc = pm_fail(m, -EINVAL, "STACK_GLOBAL of non-strings");
                break;
            }
            rc = global(m, m->v[a].s, m->v[a].slen, m->v[b].s, m->v[b].slen);
            break;
        case 'q':   /* BINPUT */
            if ((rc = need(m, 1)) == 0) rc = memo_put(m, m->p[m->pos++]);
            break;
        case 'r':   /* LONG_BINPUT */
            if ((rc = need(m, 4)) == 0) {
                rc = memo_put(m, rd32(m->p + m->pos));
                m->pos += 4;
            }
            break;
        case 0x94:   /* MEMOIZE */
            rc = memo_put(m, m->memo_len);
            break;
        case 'h':   /* BINGET */
            if ((rc = need(m, 1)) == 0) rc = memo_get(m, m->p[m->pos++]);
            break;
        case 'j':   /* LONG_BINGET */
            if ((rc = need(m, 4)) == 0) {
                rc = memo_get(m, rd32(m->p + m->pos));
                m->pos += 4;
            }
            break;
        case '(':   /* MARK */
            if (grow((void **)&m->marks, &m->capm, m->nmarks + 1, sizeof *m->marks) < 0)
                rc = pm_fail(m, -ENOMEM, "out of memory");
            else
                m->marks[m->nmarks++] = m->nst;
            break;
        case 't':   /* TUPLE */
            if ((rc = take_mark(m, &k)) < 0) break;
            if ((a = newval(m, V_TUPLE)) < 0) { rc = a; break; }
            for (int i = k; i < m->nst && rc == 0; i++) rc = append(m, a, m->st[i]);
            m->nst = k;
            if (rc == 0) rc = push(m, a);
            break;
        case 0x85: case 0x86: case 0x87: {   /* TUPLE1..3 */
            int cnt = op - 0x84, items[3];
            for (int i = cnt - 1; i >= 0 && rc == 0; i--) rc = pop(m, &items[i]);
            if (rc < 0) break;
            if ((a = newval(m, V_TUPLE)) < 0) { rc = a; break; }
            for (int i = 0; i < cnt && rc == 0; i++) rc = append(m, a, items[i]);
            if (rc == 0) rc = push(m, a);
            break;
        }
        case 'Q': rc = persid(m); break;
        case 'R': rc = reduce(m); break;
        case 's': case 'u': case 'a': case 'e': {   /* SETITEM, SETITEMS, APPEND, APPENDS */
            int dict = op == 's' || op == 'u', many = op == 'u' || op == 'e';
            if (many) {
                if ((rc = take_mark(m, &k)) < 0) break;
            } else {
                k = m->nst - (dict ? 2 : 1);
                if (k < floor_(m) + 1) { rc = pm_fail(m, -EINVAL, "stack underflow"); break; }
            }
            if (k < 1 || k - 1 < floor_(m)) { rc = pm_fail(m, -EINVAL, "stack underflow"); break; }
            int target = m->st[k - 1];
            if (m->v[target].type != (dict ? V_DICT : V_LIST) || (dict && (m->nst - k) % 2)) {
                rc = pm_fail(m, -EINVAL, "%s on a %s", dict ? "SETITEM(S)" : "APPEND(S)",
                             dict ? "non-dict or with an odd item count" : "non-list");
                break;
            }
            for (int i = k; i < m->nst && rc == 0; i++) rc = append(m, target, m->st[i]);
            m->nst = k;
            break;
        }
        case 'b':   /* BUILD: only a state dict's own state (its _metadata), ignored */
            if ((rc = pop(m, &b)) < 0) break;
            if (m->nst <= floor_(m) || m->v[m->st[m->nst - 1]].type != V_DICT ||
                (m->v[b].type != V_DICT && m->v[b].type != V_NONE))
                rc = pm_fail(m, -EINVAL, "BUILD on something other than a dict with dict state");
            break;
        case '.':   /* STOP */
            if (m->nst != 1 || m->nmarks)
                return pm_fail(m, -EINVAL, "STOP with %d values and %d marks on the stack (want one value)", m->nst,
                               m->nmarks);
            *result = m->st[0];
            return 0;
        default:
            return pm_fail(m, -EINVAL, "opcode 0x%02x (%s) is not allowed: a checkpoint is read as a state dict of "
                           "tensors, and lind runs no code from it", op, opname(op));
        }
    }
    return rc;
}

/* ---- the file --------------------------------------------------------------- */

static int build(st_file *f, const char *path, char *err, size_t errlen)
{
    zip z;
    int rc = zip_read(f->map, f->size, path, &z, err, errlen);
    if (rc < 0) { free(z.e); return rc; }
    const zentry *pkl = NULL;
    for (size_t i = 0; i < z.n; i++) {
        const zentry *e = &z.e[i];
        const uint8_t *sl = memchr(e->name, '/', e->nlen);
        if (sl && e->nlen - (size_t)(sl - e->name) == 9 && !memcmp(sl, "/data.pkl", 9) && sl > e->name) {
            if (pkl) {
                free(z.e);
                return errmsg_set(-EINVAL, err, errlen, "%s: more than one data.pkl in the archive", path);
            }
            pkl = e;
        }
    }
    if (!pkl) {
        free(z.e);
        return errmsg_set(-EINVAL, err, errlen, "%s: no <name>/data.pkl in the zip: not a torch.save checkpoint", path);
    }
    char prefix[256];
    size_t plen = pkl->nlen - 8;   /* "<stem>/" */
    if (plen >= sizeof prefix || memchr(pkl->name, 0, plen)) {
        free(z.e);
        return errmsg_set(-EINVAL, err, errlen, "%s: archive folder name too long or not text", path);
    }
    memcpy(prefix, pkl->name, plen);
    prefix[plen] = 0;
    const zentry *bo = zip_find(&z, prefix, plen, (const uint8_t *)"byteorder", 9);
    if (bo && !(bo->size == 6 && !memcmp(f->map + bo->off, "little", 6))) {
        free(z.e);
        return errmsg_set(-EINVAL, err, errlen, "%s: %sbyteorder is not \"little\"", path, prefix);
    }
    pm m = {.path = path, .err = err, .errlen = errlen, .p = f->map + pkl->off, .n = pkl->size, .z = &z,
            .prefix = prefix, .plen = plen};
    int res = -1;
    rc = run(&m, &res);
    const pval *d = rc == 0 ? &m.v[res] : NULL;
    if (rc == 0 && d->type != V_DICT)
        rc = errmsg_set(-EINVAL, err, errlen, "%s: the pickled value is not a dict of tensors (a state dict)", path);
    if (rc == 0 && !(f->t = calloc((size_t)d->n / 2 + 1, sizeof *f->t)))
        rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    for (int i = 0; rc == 0 && i + 1 < d->n; i += 2) {
        const pval *k = &m.v[d->it[i]], *v = &m.v[d->it[i + 1]];
        if (k->type != V_STR || k->slen > 200 || memchr(k->s, 0, k->slen)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: state dict entry %d has a key that is not a tensor name", path,
                            i / 2);
            break;
        }
        if (v->type != V_TENSOR) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: state dict entry '%.*s' is not a tensor", path, (int)k->slen,
                            (const char *)k->s);
            break;
        }
        const ptensor *pt = &m.t[v->i];
        const pval *s = &m.v[pt->storage];
        st_tensor *t = &f->t[f->n];
        if (!(t->name = strndup((const char *)k->s, k->slen))) {
            rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
            break;
        }
        f->n++;
        for (int j = 0; j < f->n - 1; j++)
            if (!strcmp(f->t[j].name, t->name)) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s' appears twice", path, t->name);
                break;
            }
        size_t es = s->i == ST_F32 ? 4 : 2;
        t->dtype = (int)s->i;
        t->ndim = pt->ndim;
        memcpy(t->shape, pt->shape, sizeof t->shape);
        t->numel = (size_t)pt->numel;
        t->begin = s->off + (size_t)pt->offset * es;
        t->end = t->begin + t->numel * es;
    }
    for (int i = 0; i < m.nv; i++) free(m.v[i].it);
    free(m.v);
    free(m.st);
    free(m.marks);
    free(m.memo);
    free(m.t);
    free(z.e);
    return rc;
}

int pth_open(st_file *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errmsg_set(-errno, err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return errmsg_set(-e, err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return errmsg_set(-EINVAL, err, errlen, "%s: %s", path, st.st_size ? "not a regular file" : "empty file");
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return errmsg_set(-e, err, errlen, "%s: mmap: %s", path, strerror(e));
    f->map = map;
    f->size = size;
    f->data = f->map;   /* tensors are byte ranges of the whole file */
    f->data_size = size;
    if (!(f->path = strdup(path))) {
        st_close(f);
        return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    }
    int rc = build(f, path, err, errlen);
    if (rc < 0) st_close(f);
    return rc;
}
