#!/usr/bin/python3
"""tools/mamba2_fixtures.py — write the committed Mamba-2 fixtures
(tests/fixtures/mamba2/), which keep tests/test_model_mamba2.c in `make test`
without PyTorch.

Each fixture <name>/ holds
  model/              a random Mamba2ForCausalLM in the Hugging Face layout
                      (tools/mamba2_ref.py make(): config.json with the real
                      keys and a bare Infinity where time_step_limit has one,
                      model.safetensors with HF's names and shapes, a small
                      byte-level BPE tokenizer.json)
  tokens.i32          512 random token ids, int32 LE (fed from the zero state)
  logits.f32          512 x vocab float32 LE: row t = the float64 reference's
                      logits after tokens[0..t] (mamba2_ref.logits: the
                      chunked SSD scan), rounded to float32
  fixture.json        the shape, the seed, the reference's two forms' distance
                      and how far each plausible mistake moves the logits

Fixed seeds: the output is byte-identical run to run.

usage: /usr/bin/python3 tools/mamba2_fixtures.py tests/fixtures/mamba2
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mamba2_ref as R  # noqa: E402

POSITIONS = 512
INF = float("inf")
FIXTURES = [
    # 4 heads of 16, one group, tied head, no biases on the projections, f32
    dict(name="a_f32", hidden=32, layers=2, vocab=300, state=16, head_dim=16, expand=2, n_groups=1, conv_kernel=4,
         use_bias=False, use_conv_bias=True, tie=True, eps=1e-5, limit=(0.0, INF), chunk_size=64, dtype="F32",
         seed=201),
    # 6 heads of 8 in 3 groups, untied head, projection biases, no conv bias,
    # a time_step_limit that clamps, bf16
    dict(name="b_bf16", hidden=24, layers=3, vocab=290, state=8, head_dim=8, expand=2, n_groups=3, conv_kernel=3,
         use_bias=True, use_conv_bias=False, tie=False, eps=1e-6, limit=(0.02, 0.3), chunk_size=32, dtype="BF16",
         seed=202),
    # expand 3: 12 heads of 4 in 4 groups, d_state 32, K 2, one layer, f16;
    # a chunk size that does not divide the sequence
    dict(name="c_f16", hidden=16, layers=1, vocab=280, state=32, head_dim=4, expand=3, n_groups=4, conv_kernel=2,
         use_bias=False, use_conv_bias=True, tie=True, eps=1e-5, limit=(0.0, INF), chunk_size=100, dtype="F16",
         seed=203),
]
VARIANTS = ["group_norm", "no_clamp", "norm_before_gate", "group_mod"]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    torch.set_grad_enabled(False)
    for fx in FIXTURES:
        spec = dict(fx)
        name, seed = spec.pop("name"), spec.pop("seed")
        d = os.path.join(out, name)
        md = os.path.join(d, "model")
        cfg = R.make(md, seed=seed, **spec)
        cfg, sd = R.load(md)
        toks = np.random.default_rng(seed + 1000).integers(0, cfg["vocab_size"], POSITIONS).astype("<i4")
        ref = R.logits(cfg, sd, toks)
        rec = R.logits_recurrent(cfg, sd, toks)
        toks.tofile(os.path.join(d, "tokens.i32"))
        ref.numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
        moves = {v: round(R.rel_err(R.logits(cfg, sd, toks, v), ref), 4) for v in VARIANTS}
        meta = dict(fx, made_by="tools/mamba2_fixtures.py", positions=POSITIONS, tolerance=1e-5,
                    chunked_vs_recurrent=float("%.3g" % R.rel_err(rec, ref)), variant_moves=moves,
                    safetensors_sha256=sha(os.path.join(md, "model.safetensors")))
        meta["limit"] = [meta["limit"][0], "Infinity" if meta["limit"][1] == INF else meta["limit"][1]]
        with open(os.path.join(d, "fixture.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")
        print(name, "chunked vs recurrent %.3g" % meta["chunked_vs_recurrent"], moves)


if __name__ == "__main__":
    main()
