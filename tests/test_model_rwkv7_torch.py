"""tests/test_model_rwkv7_torch.py — lind against a live PyTorch reference on
fresh random RWKV-7 (x070) .pth checkpoints.

The committed fixtures (tests/test_model_rwkv7.c) pin three shapes; this
writes other ones each run with tools/rwkv7_ref.py (torch.save of a dict of
tensors, as BlinkDL's files are) — odd head counts, bf16 / f32 / f16 files,
LoRA widths that differ per kind, 1 to 4 layers — and checks:
  - torch.load reads back exactly what was written, and lind's reader
    accepts the same file;
  - `lind logits --model FILE.pth --tokens T --out O` (float32 logits at every
    position, fed token by token: --chunk 1) is within 1e-5 relative of the
    float64 reference at every one of 512 positions;
  - the same through batched prefill (--chunk 512 and --chunk 37) is
    bit-identical to the token-by-token run;
  - a directory holding the .pth and the vocabulary gives the same logits as
    the file named directly.
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
    print("SKIP rwkv7_torch: %s (python3-torch / python3-numpy not installed)" % e)
    sys.exit(0)

import rwkv7_ref  # noqa: E402

TOL = 1e-5
POSITIONS = 512
LIND = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
SHAPES = [
    dict(name="h7_n8_l2_bf16", vocab=300, C=56, H=7, layers=2, ffn=192, dw=12, da=6, dv=10, dg=20,
         dtype=torch.bfloat16, seed=101),
    dict(name="h3_n32_l4_f32", vocab=290, C=96, H=3, layers=4, ffn=320, dw=24, da=16, dv=8, dg=32,
         dtype=torch.float32, seed=102),
    dict(name="h1_n64_l1_f16", vocab=270, C=64, H=1, layers=1, ffn=224, dw=8, da=20, dv=4, dg=12,
         dtype=torch.float16, seed=103),
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
        print("SKIP rwkv7_torch: %s not built" % LIND)
        return
    tmp = tempfile.mkdtemp(prefix="lind-rwkv7-torch-")
    try:
        for s in SHAPES:
            d = os.path.join(tmp, s["name"])
            os.makedirs(d)
            pth = os.path.join(d, "RWKV-x070-%s.pth" % s["name"])
            rwkv7_ref.make_pth(pth, s["vocab"], s["C"], s["H"], s["layers"], s["ffn"], s["dw"], s["da"], s["dv"],
                               s["dg"], s["dtype"], s["seed"])
            shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "world_small.txt"),
                        os.path.join(d, "rwkv_vocab_v20230424.txt"))
            back = torch.load(pth, map_location="cpu")
            case("%s_torch_layout" % s["name"],
                 back["blocks.0.att.r_k"].shape == (s["H"], s["C"] // s["H"]) and
                 back["blocks.0.att.w1"].shape == (s["C"], s["dw"]) and "blocks.0.att.v1" in back and
                 back["emb.weight"].dtype == s["dtype"], "unexpected layout")
            toks = np.random.RandomState(s["seed"]).randint(0, s["vocab"], POSITIONS).astype("<i4")
            tp = os.path.join(d, "tokens.i32")
            toks.tofile(tp)
            ref = rwkv7_ref.logits(rwkv7_ref.load(pth), toks).numpy()
            V = s["vocab"]
            step, why = lind_logits(pth, tp, os.path.join(d, "step.f32"), 1, V)
            if step is None:
                case("%s_parity" % s["name"], False, why)
                continue
            e, at = rwkv7_ref.rel_err(step, ref)
            print("NOTE rwkv7_torch %s: worst relative error %.3g at position %d of %d" % (s["name"], e, at,
                                                                                          POSITIONS))
            case("%s_parity" % s["name"], e <= TOL, "relative error %.3g at position %d > %g" % (e, at, TOL))
            for chunk in (512, 37):
                pre, why = lind_logits(pth, tp, os.path.join(d, "pre.f32"), chunk, V)
                case("%s_prefill_%d_bit_identical" % (s["name"], chunk),
                     pre is not None and pre.tobytes() == step.tobytes(), why or "logits differ from --chunk 1")
            dir_run, why = lind_logits(d, tp, os.path.join(d, "dir.f32"), 64, V)
            case("%s_directory_same" % s["name"], dir_run is not None and dir_run.tobytes() == step.tobytes(),
                 why or "the directory gives other logits than the file")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


main()
sys.exit(1 if failed else 0)
