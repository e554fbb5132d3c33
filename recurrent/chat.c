/* recurrent/chat.c — see chat.h. */
#include "recurrent/chat.h"
#include "recurrent/bytebuf.h"
#include "recurrent/file.h"

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

/* One placeholder at most, and only the one the pattern is for. */
static int check_pattern(const char *field, const char *pat, const char *want, char *err, size_t errlen)
{
    const char *other = !strcmp(want, "{prompt}") ? "{system}" : "{prompt}";
    const char *hit = strstr(pat, want);
    if (!hit) {
        snprintf(err, errlen, "'%s' must contain %s", field, want);
        return -EINVAL;
    }
    if (strstr(hit + strlen(want), want)) {
        snprintf(err, errlen, "'%s' holds %s twice", field, want);
        return -EINVAL;
    }
    if (strstr(pat, other)) {
        snprintf(err, errlen, "'%s' may not hold %s", field, other);
        return -EINVAL;
    }
    return 0;
}

static int dup_field(json_t *j, const char *key, char **out)
{
    const char *s = json_string_value(json_object_get(j, key));
    *out = s ? strdup(s) : NULL;
    return s && !*out ? -ENOMEM : 0;
}

int chat_template_from_json(chat_template *t, const char *json, size_t len, const char *origin,
                            char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        snprintf(err, errlen, "%s: not JSON (line %d: %s)", origin, je.line, je.text);
        return -EINVAL;
    }
    int rc = -EINVAL;
    char why[160];
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: want a JSON object", origin);
        goto out;
    }
    static const char *const known[] = { "name", "system", "user", "assistant_end", "stop",
                                         "default_system" };
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(known[k], key)) k++;
        if (k == sizeof known / sizeof known[0]) {
            snprintf(err, errlen, "%s: unknown field '%s' (known: name, system, user, assistant_end, "
                     "stop, default_system)", origin, key);
            goto out;
        }
        if (strcmp(key, "stop") && !json_is_string(v)) {
            snprintf(err, errlen, "%s: '%s' must be a string", origin, key);
            goto out;
        }
        if (strcmp(key, "stop") && strlen(json_string_value(v)) != json_string_length(v)) {
            snprintf(err, errlen, "%s: '%s' holds a NUL character", origin, key);
            goto out;
        }
    }
    const char *user = json_string_value(json_object_get(j, "user"));
    if (!user) {
        snprintf(err, errlen, "%s: missing the 'user' pattern (e.g. \"User: {prompt}\\n\\nAssistant:\")",
                 origin);
        goto out;
    }
    if (check_pattern("user", user, "{prompt}", why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", origin, why);
        goto out;
    }
    const char *sys = json_string_value(json_object_get(j, "system"));
    if (sys && check_pattern("system", sys, "{system}", why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", origin, why);
        goto out;
    }
    const char *aend = json_string_value(json_object_get(j, "assistant_end"));
    if (aend && (strstr(aend, "{prompt}") || strstr(aend, "{system}"))) {
        snprintf(err, errlen, "%s: 'assistant_end' takes no placeholder", origin);
        goto out;
    }
    json_t *stop = json_object_get(j, "stop");
    if (stop && !json_is_array(stop)) {
        snprintf(err, errlen, "%s: 'stop' must be an array of strings", origin);
        goto out;
    }
    if (json_array_size(stop) > STOP_MAX) {
        snprintf(err, errlen, "%s: 'stop' has %zu strings; at most %d", origin, json_array_size(stop),
                 STOP_MAX);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(stop); i++) {
        json_t *s = json_array_get(stop, i);
        size_t n = json_string_length(s);
        if (!json_is_string(s) || n < 1 || n > STOP_MAX_LEN || strlen(json_string_value(s)) != n) {
            snprintf(err, errlen, "%s: stop[%zu] must be a string of 1..%d bytes", origin, i,
                     STOP_MAX_LEN);
            goto out;
        }
        memcpy(t->stop[t->n_stop++], json_string_value(s), n + 1);
    }
    {   /* FNV-1a over what renders: each field, NUL-terminated, absent ones as "\1" */
        const char *const parts[] = { "user", "system", "assistant_end", "default_system" };
        uint32_t h = 2166136261u;
        for (size_t k = 0; k < 4 + t->n_stop; k++) {
            const char *v = k < 4 ? json_string_value(json_object_get(j, parts[k])) : t->stop[k - 4];
            if (!v) v = "\1";
            for (size_t i = 0; i <= strlen(v); i++) h = (h ^ (unsigned char)v[i]) * 16777619u;
        }
        t->hash = h ? h : 1;
    }
    const char *name = json_string_value(json_object_get(j, "name"));
    snprintf(t->name, sizeof t->name, "%s", name ? name : origin);
    if (dup_field(j, "user", &t->user) || dup_field(j, "system", &t->system) ||
        dup_field(j, "assistant_end", &t->assistant_end) ||
        dup_field(j, "default_system", &t->default_system)) {
        snprintf(err, errlen, "%s: out of memory", origin);
        rc = -ENOMEM;
        goto out;
    }
    rc = 0;
out:
    json_decref(j);
    if (rc) chat_template_free(t);
    return rc;
}

/* The built-in templates, in the file format itself. */
static const struct { const char *name, *json, *about; } builtins[] = {
    { "none", "{\"name\":\"none\",\"user\":\"{prompt}\\n\"}",
      "the typed text as it is, with its newline (for a plain language model)" },
    { "raven", "{\"name\":\"raven\",\"system\":\"{system}\\n\\n\","
               "\"user\":\"User: {prompt}\\n\\nAssistant:\",\"assistant_end\":\"\\n\\n\","
               "\"stop\":[\"\\n\\nUser:\"]}",
      "RWKV Raven: \"User: ...\\n\\nAssistant:\", stops at \"\\n\\nUser:\"" },
    { "world", "{\"name\":\"world\",\"system\":\"System: {system}\\n\\n\","
               "\"user\":\"User: {prompt}\\n\\nAssistant:\",\"assistant_end\":\"\\n\\n\","
               "\"stop\":[\"\\n\\nUser:\"]}",
      "RWKV World/G1: \"System: ...\\n\\nUser: ...\\n\\nAssistant:\", stops at \"\\n\\nUser:\"" },
    /* RWKV7-G1's think mode: the reply starts inside "<think", so it is
     * ">...</think>" and the answer (docs/DAEMON.md). */
    { "g1-think", "{\"name\":\"g1-think\",\"system\":\"System: {system}\\n\\n\","
                  "\"user\":\"User: {prompt}\\n\\nAssistant: <think\",\"assistant_end\":\"\\n\\n\","
                  "\"stop\":[\"\\n\\nUser:\"]}",
      "RWKV7-G1 think mode: as world, each reply opened with \"<think\"" },
};

#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

const char *chat_template_builtin(const char *name)
{
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (!strcmp(name, builtins[i].name)) return builtins[i].json;
    return NULL;
}

const char *chat_template_for_family(const char *format)
{
    if (!strcmp(format, "hf-rwkv4")) return "raven";
    if (!strcmp(format, "rwkv7-pth")) return "world";
    return NULL;
}

const char *chat_template_builtin_name(uint32_t h)
{
    for (size_t i = 0; i < N_BUILTINS; i++) {
        chat_template t;
        char err[64];
        if (chat_template_from_json(&t, builtins[i].json, strlen(builtins[i].json), builtins[i].name, err,
                                    sizeof err) == 0) {
            uint32_t th = t.hash;
            chat_template_free(&t);
            if (th == h) return builtins[i].name;
        }
    }
    return NULL;
}

void chat_template_list(FILE *f)
{
    for (size_t i = 0; i < N_BUILTINS; i++)
        fprintf(f, "  %-8s %s\n", builtins[i].name, builtins[i].about);
}

int chat_template_parse(chat_template *t, const char *json, char *err, size_t errlen)
{
    if (!json) return chat_template_from_json(t, builtins[0].json, strlen(builtins[0].json), "none", err, errlen);
    return chat_template_from_json(t, json, strlen(json), "lind_chat.json", err, errlen);
}

int chat_template_read(const char *spec, char **json, char *err, size_t errlen)
{
    *json = NULL;
    const char *b = chat_template_builtin(spec);
    char *buf;
    size_t n;
    int rc = 0;
    if (b) {
        n = strlen(b);
        if (!(buf = strdup(b))) { snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    } else {
        char ferr[64];
        rc = file_read(spec, CHAT_TEMPLATE_MAX, &buf, &n, ferr, sizeof ferr);
        if (rc == -EFBIG) {
            snprintf(err, errlen, "template file %s is over %d bytes", spec, CHAT_TEMPLATE_MAX);
        } else if (rc == -ENOMEM) {
            snprintf(err, errlen, "out of memory");
        } else if (rc) {
            snprintf(err, errlen, "template '%s' is neither a built-in (none, raven, world, g1-think) nor a "
                     "readable file: %s", spec, strerror(-rc));
            rc = -ENOENT;
        } else if (memchr(buf, 0, n)) {
            snprintf(err, errlen, "template file %s holds a NUL byte", spec);
            rc = -EINVAL;
        }
    }
    if (rc == 0) {   /* the full checks, so what is returned parses */
        chat_template t;
        if ((rc = chat_template_from_json(&t, buf, n, spec, err, errlen)) == 0)
            chat_template_free(&t);
    }
    if (rc) free(buf);
    else *json = buf;
    return rc;
}

int chat_template_load(chat_template *t, const char *spec, char *err, size_t errlen)
{
    char *json;
    int rc = chat_template_read(spec, &json, err, errlen);
    if (rc) return rc;
    rc = chat_template_from_json(t, json, strlen(json), spec, err, errlen);
    free(json);
    return rc;
}

/* The rendering's bytes, with a sticky out-of-memory flag so that a
 * rendering appends freely and checks once. */
typedef struct sbuf { bytebuf b; int oom; } sbuf;

/* Append n bytes (n = 0 on an empty buffer allocates it: results are
 * never NULL, even when empty). */
static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom || (!n && b->b.p)) return;
    if (bytebuf_put(&b->b, s, n)) b->oom = 1;
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
                free(b.b.p);
                return -EINVAL;
            }
            put(&b, json_string_value(text), json_string_length(text));
        }
    } else if (c && !json_is_null(c)) {
        snprintf(err, errlen, "messages[%zu].content must be a string or an array of text parts",
                 index);
        free(b.b.p);
        return -EINVAL;
    }
    if (b.oom || !b.b.p) { free(b.b.p); snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    if (memchr(b.b.p, 0, b.b.n)) {
        snprintf(err, errlen, "messages[%zu].content holds a NUL character", index);
        free(b.b.p);
        return -EINVAL;
    }
    *out = b.b.p;
    *len = b.b.n;
    return 0;
}

size_t chat_repeated(const chat_template *t, const uint8_t *tail, size_t tail_len, const uint8_t *s, size_t n)
{
    size_t skip = 0;
    for (size_t i = 0; i < t->n_stop; i++) {
        size_t k = strlen(t->stop[i]);
        if (k <= tail_len && k <= n && !memcmp(tail + tail_len - k, t->stop[i], k) &&
            !memcmp(s, t->stop[i], k) && k > skip)
            skip = k;
    }
    size_t ae = t->assistant_end ? strlen(t->assistant_end) : 0;
    if (ae > n) ae = n;
    for (size_t k = ae < tail_len ? ae : tail_len; k > skip; k--)
        if (!memcmp(tail + tail_len - k, s, k)) { skip = k; break; }
    return skip;
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
            free(b.b.p);
            return -EINVAL;
        }
        int sys = !strcmp(role, "system") || !strcmp(role, "developer");
        int user = !strcmp(role, "user"), asst = !strcmp(role, "assistant");
        if (!sys && !user && !asst) {
            snprintf(err, errlen, "messages[%zu].role '%.40s' is not one of system, developer, "
                     "user, assistant", i, role);
            free(b.b.p);
            return -EINVAL;
        }
        char *text;
        size_t len;
        int rc = chat_message_text(m, i, &text, &len, err, errlen);
        if (rc) { free(b.b.p); return rc; }
        if (prev_reply && !asst) {
            if (first) skip_from = b.b.n;
            if (t->assistant_end) put(&b, t->assistant_end, strlen(t->assistant_end));
        }
        if (sys) {
            expand(&b, t->system ? t->system : "{system}\n", "{system}", text, len);
        } else if (user) {
            /* The Enter that ended a typed message is not part of it; the
             * pattern puts back what the model expects ("none": "{prompt}\n"). */
            if (len && text[len - 1] == '\n') len--;
            expand(&b, t->user, "{prompt}", text, len);
        } else {
            put(&b, text, len);
        }
        free(text);
        prev_reply = asst;
        first = 0;
    }
    if (b.oom) { free(b.b.p); snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    if (after_reply && tail_len) {
        size_t skip = chat_repeated(t, tail, tail_len, (const uint8_t *)b.b.p + skip_from, b.b.n - skip_from);
        memmove(b.b.p + skip_from, b.b.p + skip_from + skip, b.b.n - skip_from - skip + 1);
        b.b.n -= skip;
    }
    *out = b.b.p;
    *out_len = b.b.n;
    return 0;
}

int chat_template_format(const chat_template *t, const char *system, int after_reply,
                         const uint8_t *tail, size_t tail_len, const char *msg, size_t msg_len,
                         char **out, size_t *out_len)
{
    if (memchr(msg, 0, msg_len)) return -EINVAL;
    /* The same rendering as a message list's (any bytes: typed text need
     * not be UTF-8). */
    json_t *msgs = json_array();
    int rc = msgs ? 0 : -ENOMEM;
    if (!rc && system && *system &&
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content",
                                              json_stringn_nocheck(system, strlen(system)))))
        rc = -ENOMEM;
    if (!rc && json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "user", "content",
                                                     json_stringn_nocheck(msg, msg_len))))
        rc = -ENOMEM;
    char err[256];
    if (!rc) rc = chat_render(t, msgs, 0, after_reply, tail, tail_len, 0, out, out_len, err, sizeof err);
    json_decref(msgs);
    return rc;
}
