/* recurrent/conventions.c — see conventions.h. */
#include "recurrent/conventions.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/config.h"
#include "recurrent/errmsg.h"
#include "recurrent/file.h"
#include "recurrent/tokenizer.h"

/* dir/name parsed, or NULL when it is absent (*rc 0) or unreadable JSON
 * (*rc -EINVAL with the message). */
static json_t *load_json(const char *dir, const char *name, int *rc, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *rc = 0;
    json_error_t je;
    char *text = NULL, *q = NULL, ferr[64];
    size_t n = 0, qlen = 0;
    int frc = file_read(path, 0, &text, &n, ferr, sizeof ferr);
    if (frc == -ENOENT) return NULL;   /* absent */
    if (frc == 0) q = config_quote_nonfinite(text, n, &qlen);   /* Python json's bare Infinity (HF Mamba-2 configs) */
    free(text);
    if (!q) {
        *rc = errmsg_set(-EIO, err, errlen, "%s: could not read it", path);
        return NULL;
    }
    json_t *j = json_loadb(q, qlen, 0, &je);
    free(q);
    if (j) return j;
    *rc = errmsg_set(-EINVAL, err, errlen, "%s:%d:%d: bad JSON: %s", path, je.line, je.column, je.text);
    return NULL;
}

/* "eos_token_id" of root (an id or a list of ids) into c; 1 when present. */
static int read_eos(json_t *root, const char *dir, const char *file, lind_config *c, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > LIND_MAX_EOS)
        return errmsg_set(-EINVAL, err, errlen, "%s/%s: \"eos_token_id\" lists %zu ids (at most %d)", dir, file, n,
                          LIND_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= c->vocab_size)
            return errmsg_set(-EINVAL, err, errlen, "%s/%s: \"eos_token_id\" must be an id in 0..%d or a list of them",
                              dir, file, c->vocab_size - 1);
        c->eos[i] = (int32_t)json_integer_value(e);
    }
    c->n_eos = (int)n;
    snprintf(c->eos_from, sizeof c->eos_from, "%s eos_token_id", file);
    return 1;
}

int conventions_read(const char *dir, lind_config *c, const tokenizer *tok, int bos_override, char *err,
                     size_t errlen)
{
    int mamba = !strcmp(c->format, "hf-mamba2");
    int hf = !strcmp(c->format, "hf-rwkv4") || mamba, rc = 0;
    c->n_eos = 0;
    if (hf) {
        /* EOS */
        json_t *g = load_json(dir, "generation_config.json", &rc, err, errlen);
        int got = rc ? rc : g ? read_eos(g, dir, "generation_config.json", c, err, errlen) : 0;
        json_decref(g);
        if (got < 0) return got;
        if (!got) {
            json_t *cf = load_json(dir, "config.json", &rc, err, errlen);
            got = rc ? rc : cf ? read_eos(cf, dir, "config.json", c, err, errlen) : 0;
            json_decref(cf);
            if (got < 0) return got;
        }
        if (!got) {
            c->eos[0] = 0;
            c->n_eos = 1;
            snprintf(c->eos_from, sizeof c->eos_from, "%s default (<|endoftext|>)", mamba ? "Mamba-2" : "RWKV");
        }
        /* BOS */
        c->add_bos = 0;
        snprintf(c->bos_from, sizeof c->bos_from, "HF %s default (the prompt alone, from the zero state)",
                 mamba ? "Mamba-2" : "RWKV");
        json_t *tc = load_json(dir, "tokenizer_config.json", &rc, err, errlen);
        if (rc) return rc;
        json_t *ab = json_object_get(tc, "add_bos_token");
        int32_t id = -1;
        int says = tokenizer_bos(tok, &id);
        if (ab && !json_is_boolean(ab)) {
            json_decref(tc);
            return errmsg_set(-EINVAL, err, errlen, "%s/tokenizer_config.json: \"add_bos_token\" must be true or false",
                              dir);
        }
        if (ab) {
            c->add_bos = json_is_true(ab);
            snprintf(c->bos_from, sizeof c->bos_from, "tokenizer_config.json add_bos_token");
        } else if (says >= 0) {
            c->add_bos = says;
            if (says) c->bos = id;
            snprintf(c->bos_from, sizeof c->bos_from, "tokenizer.json post_processor");
        }
        json_decref(tc);
    } else if (!strcmp(c->format, "rwkv7-pth")) {
        /* BlinkDL's RWKV-7: the prompt alone from the zero state; the World
         * vocabulary's id 0 (<|endoftext|>) ends a turn */
        c->add_bos = 0;
        snprintf(c->bos_from, sizeof c->bos_from, "RWKV-7 default (the prompt alone, from the zero state)");
        c->eos[0] = 0;
        c->n_eos = 1;
        snprintf(c->eos_from, sizeof c->eos_from, "RWKV-7 World default (id 0)");
    } else {
        c->add_bos = 1;
        snprintf(c->bos_from, sizeof c->bos_from, "lind model (trained after its bos)");
        snprintf(c->eos_from, sizeof c->eos_from, "lind model (none)");
    }
    if (bos_override) {
        c->add_bos = bos_override > 0;
        snprintf(c->bos_from, sizeof c->bos_from, "%s", bos_override > 0 ? "--bos" : "--no-bos");
    }
    return 0;
}
