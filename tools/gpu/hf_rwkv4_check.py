#!/usr/bin/python3
"""lind's CUDA backend against Hugging Face transformers' own RWKV-4 on the
GPU machine (tools/gpu/check.sh, docs/CUDA.md, issue: a real-architecture
model against the device's own transformers/PyTorch).

For each shape (those of tests/test_model_rwkv4_torch.py): write a random
HF RWKV-4 model with tools/rwkv4_make.py, feed T random tokens to one fresh
session through `step_bench --logits` (lind, backend given), and through
transformers' RwkvForCausalLM in float64 on the CPU (eval mode, so its
rescale_every applies), and compare the logits at every position:
||lind - hf|| / ||hf|| per position, worst over positions, within 1e-4.

    hf_rwkv4_check.py STEP_BENCH [BACKEND]     # prints PASS/FAIL lines

Runs on the lent GPU machine only (tools/gpu/check.sh), whose image has
transformers; Debian packages no python3-transformers, so neither `make
deps`, `make test` nor CI uses this script. Without it, it says so in one
FAIL line.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import rwkv4_make  # noqa: E402

TOL = 1e-4
T = 128
SHAPES = [
    dict(name="h32_a48_l4_r1_f16", hidden=32, attention=48, intermediate=96, layers=4, vocab=290,
         eps=1e-5, rescale_every=1, dtype="F16", shards=1, seed=11),
    dict(name="h80_a40_l5_r3_bf16_2shards", hidden=80, attention=40, intermediate=200, layers=5, vocab=400,
         eps=5e-4, rescale_every=3, dtype="BF16", shards=2, seed=12),
    dict(name="h96_l1_r6_f32_4shards", hidden=96, attention=96, intermediate=384, layers=1, vocab=277,
         eps=1e-5, rescale_every=6, dtype="F32", shards=4, seed=13),
    dict(name="h256_l6_r6_f32", hidden=256, attention=256, intermediate=1024, layers=6, vocab=1000,
         eps=1e-5, rescale_every=6, dtype="F32", shards=1, seed=14),
    dict(name="h64_l3_r2_bf16", hidden=64, attention=64, intermediate=224, layers=3, vocab=512,
         eps=1e-5, rescale_every=2, dtype="BF16", shards=1, seed=15),
    dict(name="h768_l12_f32_169m", hidden=768, attention=768, intermediate=3072, layers=12, vocab=50277,
         eps=1e-5, rescale_every=6, dtype="F32", shards=1, seed=16),
]


def main():
    bench = sys.argv[1]
    backend = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    try:
        from transformers import RwkvForCausalLM
    except ImportError as e:
        print("FAIL hf_rwkv4: transformers has no RWKV-4 (%s)" % e)
        return 1
    failed = 0
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    for sh in SHAPES:
        p = dict(sh)
        name = p.pop("name")
        with tempfile.TemporaryDirectory() as d:
            rwkv4_make.make(d, **p)
            rng = np.random.default_rng(p["seed"])
            toks = rng.integers(0, p["vocab"], T).astype(np.int32)
            tokfile, out = os.path.join(d, "tokens.i32"), os.path.join(d, "logits.f32")
            toks.tofile(tokfile)
            r = subprocess.run([bench, "--model", d, "--backend", backend, "--logits", tokfile, out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL hf_rwkv4 %s: step_bench: %s" % (name, (r.stderr or r.stdout).strip()))
                failed += 1
                continue
            got = np.fromfile(out, np.float32).reshape(T, p["vocab"]).astype(np.float64)
            try:
                m = RwkvForCausalLM.from_pretrained(d, torch_dtype=torch.float64).eval()
            except ZeroDivisionError as e:
                # its _init_weights divides by num_hidden_layers - 1
                print("SKIP hf_rwkv4 %s: transformers cannot load a %d-layer RWKV-4: %s" % (name, p["layers"], e))
                continue
            try:
                with torch.no_grad():
                    ref = m(torch.as_tensor(toks[None, :].astype(np.int64))).logits[0].numpy()
            except RuntimeError as e:
                if p["attention"] != p["hidden"]:
                    # transformers sizes its recurrent state by hidden_size
                    # (RwkvModel), so it cannot run such a model at all
                    print("SKIP hf_rwkv4 %s: transformers cannot run attention_hidden_size %d != hidden_size %d: %s"
                          % (name, p["attention"], p["hidden"], str(e).splitlines()[0]))
                    continue
                raise
            err = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
            worst = float(err.max()) if np.all(np.isfinite(err)) else float("inf")
            ok = worst <= TOL
            failed += not ok
            print("%s hf_rwkv4 %s: worst relative logits error %.3g over %d positions on %s (tolerance %g)" %
                  ("PASS" if ok else "FAIL", name, worst, T, backend, TOL))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
