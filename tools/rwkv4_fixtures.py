#!/usr/bin/python3
"""tools/rwkv4_fixtures.py — the committed RWKV-4 parity fixtures.

Writes, under OUTDIR (tests/fixtures/rwkv4), one directory per fixture:

  <name>/model/        a random RWKV-4 model in the Hugging Face layout
                       (tools/rwkv4_make.py)
  <name>/tokens.i32    512 token ids, int32 LE; the first is 0 (BOS)
  <name>/logits.f32    512 x vocab float32 LE: row t = logits after tokens[0..t]
                       (a fresh session), computed in float64 by
                       tools/rwkv4_ref.py's recurrent form
  <name>/fixture.json  shape, seeds, checksums and the figures below

Fixtures:
  a_f32      hidden 64, 2 layers, attention 64, intermediate 256, vocab 300,
             rescale_every 0, layer_norm_epsilon 1e-5, one model.safetensors (F32)
  b_sharded  hidden 48 != attention 80, intermediate 160, 3 layers, vocab 320,
             rescale_every 2, layer_norm_epsilon 1e-3, three shards + index (F32)
  c_bf16     a_f32's weights stored as BF16; its logits come from the
             bf16-rounded weights (exactly what the file holds), in float64

The script checks, and refuses to write fixtures that fail:
  - the recurrent reference equals the parallel form (when torch is
    installed) to 1e-12 relative;
  - each fixture tells HF's semantics from plausible wrong ones by far more
    than the C test's 1e-4 tolerance: ln_out with the config epsilon instead
    of 1e-5 (b_sharded, whose config epsilon is 1e-3), and rescale_every
    ignored (b_sharded; it differs from HF only through the LayerNorm
    epsilons, hence the larger epsilon there).
It records the accuracy cost of bf16 weights (c_bf16 vs a_f32's logits) that
tests/test_model_rwkv4.c bounds lind's bf16 path with.

    usage: tools/rwkv4_fixtures.py [OUTDIR]     (default tests/fixtures/rwkv4)
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rwkv4_make  # noqa: E402
import rwkv4_ref  # noqa: E402

POSITIONS = 512
TOL = 1e-4                 # the C test's tolerance
PARITY_TOL = 1e-12         # recurrent vs parallel form, both float64

FIXTURES = [
    dict(name="a_f32", hidden=64, attention=64, intermediate=256, layers=2, vocab=300, eps=1e-5,
         rescale_every=0, dtype="F32", shards=1, seed=1),
    dict(name="b_sharded", hidden=48, attention=80, intermediate=160, layers=3, vocab=320, eps=1e-3,
         rescale_every=2, dtype="F32", shards=3, seed=2),
    dict(name="c_bf16", hidden=64, attention=64, intermediate=256, layers=2, vocab=300, eps=1e-5,
         rescale_every=0, dtype="BF16", shards=1, seed=1),      # a_f32's weights
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tokens_for(fx):
    # a_f32 and c_bf16 share their seed, hence their tokens
    rng = np.random.default_rng(1000 + fx["seed"])
    tok = rng.integers(0, fx["vocab"], POSITIONS).astype("<i4")
    tok[0] = 0
    return tok


def parallel_check(cfg, t, tokens, ref):
    try:
        import torch
        torch.set_num_threads(2)
    except ImportError:
        return None
    e = rwkv4_ref.rel_err(rwkv4_ref.parallel_logits(cfg, t, tokens), ref)
    if e > PARITY_TOL:
        raise SystemExit("recurrent and parallel forms disagree: %.3g" % e)
    return e


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/rwkv4"
    os.makedirs(out, exist_ok=True)
    logits = {}
    for fx in FIXTURES:
        d = os.path.join(out, fx["name"])
        if os.path.isdir(d):
            shutil.rmtree(d)
        mdir = os.path.join(d, "model")
        args = {k: v for k, v in fx.items() if k != "name"}
        rwkv4_make.make(mdir, **args)
        cfg, t = rwkv4_ref.load_dir(mdir)          # what the files hold (bf16-rounded for c)
        tokens = tokens_for(fx)
        ref = rwkv4_ref.rnn_logits(cfg, t, tokens)
        logits[fx["name"]] = ref
        tokens.tofile(os.path.join(d, "tokens.i32"))
        ref.astype("<f4").tofile(os.path.join(d, "logits.f32"))
        meta = {k: v for k, v in fx.items() if k != "name"}
        meta.update({
            "made_by": "/usr/bin/python3 tools/rwkv4_fixtures.py " + out,
            "positions": POSITIONS,
            "tokens": "tokens.i32: int32 LE, first is 0 (BOS), then random ids in [0, vocab)",
            "logits": "logits.f32: float32 LE [positions, vocab], row t after tokens[0..t] from a "
                      "fresh session, computed in float64 (tools/rwkv4_ref.py rnn_logits)",
            "logit_row_max_abs_mean": round(float(np.abs(ref).max(1).mean()), 3),
            "logit_row_std_mean": round(float(ref.std(1).mean()), 3),
            "files_sha256": {f: sha256(os.path.join(mdir, f)) for f in sorted(os.listdir(mdir))},
        })
        par = parallel_check(cfg, t, tokens, ref)
        meta["recurrent_vs_parallel_rel_err"] = par
        # How far wrong semantics land (must be >> TOL where they differ).
        wrong = {}
        if cfg["layer_norm_epsilon"] != rwkv4_ref.LN_OUT_EPS:
            wrong["ln_out_with_config_eps"] = rwkv4_ref.rel_err(
                rwkv4_ref.rnn_logits(cfg, t, tokens, ln_out_eps=cfg["layer_norm_epsilon"]), ref)
        if cfg["rescale_every"] > 0:
            wrong["rescale_ignored"] = rwkv4_ref.rel_err(rwkv4_ref.rnn_logits(cfg, t, tokens, rescale=False), ref)
        for k, e in wrong.items():
            if e < 10 * TOL:
                raise SystemExit("%s: %s changes the logits by only %.3g" % (fx["name"], k, e))
        meta["wrong_semantics_rel_err"] = wrong
        if fx["name"] == "c_bf16":
            # bf16's cost: bf16-rounded weights vs the fp32 ones, both in float64.
            _, ta = rwkv4_ref.load_dir(os.path.join(out, "a_f32", "model"))
            ca = dict(cfg)
            meta["bf16_vs_a_f32_rel_err"] = rwkv4_ref.rel_err(ref, logits["a_f32"])
            # lind keeps vectors in fp32 and only matrices in bf16: that costs no more.
            mats = {k: (rwkv4_make.bf16_round(v) if v.ndim == 2 else v) for k, v in ta.items()}
            meta["bf16_matrices_only_vs_a_f32_rel_err"] = rwkv4_ref.rel_err(
                rwkv4_ref.rnn_logits(ca, mats, tokens), logits["a_f32"])
            nohead = {k: (rwkv4_make.bf16_round(v) if v.ndim == 2 and "embeddings" not in k else v)
                      for k, v in ta.items()}
            meta["bf16_matrices_but_embeddings_vs_a_f32_rel_err"] = rwkv4_ref.rel_err(
                rwkv4_ref.rnn_logits(ca, nohead, tokens), logits["a_f32"])
        with open(os.path.join(d, "fixture.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print("%s: %d x %d logits, parallel agreement %s, wrong semantics %s" % (
            fx["name"], POSITIONS, fx["vocab"], "%.2g" % par if par is not None else "(no torch)",
            {k: "%.2g" % v for k, v in wrong.items()}))
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print("total %d bytes under %s" % (total, out))


if __name__ == "__main__":
    main()
