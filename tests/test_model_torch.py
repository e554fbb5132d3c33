"""tests/test_model_torch.py — the training code computes the model lind runs.

Checks tools/lindmodel.py (the parallel form the default model is trained
in) against a step-by-step recurrent reference written here in numpy from
the math of the recurrent-core issue (state S, z for the linear mixer;
numerator, denominator, running max for AFT), on a small random model; the
export names and the safetensors round trip; and that the committed fixture
is what the PyTorch code computes for the shipped model. Skips when
python3-torch is not installed.
"""
import json
import math
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP model_torch: %s (python3-torch not installed)" % e)
    sys.exit(0)

import lindmodel  # noqa: E402

failed = 0


def case(name, ok, why=""):
    global failed
    if ok:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def layer_norm(x, w, b, eps):
    mu = x.mean()
    var = ((x - mu) ** 2).mean()
    return (x - mu) / math.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0)))


def recurrent_logits(cfg, t, tokens):
    """The recurrent form, one token at a time, from exported tensors."""
    d, H, dh, eps = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["norm_eps"]
    L = cfg["n_layers"]
    st = []
    for i in range(L):
        s = {"shift": np.zeros(d)}
        if cfg["mixers"][i] == "linear":
            s["S"], s["z"] = np.zeros((H, dh, dh)), np.zeros((H, dh))
        else:
            s["num"], s["den"], s["max"] = np.zeros(d), np.zeros(d), np.full(d, -np.inf)
        st.append(s)
    out = []
    for tok in tokens:
        x = t["embed.weight"][tok].astype(np.float64)
        for i in range(L):
            p = "layers.%d." % i
            g = lambda n: t[p + n].astype(np.float64)  # noqa: E731
            h = layer_norm(x, g("ln1.weight"), g("ln1.bias"), eps)
            hp, s = st[i]["shift"], st[i]
            s["shift"] = h
            mixed = lambda mu: mu * h + (1 - mu) * hp  # noqa: E731
            if cfg["mixers"][i] == "linear":
                q = (g("mixer.wq") @ mixed(g("mixer.mu_q"))).reshape(H, dh)
                k = (g("mixer.wk") @ mixed(g("mixer.mu_k"))).reshape(H, dh)
                v = (g("mixer.wv") @ mixed(g("mixer.mu_v"))).reshape(H, dh)
                gam = g("mixer.decay")
                s["S"] = gam[:, None, None] * s["S"] + phi(k)[:, :, None] * v[:, None, :]
                s["z"] = gam[:, None] * s["z"] + phi(k)
                fq = phi(q)
                o = np.einsum("hi,hij->hj", fq, s["S"]) / ((fq * s["z"]).sum(1)[:, None] + cfg["attn_eps"])
                y = g("mixer.wo") @ o.reshape(-1)
            else:
                r = g("mixer.wr") @ mixed(g("mixer.mu_r"))
                k = g("mixer.wk") @ mixed(g("mixer.mu_k"))
                v = g("mixer.wv") @ mixed(g("mixer.mu_v"))
                w, u = np.exp(g("mixer.time_decay")), g("mixer.time_first")
                # output: the stored past plus the current token with bonus
                m = np.maximum(s["max"], u + k)
                e1, e2 = np.exp(s["max"] - m), np.exp(u + k - m)
                wkv = (e1 * s["num"] + e2 * v) / (e1 * s["den"] + e2)
                # state: decay the past by w, add the current token
                m2 = np.maximum(s["max"] - w, k)
                e1, e2 = np.exp(s["max"] - w - m2), np.exp(k - m2)
                s["num"], s["den"], s["max"] = e1 * s["num"] + e2 * v, e1 * s["den"] + e2, m2
                y = g("mixer.wo") @ (wkv / (1 + np.exp(-r)))
            x = x + y
            h2 = layer_norm(x, g("ln2.weight"), g("ln2.bias"), eps)
            x = x + g("ffn.w2") @ gelu(g("ffn.w1") @ h2 + g("ffn.b1")) + g("ffn.b2")
        out.append(t["head.weight"].astype(np.float64) @ layer_norm(x, t["ln_f.weight"], t["ln_f.bias"], eps))
    return np.array(out)


def small_cfg(mixers):
    return {"vocab_size": 256, "d_model": 16, "n_layers": len(mixers), "n_heads": 2, "d_head": 8,
            "d_ff": 32, "mixers": mixers, "feature_map": "elu1", "token_shift": True,
            "norm_eps": 1e-5, "aft_variant": "decay", "attn_eps": 1e-6}


def random_tensors(cfg, seed):
    torch.manual_seed(seed)
    m = lindmodel.Model(cfg)
    with torch.no_grad():   # larger than init so every term matters
        for n, p in m.named_parameters():
            if "decay_theta" in n:
                p.uniform_(-3, 3)
            else:
                p.add_(torch.randn_like(p) * 0.3)
    return m.export_tensors()


def test_parallel_equals_recurrent():
    for mixers in (["linear", "aft"], ["aft", "linear", "aft"]):
        cfg = small_cfg(mixers)
        t = random_tensors(cfg, 7)
        tokens = [0] + list(np.random.RandomState(3).randint(1, 256, 80))
        m = lindmodel.Model.from_tensors(cfg, t, torch.float64)
        for blk in m.layers:            # several chunks, one partial
            if isinstance(blk.mixer, lindmodel.AftMixer):
                blk.mixer.chunk = 32
        with torch.no_grad():
            par = m(torch.tensor([tokens]))[0].numpy()
        rec = recurrent_logits(cfg, t, tokens)
        err = (np.abs(par - rec).max(1) / np.abs(rec).max(1)).max()
        case("parallel_equals_recurrent_" + "_".join(mixers), err < 1e-9, "max relative error %.3g" % err)


def test_aft_chunks_extreme_keys():
    # keys of +-60 and the fastest/slowest allowed decays: the chunked sums must
    # neither overflow nor lose the dominant term
    g = torch.Generator().manual_seed(5)
    B, T, d = 2, 100, 6
    k = (torch.rand(B, T, d, generator=g, dtype=torch.float64) * 120 - 60)
    v = torch.randn(B, T, d, generator=g, dtype=torch.float64)
    w = torch.tensor([lindmodel.W_MIN, lindmodel.W_MAX, 0.1, 1.0, 3.0, 0.02], dtype=torch.float64)
    u = torch.randn(d, generator=g, dtype=torch.float64) * 5
    ref = torch.zeros(B, T, d, dtype=torch.float64)
    for t in range(T):
        L = torch.stack([-(t - 1 - i) * w + k[:, i] for i in range(t)] + [u + k[:, t]], 1)
        ref[:, t] = (torch.softmax(L, 1) * v[:, :t + 1]).sum(1)
    worst = max((lindmodel.aft_wkv(k, v, w, u, c) - ref).abs().max().item() for c in (1, 16, 32, 128))
    case("aft_chunked_extreme_keys", worst < 1e-10 and math.isfinite(worst), "max abs error %.3g" % worst)


def test_export_names_and_roundtrip():
    cfg = small_cfg(["linear", "aft"])
    t = random_tensors(cfg, 1)
    want = {"embed.weight", "ln_f.weight", "ln_f.bias", "head.weight"}
    for i, kind in enumerate(cfg["mixers"]):
        p = "layers.%d." % i
        want |= {p + n for n in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
                                 "ffn.w1", "ffn.b1", "ffn.w2", "ffn.b2")}
        names = ("wq", "wk", "wv", "wo", "decay", "mu_q", "mu_k", "mu_v") if kind == "linear" else \
                ("wr", "wk", "wv", "wo", "time_decay", "time_first", "mu_r", "mu_k", "mu_v")
        want |= {p + "mixer." + n for n in names}
    case("export_names", set(t) == want, "extra %s missing %s" % (sorted(set(t) - want), sorted(want - set(t))))
    shapes_ok = (t["layers.0.mixer.wq"].shape == (16, 16) and t["layers.0.mixer.decay"].shape == (2,)
                 and t["layers.0.ffn.w1"].shape == (32, 16) and t["layers.1.mixer.time_first"].shape == (16,))
    gam, td = t["layers.0.mixer.decay"], t["layers.1.mixer.time_decay"]
    case("export_shapes_and_ranges", shapes_ok and (gam > 0).all() and (gam <= 1).all()
         and (np.exp(td) >= lindmodel.W_MIN * 0.999).all(), "shapes or decay ranges wrong")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.safetensors")
        lindmodel.save_safetensors(path, t)
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        back = lindmodel.load_safetensors(path)
        same = set(back) == set(t) and all(np.array_equal(back[k], t[k]) for k in t)
        case("safetensors_roundtrip", same and n % 8 == 0 and "__metadata__" not in json.loads(raw[8:8 + n]),
             "tensors differ after write/read or header not 8-aligned")


def test_committed_fixture_matches_model():
    mdir = os.path.join(ROOT, "models", "default")
    fdir = os.path.join(ROOT, "tests", "fixtures")
    if not os.path.exists(os.path.join(mdir, "model.safetensors")):
        case("fixture_matches_shipped_model", False, "models/default/model.safetensors missing")
        return
    torch.set_num_threads(2)
    sample = open(os.path.join(fdir, "default_sample.bin"), "rb").read()
    ref = np.fromfile(os.path.join(fdir, "default_logits.f32"), dtype="<f4").reshape(-1, 256)
    cfg, m = lindmodel.load_model_dir(mdir, torch.float64)
    with torch.no_grad():
        got = m(torch.tensor([[0] + list(sample)]))[0].numpy()
    err = (np.abs(got - ref).max(1) / np.abs(got).max(1)).max() if got.shape == ref.shape else float("inf")
    case("fixture_matches_shipped_model", err < 1e-6,
         "committed fixture differs from the model's PyTorch logits (rel %.3g): rerun make model" % err)


test_parallel_equals_recurrent()
test_aft_chunks_extreme_keys()
test_export_names_and_roundtrip()
test_committed_fixture_matches_model()
sys.exit(1 if failed else 0)
