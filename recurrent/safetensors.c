/* recurrent/safetensors.c — see safetensors.h. */
#include "recurrent/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernels/mixer_math.h"
#include "recurrent/errmsg.h"

const char *st_dtype_name(int dtype)
{
    switch (dtype) {
    case ST_F32: return "F32";
    case ST_F16: return "F16";
    case ST_BF16: return "BF16";
    }
    return "?";
}

static int dtype_size(int dtype) { return dtype == ST_F32 ? 4 : 2; }

/* Parse one tensor entry; 0 or -EINVAL with a message. */
static int parse_tensor(const char *path, const char *name, json_t *v, st_tensor *t,
                        size_t data_size, char *err, size_t errlen)
{
    if (!json_is_object(v))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': header entry is not a JSON object", path, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    const char *d = json_string_value(dt);
    if (!strcmp(d, "F32")) t->dtype = ST_F32;
    else if (!strcmp(d, "F16")) t->dtype = ST_F16;
    else if (!strcmp(d, "BF16")) t->dtype = ST_BF16;
    else
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': unsupported dtype \"%s\" (F32, F16 or BF16 accepted)",
                    path, name, d);
    if (!json_is_array(sh))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS)
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': %zu dimensions (at most %d)", path, name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    size_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *e = json_array_get(sh, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': shape[%zu] is not a non-negative integer", path, name, i);
        json_int_t x = json_integer_value(e);
        t->shape[i] = x;
        if (x != 0 && numel > (SIZE_MAX / 8) / (size_t)x)
            return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': shape too large", path, name);
        numel *= (size_t)x;
    }
    t->numel = numel;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': \"data_offsets\" must be [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b)
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': bad data_offsets [%lld, %lld]", path, name,
                    (long long)b, (long long)e);
    if ((unsigned long long)e > data_size)
        return errmsg_set(-EINVAL, err, errlen,
                    "%s: tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%zu bytes; file truncated?)",
                    path, name, (long long)b, (long long)e, data_size);
    t->begin = (size_t)b;
    t->end = (size_t)e;
    if (t->end - t->begin != numel * (size_t)dtype_size(t->dtype))
        return errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s': %zu data bytes for %zu %s elements (expected %zu)",
                    path, name, t->end - t->begin, numel, d, numel * (size_t)dtype_size(t->dtype));
    return 0;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen)
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
    if (st.st_size < 8) {
        close(fd);
        return errmsg_set(-EINVAL, err, errlen, "%s: truncated: %lld bytes, shorter than the 8-byte header length",
                    path, (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return errmsg_set(-e, err, errlen, "%s: mmap: %s", path, strerror(e));
    f->map = map;
    f->size = size;
    f->path = strdup(path);
    if (!f->path) { st_close(f); return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); }

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > size - 8) {
        int r = errmsg_set(-EINVAL, err, errlen, "%s: truncated: header length %llu but only %zu bytes follow",
                     path, (unsigned long long)hlen, size - 8);
        st_close(f);
        return r;
    }
    f->data = f->map + 8 + hlen;
    f->data_size = size - 8 - (size_t)hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        int r = errmsg_set(-EINVAL, err, errlen, "%s: bad header JSON at line %d column %d: %s", path, je.line,
                     je.column, je.text);
        st_close(f);
        return r;
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: bad header JSON: top level is not an object", path);
        goto out;
    }
    f->t = calloc(json_object_size(root) + 1, sizeof *f->t);
    if (!f->t) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        st_tensor *t = &f->t[f->n];
        if ((rc = parse_tensor(path, key, v, t, f->data_size, err, errlen)) < 0) goto out;
        t->name = strdup(key);
        if (!t->name) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
        f->n++;
    }
out:
    json_decref(root);
    if (rc < 0) st_close(f);
    return rc;
}

void st_close(st_file *f)
{
    if (f->t)
        for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->map) munmap((void *)f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

st_tensor *st_find(st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

void st_read_f32(const st_file *f, const st_tensor *t, float *dst)
{
    const uint8_t *p = f->data + t->begin;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (t->dtype == ST_F32) {
        memcpy(dst, p, t->numel * 4);
        return;
    }
#endif
    for (size_t i = 0; i < t->numel; i++) {
        uint32_t bits;
        switch (t->dtype) {
        case ST_F32:
            bits = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                   (uint32_t)p[4 * i + 3] << 24;
            memcpy(&dst[i], &bits, 4);
            break;
        case ST_F16:
            dst[i] = lind_f16_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
            break;
        default: /* BF16: the top half of an fp32 */
            bits = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &bits, 4);
            break;
        }
    }
}

void st_read_half(const st_file *f, const st_tensor *t, uint16_t *dst)
{
    const uint8_t *p = f->data + t->begin;
    for (size_t i = 0; i < t->numel; i++) dst[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
}

/* ---- sharded checkpoints ------------------------------------------------ */

void st_set_close(st_set *s)
{
    for (int i = 0; i < s->n; i++) st_close(&s->f[i]);
    free(s->f);
    free(s->index_path);
    memset(s, 0, sizeof *s);
}

st_tensor *st_set_find(st_set *s, const char *name, st_file **file)
{
    for (int i = 0; i < s->n; i++) {
        st_tensor *t = st_find(&s->f[i], name);
        if (t) {
            if (file) *file = &s->f[i];
            return t;
        }
    }
    return NULL;
}

/* Index of the shard called fname in s, opening it if new; <0 on error. */
static int shard_open(st_set *s, const char *dir, const char *fname, char *err, size_t errlen)
{
    if (!*fname || strchr(fname, '/') || !strcmp(fname, ".") || !strcmp(fname, ".."))
        return errmsg_set(-EINVAL, err, errlen, "%s: weight_map names \"%s\": shards must be plain file names in the "
                          "model directory", s->index_path, fname);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->f[i].path, path)) return i;
    st_file *nf = realloc(s->f, (size_t)(s->n + 1) * sizeof *nf);
    if (!nf) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", s->index_path);
    s->f = nf;
    char e2[512];
    int rc = st_open(&s->f[s->n], path, e2, sizeof e2);
    if (rc < 0) return errmsg_set(rc, err, errlen, "%s: shard named by %s: %s", fname, s->index_path, e2);
    return s->n++;
}

int st_set_open(st_set *s, const char *dir, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0 || errno != ENOENT) {
        s->f = calloc(1, sizeof *s->f);
        if (!s->f) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
        int rc = st_open(&s->f[0], path, err, errlen);
        if (rc < 0) { st_set_close(s); return rc; }
        s->n = 1;
        return 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (access(path, F_OK) != 0) {
            char bin[4096];
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
            int pt = access(bin, F_OK) == 0;
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin.index.json", dir);
            pt = pt || access(bin, F_OK) == 0;
            return errmsg_set(-ENOENT, err, errlen, "%s: no model.safetensors and no model.safetensors.index.json%s", dir,
                              pt ? " (lind reads only safetensors, not pytorch_model*.bin: convert the checkpoint, "
                                   "e.g. with safetensors' convert script, or download the safetensors revision)"
                                 : "");
        }
        return errmsg_set(-EINVAL, err, errlen, "%s: bad JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    }
    int rc = 0;
    s->index_path = strdup(path);
    if (!s->index_path) { rc = errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path); goto out; }
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = errmsg_set(-EINVAL, err, errlen, "%s: missing or empty object \"weight_map\"", path);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: weight_map[\"%s\"] is not a file name", path, key);
            goto out;
        }
        int i = shard_open(s, dir, json_string_value(v), err, errlen);
        if (i < 0) { rc = i; goto out; }
        if (!st_find(&s->f[i], key)) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: weight_map puts tensor '%s' in %s, which does not hold it", path,
                            key, json_string_value(v));
            goto out;
        }
    }
    /* every tensor once, and only the ones the index names */
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->f[i].n; k++) {
            const char *nm = s->f[i].t[k].name;
            json_t *where = json_object_get(wm, nm);
            if (!where || strcmp(s->f[i].path + strlen(dir) + 1, json_string_value(where))) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: tensor '%s' is not in %s's weight_map for that file%s",
                                s->f[i].path, nm, path, where ? " (it names another shard: a duplicate)" : "");
                goto out;
            }
        }
out:
    json_decref(root);
    if (rc < 0) st_set_close(s);
    return rc;
}
