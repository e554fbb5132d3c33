"""tests/test_model_torch_window.py — the training code of the sliding-window
mixers computes what lind runs.

tools/lindmodel.py's parallel forms of the `window`, `aft_local` and
`aft_conv` mixers (WindowMixer, AftWindowMixer) are exported with
export_tensors() into a model directory; `lind logits` runs it one token at
a time in the recurrent form (rings, sums, positions) and its logits must
match the PyTorch float64 logits within 1e-4 of each position's largest over
300 tokens (every window crossed). Also: the export names are exactly what
the C loader reads (it refuses anything else, so loading is part of the
check), from_tensors rebuilds the same model, and gradients reach every
exported parameter. Skips when python3-torch is not installed, and the
engine cases when build/lind is not built.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP model_torch_window: %s (python3-torch not installed)" % e)
    sys.exit(0)

import lindmodel  # noqa: E402

failed = 0
T = 300
TOL = 1e-4


def case(name, ok, why=""):
    global failed
    if ok:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def cfg_for(mixers, **keys):
    c = {"vocab_size": 256, "d_model": 32, "n_layers": len(mixers), "d_ff": 64, "mixers": mixers,
         "norm_eps": 1e-5, "feature_map": "elu1", "token_shift": True, "aft_variant": "decay",
         "attn_eps": 1e-6, "n_heads": 4, "d_head": 8}
    c.update(keys)
    return c


# flat configs: every kind key at the top level, shared by the layers
CONFIGS = [
    ("window_alibi", cfg_for(["window", "window"], window=6, dilation=3, **{"global": 2})),
    ("window_rope", cfg_for(["window"], window=20, position="rope", rope_base=500.0, **{"global": 1})),
    ("aft_local", cfg_for(["aft_local", "aft_local"], window=9)),
    ("aft_conv", cfg_for(["aft_conv"], kernel_size=7)),
]


def random_model(cfg, seed):
    torch.manual_seed(seed)
    m = lindmodel.Model(cfg)
    with torch.no_grad():   # larger than init so every term matters
        for n, p in m.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.dim() == 2 else 0.5))
    return m


def expected_names(cfg):
    want = {"embed.weight", "ln_f.weight", "ln_f.bias", "head.weight"}
    for i, kind in enumerate(cfg["mixers"]):
        p = "layers.%d." % i
        want |= {p + n for n in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
                                 "ffn.w1", "ffn.b1", "ffn.w2", "ffn.b2")}
        names = ["wq", "wk", "wv", "wo"]
        if kind == "aft_local":
            names.append("pos_bias")
        elif kind == "aft_conv":
            names += ["kernel", "kernel_gain", "kernel_bias"]
        want |= {p + "mixer." + n for n in names}
    return want


def lind_binary():
    b = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
    return b if os.path.exists(b) else None


def main():
    torch.set_num_threads(2)
    lind = lind_binary()
    with tempfile.TemporaryDirectory(prefix="lind_torchwin_") as tmp:
        for k, (name, cfg) in enumerate(CONFIGS):
            m = random_model(cfg, 40 + k)
            t = m.export_tensors()
            want = expected_names(cfg)
            case("export_names_" + name, set(t) == want,
                 "extra %s missing %s" % (sorted(set(t) - want), sorted(want - set(t))))
            tokens = np.random.RandomState(7 + k).randint(1, 256, T).astype("<i4")
            tokens[0] = 0
            m64 = lindmodel.Model.from_tensors(cfg, t, torch.float64)
            with torch.no_grad():
                x = torch.from_numpy(tokens.astype(np.int64))[None]
                par = m64(x)[0].numpy()
                same = m.double()(x)[0].numpy()
            e = np.abs(par - same).max() / np.abs(same).max()
            case("from_tensors_" + name, e < 1e-6, "rebuilt model differs by %.3g" % e)
            # gradients reach every exported parameter (float32 training copy)
            mt = random_model(cfg, 40 + k)
            x = torch.from_numpy(tokens.astype(np.int64))
            loss = torch.nn.functional.cross_entropy(mt(x[None, :-1])[0], x[1:])
            loss.backward()
            dead = [n for n, p in mt.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()
                    or p.grad.abs().max() == 0]
            case("gradients_" + name, not dead and torch.isfinite(loss), "no/bad gradient for %s" % dead)
            tname = "lind_logits_" + name
            if lind is None:
                print("SKIP %s: build/lind not built" % tname)
                continue
            mdir = os.path.join(tmp, name)
            os.makedirs(mdir)
            with open(os.path.join(mdir, "config.json"), "w") as f:
                json.dump(cfg, f)
            lindmodel.save_safetensors(os.path.join(mdir, "model.safetensors"), t)
            tok_path, out_path = os.path.join(tmp, "tokens.i32"), os.path.join(tmp, "logits.f32")
            tokens.tofile(tok_path)
            r = subprocess.run([lind, "logits", "--model", mdir, "--tokens", tok_path, "--out", out_path],
                               capture_output=True, text=True)
            if r.returncode != 0:
                case(tname, False, "lind logits exited %d: %s" % (r.returncode, (r.stderr or r.stdout).strip()[-300:]))
                continue
            got = np.fromfile(out_path, dtype="<f4")
            if got.size != T * 256:
                case(tname, False, "%d floats, want %d x 256" % (got.size, T))
                continue
            got = got.reshape(T, 256)
            rows = np.abs(got - par).max(1) / np.abs(par).max(1)
            worst = int(np.argmax(rows))
            print("NOTE %s: lind (recurrent) vs PyTorch (parallel): worst relative error %.3g (position %d)"
                  % (name, rows[worst], worst))
            case(tname, bool(np.all(rows <= TOL)), "relative error %.3g at position %d > %g" % (
                rows[worst], worst, TOL))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
