/* recurrent/jsonfsm.c — see jsonfsm.h. */
#include "recurrent/jsonfsm.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the compiled schema: one block ------------------------------------- */

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ALL = 127 };
#define ADDL_NONE (-2)   /* additionalProperties false */

typedef struct snode {
    uint8_t  types;
    uint8_t  pad;
    uint16_t nprops, nlits;
    uint16_t pad2;
    int32_t  items;      /* node of the items */
    int32_t  addl;       /* node of additional properties, ADDL_NONE: none */
    uint32_t prop0, lit0;
    uint64_t required;
} snode;

typedef struct sprop { uint32_t off, len; int32_t node; } sprop;
typedef struct slit  { uint32_t off, len; } slit;

struct jsonfsm_schema {
    uint64_t size;       /* bytes of the whole block */
    int32_t  root;
    uint32_t nnodes, nprops, nlits, pool;
    uint32_t pad;
    /* then snode[nnodes], sprop[nprops], slit[nlits], pool bytes */
};

static const snode *S_nodes(const jsonfsm_schema *s) { return (const snode *)(s + 1); }
static const sprop *S_props(const jsonfsm_schema *s) { return (const sprop *)(S_nodes(s) + s->nnodes); }
static const slit  *S_lits(const jsonfsm_schema *s) { return (const slit *)(S_props(s) + s->nprops); }
static const uint8_t *S_pool(const jsonfsm_schema *s) { return (const uint8_t *)(S_lits(s) + s->nlits); }

/* The node used where no schema is given: anything. */
static const snode any_node = { T_ALL, 0, 0, 0, 0, -1, -1, 0, 0, 0 };

static const snode *node_of(const jsonfsm *f, int32_t n)
{
    if (!f->schema || n < 0) return &any_node;
    return &S_nodes(f->schema)[n];
}

/* ---- the automaton ------------------------------------------------------- */

enum { K_DOC, K_OBJ, K_ARR };
enum {
    D_START, D_DONE,
    O_START, O_COLON, O_VALUE, O_AFTER, O_NEXT,
    A_START, A_AFTER, A_NEXT,
};
enum { M_NONE, M_STR, M_NUM, M_LIT };
/* number states */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const builtin[3] = { "true", "false", "null" };
static const uint8_t builtin_len[3] = { 4, 5, 4 };

void jsonfsm_init(jsonfsm *f, const jsonfsm_schema *schema)
{
    memset(f, 0, sizeof *f);
    f->schema = schema;
    f->depth = 1;
    f->vnode = -1;
    f->stack[0].kind = K_DOC;
    f->stack[0].st = D_START;
    f->stack[0].node = schema ? schema->root : -1;
    f->stack[0].key_node = -1;
}

size_t jsonfsm_used_size(const jsonfsm *f)
{
    return offsetof(jsonfsm, stack) + (size_t)f->depth * sizeof(jsonfsm_frame);
}

void jsonfsm_copy(jsonfsm *dst, const jsonfsm *src)
{
    memcpy(dst, src, jsonfsm_used_size(src));
}

static int die(jsonfsm *f) { f->dead = 1; return 0; }

static int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* The value just read ends: the container moves on. */
static void value_done(jsonfsm *f)
{
    jsonfsm_frame *t = &f->stack[f->depth - 1];
    f->mode = M_NONE;
    f->sub = 0;
    f->nlen = 0;
    f->pos = 0;
    f->cand = 0;
    f->vnode = -1;
    f->ws = 0;
    if (t->kind == K_DOC) t->st = D_DONE;
    else if (t->kind == K_OBJ) { t->st = O_AFTER; t->key_node = -1; }
    else t->st = A_AFTER;
}

static uint64_t lit_first(const jsonfsm *f, const snode *n, uint8_t b)
{
    uint64_t c = 0;
    const slit *L = S_lits(f->schema) + n->lit0;
    const uint8_t *pool = S_pool(f->schema);
    for (unsigned i = 0; i < n->nlits; i++)
        if (L[i].len && pool[L[i].off] == b) c |= 1ull << i;
    return c;
}

static int push(jsonfsm *f, int kind, int st, int32_t node)
{
    if (f->depth > JSONFSM_DEPTH) return die(f);
    jsonfsm_frame *t = &f->stack[f->depth++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->st = (uint8_t)st;
    t->node = node;
    t->key_node = -1;
    f->ws = 0;
    return 1;
}

static int start_value(jsonfsm *f, int32_t ni, uint8_t b)
{
    const snode *n = node_of(f, ni);
    f->ws = 0;
    if (n->nlits) {
        uint64_t c = lit_first(f, n, b);
        if (!c) return die(f);
        f->mode = M_LIT;
        f->cand = c;
        f->pos = 1;
        f->vnode = ni;
        return 1;
    }
    if (b == '{' && (n->types & T_OBJ)) return push(f, K_OBJ, O_START, ni);
    if (b == '[' && (n->types & T_ARR)) return push(f, K_ARR, A_START, ni);
    if (b == '"' && (n->types & T_STR)) {
        f->mode = M_STR;
        f->iskey = 0;
        return 1;
    }
    if ((b == '-' || (b >= '0' && b <= '9')) && (n->types & (T_NUM | T_INT))) {
        f->mode = M_NUM;
        f->sub = b == '-' ? N_MINUS : b == '0' ? N_ZERO : N_INT;
        f->nlen = 1;
        f->vnode = ni;
        return 1;
    }
    uint64_t c = 0;
    if (n->types & T_BOOL) c |= b == 't' ? 1 : b == 'f' ? 2 : 0;
    if ((n->types & T_NULL) && b == 'n') c |= 4;
    if (!c) return die(f);
    f->mode = M_LIT;
    f->cand = c;
    f->pos = 1;
    f->vnode = -1;
    return 1;
}

/* Whether any declared property of node n may still be written in frame t
 * (closed objects: an unseen one). */
static int key_possible(const snode *n, const jsonfsm_frame *t)
{
    if (n->addl != ADDL_NONE) return 1;
    uint64_t all = n->nprops >= 64 ? ~0ull : (1ull << n->nprops) - 1;
    return (all & ~t->seen) != 0;
}

static int start_key(jsonfsm *f, jsonfsm_frame *t)
{
    const snode *n = node_of(f, t->node);
    if (!key_possible(n, t)) return die(f);
    uint64_t all = n->nprops >= 64 ? ~0ull : (1ull << n->nprops) - 1;
    f->mode = M_STR;
    f->iskey = 1;
    f->cand = n->addl == ADDL_NONE ? all & ~t->seen : all;
    f->pos = 0;
    f->ws = 0;
    return 1;
}

static int close_object(jsonfsm *f, jsonfsm_frame *t)
{
    const snode *n = node_of(f, t->node);
    if ((n->required & ~t->seen) != 0) return die(f);
    f->depth--;
    value_done(f);
    return 1;
}

static int structural(jsonfsm *f, uint8_t b)
{
    if (is_ws(b)) {
        if (f->ws >= JSONFSM_WS_MAX) return die(f);
        f->ws++;
        return 1;
    }
    f->ws = 0;
    jsonfsm_frame *t = &f->stack[f->depth - 1];
    switch (t->st) {
    case D_START: return start_value(f, t->node, b);
    case D_DONE:  return die(f);
    case O_START:
        if (b == '}') return close_object(f, t);
        /* fall through */
    case O_NEXT:
        if (b == '"') return start_key(f, t);
        return die(f);
    case O_COLON:
        if (b != ':') return die(f);
        t->st = O_VALUE;
        return 1;
    case O_VALUE: return start_value(f, t->key_node, b);
    case O_AFTER:
        if (b == '}') return close_object(f, t);
        if (b != ',' || !key_possible(node_of(f, t->node), t)) return die(f);
        t->st = O_NEXT;
        return 1;
    case A_START:
        if (b == ']') { f->depth--; value_done(f); return 1; }
        /* fall through */
    case A_NEXT:
        return start_value(f, node_of(f, t->node)->items, b);
    case A_AFTER:
        if (b == ']') { f->depth--; value_done(f); return 1; }
        if (b != ',') return die(f);
        t->st = A_NEXT;
        return 1;
    }
    return die(f);
}

static int hexval(uint8_t b)
{
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

static int key_end(jsonfsm *f)
{
    jsonfsm_frame *t = &f->stack[f->depth - 1];
    const snode *n = node_of(f, t->node);
    int exact = -1;
    if (f->schema && n->nprops) {
        const sprop *P = S_props(f->schema) + n->prop0;
        for (unsigned i = 0; i < n->nprops; i++)
            if ((f->cand >> i & 1) && P[i].len == f->pos) { exact = (int)i; break; }
    }
    if (exact >= 0) {
        if (t->seen >> exact & 1) return die(f);   /* a duplicate of a declared key */
        t->seen |= 1ull << exact;
        t->key_node = S_props(f->schema)[n->prop0 + (unsigned)exact].node;
    } else {
        if (n->addl == ADDL_NONE) return die(f);
        t->key_node = n->addl;
    }
    f->mode = M_NONE;
    f->iskey = 0;
    f->cand = 0;
    f->pos = 0;
    f->ws = 0;
    t->st = O_COLON;
    return 1;
}

static int string_byte(jsonfsm *f, uint8_t b)
{
    int closing = b == '"' && f->sub == 0 && f->u8need == 0 && !f->sur;
    if (f->iskey && f->cand && !closing) {
        /* match the key's raw bytes against the candidate names */
        const jsonfsm_frame *t = &f->stack[f->depth - 1];
        const snode *n = node_of(f, t->node);
        const sprop *P = S_props(f->schema) + n->prop0;
        const uint8_t *pool = S_pool(f->schema);
        uint64_t c = 0;
        for (uint64_t m = f->cand; m; m &= m - 1) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            if (f->pos < P[i].len && pool[P[i].off + f->pos] == b) c |= 1ull << i;
        }
        if (!c && n->addl == ADDL_NONE) return die(f);
        f->cand = c;
        f->pos = c ? (uint16_t)(f->pos + 1) : 0;
    }
    if (f->u8need) {
        if (b < f->u8lo || b > f->u8hi) return die(f);
        f->u8need--;
        f->u8lo = 0x80;
        f->u8hi = 0xbf;
        if (!f->u8need) f->u8lo = f->u8hi = 0;
        return 1;
    }
    if (f->sub == 1) {   /* after a backslash */
        if (b == 'u') { f->sub = 2; f->hexn = 0; f->hex = 0; return 1; }
        if (f->sur) return die(f);
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
            f->sub = 0;
            return 1;
        }
        return die(f);
    }
    if (f->sub == 2) {   /* \uXXXX */
        int d = hexval(b);
        if (d < 0) return die(f);
        f->hexn++;
        if (f->hexn == 1 && f->sur && d != 0xd) return die(f);
        if (f->hexn == 2) {
            int hi = (f->hex << 4) | d;   /* the first two digits */
            if (f->sur && (hi < 0xdc || hi > 0xdf)) return die(f);
            if (!f->sur && hi >= 0xdc && hi <= 0xdf) return die(f);   /* a lone low surrogate */
        }
        f->hex = (uint16_t)((f->hex << 4) | d);
        if (f->hexn == 4) {
            if (f->sur) f->sur = 0;
            else if (f->hex >= 0xd800 && f->hex <= 0xdbff) f->sur = 1;
            f->sub = 0;
            f->hexn = 0;
            f->hex = 0;
        }
        return 1;
    }
    if (f->sur && b != '\\') return die(f);
    if (b == '"') {
        if (f->iskey) return key_end(f);
        value_done(f);
        return 1;
    }
    if (b == '\\') { f->sub = 1; return 1; }
    if (b < 0x20) return die(f);
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) { f->u8need = 1; f->u8lo = 0x80; f->u8hi = 0xbf; return 1; }
    if (b >= 0xe0 && b <= 0xef) {
        f->u8need = 2;
        f->u8lo = b == 0xe0 ? 0xa0 : 0x80;
        f->u8hi = b == 0xed ? 0x9f : 0xbf;
        return 1;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        f->u8need = 3;
        f->u8lo = b == 0xf0 ? 0x90 : 0x80;
        f->u8hi = b == 0xf4 ? 0x8f : 0xbf;
        return 1;
    }
    return die(f);
}

/* More bytes a number in state st needs before it is complete. */
static int num_need(int st)
{
    return st == N_MINUS || st == N_DOT || st == N_E || st == N_ESIGN;
}

static int num_complete(int st) { return st == N_ZERO || st == N_INT || st == N_FRAC || st == N_EXP; }

/* 1: b continues the number, 0: it does not. */
static int number_byte(jsonfsm *f, uint8_t b)
{
    int integer = !(node_of(f, f->vnode)->types & T_NUM);
    int dig = b >= '0' && b <= '9', ns = -1;
    switch (f->sub) {
    case N_MINUS: if (dig) ns = b == '0' ? N_ZERO : N_INT; break;
    case N_ZERO:
    case N_INT:
        if (dig && f->sub == N_INT) ns = N_INT;
        else if (b == '.' && !integer) ns = N_DOT;
        else if ((b == 'e' || b == 'E') && !integer) ns = N_E;
        break;
    case N_DOT: if (dig) ns = N_FRAC; break;
    case N_FRAC:
        if (dig) ns = N_FRAC;
        else if (b == 'e' || b == 'E') ns = N_E;
        break;
    case N_E:
        if (dig) ns = N_EXP;
        else if (b == '+' || b == '-') ns = N_ESIGN;
        break;
    case N_ESIGN:
    case N_EXP: if (dig) ns = N_EXP; break;
    }
    if (ns < 0) return 0;
    if (f->nlen + 1 + num_need(ns) > JSONFSM_NUMBER_MAX) return -1;   /* no room to finish */
    f->sub = (uint8_t)ns;
    f->nlen++;
    return 1;
}

static const uint8_t *lit_bytes(const jsonfsm *f, unsigned i, uint32_t *len)
{
    if (f->vnode < 0) { *len = builtin_len[i]; return (const uint8_t *)builtin[i]; }
    const snode *n = node_of(f, f->vnode);
    const slit *L = &S_lits(f->schema)[n->lit0 + i];
    *len = L->len;
    return S_pool(f->schema) + L->off;
}

static int lit_complete(const jsonfsm *f)
{
    for (uint64_t m = f->cand; m; m &= m - 1) {
        uint32_t len;
        lit_bytes(f, (unsigned)__builtin_ctzll(m), &len);
        if (len == f->pos) return 1;
    }
    return 0;
}

/* 1: b continues some candidate literal, 0: it does not. */
static int literal_byte(jsonfsm *f, uint8_t b)
{
    uint64_t c = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctzll(m);
        uint32_t len;
        const uint8_t *p = lit_bytes(f, i, &len);
        if (f->pos < len && p[f->pos] == b) c |= 1ull << i;
    }
    if (!c) return 0;
    f->cand = c;
    f->pos++;
    return 1;
}

int jsonfsm_feed(jsonfsm *f, uint8_t b)
{
    if (f->dead) return 0;
    switch (f->mode) {
    case M_STR: return string_byte(f, b);
    case M_NUM: {
        int r = number_byte(f, b);
        if (r > 0) return 1;
        if (r < 0 || !num_complete(f->sub)) return die(f);
        value_done(f);
        return structural(f, b);
    }
    case M_LIT:
        if (literal_byte(f, b)) return 1;
        if (!lit_complete(f)) return die(f);
        value_done(f);
        return structural(f, b);
    default: return structural(f, b);
    }
}

int jsonfsm_feed_bytes(jsonfsm *f, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!jsonfsm_feed(f, p[i])) return 0;
    return !f->dead;
}

int jsonfsm_is_complete(const jsonfsm *f)
{
    if (f->dead || f->depth != 1) return 0;
    if (f->mode == M_NONE) return f->stack[0].st == D_DONE;
    if (f->mode == M_NUM) return num_complete(f->sub);
    if (f->mode == M_LIT) return lit_complete(f);
    return 0;
}

int jsonfsm_is_closed(const jsonfsm *f)
{
    if (f->dead || f->depth != 1) return 0;
    if (f->mode == M_NONE) return f->stack[0].st == D_DONE;
    if (f->mode != M_LIT || !lit_complete(f)) return 0;
    /* a literal: closed when no candidate is longer than what was read */
    for (uint64_t m = f->cand; m; m &= m - 1) {
        uint32_t len;
        lit_bytes(f, (unsigned)__builtin_ctzll(m), &len);
        if (len > f->pos) return 0;
    }
    return 1;
}

int jsonfsm_is_free_string(const jsonfsm *f)
{
    return !f->dead && f->mode == M_STR && f->sub == 0 && f->u8need == 0 && !f->sur &&
           (!f->iskey || f->cand == 0);
}

/* ---- the schema compiler ------------------------------------------------- */

typedef struct builder {
    snode   *nodes; size_t nn, cn;
    sprop   *props; size_t np, cp;
    slit    *lits;  size_t nl, cl;
    uint8_t *pool;  size_t npool, cpool;
    char    *err;   size_t errlen;
} builder;

static int berr(builder *b, const char *ptr, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b->errlen) snprintf(b->err, b->errlen, "%s (at schema%s%s)", msg, *ptr ? " " : "", ptr);
    return -EINVAL;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int pool_add(builder *b, const char *s, size_t n, uint32_t *off, const char *ptr)
{
    if (b->npool + n > JSONFSM_POOL_MAX)
        return berr(b, ptr, "the schema's names and enum values exceed %d bytes", JSONFSM_POOL_MAX);
    if (grow((void **)&b->pool, &b->cpool, b->npool + n + 1, 1)) return -ENOMEM;
    memcpy(b->pool + b->npool, s, n);
    *off = (uint32_t)b->npool;
    b->npool += n;
    return 0;
}

static int type_bit(const char *s)
{
    static const char *const names[] = { "object", "array", "string", "number", "integer", "boolean", "null" };
    static const int bits[] = { T_OBJ, T_ARR, T_STR, T_NUM | T_INT, T_INT, T_BOOL, T_NULL };
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, names[i])) return bits[i];
    return 0;
}

/* Whether literal value v is of a type in types. */
static int value_typed(const json_t *v, int types)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return types & T_OBJ;
    case JSON_ARRAY: return types & T_ARR;
    case JSON_STRING: return types & T_STR;
    case JSON_INTEGER: return types & (T_NUM | T_INT);
    case JSON_REAL: return types & T_NUM;
    case JSON_TRUE: case JSON_FALSE: return types & T_BOOL;
    case JSON_NULL: return types & T_NULL;
    }
    return 0;
}

static int add_lit(builder *b, const json_t *v, const char *ptr)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return -ENOMEM;
    if (grow((void **)&b->lits, &b->cl, b->nl + 1, sizeof *b->lits)) { free(s); return -ENOMEM; }
    slit *L = &b->lits[b->nl];
    L->len = (uint32_t)strlen(s);
    if (L->len > JSONFSM_VALUE_MAX) {
        free(s);
        return berr(b, ptr, "an 'enum' or 'const' value is over %d bytes", JSONFSM_VALUE_MAX);
    }
    int rc = pool_add(b, s, L->len, &L->off, ptr);
    free(s);
    if (rc) return rc;
    b->nl++;
    return 0;
}

static int compile_node(builder *b, const json_t *j, const char *ptr, int depth, int32_t *out);

/* ptr + "/" + a [+ "/" + key, ~ and / escaped as a JSON pointer has them] */
static void sub_ptr(char *buf, size_t n, const char *ptr, const char *a, const char *key)
{
    size_t o = (size_t)snprintf(buf, n, "%s/%s", ptr, a);
    if (o >= n) { buf[n - 1] = 0; return; }
    if (key && o + 1 < n) {
        buf[o++] = '/';
        for (const char *k = key; *k && o + 3 < n; k++) {
            if (*k == '~') { buf[o++] = '~'; buf[o++] = '0'; }
            else if (*k == '/') { buf[o++] = '~'; buf[o++] = '1'; }
            else buf[o++] = *k;
        }
        buf[o] = 0;
    }
}

static int compile_node(builder *b, const json_t *j, const char *ptr, int depth, int32_t *out)
{
    if (json_is_true(j)) { *out = -1; return 0; }
    if (!json_is_object(j)) return berr(b, ptr, "a schema must be an object or true");
    if (depth > JSONFSM_DEPTH) return berr(b, ptr, "the schema nests deeper than %d", JSONFSM_DEPTH);
    if (b->nn >= JSONFSM_NODES_MAX) return berr(b, ptr, "the schema has more than %d subschemas", JSONFSM_NODES_MAX);
    const char *k;
    json_t *v;
    static const char *const known[] = { "type", "properties", "required", "items", "additionalProperties",
                                         "enum", "const", "title", "description", "$schema", "$id",
                                         "$comment", "default", "examples" };
    json_object_foreach((json_t *)j, k, v) {
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(k, known[i])) i++;
        if (i == sizeof known / sizeof known[0])
            return berr(b, ptr, "the JSON-schema keyword '%.64s' is not supported", k);
    }
    if (grow((void **)&b->nodes, &b->cn, b->nn + 1, sizeof *b->nodes)) return -ENOMEM;
    int32_t me = (int32_t)b->nn++;
    snode n = { T_ALL, 0, 0, 0, 0, -1, -1, 0, 0, 0 };
    char sp[512];
    if ((v = json_object_get(j, "type"))) {
        n.types = 0;
        if (json_is_string(v)) {
            if (!(n.types = (uint8_t)type_bit(json_string_value(v))))
                return berr(b, ptr, "'type' '%.64s' is not one of object, array, string, number, integer, "
                            "boolean, null", json_string_value(v));
        } else if (json_is_array(v) && json_array_size(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                int t = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
                if (!t) return berr(b, ptr, "'type' must hold names of types (object, array, string, number, "
                                    "integer, boolean, null)");
                n.types |= (uint8_t)t;
            }
        } else {
            return berr(b, ptr, "'type' must be a string or a non-empty array of strings");
        }
    }
    json_t *en = json_object_get(j, "enum"), *cn = json_object_get(j, "const");
    if (en && cn) return berr(b, ptr, "'enum' and 'const' together are not supported");
    if (en || cn) {
        if (en && (!json_is_array(en) || !json_array_size(en) || json_array_size(en) > JSONFSM_ENUM_MAX))
            return berr(b, ptr, "'enum' must be an array of 1..%d values", JSONFSM_ENUM_MAX);
        n.lit0 = (uint32_t)b->nl;
        size_t cnt = en ? json_array_size(en) : 1;
        for (size_t i = 0; i < cnt; i++) {
            json_t *e = en ? json_array_get(en, i) : cn;
            if (!value_typed(e, n.types)) continue;
            int rc = add_lit(b, e, ptr);
            if (rc) return rc;
            n.nlits++;
        }
        if (!n.nlits) return berr(b, ptr, "no value of '%s' has the schema's 'type'", en ? "enum" : "const");
    }
    json_t *props = json_object_get(j, "properties");
    if (props && !json_is_object(props)) return berr(b, ptr, "'properties' must be an object");
    size_t np = props ? json_object_size(props) : 0;
    if (np > JSONFSM_PROPS_MAX)
        return berr(b, ptr, "'properties' declares %zu properties, at most %d", np, JSONFSM_PROPS_MAX);
    if (grow((void **)&b->props, &b->cp, b->np + np, sizeof *b->props)) return -ENOMEM;
    n.prop0 = (uint32_t)b->np;
    n.nprops = (uint16_t)np;
    b->np += np;
    if (np) {
        size_t i = 0;
        json_object_foreach(props, k, v) {
            json_t *name = json_string(k);
            char *enc = name ? json_dumps(name, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            json_decref(name);
            if (!enc) return -ENOMEM;
            size_t el = strlen(enc);
            if (el - 2 > JSONFSM_VALUE_MAX) {
                free(enc);
                return berr(b, ptr, "a property name is over %d bytes", JSONFSM_VALUE_MAX);
            }
            uint32_t off = 0;
            int rc = pool_add(b, enc + 1, el - 2, &off, ptr);   /* without the quotes */
            free(enc);
            if (rc) return rc;
            sub_ptr(sp, sizeof sp, ptr, "properties", k);
            int32_t child;
            if ((rc = compile_node(b, v, sp, depth + 1, &child))) return rc;
            sprop *P = &b->props[n.prop0 + i];
            P->off = off;
            P->len = (uint32_t)(el - 2);
            P->node = child;
            i++;
        }
    }
    json_t *req = json_object_get(j, "required");
    if (req) {
        if (!json_is_array(req)) return berr(b, ptr, "'required' must be an array of property names");
        size_t i;
        json_t *e;
        json_array_foreach(req, i, e) {
            const char *r = json_string_value(e);
            if (!r) return berr(b, ptr, "'required' must be an array of property names");
            size_t idx = 0;
            int found = 0;
            if (props)
                json_object_foreach(props, k, v) {
                    if (!strcmp(k, r)) { found = 1; break; }
                    idx++;
                }
            if (!found)
                return berr(b, ptr, "'required' names '%.64s', which 'properties' does not declare", r);
            n.required |= 1ull << idx;
        }
    }
    if ((v = json_object_get(j, "additionalProperties"))) {
        if (json_is_false(v)) n.addl = ADDL_NONE;
        else if (!json_is_true(v)) {
            sub_ptr(sp, sizeof sp, ptr, "additionalProperties", NULL);
            int rc = compile_node(b, v, sp, depth + 1, &n.addl);
            if (rc) return rc;
        }
    }
    if ((v = json_object_get(j, "items"))) {
        if (!json_is_object(v) && !json_is_true(v))
            return berr(b, ptr, "'items' must be one schema (tuple forms are not supported)");
        sub_ptr(sp, sizeof sp, ptr, "items", NULL);
        int rc = compile_node(b, v, sp, depth + 1, &n.items);
        if (rc) return rc;
    }
    b->nodes[me] = n;
    *out = me;
    return 0;
}

static jsonfsm_schema *pack(builder *b, int32_t root)
{
    size_t size = sizeof(jsonfsm_schema) + b->nn * sizeof(snode) + b->np * sizeof(sprop) +
                  b->nl * sizeof(slit) + b->npool;
    jsonfsm_schema *s = calloc(1, size);
    if (!s) return NULL;
    s->size = size;
    s->root = root;
    s->nnodes = (uint32_t)b->nn;
    s->nprops = (uint32_t)b->np;
    s->nlits = (uint32_t)b->nl;
    s->pool = (uint32_t)b->npool;
    if (b->nn) memcpy((void *)S_nodes(s), b->nodes, b->nn * sizeof(snode));
    if (b->np) memcpy((void *)S_props(s), b->props, b->np * sizeof(sprop));
    if (b->nl) memcpy((void *)S_lits(s), b->lits, b->nl * sizeof(slit));
    if (b->npool) memcpy((void *)S_pool(s), b->pool, b->npool);
    return s;
}

static void builder_free(builder *b)
{
    free(b->nodes);
    free(b->props);
    free(b->lits);
    free(b->pool);
}

int jsonfsm_schema_compile(const json_t *schema, jsonfsm_schema **out, char *err, size_t errlen)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.err = err;
    b.errlen = errlen;
    *out = NULL;
    if (errlen) err[0] = 0;
    int32_t root = -1;
    int rc = compile_node(&b, schema, "", 0, &root);
    if (rc == -ENOMEM && errlen) snprintf(err, errlen, "out of memory compiling the schema");
    if (!rc && !(*out = pack(&b, root))) {
        rc = -ENOMEM;
        if (errlen) snprintf(err, errlen, "out of memory compiling the schema");
    }
    builder_free(&b);
    return rc;
}

int jsonfsm_schema_object(jsonfsm_schema **out)
{
    builder b;
    memset(&b, 0, sizeof b);
    *out = NULL;
    if (grow((void **)&b.nodes, &b.cn, 1, sizeof *b.nodes)) return -ENOMEM;
    snode n = { T_OBJ, 0, 0, 0, 0, -1, -1, 0, 0, 0 };
    b.nodes[b.nn++] = n;
    *out = pack(&b, 0);
    builder_free(&b);
    return *out ? 0 : -ENOMEM;
}

jsonfsm_schema *jsonfsm_schema_clone(const jsonfsm_schema *s)
{
    jsonfsm_schema *c = malloc(s->size);
    if (c) memcpy(c, s, s->size);
    return c;
}

size_t jsonfsm_schema_size(const jsonfsm_schema *s) { return s->size; }

uint64_t jsonfsm_schema_hash(const jsonfsm_schema *s)
{
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < s->size; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
