/* recurrent/ffn_none.c — the empty FFN: a block with no second half, as
 * Mamba's blocks are (x += mixer(norm(x)) only). No keys, tensors or state;
 * its step is NULL, which tells the model to skip ln2 and the FFN
 * (recurrent/kind.h), so no ln2 tensors are read either. */
#include "recurrent/ffn.h"

static int none_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)s, (void)c, (void)params, (void)err, (void)errlen;
    return 0;
}

static int none_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    (void)c, (void)params, (void)t;
    return 0;
}

static int none_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c, (void)params, (void)r;
    return 0;
}

static size_t none_scratch(const lind_config *c, const void *params)
{
    (void)c, (void)params;
    return 0;
}

static int none_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    (void)c, (void)params, (void)ctx, (void)t, (void)err, (void)errlen;
    *priv = NULL;
    return 0;
}

static void none_free(void *priv, backend *be) { (void)priv, (void)be; }

const layer_kind ffn_none = {
    .name = "none",
    .configure = none_configure,
    .tensors = none_tensors,
    .regions = none_regions,
    .scratch_floats = none_scratch,
    .load = none_load,
    .step = NULL,
    .free = none_free,
};
