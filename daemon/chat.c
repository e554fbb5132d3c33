/* daemon/chat.c — see chat.h. */
#include "daemon/chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void chat_template_free(chat_template *t)
{
    free(t->system);
    free(t->user);
    free(t->assistant_end);
    free(t->default_system);
    memset(t, 0, sizeof *t);
}

static int dup_field(json_t *j, const char *key, char **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(j, key);
    *out = NULL;
    if (!v) return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "lind_chat.json: '%s' must be a string", key);
        return -EINVAL;
    }
    *out = strdup(json_string_value(v));
    return *out ? 0 : -ENOMEM;
}

int chat_template_parse(chat_template *t, const char *json, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!json) {
        t->user = strdup("{prompt}\n");
        return t->user ? 0 : -ENOMEM;
    }
    json_error_t je;
    json_t *j = json_loads(json, 0, &je);
    if (!j || !json_is_object(j)) {
        snprintf(err, errlen, "lind_chat.json: not a JSON object");
        json_decref(j);
        return -EINVAL;
    }
    int rc = dup_field(j, "user", &t->user, err, errlen);
    if (!rc) rc = dup_field(j, "system", &t->system, err, errlen);
    if (!rc) rc = dup_field(j, "assistant_end", &t->assistant_end, err, errlen);
    if (!rc) rc = dup_field(j, "default_system", &t->default_system, err, errlen);
    if (!rc && (!t->user || !strstr(t->user, "{prompt}"))) {
        snprintf(err, errlen, "lind_chat.json: 'user' must be a string holding {prompt}");
        rc = -EINVAL;
    }
    if (!rc && t->system && !strstr(t->system, "{system}")) {
        snprintf(err, errlen, "lind_chat.json: 'system' must hold {system}");
        rc = -EINVAL;
    }
    json_t *stop = json_object_get(j, "stop");
    for (size_t i = 0; !rc && i < json_array_size(stop); i++) {
        const char *s = json_string_value(json_array_get(stop, i));
        size_t n = s ? strlen(s) : 0;
        if (!s || n < 1 || n > PROTO_MAX_STOP_LEN || t->n_stop == PROTO_MAX_STOPS) {
            snprintf(err, errlen, "lind_chat.json: stop[%zu] must be a string of 1..%d bytes (at most %d)",
                     i, PROTO_MAX_STOP_LEN, PROTO_MAX_STOPS);
            rc = -EINVAL;
            break;
        }
        memcpy(t->stop[t->n_stop++], s, n + 1);
    }
    json_decref(j);
    if (rc) chat_template_free(t);
    return rc;
}

/* A growing byte buffer. */
typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

/* Append n bytes (n = 0 on an empty buffer allocates it: results are
 * never NULL, even when empty). */
static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom || (!n && b->p)) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* pat with its placeholder ph replaced by val. */
static void expand(sbuf *b, const char *pat, const char *ph, const char *val, size_t vlen)
{
    const char *hit = strstr(pat, ph);
    if (!hit) { put(b, pat, strlen(pat)); return; }
    put(b, pat, (size_t)(hit - pat));
    put(b, val, vlen);
    put(b, hit + strlen(ph), strlen(hit + strlen(ph)));
}

int chat_message_text(json_t *msg, size_t index, char **out, size_t *len, char *err, size_t errlen)
{
    json_t *c = json_object_get(msg, "content");
    sbuf b = { 0 };
    put(&b, "", 0);
    if (json_is_string(c)) {
        put(&b, json_string_value(c), json_string_length(c));
    } else if (json_is_array(c)) {
        for (size_t i = 0; i < json_array_size(c); i++) {
            json_t *part = json_array_get(c, i);
            const char *type = json_string_value(json_object_get(part, "type"));
            json_t *text = json_object_get(part, "text");
            if (!type || strcmp(type, "text") || !json_is_string(text)) {
                snprintf(err, errlen, "messages[%zu].content[%zu] must be {\"type\": \"text\", "
                         "\"text\": string} (only text is supported)", index, i);
                free(b.p);
                return -EINVAL;
            }
            put(&b, json_string_value(text), json_string_length(text));
        }
    } else if (c && !json_is_null(c)) {
        snprintf(err, errlen, "messages[%zu].content must be a string or an array of text parts",
                 index);
        free(b.p);
        return -EINVAL;
    }
    if (b.oom || !b.p) { free(b.p); snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    if (memchr(b.p, 0, b.n)) {
        snprintf(err, errlen, "messages[%zu].content holds a NUL character", index);
        free(b.p);
        return -EINVAL;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

int chat_render(const chat_template *t, json_t *messages, size_t from, int after_reply,
                const uint8_t *tail, size_t tail_len, int fresh, char **out, size_t *out_len,
                char *err, size_t errlen)
{
    sbuf b = { 0 };
    put(&b, "", 0);
    size_t n = json_array_size(messages);
    int has_system = 0;
    for (size_t i = 0; i < n; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
        if (role && (!strcmp(role, "system") || !strcmp(role, "developer"))) has_system = 1;
    }
    if (fresh && !has_system && t->default_system && *t->default_system)
        expand(&b, t->system ? t->system : "{system}\n", "{system}", t->default_system,
               strlen(t->default_system));
    int prev_reply = after_reply;
    size_t skip_from = 0;   /* where assistant_end of the session's reply starts in b */
    int first = 1;
    for (size_t i = from; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            snprintf(err, errlen, "messages[%zu] must be an object with a string 'role'", i);
            free(b.p);
            return -EINVAL;
        }
        int sys = !strcmp(role, "system") || !strcmp(role, "developer");
        int user = !strcmp(role, "user"), asst = !strcmp(role, "assistant");
        if (!sys && !user && !asst) {
            snprintf(err, errlen, "messages[%zu].role '%.40s' is not one of system, developer, "
                     "user, assistant", i, role);
            free(b.p);
            return -EINVAL;
        }
        char *text;
        size_t len;
        int rc = chat_message_text(m, i, &text, &len, err, errlen);
        if (rc) { free(b.p); return rc; }
        if (prev_reply && !asst) {
            if (first) skip_from = b.n;
            if (t->assistant_end) put(&b, t->assistant_end, strlen(t->assistant_end));
        }
        if (sys) {
            expand(&b, t->system ? t->system : "{system}\n", "{system}", text, len);
        } else if (user) {
            if (len && text[len - 1] == '\n') len--;
            expand(&b, t->user, "{prompt}", text, len);
        } else {
            put(&b, text, len);
        }
        free(text);
        prev_reply = asst;
        first = 0;
    }
    if (b.oom) { free(b.p); snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    /* The session's reply may already end with the start of what follows
     * it (a stop string such as "\n\nUser:"): do not say it twice. */
    size_t skip = 0;
    if (after_reply && tail_len) {
        const char *s = b.p + skip_from;
        size_t avail = b.n - skip_from;
        for (size_t k = tail_len < avail ? tail_len : avail; k > 0; k--)
            if (!memcmp(tail + tail_len - k, s, k)) { skip = k; break; }
        memmove(b.p + skip_from, b.p + skip_from + skip, b.n - skip_from - skip + 1);
        b.n -= skip;
    }
    *out = b.p;
    *out_len = b.n;
    return 0;
}
