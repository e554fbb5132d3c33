/* daemon/http_sessions.c — the stored sessions over HTTP (daemon/http_sessions.h). */
#include "daemon/http_sessions.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "state/store.h"

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int http_sessions_request(const char *target, size_t n, op_request *r)
{
    const char *q = memchr(target, '?', n);
    if (q) n = (size_t)(q - target);
    size_t pl = strlen(HTTP_SESSIONS_PATH);
    if (n < pl || memcmp(target, HTTP_SESSIONS_PATH, pl)) return -ENOENT;
    memset(r, 0, sizeof *r);
    r->id = 1;
    if (n == pl || (n == pl + 1 && target[pl] == '/')) {
        r->op = OP_LIST;
        return 0;
    }
    if (target[pl] != '/') return -ENOENT;
    /* The name, %-decoded: a browser encodes what a URL cannot hold. */
    size_t k = 0;
    for (size_t i = pl + 1; i < n; i++) {
        int c = (unsigned char)target[i];
        if (c == '%') {
            int hi = i + 2 < n ? hexval(target[i + 1]) : -1, lo = i + 2 < n ? hexval(target[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -ENOENT;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || k >= STORE_NAME_MAX) return -ENOENT;
        r->session[k++] = (char)c;
    }
    r->session[k] = 0;
    char why[160];
    if (store_name_check(r->session, why, sizeof why)) return -ENOENT;
    r->op = OP_INFO;
    return 0;
}

/* Bytes as a JSON string, each byte that is not part of UTF-8 as U+FFFD
 * (a token may end inside a character; jansson takes valid UTF-8 only). */
static json_t *text_value(const uint8_t *p, size_t n)
{
    char *s = malloc(3 * n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t got = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (got > 0) {
            memcpy(s + k, p + i, (size_t)got);
            k += (size_t)got;
            i += (size_t)got;
        } else {
            memcpy(s + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(s, k);
    free(s);
    return j;
}

/* The value of field f (a container with everything inside it). */
static json_t *value(const evlist *l, size_t i)
{
    const ev_field *f = &l->f[i];
    switch (f->type) {
    case EVV_NIL:   return json_null();
    case EVV_BOOL:  return json_boolean(f->v.b);
    case EVV_I64:   return json_integer((json_int_t)f->v.i);
    case EVV_U64:   return f->v.u <= INT64_MAX ? json_integer((json_int_t)f->v.u) : json_real((double)f->v.u);
    case EVV_F64:   return json_real(f->v.f);
    case EVV_STR:
    case EVV_BYTES: return text_value(ev_field_bytes(l, f), f->v.s.len);
    case EVV_ARRAY:
    case EVV_RECORD: {
        int rec = f->type == EVV_RECORD;
        json_t *c = rec ? json_object() : json_array();
        for (size_t k = i + 1; c && k < f->end;) {
            const ev_field *x = &l->f[k];
            json_t *v = value(l, k);
            if (!v || (rec ? json_object_set_new(c, x->key ? x->key : "", v) : json_array_append_new(c, v))) {
                json_decref(c);
                return NULL;
            }
            k = x->type == EVV_ARRAY || x->type == EVV_RECORD ? x->end : k + 1;
        }
        return c;
    }
    }
    return json_null();
}

json_t *http_sessions_json(const evlist *l, const event *e)
{
    if (e->kind != EV_RESULT) return NULL;
    json_t *j = value(l, e->rec);
    if (!j) return NULL;
    json_t *list = json_object_get(j, "sessions");
    if (list) {   /* OpenAI's shape for a list */
        json_t *o = json_pack("{s:s, s:O}", "object", "list", "data", list);
        json_decref(j);
        return o;
    }
    json_object_set_new(j, "object", json_string("session"));
    return j;
}
