"""tests/test_model_torch_mixers.py — the PyTorch parallel forms of the
retnet, performer, cosformer and linformer mixers and the delta mixer's
training form (tools/lindmodel.py)
compute what lind's C engine computes in recurrent form.

For each kind: a small random two-layer model built in PyTorch, exported
with export_tensors() (exactly the tensor names the C loader reads) into a
model directory, run by `lind logits` (one session, the recurrent state ops,
prefill chunks of 7), and compared with the PyTorch float64 forward over
200 tokens: max |difference| within 1e-4 of the largest logit at every
position. Also: from_tensors() rebuilds the same function from the exported
tensors, and refuses an extra tensor. Skips when python3-torch is not
installed.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
BUILD = os.environ.get("LIND_BUILD", "build")

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP model_torch_mixers: %s (python3-torch not installed)" % e)
    sys.exit(0)

import lindmodel  # noqa: E402

failed = 0
T = 200


def case(name, ok, why=""):
    global failed
    if ok:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def make_cfg(kind, extra):
    cfg = {"vocab_size": 256, "d_model": 32, "n_layers": 2, "norm_eps": 1e-5, "d_ff": 64,
           "n_heads": 2, "d_head": 16, "mixers": [kind, kind]}
    cfg.update(extra)
    return cfg


def randomize(model, seed):
    """Weights large enough that every part of the mixer matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gn_weight") or name.endswith("ln1.weight") or name.endswith("ln2.weight") \
                    or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.1 * (2 * torch.rand(p.shape, generator=g) - 1))
            elif p.dim() == 2 and "proj_" not in name and "embed" not in name:
                p.copy_((2 * torch.rand(p.shape, generator=g) - 1) * 2.0 / p.shape[1] ** 0.5)
            elif "proj_" in name:
                p.copy_(0.3 * (2 * torch.rand(p.shape, generator=g) - 1))
            else:
                p.copy_(0.1 * (2 * torch.rand(p.shape, generator=g) - 1))
        model.embed.weight.copy_(2 * torch.rand(model.embed.weight.shape, generator=g) - 1)


def run_case(label, kind, extra, seed):
    cfg = make_cfg(kind, extra)
    torch.manual_seed(seed)
    m = lindmodel.Model(cfg)
    randomize(m, seed)
    tensors = m.export_tensors()
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        lindmodel.save_safetensors(os.path.join(d, "model.safetensors"), tensors)
        rng = np.random.default_rng(seed)
        toks = np.concatenate([[0], rng.integers(1, 256, T - 1)]).astype("<i4")
        toks.tofile(os.path.join(d, "tokens.bin"))
        r = subprocess.run([os.path.join(BUILD, "lind"), "logits", "--model", d, "--tokens",
                            os.path.join(d, "tokens.bin"), "--out", os.path.join(d, "out.bin"), "--chunk", "7"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            case(label + "_engine_matches_torch", False, "lind logits: %s" % r.stderr.strip())
            return
        got = np.fromfile(os.path.join(d, "out.bin"), dtype="<f4").reshape(T, 256).astype(np.float64)
        # the exported tensors, rebuilt, computing in float64
        ref = lindmodel.Model.from_tensors(cfg, tensors, torch.float64)
        with torch.no_grad():
            want = ref(torch.from_numpy(toks.astype(np.int64))[None])[0].numpy()
            direct = m.double()(torch.from_numpy(toks.astype(np.int64))[None])[0].numpy()
    rel = (np.abs(got - want).max(1) / np.abs(want).max(1)).max()
    case(label + "_engine_matches_torch", rel <= 1e-4, "max relative logit error %.3g" % rel)
    print("NOTE %s: lind (recurrent, chunks of 7) vs PyTorch (parallel, float64) over %d tokens: "
          "max relative logit error %.2e" % (label, T, rel))
    d2 = np.abs(direct - want).max()
    case(label + "_from_tensors_same_function", d2 <= 1e-5 * np.abs(want).max(), "differs by %.3g" % d2)
    bad = dict(tensors)
    bad["layers.0.mixer.extra"] = np.zeros(3, np.float32)
    try:
        lindmodel.Model.from_tensors(cfg, bad)
        case(label + "_from_tensors_refuses_extra", False, "accepted an unexpected tensor")
    except ValueError as e:
        case(label + "_from_tensors_refuses_extra", "layers.0.mixer.extra" in str(e), str(e))


run_case("retnet", "retnet", {}, 1)
run_case("performer", "performer", {"n_features": 24, "seed": 7}, 2)
run_case("cosformer", "cosformer", {"horizon": 256}, 3)
run_case("cosformer_periodic", "cosformer", {"horizon": 40, "cos_mode": "periodic"}, 4)
run_case("linformer", "linformer", {"proj_len": 12, "max_len": 256}, 5)
run_case("delta", "delta", {"conv_size": 4}, 6)
run_case("delta_k2", "delta", {"conv_size": 2, "head_norm_eps": 1e-3}, 7)
sys.exit(1 if failed else 0)
