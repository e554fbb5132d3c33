/* recurrent/pth.h — a restricted reader of PyTorch checkpoints (torch.save's
 * zip format: <stem>/data.pkl, <stem>/data/<key>, ...) that accepts exactly a
 * state dict of tensors, the form BlinkDL's RWKV .pth files take.
 *
 * It never executes anything: data.pkl is interpreted by a small pickle
 * machine that knows the opcodes such files use (protocol 2, and 4's
 * framing) and exactly these globals:
 *   collections.OrderedDict          (the dict, and every tensor's empty
 *                                     backward_hooks — plain dicts too)
 *   torch._utils._rebuild_tensor_v2  (storage, offset, size, stride,
 *                                     requires_grad, hooks[, metadata])
 *   torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage
 *                                    (persistent ids ('storage', type, key,
 *                                     location, numel) naming data/<key>)
 * Any other opcode or global is refused with a message naming it and the
 * file — the whitelist idea of PyTorch's weights_only loading.
 *
 * Zip: torch writes entries STORED (uncompressed), so a tensor's bytes lie
 * in the file as they are: the file is mapped and each tensor becomes a byte
 * range of it, exactly like a safetensors tensor (st_file, with data = the
 * whole file). The central directory (zip64 included: files past 4 GiB) and
 * every local header are bounds-checked; a compressed or encrypted entry is
 * refused. Tensors must be contiguous and lie inside their storage. */
#ifndef LIND_RECURRENT_PTH_H
#define LIND_RECURRENT_PTH_H

#include <stddef.h>
#include "recurrent/safetensors.h"

/* Open and validate `path` into f (closed with st_close). 0, or <0 with err
 * naming the file and what is wrong; f is left closed. */
int pth_open(st_file *f, const char *path, char *err, size_t errlen);

#endif
