#!/usr/bin/python3
"""tools/rwkv4_ref.py — a reference RWKV-4 with Hugging Face's semantics.

Written from the math of transformers' RwkvForCausalLM (modeling_rwkv.py,
configuration_rwkv.py), in eval mode, which is what a served model is:

  x = emb[token]
  block i:   (block 0 first: x = pre_ln(x))
    h = ln1(x)
      token shift: h_prev is ln1's output at the previous token (0 at the
      first); xk = mk*h + (1-mk)*h_prev, likewise xv (mv), xr (mr)
      k = Wk xk, v = Wv xv, r = sigmoid(Wr xr)            ([A] each)
      wkv with w = -exp(time_decay), u = time_first, per channel, state
      (num, den, max) = (0, 0, -1e38) at the start:
        q = max(max, u + k);  a = e^(max-q), b = e^(u+k-q)
        wkv = (a num + b v) / (a den + b)
        q' = max(max + w, k); a = e^(max+w-q'), b = e^(k-q')
        num = a num + b v;  den = a den + b;  max = q'
    x = x + Wo (r * wkv)
    h = ln2(x)
      own token shift (ln2's previous output), mk, mr
      x = x + sigmoid(Wr' xr) * (Wv' relu(Wk' xk)^2)
    rescale_every = R > 0: Wo and Wv' of block i are divided by 2^(i // R)
      and x is halved after every block i with (i + 1) % R == 0
  logits = head(ln_out(x))

LayerNorm epsilons: pre_ln, ln1, ln2 use config layer_norm_epsilon; ln_out is
nn.LayerNorm(hidden_size) without it, i.e. 1e-5 whatever the config says.
Because of the epsilons, rescaling is *not* exactly the un-rescaled function
(LN(x/2) != LN(x) when eps > 0): this reference does what HF does.

HF's state initialises max to -1e38 in rwkv_linear_attention_cpu and -1e30
when RwkvModel builds a use_cache state; either is "minus infinity" here
(exp of it underflows to exactly 0 at the first token).

Two forms, which must agree:
  rnn_logits      token by token with an explicit state, float64 numpy (the
                  reference the fixtures are made with);
  parallel_logits the whole sequence at once, wkv as a causal softmax over
                  positions L[t,i] = k_i - (t-1-i) exp(time_decay) (i<t),
                  u + k_t (i=t), float64 torch (a cross-check of the first).

Weights are read from the model directory (config.json + model.safetensors
or the sharded index) by a numpy-only safetensors reader here.

    usage: tools/rwkv4_ref.py MODEL_DIR TOKENS.i32 OUT_LOGITS.f32
           (tokens: int32 LE; logits: len(tokens) x vocab float32 LE)
"""
import json
import os
import struct
import sys

import numpy as np

LN_OUT_EPS = 1e-5          # nn.LayerNorm's default: HF's ln_out has no eps argument
MAX_INIT = -1e38


# ---- reading a Hugging Face directory --------------------------------------

def read_safetensors(path):
    """name -> float64 array, from a safetensors file (F32/F16/BF16)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        b, e = d["data_offsets"]
        buf = data[b:e]
        if d["dtype"] == "F32":
            a = np.frombuffer(buf, "<f4")
        elif d["dtype"] == "F16":
            a = np.frombuffer(buf, "<f2")
        elif d["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype("<u4") << 16).view("<f4")
        else:
            raise ValueError("%s: tensor %s has dtype %s" % (path, name, d["dtype"]))
        out[name] = a.astype(np.float64).reshape(d["shape"])
    return out


def load_dir(mdir):
    """(config with HF's defaults filled in, name -> float64 tensor)."""
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    H = cfg["hidden_size"]
    if cfg.get("attention_hidden_size") is None:
        cfg["attention_hidden_size"] = H
    if cfg.get("intermediate_size") is None:
        cfg["intermediate_size"] = 4 * H
    cfg.setdefault("layer_norm_epsilon", 1e-5)
    cfg.setdefault("rescale_every", 6)          # RwkvConfig's default
    idx = os.path.join(mdir, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        for fname in sorted(set(wm.values())):
            part = read_safetensors(os.path.join(mdir, fname))
            tensors.update({k: v for k, v in part.items() if wm.get(k) == fname})
    else:
        tensors = read_safetensors(os.path.join(mdir, "model.safetensors"))
    return cfg, tensors


# ---- the recurrent form ----------------------------------------------------

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def blocks(cfg, t, rescale=True):
    """Per-block parameter dicts in float64, with HF's inference rescale applied
    to output.weight / feed_forward.value.weight (rescale=False leaves them)."""
    L, R = cfg["num_hidden_layers"], cfg["rescale_every"]
    out = []
    for i in range(L):
        p = "rwkv.blocks.%d." % i
        g = lambda n: t[p + n]  # noqa: E731
        s = 2.0 ** (i // R) if (rescale and R > 0) else 1.0
        out.append({
            "ln1": (g("ln1.weight"), g("ln1.bias")), "ln2": (g("ln2.weight"), g("ln2.bias")),
            "pre_ln": (g("pre_ln.weight"), g("pre_ln.bias")) if i == 0 else None,
            "w": -np.exp(g("attention.time_decay")), "u": g("attention.time_first"),
            "amk": g("attention.time_mix_key").reshape(-1),
            "amv": g("attention.time_mix_value").reshape(-1),
            "amr": g("attention.time_mix_receptance").reshape(-1),
            "Wk": g("attention.key.weight"), "Wv": g("attention.value.weight"),
            "Wr": g("attention.receptance.weight"), "Wo": g("attention.output.weight") / s,
            "fmk": g("feed_forward.time_mix_key").reshape(-1),
            "fmr": g("feed_forward.time_mix_receptance").reshape(-1),
            "Fk": g("feed_forward.key.weight"), "Fr": g("feed_forward.receptance.weight"),
            "Fv": g("feed_forward.value.weight") / s,
        })
    return out


def fresh_state(cfg):
    """One session's state: per block the two token-shift vectors and wkv's
    num/den/max — what HF keeps in its five [B, H, L] state tensors."""
    H, A = cfg["hidden_size"], cfg["attention_hidden_size"]
    return [{"att_shift": np.zeros(H), "ffn_shift": np.zeros(H), "num": np.zeros(A),
             "den": np.zeros(A), "max": np.full(A, MAX_INIT)} for _ in range(cfg["num_hidden_layers"])]


def rnn_step(cfg, B, t, state, tok, ln_out_eps=LN_OUT_EPS, halve=True):
    """Feed one token; returns its logits (float64 [V]) and updates state."""
    eps, R = cfg["layer_norm_epsilon"], cfg["rescale_every"]
    x = t["rwkv.embeddings.weight"][tok].copy()
    for i, (b, s) in enumerate(zip(B, state)):
        if b["pre_ln"] is not None:
            x = layer_norm(x, *b["pre_ln"], eps)
        h = layer_norm(x, *b["ln1"], eps)
        hp, s["att_shift"] = s["att_shift"], h
        k = b["Wk"] @ (b["amk"] * h + (1 - b["amk"]) * hp)
        v = b["Wv"] @ (b["amv"] * h + (1 - b["amv"]) * hp)
        r = sigmoid(b["Wr"] @ (b["amr"] * h + (1 - b["amr"]) * hp))
        num, den, mx, u, w = s["num"], s["den"], s["max"], b["u"], b["w"]
        q = np.maximum(mx, u + k)
        e1, e2 = np.exp(mx - q), np.exp(u + k - q)
        wkv = (e1 * num + e2 * v) / (e1 * den + e2)
        q = np.maximum(mx + w, k)
        e1, e2 = np.exp(mx + w - q), np.exp(k - q)
        s["num"], s["den"], s["max"] = e1 * num + e2 * v, e1 * den + e2, q
        x = x + b["Wo"] @ (r * wkv)
        h = layer_norm(x, *b["ln2"], eps)
        hp, s["ffn_shift"] = s["ffn_shift"], h
        kk = np.maximum(b["Fk"] @ (b["fmk"] * h + (1 - b["fmk"]) * hp), 0.0) ** 2
        rr = sigmoid(b["Fr"] @ (b["fmr"] * h + (1 - b["fmr"]) * hp))
        x = x + rr * (b["Fv"] @ kk)
        if halve and R > 0 and (i + 1) % R == 0:
            x = x / 2
    x = layer_norm(x, t["rwkv.ln_out.weight"], t["rwkv.ln_out.bias"], ln_out_eps)
    return t["head.weight"] @ x


def rnn_logits(cfg, t, tokens, ln_out_eps=LN_OUT_EPS, rescale=True):
    """Logits after each token of a fresh session, float64 [T, V].
    ln_out_eps / rescale exist to measure how far *wrong* semantics land
    (tools/rwkv4_fixtures.py checks the fixtures tell them apart)."""
    B = blocks(cfg, t, rescale)
    st = fresh_state(cfg)
    return np.stack([rnn_step(cfg, B, t, st, int(tok), ln_out_eps, rescale) for tok in tokens])


# ---- the parallel form (torch) ---------------------------------------------

def parallel_logits(cfg, t, tokens, chunk=64):
    """The same function over the whole sequence at once, float64 torch; wkv
    as a causal softmax over positions instead of the num/den/max recurrence."""
    import torch

    def T(a):
        return torch.from_numpy(np.ascontiguousarray(a))

    def ln(x, wb, eps):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], T(wb[0]), T(wb[1]), eps)

    def shift(h):
        return torch.cat([torch.zeros_like(h[:1]), h[:-1]], 0)

    eps, R = cfg["layer_norm_epsilon"], cfg["rescale_every"]
    x = T(t["rwkv.embeddings.weight"])[torch.as_tensor(np.asarray(tokens, dtype=np.int64))]
    n = x.shape[0]
    pos = torch.arange(n, dtype=torch.float64)
    for i, b in enumerate(blocks(cfg, t)):
        if b["pre_ln"] is not None:
            x = ln(x, b["pre_ln"], eps)
        h = ln(x, b["ln1"], eps)
        hp = shift(h)
        mix = lambda m: T(m) * h + (1 - T(m)) * hp  # noqa: E731
        k, v = mix(b["amk"]) @ T(b["Wk"]).T, mix(b["amv"]) @ T(b["Wv"]).T
        r = torch.sigmoid(mix(b["amr"]) @ T(b["Wr"]).T)
        decay = -T(b["w"])                          # exp(time_decay) > 0
        wkv = torch.empty_like(k)
        for t0 in range(0, n, chunk):
            tt = pos[t0:t0 + chunk]
            gap = (tt[:, None] - 1 - pos[None, :])                      # t-1-i
            Lg = k[None, :, :] - gap[:, :, None] * decay[None, None, :]  # [c, n, A]
            diag = (tt[:, None] == pos[None, :])
            Lg = torch.where(diag[:, :, None], T(b["u"])[None, None, :] + k[None, :, :], Lg)
            Lg = Lg.masked_fill((pos[None, :] > tt[:, None])[:, :, None], float("-inf"))
            wkv[t0:t0 + chunk] = (torch.softmax(Lg, 1) * v[None, :, :]).sum(1)
        x = x + (r * wkv) @ T(b["Wo"]).T
        h = ln(x, b["ln2"], eps)
        hp = shift(h)
        kk = torch.relu(mix(b["fmk"]) @ T(b["Fk"]).T) ** 2
        x = x + torch.sigmoid(mix(b["fmr"]) @ T(b["Fr"]).T) * (kk @ T(b["Fv"]).T)
        if R > 0 and (i + 1) % R == 0:
            x = x / 2
    x = ln(x, (t["rwkv.ln_out.weight"], t["rwkv.ln_out.bias"]), LN_OUT_EPS)
    return (x @ T(t["head.weight"]).T).numpy()


def rel_err(a, b):
    """Worst row of max|a-b| / max|b| (the figure the C tests use)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float((np.abs(a - b).max(-1) / np.abs(b).max(-1)).max())


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    mdir, tok_path, out = sys.argv[1:]
    cfg, t = load_dir(mdir)
    tokens = np.fromfile(tok_path, dtype="<i4")
    logits = rnn_logits(cfg, t, tokens)
    logits.astype("<f4").tofile(out)
    print("%d positions x %d logits -> %s" % (logits.shape[0], logits.shape[1], out))


if __name__ == "__main__":
    main()
