/* recurrent/safetensors.h — a validating reader of .safetensors files.
 *
 * Format: 8-byte little-endian header length n, n bytes of JSON mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the byte after the header), optional "__metadata__", then the
 * raw little-endian tensor data. The file is mapped read-only; every offset,
 * dtype and shape is checked on open, so later reads never go out of bounds.
 * F32, F16 and BF16 are accepted; reads widen to fp32. */
#ifndef LIND_RECURRENT_SAFETENSORS_H
#define LIND_RECURRENT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

enum st_dtype { ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2 };

typedef struct st_tensor {
    char    *name;                 /* owned by the st_file */
    int      dtype;                /* enum st_dtype */
    int      ndim;
    int64_t  shape[ST_MAX_DIMS];
    size_t   numel;
    size_t   begin, end;           /* byte range inside the data section */
    int      used;                 /* set by the caller (model loader) */
} st_tensor;

typedef struct st_file {
    char          *path;           /* owned copy, for messages */
    const uint8_t *map;            /* whole file, read-only mapping */
    size_t         size;
    const uint8_t *data;           /* start of the data section */
    size_t         data_size;
    st_tensor     *t;              /* n tensors, owned */
    int            n;
} st_file;

/* Open and validate. On failure returns <0 (-ENOENT, -EINVAL, ...) and err
 * names the file, the tensor and what is wrong; f is left closed. */
int  st_open(st_file *f, const char *path, char *err, size_t errlen);
void st_close(st_file *f);

/* The tensor called name, or NULL. */
st_tensor *st_find(st_file *f, const char *name);
/* Widen a tensor's data to fp32 into dst (t->numel floats). */
void st_read_f32(const st_file *f, const st_tensor *t, float *dst);
/* Copy an F16/BF16 tensor's raw 16-bit values (little-endian in the file)
 * into dst (t->numel entries). */
void st_read_half(const st_file *f, const st_tensor *t, uint16_t *dst);
/* "F32", "F16", "BF16" */
const char *st_dtype_name(int dtype);

/* A model's weights: model.safetensors, or the shards that
 * model.safetensors.index.json names ("weight_map": tensor → file, as
 * Hugging Face writes sharded checkpoints). Every shard is opened and
 * validated; the index must name only files in the same directory, each
 * tensor of the weight map must be in the file it names, and no tensor may
 * appear twice. */
typedef struct st_set {
    st_file *f;                    /* n files, in index order (shard order) */
    int      n;
    char    *index_path;           /* owned; NULL for a single file */
} st_set;

int  st_set_open(st_set *s, const char *dir, char *err, size_t errlen);
void st_set_close(st_set *s);
/* The tensor called name and the file holding it (*file), or NULL. */
st_tensor *st_set_find(st_set *s, const char *name, st_file **file);

#endif
