/* recurrent/ffn.c — the table of FFN kinds. Adding a kind: one file defining
 * a `layer_kind`, one line in kinds[]. */
#include "recurrent/ffn.h"

#include <stdio.h>
#include <string.h>

static const layer_kind *const kinds[] = {
    &ffn_gelu_mlp,
    &ffn_rwkv_channel_mix,
    &ffn_rwkv7_channel_mix,
    &ffn_none,
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const layer_kind *ffn_find(const char *name) {
    for (size_t i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *ffn_kind_names(char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < NKINDS && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", kinds[i]->name);
    return buf;
}
