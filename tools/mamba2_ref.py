#!/usr/bin/python3
"""tools/mamba2_ref.py — Mamba-2 in PyTorch (float64), written here from the
semantics of transformers' Mamba2ForCausalLM (modeling_mamba2.py, its
torch_forward path), and a writer of random checkpoints in the Hugging Face
layout.

  make(outdir, ...)        a random model as HF publishes Mamba2ForCausalLM:
                           config.json (model_type "mamba2", the real keys;
                           Python's json writes time_step_limit's inf as a
                           bare Infinity, as save_pretrained does),
                           model.safetensors (backbone.embeddings.weight,
                           backbone.layers.N.norm.weight,
                           backbone.layers.N.mixer.{in_proj.weight,
                           conv1d.weight [CD, 1, K], conv1d.bias, dt_bias,
                           A_log, D, norm.weight, out_proj.weight},
                           backbone.norm_f.weight, lm_head.weight unless tied),
                           tokenizer.json (a small byte-level BPE, or the
                           genuine GPT-NeoX-20B file state-spaces' Mamba uses)
  load(dir)                (config dict, {name: float64 tensor})
  logits(cfg, sd, tokens)  float64 logits after every token: the whole
                           sequence at once, the SSM by the chunked SSD scan
                           (state space duality: intra-chunk quadratic form,
                           chunk states, the inter-chunk recurrence) as HF's
                           torch_forward computes a prompt without a cache
  logits_recurrent(...)    the same function one token at a time with the
                           (conv ring, S) state: HF's cached single-token path

The two forms share nothing but the parameters; they agree to ~1e-14.
`variant` names a plausible mistake, for showing that a comparison tells
them apart: "group_norm" (the gated norm per group, as mamba_ssm's
RMSNormGated with group_size does, instead of over all channels),
"no_clamp" (time_step_limit ignored), "norm_before_gate" (norm(y) * silu(z)),
"group_mod" (head h reads group h % G instead of h // (H/G)).

usage: tools/mamba2_ref.py MODEL_DIR TOKENS.i32 OUT.f64   (float64 logits)
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rwkv4_make  # noqa: E402  (safetensors writer, small BPE tokenizer.json)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEOX_GZ = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "20B_tokenizer.json.gz")
NEOX_VOCAB = 50277   # the GPT-NeoX-20B tokenizer.json; state-spaces pads the model's vocab to 50280


# ---- writing a checkpoint ------------------------------------------------------

def config_json(hidden, layers, vocab, state, head_dim, expand, n_groups, conv_kernel, use_bias, use_conv_bias,
                tie, eps, limit, chunk_size, dtype):
    inter = expand * hidden
    return {
        "architectures": ["Mamba2ForCausalLM"],
        "model_type": "mamba2",
        "bos_token_id": 0,
        "pad_token_id": 0,
        "eos_token_id": 0,
        "chunk_size": chunk_size,
        "conv_kernel": conv_kernel,
        "expand": expand,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.1,
        "layer_norm_epsilon": eps,
        "n_groups": n_groups,
        "norm_before_gate": False,
        "num_heads": inter // head_dim,
        "num_hidden_layers": layers,
        "rescale_prenorm_residual": False,
        "residual_in_fp32": True,
        "rms_norm": True,
        "state_size": state,
        "tie_word_embeddings": tie,
        "time_step_floor": 1e-4,
        "time_step_limit": [float(limit[0]), float(limit[1])],
        "time_step_max": 0.1,
        "time_step_min": 0.001,
        "time_step_rank": math.ceil(hidden / 16),
        "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype],
        "transformers_version": "4.46.0",
        "use_bias": use_bias,
        "use_cache": True,
        "use_conv_bias": use_conv_bias,
        "vocab_size": vocab,
    }


def random_tensors(cfg, seed):
    """HF-named tensors (name, float64 ndarray), drawn so the model is
    well-conditioned: dt over [0.01, 0.5] after softplus, A in [1, 16] as
    HF initialises it, D near 1, norms near 1, each block adding O(1)."""
    rng = np.random.default_rng(seed)
    d, L, V, N = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["state_size"]
    H, P, G, K = cfg["num_heads"], cfg["head_dim"], cfg["n_groups"], cfg["conv_kernel"]
    I = H * P
    CD = I + 2 * G * N
    PT = I + CD + H
    t = [("backbone.embeddings.weight", rng.standard_normal((V, d)))]
    for i in range(L):
        p = "backbone.layers.%d." % i
        t.append((p + "norm.weight", 1.0 + 0.2 * rng.standard_normal(d)))
        t.append((p + "mixer.in_proj.weight", rng.standard_normal((PT, d)) / math.sqrt(d)))
        if cfg["use_bias"]:
            t.append((p + "mixer.in_proj.bias", 0.1 * rng.standard_normal(PT)))
        t.append((p + "mixer.conv1d.weight", rng.uniform(-1, 1, (CD, 1, K)) * (1.5 / math.sqrt(K))))
        if cfg["use_conv_bias"]:
            t.append((p + "mixer.conv1d.bias", 0.2 * rng.standard_normal(CD)))
        dt = np.exp(rng.uniform(math.log(0.01), math.log(0.5), H))
        t.append((p + "mixer.dt_bias", dt + np.log(-np.expm1(-dt))))   # softplus⁻¹
        t.append((p + "mixer.A_log", np.log(rng.uniform(1, 16, H))))
        t.append((p + "mixer.D", 1.0 + 0.3 * rng.standard_normal(H)))
        t.append((p + "mixer.norm.weight", 1.0 + 0.2 * rng.standard_normal(I)))
        t.append((p + "mixer.out_proj.weight", rng.standard_normal((d, I)) / math.sqrt(I)))
        if cfg["use_bias"]:
            t.append((p + "mixer.out_proj.bias", 0.1 * rng.standard_normal(d)))
    t.append(("backbone.norm_f.weight", 1.0 + 0.2 * rng.standard_normal(d)))
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", rng.standard_normal((V, d)) / math.sqrt(d) * 3))
    return t


def make(outdir, hidden=32, layers=2, vocab=300, state=16, head_dim=16, expand=2, n_groups=1, conv_kernel=4,
         use_bias=False, use_conv_bias=True, tie=True, eps=1e-5, limit=(0.0, float("inf")), chunk_size=16,
         dtype="F32", seed=1, tokenizer="small"):
    """Write a random model; returns its config dict. tokenizer: "small" (a
    277-token byte-level BPE) or "neox" (the genuine GPT-NeoX-20B file)."""
    os.makedirs(outdir, exist_ok=True)
    cfg = config_json(hidden, layers, vocab, state, head_dim, expand, n_groups, conv_kernel, use_bias,
                      use_conv_bias, tie, eps, limit, chunk_size, dtype)
    rwkv4_make.write_safetensors(os.path.join(outdir, "model.safetensors"), random_tensors(cfg, seed), dtype)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)   # inf → bare Infinity, as save_pretrained writes it
    tp = os.path.join(outdir, "tokenizer.json")
    if tokenizer == "neox":
        import gzip
        with gzip.open(NEOX_GZ, "rb") as g, open(tp, "wb") as f:
            f.write(g.read())
    else:
        with open(tp, "w") as f:
            json.dump(rwkv4_make.tokenizer_json(), f, ensure_ascii=False)
    return cfg


# ---- reading one -----------------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    base, out = 8 + n, {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = buf[base + a:base + b]
        if h["dtype"] == "F32":
            v = np.frombuffer(raw, "<f4").astype(np.float64)
        elif h["dtype"] == "F16":
            v = np.frombuffer(raw, "<f2").astype(np.float64)
        elif h["dtype"] == "BF16":
            v = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4").astype(np.float64)
        else:
            raise ValueError("%s: dtype %s" % (name, h["dtype"]))
        out[name] = torch.from_numpy(v.reshape(h["shape"]).copy())
    return out


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)   # Python's json reads Infinity back
    return cfg, read_safetensors(os.path.join(d, "model.safetensors"))


# ---- the function ----------------------------------------------------------------

def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def gated_norm(y, z, w, eps, G, variant):
    if variant == "norm_before_gate":
        return rms(y, w, eps) * F.silu(z)
    h = y * F.silu(z)
    if variant == "group_norm":   # mamba_ssm's per-group norm (not HF's)
        T, I = h.shape
        hg = h.reshape(T, G, I // G)
        hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
        return w * hg.reshape(T, I)
    return rms(h, w, eps)


class Dims:
    def __init__(self, cfg):
        self.d = cfg["hidden_size"]
        self.H, self.P, self.N, self.G = cfg["num_heads"], cfg["head_dim"], cfg["state_size"], cfg["n_groups"]
        self.K = cfg["conv_kernel"]
        self.I = self.H * self.P
        self.CD = self.I + 2 * self.G * self.N
        self.eps = cfg["layer_norm_epsilon"]
        self.lim = cfg.get("time_step_limit", [0.0, float("inf")])
        self.L = cfg.get("chunk_size", 256)


def head_groups(D, variant):
    """The group each head reads B and C from."""
    rep = D.H // D.G
    if variant == "group_mod":
        return torch.arange(D.H) % D.G
    return torch.arange(D.H) // rep


def segsum(a):
    """a [..., L] → [..., L, L]: out[i, j] = Σ_{j<k≤i} a_k for j ≤ i, −inf above
    the diagonal (cumulative sums and a mask, no subtraction of cumsums)."""
    L = a.shape[-1]
    x = a[..., None].expand(*a.shape, L)                  # x[..., k, j] = a_k
    below = torch.tril(torch.ones(L, L, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~below, 0.0)                        # keep k > j
    s = torch.cumsum(x, dim=-2)                           # s[..., i, j] = Σ_{j<k≤i} a_k
    return s.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool)), -math.inf)


def ssd_chunked(x, dt, A, B, C, L):
    """The SSM over a whole sequence by chunks. x [T, H, P], dt [T, H], A [H],
    B, C [T, H, N]. Returns y [T, H, P] (without D) and the final state
    [H, P, N]."""
    T, H, P = x.shape
    N = B.shape[-1]
    pad = (L - T % L) % L
    def chunks(t):
        t = torch.cat([t, t.new_zeros((pad,) + tuple(t.shape[1:]))], 0)   # zero-padded to whole chunks
        return t.reshape(-1, L, *t.shape[1:])
    xd = chunks(x * dt[..., None])                       # [c, L, H, P]
    a = chunks(A[None, :] * dt).permute(2, 0, 1)         # [H, c, L]
    Bc, Cc = chunks(B), chunks(C)                        # [c, L, H, N]
    a_cs = torch.cumsum(a, -1)                           # [H, c, L]
    # 1. within each chunk: y_i = Σ_{j≤i} (C_i·B_j) exp(Σ_{j<k≤i} a_k) x_j dt_j
    Lm = torch.exp(segsum(a))                            # [H, c, L(i), L(j)]
    CB = torch.einsum("cihn,cjhn->hcij", Cc, Bc)
    y_diag = torch.einsum("hcij,cjhp->cihp", CB * Lm, xd)
    # 2. each chunk's own end state (from a zero start)
    decay_to_end = torch.exp(a_cs[..., -1:] - a_cs)      # [H, c, L]
    st = torch.einsum("hcj,cjhn,cjhp->chpn", decay_to_end, Bc, xd)
    # 3. the state entering each chunk: the chunks' end states carried
    #    across chunk boundaries by their total decays
    tot = F.pad(a_cs[..., -1], (1, 0))                   # [H, c+1]
    carry = torch.exp(segsum(tot))                       # [H, c+1, c+1]
    st0 = torch.cat([st.new_zeros((1, H, P, N)), st], 0) # [c+1, H, P, N]
    entering = torch.einsum("hzc,chpn->zhpn", carry, st0)
    st_in, final = entering[:-1], entering[-1]
    # 4. the entering state seen from inside each chunk
    y_off = torch.einsum("cihn,chpn,hci->cihp", Cc, st_in, torch.exp(a_cs))
    y = (y_diag + y_off).reshape(-1, H, P)[:T]
    return y, final


def mixer_seq(D, p, h, variant):
    """One layer's mixer over a whole sequence h [T, d] (no cache)."""
    T = h.shape[0]
    proj = h @ p["in_proj.weight"].T
    if "in_proj.bias" in p:
        proj = proj + p["in_proj.bias"]
    z, xBC, dtr = proj.split([D.I, D.CD, D.H], dim=-1)
    w = p["conv1d.weight"]                               # [CD, 1, K]
    conv = F.conv1d(xBC.T[None], w, p.get("conv1d.bias"), padding=D.K - 1, groups=D.CD)[0, :, :T].T
    xBC = F.silu(conv)
    x, B, C = xBC.split([D.I, D.G * D.N, D.G * D.N], dim=-1)
    dt = F.softplus(dtr + p["dt_bias"])
    if variant != "no_clamp":
        dt = torch.clamp(dt, D.lim[0], D.lim[1])
    A = -torch.exp(p["A_log"])
    g = head_groups(D, variant)
    B = B.reshape(T, D.G, D.N)[:, g]
    C = C.reshape(T, D.G, D.N)[:, g]
    xh = x.reshape(T, D.H, D.P)
    y, _ = ssd_chunked(xh, dt, A, B, C, D.L)
    y = y + p["D"][None, :, None] * xh
    o = gated_norm(y.reshape(T, D.I), z, p["norm.weight"], D.eps, D.G, variant)
    out = o @ p["out_proj.weight"].T
    if "out_proj.bias" in p:
        out = out + p["out_proj.bias"]
    return out


def _params(sd, i):
    pre = "backbone.layers.%d.mixer." % i
    return {k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)}


def _embed(sd):
    return sd.get("backbone.embeddings.weight", sd.get("backbone.embedding.weight"))


def _head(cfg, sd):
    return _embed(sd) if cfg.get("tie_word_embeddings") else sd["lm_head.weight"]


def logits(cfg, sd, tokens, variant=None):
    D = Dims(cfg)
    x = _embed(sd)[torch.as_tensor(tokens, dtype=torch.long)]
    for i in range(cfg["num_hidden_layers"]):
        h = rms(x, sd["backbone.layers.%d.norm.weight" % i], D.eps)
        x = x + mixer_seq(D, _params(sd, i), h, variant)
    return rms(x, sd["backbone.norm_f.weight"], D.eps) @ _head(cfg, sd).T


def logits_recurrent(cfg, sd, tokens, variant=None):
    """Token by token with the state (per layer: the last K−1 conv inputs and
    S [H, P, N]), as HF's cached single-token step."""
    D = Dims(cfg)
    Ls = cfg["num_hidden_layers"]
    ring = [torch.zeros(D.CD, D.K - 1, dtype=torch.float64) for _ in range(Ls)]
    S = [torch.zeros(D.H, D.P, D.N, dtype=torch.float64) for _ in range(Ls)]
    E, Hd = _embed(sd), _head(cfg, sd)
    out = []
    for tok in tokens:
        x = E[int(tok)]
        for i in range(Ls):
            p = _params(sd, i)
            h = rms(x, sd["backbone.layers.%d.norm.weight" % i], D.eps)
            proj = p["in_proj.weight"] @ h + (p["in_proj.bias"] if "in_proj.bias" in p else 0)
            z, xBC, dtr = proj.split([D.I, D.CD, D.H])
            win = torch.cat([ring[i], xBC[:, None]], 1)     # [CD, K], oldest first
            ring[i] = win[:, 1:]
            c = (win * p["conv1d.weight"][:, 0, :]).sum(-1)
            if "conv1d.bias" in p:
                c = c + p["conv1d.bias"]
            xBC = F.silu(c)
            xs, B, C = xBC.split([D.I, D.G * D.N, D.G * D.N])
            dt = F.softplus(dtr + p["dt_bias"])
            if variant != "no_clamp":
                dt = torch.clamp(dt, D.lim[0], D.lim[1])
            A = -torch.exp(p["A_log"])
            g = head_groups(D, variant)
            Bh, Ch = B.reshape(D.G, D.N)[g], C.reshape(D.G, D.N)[g]   # [H, N]
            xh = xs.reshape(D.H, D.P)
            S[i] = torch.exp(dt * A)[:, None, None] * S[i] + (dt[:, None] * xh)[..., None] * Bh[:, None, :]
            y = (S[i] * Ch[:, None, :]).sum(-1) + p["D"][:, None] * xh
            o = gated_norm(y.reshape(1, D.I), z[None], p["norm.weight"], D.eps, D.G, variant)[0]
            o = p["out_proj.weight"] @ o + (p["out_proj.bias"] if "out_proj.bias" in p else 0)
            x = x + o
        out.append(Hd @ rms(x, sd["backbone.norm_f.weight"], D.eps))
    return torch.stack(out)


def rel_err(a, b):
    """Worst over positions of max|a−b| / max|b| within a position's row."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float(((a - b).abs().amax(-1) / b.abs().amax(-1)).max())


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    cfg, sd = load(sys.argv[1])
    toks = np.fromfile(sys.argv[2], dtype="<i4")
    with torch.no_grad():
        logits(cfg, sd, toks).numpy().astype("<f8").tofile(sys.argv[3])


if __name__ == "__main__":
    main()
