/* recurrent/rwkv7_pth.c — see rwkv7_pth.h. The kinds it configures are
 * recurrent/mixer_rwkv7.c and recurrent/ffn_rwkv7.c. */
#include "recurrent/rwkv7_pth.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recurrent/errmsg.h"
#include "recurrent/model.h"

/* The tensor's shape with leading 1s dropped (x_r is stored [1, 1, C]). */
static const st_tensor *shaped(const st_file *f, const char *name, int ndim, int64_t *d0, int64_t *d1)
{
    const st_tensor *t = st_find((st_file *)f, name);
    if (!t) return NULL;
    int k = 0;
    while (t->ndim - k > ndim && t->shape[k] == 1) k++;
    if (t->ndim - k != ndim) return NULL;
    *d0 = t->shape[k];
    if (d1) *d1 = ndim > 1 ? t->shape[k + 1] : 0;
    return t;
}

static int need2(const st_file *f, const char *name, int64_t rows, int64_t *cols, char *err, size_t errlen)
{
    int64_t a, b;
    if (!shaped(f, name, 2, &a, &b) || (rows >= 0 && a != rows) || b < 1 || b > (1 << 14))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s' is %s (expected [%lld, D], D ≤ 16384)", f->path, name,
                          st_find((st_file *)f, name) ? "misshapen" : "missing", (long long)rows);
    *cols = b;
    return 0;
}

int rwkv7_translate(const st_file *f, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    int64_t V, C, H, N, F, D;
    if (!st_find((st_file *)f, "blocks.0.att.r_k") || !st_find((st_file *)f, "blocks.0.att.k_k")) {
        const char *gen = st_find((st_file *)f, "blocks.0.att.time_maa_x")     ? " (it looks like RWKV-6)"
                          : st_find((st_file *)f, "blocks.0.att.time_faaaa")   ? " (it looks like RWKV-5)"
                          : st_find((st_file *)f, "blocks.0.att.time_first")   ? " (it looks like RWKV-4: use the "
                                                                                 "Hugging Face layout)"
                                                                               : "";
        return errmsg_set(-EINVAL, err, errlen, "%s: not an RWKV-7 x070 checkpoint: no blocks.0.att.r_k / k_k%s",
                          f->path, gen);
    }
    if (!shaped(f, "emb.weight", 2, &V, &C) || V < 1 || V > LIND_MAX_VOCAB || C < 1 || C > (1 << 16))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor 'emb.weight' missing or not [vocab ≤ %d, C]", f->path,
                          LIND_MAX_VOCAB);
    if (!shaped(f, "blocks.0.att.r_k", 2, &H, &N) || H * N != C)
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor 'blocks.0.att.r_k' is not [H, N] with H·N = %lld "
                          "(emb.weight's width)", f->path, (long long)C);
    int L = 0;
    char nm[128];
    for (;; L++) {
        snprintf(nm, sizeof nm, "blocks.%d.ln1.weight", L);
        if (!st_find((st_file *)f, nm)) break;
        if (L == LIND_MAX_LAYERS)
            return errmsg_set(-EINVAL, err, errlen, "%s: more than %d blocks", f->path, LIND_MAX_LAYERS);
    }
    if (L == 0) return errmsg_set(-EINVAL, err, errlen, "%s: missing tensor 'blocks.0.ln1.weight'", f->path);
    json_t *layers = json_array();
    int rc = layers ? 0 : -ENOMEM;
    for (int i = 0; i < L && rc == 0; i++) {
        int64_t dw, da, dv = 0, dg, hh, nn;
        snprintf(nm, sizeof nm, "blocks.%d.att.r_k", i);
        if (!shaped(f, nm, 2, &hh, &nn) || hh != H || nn != N) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s' is not [%lld, %lld] like block 0's", f->path, nm,
                            (long long)H, (long long)N);
            break;
        }
        snprintf(nm, sizeof nm, "blocks.%d.att.w1", i);
        if ((rc = need2(f, nm, C, &dw, err, errlen))) break;
        snprintf(nm, sizeof nm, "blocks.%d.att.a1", i);
        if ((rc = need2(f, nm, C, &da, err, errlen))) break;
        snprintf(nm, sizeof nm, "blocks.%d.att.g1", i);
        if ((rc = need2(f, nm, C, &dg, err, errlen))) break;
        snprintf(nm, sizeof nm, "blocks.%d.att.v1", i);
        if ((i > 0 || st_find((st_file *)f, nm)) && (rc = need2(f, nm, C, &dv, err, errlen))) break;
        snprintf(nm, sizeof nm, "blocks.%d.ffn.key.weight", i);
        if (!shaped(f, nm, 2, &F, &D) || D != C || F < 1 || F > (1 << 20)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s' missing or not [F, %lld]", f->path, nm, (long long)C);
            break;
        }
        json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I}", "mixer", "rwkv7", "ffn",
                              "rwkv7_channel_mix", "n_heads", (json_int_t)H, "d_head", (json_int_t)N, "w_lora",
                              (json_int_t)dw, "a_lora", (json_int_t)da, "v_lora", (json_int_t)dv, "g_lora",
                              (json_int_t)dg, "value_residual", i == 0 ? "source" : "mix", "d_ff", (json_int_t)F);
        if (!o || json_array_append_new(layers, o)) rc = -ENOMEM;
    }
    json_t *root = NULL;
    if (rc == 0) {
        root = json_pack("{s:I, s:I, s:i, s:f, s:b, s:{s:s, s:s}, s:o}", "vocab_size", (json_int_t)V, "d_model",
                         (json_int_t)C, "n_layers", L, "norm_eps", 1e-5, "emb_norm", 1, "tokenizer", "kind", "world",
                         "file", RWKV7_VOCAB_FILE, "layers", layers);
        layers = NULL;
        if (!root) rc = -ENOMEM;
    }
    if (rc == 0) {
        *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*out) rc = -ENOMEM;
        else *len = strlen(*out);
    }
    if (rc == -ENOMEM) errmsg_set(rc, err, errlen, "%s: out of memory", f->path);
    json_decref(layers);
    json_decref(root);
    return rc;
}

static const char *const top_map[][2] = {
    {"embed.weight", "emb.weight"},
    {"emb_norm.weight", "blocks.0.ln0.weight"},
    {"emb_norm.bias", "blocks.0.ln0.bias"},
    {"ln_f.weight", "ln_out.weight"},
    {"ln_f.bias", "ln_out.bias"},
    {"head.weight", "head.weight"},
};

const char *rwkv7_tensor_name(const char *lind_name, char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof top_map / sizeof top_map[0]; i++)
        if (!strcmp(lind_name, top_map[i][0])) {
            snprintf(buf, len, "%s", top_map[i][1]);
            return buf;
        }
    int layer, n = 0;
    if (sscanf(lind_name, "layers.%d.%n", &layer, &n) != 1 || n == 0) return NULL;
    const char *rest = lind_name + n;
    if (!strncmp(rest, "mixer.", 6)) snprintf(buf, len, "blocks.%d.att.%s", layer, rest + 6);
    else if (!strncmp(rest, "ffn.", 4) || !strncmp(rest, "ln1.", 4) || !strncmp(rest, "ln2.", 4))
        snprintf(buf, len, "blocks.%d.%s", layer, rest);
    else return NULL;
    return buf;
}

static int ends_pth(const char *s)
{
    size_t n = strlen(s);
    return n > 4 && !strcmp(s + n - 4, ".pth");
}

int rwkv7_locate(const char *path, char *pth, size_t pthlen, char *dir, size_t dirlen, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0;   /* the usual loader says what is missing */
    if (S_ISREG(st.st_mode)) {
        if (!ends_pth(path)) return 0;
        snprintf(pth, pthlen, "%s", path);
        const char *sl = strrchr(path, '/');
        if (!sl) snprintf(dir, dirlen, ".");
        else if (sl == path) snprintf(dir, dirlen, "/");
        else snprintf(dir, dirlen, "%.*s", (int)(sl - path), path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) return 0;
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", path);
    if (access(p, F_OK) == 0) return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || !ends_pth(de->d_name)) continue;
        if (found++) {
            /* the message first: de points into d's buffer, which closedir frees */
            int rc = errmsg_set(-EINVAL, err, errlen, "%s: more than one .pth file (%s, %s...): name the one to load",
                                path, pth + strlen(path) + 1, de->d_name);
            closedir(d);
            return rc;
        }
        snprintf(pth, pthlen, "%s/%s", path, de->d_name);
    }
    closedir(d);
    if (found) snprintf(dir, dirlen, "%s", path);
    return found;
}
