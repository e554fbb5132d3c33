#!/usr/bin/python3
"""tools/fixture.py — the agreement fixture: PyTorch's parallel-form logits of
the shipped model on a 512-byte held-out sample.

Builds the model from exactly the exported tensors (model.safetensors, no
training-time reparametrization), runs [BOS] + sample through the parallel
form in float64 and writes, into OUTDIR:
  default_sample.bin   the 512 sample bytes
  default_logits.f32   513 x 256 little-endian float32 logits, row 0 after BOS
  default_fixture.json where the sample comes from and what it was made from
tests/test_model_default.c feeds the same bytes through lind's recurrent
path and compares.

    usage: tools/fixture.py MODEL_DIR HELDOUT_TXT OUTDIR
"""
import hashlib
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lindmodel  # noqa: E402

SAMPLE_BYTES = 512
SAMPLE_FROM = 100_000   # the sample starts at the first line start from here


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    mdir, heldout, outdir = sys.argv[1:]
    torch.set_num_threads(2)
    text = open(heldout, "rb").read()
    off = text.index(b"\n", SAMPLE_FROM) + 1
    sample = text[off:off + SAMPLE_BYTES]
    assert len(sample) == SAMPLE_BYTES
    cfg, model = lindmodel.load_model_dir(mdir, torch.float64)
    model.eval()
    x = torch.tensor([[0] + list(sample)], dtype=torch.long)
    with torch.no_grad():
        logits = model(x)[0]                                   # [513, 256] float64
    lp = torch.log_softmax(logits, -1)
    bpb = -lp[torch.arange(SAMPLE_BYTES), torch.tensor(list(sample))].mean().item() / math.log(2)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "default_sample.bin"), "wb") as f:
        f.write(sample)
    logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(outdir, "default_logits.f32"))
    st = open(os.path.join(mdir, "model.safetensors"), "rb").read()
    meta = {"model_safetensors_sha256": hashlib.sha256(st).hexdigest(),
            "heldout_offset": off, "sample_bytes": SAMPLE_BYTES, "positions": SAMPLE_BYTES + 1,
            "logits": "float32 [positions, 256], row 0 after BOS, computed in float64",
            "sample_bits_per_byte": round(bpb, 4)}
    with open(os.path.join(outdir, "default_fixture.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("fixture: %d positions from held-out offset %d, sample %.3f bits/byte -> %s"
          % (SAMPLE_BYTES + 1, off, bpb, outdir))


if __name__ == "__main__":
    main()
