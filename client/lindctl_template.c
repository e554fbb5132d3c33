/* client/lindctl_template.c — chat templates for `lindctl chat`: lind's own
 * small JSON format (lind_chat.json, docs/LINDCTL.md), the built-in ones,
 * and turning a typed message into the text a chat model was trained on.
 * HF's Jinja chat_template is not run here: a template is a handful of
 * patterns with {prompt} / {system} placeholders. */
#include "client/lindctl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ctl_template_free(ctl_template *t)
{
    free(t->system);
    free(t->user);
    free(t->assistant_end);
    free(t->default_system);
    for (size_t i = 0; i < t->n_stop; i++) free(t->stop[i]);
    memset(t, 0, sizeof *t);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* One placeholder at most, and only the one the pattern is for. */
static int check_pattern(const char *field, const char *pat, const char *want, char *err, size_t errlen)
{
    const char *other = !strcmp(want, "{prompt}") ? "{system}" : "{prompt}";
    const char *hit = strstr(pat, want);
    if (!hit && !strcmp(want, "{prompt}")) {
        snprintf(err, errlen, "'%s' must contain {prompt}", field);
        return -EINVAL;
    }
    if (hit && strstr(hit + strlen(want), want)) {
        snprintf(err, errlen, "'%s' holds %s twice", field, want);
        return -EINVAL;
    }
    if (strstr(pat, other)) {
        snprintf(err, errlen, "'%s' may not hold %s", field, other);
        return -EINVAL;
    }
    return 0;
}

int ctl_template_from_json(ctl_template *t, const char *json, size_t len, const char *origin,
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
            snprintf(err, errlen, "%s: unknown field '%s' (known: name, system, user, assistant_end, stop, default_system)",
                     origin, key);
            goto out;
        }
        if (strcmp(key, "stop") && !json_is_string(v)) {
            snprintf(err, errlen, "%s: '%s' must be a string", origin, key);
            goto out;
        }
    }
    const char *user = json_string_value(json_object_get(j, "user"));
    if (!user) {
        snprintf(err, errlen, "%s: missing the 'user' pattern (e.g. \"User: {prompt}\\n\\nAssistant:\")", origin);
        goto out;
    }
    char why[160];
    if (check_pattern("user", user, "{prompt}", why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", origin, why);
        goto out;
    }
    const char *sys = json_string_value(json_object_get(j, "system"));
    if (sys && (check_pattern("system", sys, "{system}", why, sizeof why) || !strstr(sys, "{system}"))) {
        snprintf(err, errlen, "%s: %s", origin, strstr(sys, "{system}") ? why : "'system' must contain {system}");
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
    if (json_array_size(stop) > CTL_MAX_STOPS) {
        snprintf(err, errlen, "%s: 'stop' has %zu strings; at most %d", origin, json_array_size(stop), CTL_MAX_STOPS);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(stop); i++) {
        json_t *s = json_array_get(stop, i);
        size_t n = json_string_length(s);
        if (!json_is_string(s) || n < 1 || n > CTL_STOP_MAX) {
            snprintf(err, errlen, "%s: stop[%zu] must be a string of 1..%d bytes", origin, i, CTL_STOP_MAX);
            goto out;
        }
    }
    const char *name = json_string_value(json_object_get(j, "name"));
    snprintf(t->name, sizeof t->name, "%s", name ? name : origin);
    t->user = strdup(user);
    t->system = dup_or_null(sys);
    t->assistant_end = dup_or_null(aend);
    t->default_system = dup_or_null(json_string_value(json_object_get(j, "default_system")));
    for (size_t i = 0; i < json_array_size(stop); i++)
        t->stop[t->n_stop++] = strdup(json_string_value(json_array_get(stop, i)));
    rc = 0;
out:
    json_decref(j);
    if (rc) ctl_template_free(t);
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
};

void ctl_template_list(FILE *f)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        fprintf(f, "  %-8s %s\n", builtins[i].name, builtins[i].about);
}

int ctl_template_load(ctl_template *t, const char *spec, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (!strcmp(spec, builtins[i].name))
            return ctl_template_from_json(t, builtins[i].json, strlen(builtins[i].json),
                                          builtins[i].name, err, errlen);
    FILE *f = fopen(spec, "rb");
    if (!f) {
        snprintf(err, errlen, "template '%s' is neither a built-in (none, raven) nor a readable file: %s",
                 spec, strerror(errno));
        return -ENOENT;
    }
    char buf[CTL_TEMPLATE_MAX + 1];
    size_t n = fread(buf, 1, sizeof buf, f);
    int rd_err = ferror(f);
    fclose(f);
    if (rd_err) {
        snprintf(err, errlen, "cannot read template file %s", spec);
        return -EIO;
    }
    if (n > CTL_TEMPLATE_MAX) {
        snprintf(err, errlen, "template file %s is over %d bytes", spec, CTL_TEMPLATE_MAX);
        return -EFBIG;
    }
    return ctl_template_from_json(t, buf, n, spec, err, errlen);
}

/* Append pat to *out with `ph` replaced by val. */
static int expand(char **out, size_t *len, const char *pat, const char *ph, const char *val, size_t vlen)
{
    const char *hit = ph ? strstr(pat, ph) : NULL;
    size_t before = hit ? (size_t)(hit - pat) : strlen(pat);
    const char *after = hit ? hit + strlen(ph) : "";
    size_t add = before + (hit ? vlen : 0) + strlen(after);
    char *nb = realloc(*out, *len + add + 1);
    if (!nb) return -ENOMEM;
    memcpy(nb + *len, pat, before);
    if (hit) memcpy(nb + *len + before, val, vlen);
    memcpy(nb + *len + before + (hit ? vlen : 0), after, strlen(after));
    *len += add;
    nb[*len] = 0;
    *out = nb;
    return 0;
}

int ctl_template_format(const ctl_template *t, const char *system, int after_reply,
                        const uint8_t *tail, size_t tail_len, const char *msg, size_t msg_len,
                        char **out, size_t *out_len)
{
    char *s = NULL;
    size_t n = 0;
    int rc = 0;
    /* The Enter that ended the message is not part of it; a pattern puts
     * back what the model expects ("none" is "{prompt}\n"). */
    if (msg_len && msg[msg_len - 1] == '\n') msg_len--;
    if (after_reply && t->assistant_end) rc = expand(&s, &n, t->assistant_end, NULL, NULL, 0);
    if (!rc && system && *system)   /* unframed: the prompt on a line of its own */
        rc = expand(&s, &n, t->system ? t->system : "{system}\n", "{system}", system, strlen(system));
    if (!rc) rc = expand(&s, &n, t->user, "{prompt}", msg, msg_len);
    if (rc) {
        free(s);
        return rc;
    }
    /* A reply that stopped on a stop string ("\n\nUser:"), or ran out of
     * length part way into assistant_end, already holds the start of what
     * follows it: do not say it twice. */
    size_t skip = 0;
    if (after_reply) {
        for (size_t i = 0; i < t->n_stop; i++) {
            size_t k = strlen(t->stop[i]);
            if (k <= tail_len && k <= n && !memcmp(tail + tail_len - k, t->stop[i], k) &&
                !memcmp(s, t->stop[i], k) && k > skip)
                skip = k;
        }
        size_t ae = t->assistant_end ? strlen(t->assistant_end) : 0;
        for (size_t k = ae < tail_len ? ae : tail_len; k > skip; k--)
            if (!memcmp(tail + tail_len - k, s, k)) { skip = k; break; }
    }
    memmove(s, s + skip, n - skip + 1);
    *out = s;
    *out_len = n - skip;
    return 0;
}
