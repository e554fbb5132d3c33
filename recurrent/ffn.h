/* recurrent/ffn.h — FFN kinds (recurrent/kind.h). Adding one: a file
 * defining a `layer_kind`, one line in the table in recurrent/ffn.c. */
#ifndef LIND_RECURRENT_FFN_H
#define LIND_RECURRENT_FFN_H

#include "recurrent/kind.h"

extern const layer_kind ffn_gelu_mlp;        /* x += W2·GELU(W1·h + b1) + b2 */
extern const layer_kind ffn_rwkv_channel_mix; /* RWKV-4: σ(Wr·h_r) ⊙ Wv·relu(Wk·h_k)² */
extern const layer_kind ffn_rwkv7_channel_mix; /* RWKV-7: Wv·relu(Wk·h_k)², no receptance */
extern const layer_kind ffn_none;            /* no FFN, no ln2 (Mamba's blocks) */

#endif
