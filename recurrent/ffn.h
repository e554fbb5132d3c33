/* recurrent/ffn.h — FFN kinds (recurrent/kind.h). Adding one: a file
 * defining a `layer_kind`, one row in FFN_KINDS in recurrent/ffn.c. */
#ifndef LIND_RECURRENT_FFN_H
#define LIND_RECURRENT_FFN_H

#include "recurrent/kind.h"

#endif
