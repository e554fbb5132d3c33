#!/usr/bin/python3
"""tools/rwkv7_ref.py — RWKV-7 "Goose" (x070) in PyTorch, written here from
the published math (BlinkDL's RWKV-LM, RWKV-v7/rwkv_v7_demo_rnn.py and
rwkv_v7_demo.py), and a writer of random checkpoints in the published .pth
layout.

  layout(...)           the checkpoint's tensors (names, shapes, how drawn)
  make_pth(path, ...)   a random model saved as BlinkDL's files are: torch.save
                        of a dict {name: tensor} (emb.weight, blocks.N.ln0/ln1/
                        ln2, att.x_r ... att.ln_x, ffn.x_k/key/value, ln_out,
                        head.weight), block 0 carrying v0/v1/v2 it never uses
  logits(sd, tokens)    float64 logits after every token, the recurrent form
                        fed token by token from the zero state

The reference runs in float64 on the tensors as stored (bf16/f32). `variant`
names a plausible mistake, for showing that a comparison tells them apart:
  "kk_after_ka"   kk made from k after the k_a rescale
  "bonus_raw_k"   the r_k bonus with k before the rescale
  "no_vres"       no value residual (v_first never mixed in)
  "lnx_eps"       ln_x with eps 1e-5 instead of 64e-5
  "new_s"         S·(−kk) taken from S after the decay

usage: tools/rwkv7_ref.py PTH TOKENS.i32 OUT.f64   (float64 logits, row per token)
"""
import collections
import math
import sys

import torch
import torch.nn.functional as F


def layout(vocab, C, H, layers, ffn, dw, da, dv, dg, emb_scale=1.0, lora_scale=0.3, block0_v_lora=True):
    """The x070 checkpoint's tensors in BlinkDL's order, each (name, shape,
    scale, mean) of a normal draw scale·N(0, 1) + mean, or (name, shape,
    None, None) of a uniform one in [0, 1) (the x_* mixes): emb.weight
    (scale emb_scale), blocks.N.ln0 (block 0) / ln1 / ln2, att.x_r ...
    att.ln_x (the LoRA matrices w1/w2, a1/a2, v1/v2, g1/g2 scale lora_scale;
    v0/v1/v2 in block 0 too unless block0_v_lora is false, block 0 never
    using them), ffn.x_k/key/value, ln_out, head.weight. The random
    checkpoints of make_pth and bench/peers/make_weights.py are drawn from
    it, each with its own generator."""
    assert C % H == 0
    out = [("emb.weight", (vocab, C), emb_scale, 0.0)]
    for i in range(layers):
        b = "blocks.%d." % i
        for n in (("ln0", "ln1", "ln2") if i == 0 else ("ln1", "ln2")):
            out += [(b + n + ".weight", (C,), 0.1, 1.0), (b + n + ".bias", (C,), 0.1, 0.0)]
        a = b + "att."
        out += [(a + n, (1, 1, C), None, None) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")]
        out += [(a + "w0", (1, 1, C), 1.0, -1.0), (a + "w1", (C, dw), lora_scale, 0.0),
                (a + "w2", (dw, C), lora_scale, 0.0), (a + "a0", (1, 1, C), 0.5, 0.0),
                (a + "a1", (C, da), lora_scale, 0.0), (a + "a2", (da, C), lora_scale, 0.0)]
        if i > 0 or block0_v_lora:
            out += [(a + "v0", (1, 1, C), 0.5, 0.5), (a + "v1", (C, dv), lora_scale, 0.0),
                    (a + "v2", (dv, C), lora_scale, 0.0)]
        out += [(a + "g1", (C, dg), lora_scale, 0.0), (a + "g2", (dg, C), lora_scale, 0.0),
                (a + "k_k", (1, 1, C), 0.1, 0.85), (a + "k_a", (1, 1, C), 0.2, 1.0), (a + "r_k", (H, C // H), 0.5, 0.0)]
        out += [(a + n + ".weight", (C, C), 1.0 / math.sqrt(C), 0.0) for n in ("receptance", "key", "value", "output")]
        out += [(a + "ln_x.weight", (C,), 0.1, 1.0), (a + "ln_x.bias", (C,), 0.1, 0.0)]
        f = b + "ffn."
        out += [(f + "x_k", (1, 1, C), None, None), (f + "key.weight", (ffn, C), 1.0 / math.sqrt(C), 0.0),
                (f + "value.weight", (C, ffn), 1.0 / math.sqrt(ffn), 0.0)]
    out += [("ln_out.weight", (C,), 0.1, 1.0), ("ln_out.bias", (C,), 0.1, 0.0),
            ("head.weight", (vocab, C), 1.0 / math.sqrt(C), 0.0)]
    return out


def make_pth(path, vocab, C, H, layers, ffn, dw, da, dv, dg, dtype=torch.float32, seed=0, ordered=False):
    """A random x070 checkpoint at `path` (its zip folder is the file's stem)."""
    g = torch.Generator().manual_seed(seed)
    sd = collections.OrderedDict() if ordered else {}
    for name, shp, scale, mean in layout(vocab, C, H, layers, ffn, dw, da, dv, dg):
        if scale is None:
            sd[name] = torch.rand(*shp, generator=g, dtype=torch.float64)
        else:
            sd[name] = torch.randn(*shp, generator=g, dtype=torch.float64) * scale + mean
    for k in sd:
        sd[k] = sd[k].to(dtype).contiguous()
    if ordered:   # what Module.state_dict() pickles: an OrderedDict with _metadata (a BUILD)
        sd._metadata = collections.OrderedDict([("", {"version": 1})])
    torch.save(sd, path)


def load(path):
    sd = torch.load(path, map_location="cpu")
    return {k: v.double() for k, v in sd.items()}


def shape(sd):
    V, C = sd["emb.weight"].shape
    H, N = sd["blocks.0.att.r_k"].shape
    L = 0
    while "blocks.%d.ln1.weight" % L in sd:
        L += 1
    return V, C, H, N, L


def _ln(x, w, b, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight=w, bias=b, eps=eps)


def logits(sd, tokens, variant=None):
    """[len(tokens), V] float64: row t = the logits after tokens[0..t]."""
    V, C, H, N, L = shape(sd)
    z = {k: v.reshape(-1) if v.dim() == 3 else v for k, v in sd.items()}
    emb = _ln(z["emb.weight"], z["blocks.0.ln0.weight"], z["blocks.0.ln0.bias"])
    att_prev = [torch.zeros(C, dtype=torch.float64) for _ in range(L)]
    ffn_prev = [torch.zeros(C, dtype=torch.float64) for _ in range(L)]
    S = [torch.zeros(H, N, N, dtype=torch.float64) for _ in range(L)]   # [h][v index i][k index j]
    out = torch.empty(len(tokens), V, dtype=torch.float64)
    lnx_eps = 1e-5 if variant == "lnx_eps" else 64e-5
    for t, tok in enumerate(tokens):
        x = emb[int(tok)].clone()
        v_first = None
        for i in range(L):
            a = "blocks.%d.att." % i
            h = _ln(x, z["blocks.%d.ln1.weight" % i], z["blocks.%d.ln1.bias" % i])
            d = att_prev[i] - h
            att_prev[i] = h
            xr, xw, xk, xv, xa, xg = (h + d * z[a + n] for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"))
            r = z[a + "receptance.weight"] @ xr
            k = z[a + "key.weight"] @ xk
            v = z[a + "value.weight"] @ xv
            w = torch.exp(-math.exp(-0.5) * torch.sigmoid(z[a + "w0"] + torch.tanh(xw @ z[a + "w1"]) @ z[a + "w2"]))
            if i == 0:
                v_first = v
            elif variant != "no_vres":
                v = v + (v_first - v) * torch.sigmoid(z[a + "v0"] + (xv @ z[a + "v1"]) @ z[a + "v2"])
            aa = torch.sigmoid(z[a + "a0"] + (xa @ z[a + "a1"]) @ z[a + "a2"])
            g = torch.sigmoid(xg @ z[a + "g1"]) @ z[a + "g2"]
            k_raw = k
            k = k * (1 + (aa - 1) * z[a + "k_a"])
            kk = (k if variant == "kk_after_ka" else k_raw) * z[a + "k_k"]
            kk = F.normalize(kk.view(H, N), dim=-1, p=2.0)
            s = S[i]
            decayed = s * w.view(H, 1, N)
            sa = (decayed if variant == "new_s" else s) @ (-kk).view(H, N, 1)
            s = decayed + sa @ (kk * aa.view(H, N)).view(H, 1, N) + v.view(H, N, 1) @ k.view(H, 1, N)
            S[i] = s
            o = (s @ r.view(H, N, 1)).view(H, N)
            mean = o.mean(dim=-1, keepdim=True)
            var = ((o - mean) ** 2).mean(dim=-1, keepdim=True)
            o = ((o - mean) / torch.sqrt(var + lnx_eps)).reshape(C) * z[a + "ln_x.weight"] + z[a + "ln_x.bias"]
            kb = k_raw if variant == "bonus_raw_k" else k
            o = o + ((r * kb * z[a + "r_k"].reshape(C)).view(H, N).sum(dim=-1, keepdim=True) * v.view(H, N)).reshape(C)
            x = x + z[a + "output.weight"] @ (o * g)
            f = "blocks.%d.ffn." % i
            h = _ln(x, z["blocks.%d.ln2.weight" % i], z["blocks.%d.ln2.bias" % i])
            kf = h + (ffn_prev[i] - h) * z[f + "x_k"]
            ffn_prev[i] = h
            x = x + z[f + "value.weight"] @ (torch.relu(z[f + "key.weight"] @ kf) ** 2)
        out[t] = z["head.weight"] @ _ln(x, z["ln_out.weight"], z["ln_out.bias"])
    return out


def rel_err(a, b):
    """Worst over rows of max|a−b| / max|b| (the C tests' measure), and its row."""
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    e = (a - b).abs().amax(dim=-1) / b.abs().amax(dim=-1)
    return float(e.max()), int(e.argmax())


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    import numpy as np
    toks = np.fromfile(sys.argv[2], dtype="<i4")
    logits(load(sys.argv[1]), toks).numpy().astype("<f8").tofile(sys.argv[3])
