/* recurrent/ffn.c — the table of FFN kinds. Adding a kind: one file defining
 * a `layer_kind`, one row in FFN_KINDS. */
#include "recurrent/ffn.h"

#include <stdio.h>
#include <string.h>

/* The FFN kinds, one row each: X(its layer_kind, defined in its
 * recurrent/ffn_*.c); ffn_kind_names() lists them in this order. */
#define FFN_KINDS(X)                                                       \
    X(ffn_gelu_mlp)          /* x += W2·GELU(W1·h + b1) + b2 */            \
    X(ffn_rwkv_channel_mix)  /* RWKV-4: σ(Wr·h_r) ⊙ Wv·relu(Wk·h_k)² */    \
    X(ffn_rwkv7_channel_mix) /* RWKV-7: Wv·relu(Wk·h_k)², no receptance */ \
    X(ffn_none)              /* no FFN, no ln2 (Mamba's blocks) */

#define FFN_DECL(k) extern const layer_kind k;
FFN_KINDS(FFN_DECL)
#undef FFN_DECL

static const layer_kind *const kinds[] = {
#define FFN_ROW(k) &k,
    FFN_KINDS(FFN_ROW)
#undef FFN_ROW
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const layer_kind *ffn_find(const char *name)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *ffn_kind_names(char *buf, size_t len)
{
    size_t n = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < NKINDS && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", kinds[i]->name);
    return buf;
}
