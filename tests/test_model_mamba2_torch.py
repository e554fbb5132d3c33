"""tests/test_model_mamba2_torch.py — lind against a live PyTorch reference on
fresh random Mamba-2 checkpoints in the Hugging Face layout.

The committed fixtures (tests/test_model_mamba2.c) pin three shapes; this
writes other ones each run with tools/mamba2_ref.py — the genuine
GPT-NeoX-20B tokenizer.json (tests/fixtures/tokenizer/20B_tokenizer.json.gz,
what state-spaces' Mamba models use) with its vocabulary padded to 50280 as
theirs is, one group per head, a chunk size of 7, a clamping
time_step_limit, f32 / bf16 / f16 files — and checks:
  - the reference's two forms (the chunked SSD scan over the sequence, HF's
    torch_forward without a cache, and the one-token cached step) agree
    within 1e-12;
  - `lind logits --model DIR --tokens T --out O --chunk 1` (float32 logits at
    every position, token by token) is within 1e-5 relative of the float64
    reference at every position;
  - the same through batched prefill (--chunk 512 and --chunk 37) is
    bit-identical to the token-by-token run.
Skips entirely when python3-torch is not installed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP mamba2_torch: %s (python3-torch / python3-numpy not installed)" % e)
    sys.exit(0)

import mamba2_ref  # noqa: E402

TOL = 1e-5
LIND = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
SHAPES = [
    dict(name="neox_bf16", positions=64, tokenizer="neox", hidden=16, layers=2, vocab=50280, state=16, head_dim=8,
         expand=2, n_groups=2, conv_kernel=4, tie=True, dtype="BF16", seed=301),
    dict(name="g_eq_h_f32", positions=256, hidden=24, layers=2, vocab=290, state=8, head_dim=12, expand=2,
         n_groups=4, conv_kernel=4, tie=False, eps=1e-6, limit=(0.0, 0.1), chunk_size=7, dtype="F32", seed=302),
    dict(name="wide_f16", positions=300, hidden=64, layers=2, vocab=280, state=64, head_dim=32, expand=2,
         n_groups=1, conv_kernel=3, use_bias=True, tie=True, chunk_size=256, dtype="F16", seed=303),
]

failed = 0


def case(name, ok, why=""):
    global failed
    if ok:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def lind_logits(model, toks_path, out_path, chunk, V):
    r = subprocess.run([LIND, "logits", "--model", model, "--tokens", toks_path, "--out", out_path, "--chunk",
                        str(chunk)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return np.fromfile(out_path, dtype="<f4").reshape(-1, V), ""


def main():
    if not os.access(LIND, os.X_OK):
        print("SKIP mamba2_torch: %s not built" % LIND)
        return
    torch.set_grad_enabled(False)
    tmp = tempfile.mkdtemp(prefix="lind-mamba2-torch-")
    try:
        for s in SHAPES:
            s = dict(s)
            name, T = s.pop("name"), s.pop("positions")
            d = os.path.join(tmp, name)
            mamba2_ref.make(d, **s)
            cfg, sd = mamba2_ref.load(d)
            V = cfg["vocab_size"]
            hi = mamba2_ref.NEOX_VOCAB if s.get("tokenizer") == "neox" else V
            toks = np.random.RandomState(s["seed"]).randint(0, hi, T).astype("<i4")
            tp = os.path.join(d, "tokens.i32")
            toks.tofile(tp)
            ref = mamba2_ref.logits(cfg, sd, toks)
            rec = mamba2_ref.logits_recurrent(cfg, sd, toks)
            e = mamba2_ref.rel_err(rec, ref)
            case("%s_reference_forms_agree" % name, e <= 1e-12, "chunked vs recurrent %.3g" % e)
            step, why = lind_logits(d, tp, os.path.join(d, "step.f32"), 1, V)
            if step is None:
                case("%s_parity" % name, False, why)
                continue
            err = (np.abs(step.astype(np.float64) - ref.numpy()).max(1) / np.abs(ref.numpy()).max(1))
            print("NOTE mamba2_torch %s: worst relative error %.3g at position %d of %d" % (name, err.max(),
                                                                                           int(err.argmax()), T))
            case("%s_parity" % name, err.max() <= TOL, "relative error %.3g at position %d > %g" % (
                err.max(), int(err.argmax()), TOL))
            for chunk in (512, 37):
                pre, why = lind_logits(d, tp, os.path.join(d, "pre.f32"), chunk, V)
                case("%s_prefill_%d_bit_identical" % (name, chunk),
                     pre is not None and pre.tobytes() == step.tobytes(), why or "logits differ from --chunk 1")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


main()
sys.exit(1 if failed else 0)
