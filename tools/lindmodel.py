"""tools/lindmodel.py — lind's model in PyTorch, in the parallel (training) form.

This is the same function lind's C engine computes one token at a time in the
recurrent form (see issue "Recurrent core" and docs/MODEL.md):

  block (pre-norm):  h = LN1(x);  x += Mixer(h);  x += W2·GELU(W1·LN2(x) + b1) + b2
  logits = Head·LN_f(x); byte vocabulary; token 0 is BOS, fed first.

  token shift: projection p sees  h_p = mu_p*h_t + (1-mu_p)*h_{t-1}, h_{-1} = 0.
  linear mixer: phi = elu+1, per head with decay gamma:
      o_t = sum_{i<=t} gamma^{t-i} (phi(q_t).phi(k_i)) v_i
            / (sum_{i<=t} gamma^{t-i} phi(q_t).phi(k_i) + attn_eps)
  aft mixer (RWKV-4 form), per channel with w = exp(time_decay), u = time_first:
      wkv_t = softmax_i(L[t,i]) . v,  L[t,i] = -(t-1-i)w + k_i (i<t), u + k_t (i=t)
      y = Wo (sigmoid(r) * wkv)

  retnet, performer, cosformer, linformer mixers (docs/KINDS.md): the
  parallel forms below (RetnetMixer ... LinformerMixer; DeltaMixer steps
  the gated delta rule token by token), flat-form config
  keys at the top level as the C loader reads them.

The learnable parameters are reparametrized for training (gamma and w through
bounded maps) but `export_tensors` writes exactly the tensors the C loader
reads (gamma itself as `decay`, log w as `time_decay`), and `from_tensors`
builds a model straight from those, which is what the fixture is computed
with. Also here: a numpy-only safetensors reader and writer.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Bounds of the learned decays. They keep every layer's memory finite, so
# a stream far longer than the training window stays in the regime training
# saw (the long-stream check of the default-model issue).
GAMMA_MIN, GAMMA_MAX = 0.5, 0.995      # linear mixer, per head
W_MIN, W_MAX = 0.01, 8.0              # aft decay per channel


def token_shift(h):
    """h_{t-1} for every t, zero at the first position. h: [B, T, d]."""
    return F.pad(h, (0, 0, 1, 0))[:, :-1, :]


def mix(h, hp, mu):
    return mu * h + (1.0 - mu) * hp


def linear_attention(q, k, v, gamma, eps):
    """Parallel causal form. q, k, v: [B, H, T, dh]; gamma: [H]."""
    T = q.shape[2]
    fq, fk = F.elu(q) + 1.0, F.elu(k) + 1.0
    t = torch.arange(T, device=q.device, dtype=q.dtype)
    dist = t[:, None] - t[None, :]                                # t - i
    causal = dist >= 0
    logd = torch.log(gamma)[:, None, None] * dist.clamp(min=0)    # [H, T, T]
    decay = torch.where(causal, torch.exp(logd), torch.zeros((), dtype=q.dtype))
    a = torch.matmul(fq, fk.transpose(-1, -2)) * decay            # [B, H, T, T]
    num = torch.matmul(a, v)
    den = a.sum(-1, keepdim=True) + eps
    return num / den


def aft_wkv(k, v, w, u, chunk=32):
    """Parallel causal AFT with decay, chunk by chunk.

    Per channel, for t in a chunk starting at s (j = t - s):
      sum_{s<=i<t} e^{-(t-1-i)w + k_i} v_i = e^{K-(j-1)w} * sum_{l<j} e^{k_l + l w - K} v_l
    an exclusive prefix sum against the chunk's maximum K of k_l + l w, so
    the whole chunk costs O(chunk * d) instead of O(chunk^2 * d). The earlier
    chunks enter as one more term, carried as (a, b, m): numerator and
    denominator sums scaled by e^{-m}. Every exponential is taken relative
    to a maximum; the sums run in float64 so that chunk * w stays far from
    the exponent range. Exact: the same function as the softmax over L[t, i]
    (tests/test_model_torch.py checks it). k, v: [B, T, d]; w, u: [d]."""
    B, T, d = k.shape
    out_dtype = k.dtype
    k, v, w, u = k.double(), v.double(), w.double(), u.double()
    a = torch.zeros(B, d, dtype=torch.float64)
    b = torch.zeros(B, d, dtype=torch.float64)
    m = torch.full((B, d), -1e300, dtype=torch.float64)   # empty past
    outs = []
    for s in range(0, T, chunk):
        kc, vc = k[:, s:s + chunk], v[:, s:s + chunk]
        n = kc.shape[1]
        j = torch.arange(n, dtype=torch.float64)[None, :, None]        # [1, n, 1]
        x = kc + j * w
        K = x.amax(1, keepdim=True).detach()
        e = torch.exp(x - K)
        ev = e * vc
        S = torch.cumsum(ev, 1) - ev          # exclusive prefix sums
        Z = torch.cumsum(e, 1) - e
        c1 = K - (j - 1.0) * w                # in-chunk earlier tokens
        c2 = m[:, None, :] - j * w            # earlier chunks
        c3 = u + kc                           # the current token, with bonus
        R = torch.maximum(torch.maximum(c1, c2), c3).detach()
        e1, e2, e3 = torch.exp(c1 - R), torch.exp(c2 - R), torch.exp(c3 - R)
        num = e1 * S + e2 * a[:, None, :] + e3 * vc
        den = e1 * Z + e2 * b[:, None, :] + e3
        outs.append(num / den)
        if s + chunk < T:
            d1 = K[:, 0, :] - (n - 1.0) * w
            d2 = m - n * w
            mn = torch.maximum(d1, d2).detach()
            f1, f2 = torch.exp(d1 - mn), torch.exp(d2 - mn)
            a = f1 * ev.sum(1) + f2 * a
            b = f1 * e.sum(1) + f2 * b
            m = mn
    return torch.cat(outs, 1).to(out_dtype)


class LinearMixer(nn.Module):
    def __init__(self, d, H, dh, eps, layer, n_layers):
        super().__init__()
        self.H, self.dh, self.eps = H, dh, eps
        self.wq = nn.Parameter(torch.empty(H * dh, d))
        self.wk = nn.Parameter(torch.empty(H * dh, d))
        self.wv = nn.Parameter(torch.empty(H * dh, d))
        self.wo = nn.Parameter(torch.empty(d, H * dh))
        for p in (self.wq, self.wk, self.wv):
            nn.init.normal_(p, std=0.02)
        nn.init.normal_(self.wo, std=0.02 / math.sqrt(2 * n_layers))
        ramp = torch.arange(d, dtype=torch.float32) / d
        self.mu_q = nn.Parameter(1.0 - 0.5 * ramp)
        self.mu_k = nn.Parameter(1.0 - 0.5 * ramp)
        self.mu_v = nn.Parameter(1.0 - 0.7 * ramp)
        # gamma = GAMMA_MIN + (GAMMA_MAX - GAMMA_MIN) * sigmoid(theta), spread over heads
        target = torch.linspace(0.7, 0.99, H)
        frac = (target - GAMMA_MIN) / (GAMMA_MAX - GAMMA_MIN)
        self.decay_theta = nn.Parameter(torch.log(frac / (1 - frac)))
        self.fixed_gamma = None   # set by from_tensors: the exported gamma as is

    def gamma(self):
        if self.fixed_gamma is not None:
            return self.fixed_gamma
        return GAMMA_MIN + (GAMMA_MAX - GAMMA_MIN) * torch.sigmoid(self.decay_theta)

    def forward(self, h):
        B, T, _ = h.shape
        hp = token_shift(h)
        def heads(x):
            return x.view(B, T, self.H, self.dh).transpose(1, 2)
        q = heads(F.linear(mix(h, hp, self.mu_q), self.wq))
        k = heads(F.linear(mix(h, hp, self.mu_k), self.wk))
        v = heads(F.linear(mix(h, hp, self.mu_v), self.wv))
        o = linear_attention(q, k, v, self.gamma().to(h.dtype), self.eps)
        return F.linear(o.transpose(1, 2).reshape(B, T, self.H * self.dh), self.wo)

    def export(self):
        return {"wq": self.wq, "wk": self.wk, "wv": self.wv, "wo": self.wo,
                "decay": self.gamma(), "mu_q": self.mu_q, "mu_k": self.mu_k, "mu_v": self.mu_v}


class AftMixer(nn.Module):
    def __init__(self, d, layer, n_layers, chunk=32):
        super().__init__()
        self.chunk = chunk
        self.wr = nn.Parameter(torch.empty(d, d))
        self.wk = nn.Parameter(torch.empty(d, d))
        self.wv = nn.Parameter(torch.empty(d, d))
        self.wo = nn.Parameter(torch.empty(d, d))
        for p in (self.wr, self.wk, self.wv):
            nn.init.normal_(p, std=0.02)
        nn.init.normal_(self.wo, std=0.02 / math.sqrt(2 * n_layers))
        ramp = torch.arange(d, dtype=torch.float32) / d
        self.mu_r = nn.Parameter(1.0 - 0.5 * ramp)
        self.mu_k = nn.Parameter(1.0 - 0.6 * ramp)
        self.mu_v = nn.Parameter(1.0 - 0.7 * ramp)
        # log w = log W_MIN + (log W_MAX - log W_MIN) * sigmoid(theta): channels
        # from slow (w ~ 0.02) to fast (w ~ 3)
        w0 = torch.linspace(math.log(0.02), math.log(3.0), d)
        frac = (w0 - math.log(W_MIN)) / (math.log(W_MAX) - math.log(W_MIN))
        self.decay_theta = nn.Parameter(torch.log(frac / (1 - frac)))
        self.time_first = nn.Parameter(torch.full((d,), 0.5) + 0.3 * torch.sin(torch.arange(d) * 1.0))
        self.fixed_time_decay = None

    def w(self):
        if self.fixed_time_decay is not None:
            return torch.exp(self.fixed_time_decay)
        lo, hi = math.log(W_MIN), math.log(W_MAX)
        return torch.exp(lo + (hi - lo) * torch.sigmoid(self.decay_theta))

    def forward(self, h):
        hp = token_shift(h)
        r = F.linear(mix(h, hp, self.mu_r), self.wr)
        k = F.linear(mix(h, hp, self.mu_k), self.wk)
        v = F.linear(mix(h, hp, self.mu_v), self.wv)
        wkv = aft_wkv(k, v, self.w().to(h.dtype), self.time_first, self.chunk)
        return F.linear(torch.sigmoid(r) * wkv, self.wo)

    def export(self):
        return {"wr": self.wr, "wk": self.wk, "wv": self.wv, "wo": self.wo,
                "time_decay": torch.log(self.w()), "time_first": self.time_first,
                "mu_r": self.mu_r, "mu_k": self.mu_k, "mu_v": self.mu_v}


# ---- sliding-window mixers: window, aft_local, aft_conv ----------------------
# The parallel forms of recurrent/mixer_window.c and recurrent/mixer_aft_window.c
# (docs/KINDS.md), over a sequence that starts the stream (positions 0 … T−1).

def alibi_slopes(H):
    """m_h = 2^(−8(h+1)/H), as the C loader computes them."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float64)


def rope(x, base):
    """x [B, H, T, dh] rotated by the absolute positions 0 … T−1 on the pairs
    (i, i + dh/2), angle t·base^(−2i/dh) (formed in float64)."""
    T, dh = x.shape[2], x.shape[3]
    half = dh // 2
    inv = torch.exp(-2.0 * torch.arange(half, dtype=torch.float64) / dh * math.log(base))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def window_attention(q, k, v, w, dil, g, slopes):
    """Causal softmax attention over the window t, t−dil, …, t−(w−1)·dil and
    the global positions s < g; ALiBi bias −m_h·min(t−s, w·dil) when slopes
    is given. q, k, v: [B, H, T, dh]."""
    T, dh = q.shape[2], q.shape[3]
    t = torch.arange(T)
    dist = t[:, None] - t[None, :]
    vis = (dist >= 0) & ((((dist % dil) == 0) & (dist // dil < w)) | (t[None, :] < g))
    sc = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh)
    if slopes is not None:
        sc = sc - slopes.to(q.dtype)[:, None, None] * dist.clamp(min=0, max=w * dil).to(q.dtype)
    sc = sc.masked_fill(~vis, float("-inf"))
    return torch.matmul(torch.softmax(sc, -1), v)


class WindowMixer(nn.Module):
    """Keys n_heads, d_head, window, dilation (1), global (0), position
    ("alibi" | "rope"), rope_base (10000). Tensors wq, wk, wv [H·dh, d], wo [d, H·dh]."""

    def __init__(self, cfg, layer):
        super().__init__()
        d, H, dh = cfg["d_model"], cfg["n_heads"], cfg["d_head"]
        self.H, self.dh = H, dh
        self.w, self.dil, self.g = cfg["window"], cfg.get("dilation", 1), cfg.get("global", 0)
        self.rope = cfg.get("position", "alibi") == "rope"
        self.base = float(cfg.get("rope_base", 10000.0))
        self.wq = nn.Parameter(torch.empty(H * dh, d))
        self.wk = nn.Parameter(torch.empty(H * dh, d))
        self.wv = nn.Parameter(torch.empty(H * dh, d))
        self.wo = nn.Parameter(torch.empty(d, H * dh))
        for p in (self.wq, self.wk, self.wv):
            nn.init.normal_(p, std=0.02)
        nn.init.normal_(self.wo, std=0.02 / math.sqrt(2 * cfg["n_layers"]))

    def forward(self, h):
        B, T, _ = h.shape
        def heads(x):
            return x.view(B, T, self.H, self.dh).transpose(1, 2)
        q, k, v = heads(F.linear(h, self.wq)), heads(F.linear(h, self.wk)), heads(F.linear(h, self.wv))
        if self.rope:
            q, k = rope(q, self.base), rope(k, self.base)
        o = window_attention(q, k, v, self.w, self.dil, self.g, None if self.rope else alibi_slopes(self.H))
        return F.linear(o.transpose(1, 2).reshape(B, T, self.H * self.dh), self.wo)

    def exported_params(self):
        return {"wq": self.wq, "wk": self.wk, "wv": self.wv, "wo": self.wo}

    def export(self):
        return self.exported_params()


class AftWindowMixer(nn.Module):
    """AFT-local (conv=False: key window = s, tensor pos_bias [s]) and AFT-conv
    (conv=True: keys n_heads, kernel_size = s, tensors kernel [H, s],
    kernel_gain [H], kernel_bias [H], w_h = γ_h·(kernel_h − mean)/√(var + 1e-5)
    + β_h). y_t = σ(q_t) ⊙ Σ_{t'≤t} e^{k_t' + b(t−t')} v_t' / Σ_{t'≤t} e^{k_t' + b(t−t')},
    b(j) = w[j] for j < s, 0 beyond; tensors wq, wk, wv, wo [d, d]."""

    def __init__(self, cfg, layer, conv):
        super().__init__()
        d = cfg["d_model"]
        self.conv = conv
        self.H = cfg["n_heads"] if conv else 1
        self.s = cfg["kernel_size"] if conv else cfg["window"]
        self.wq = nn.Parameter(torch.empty(d, d))
        self.wk = nn.Parameter(torch.empty(d, d))
        self.wv = nn.Parameter(torch.empty(d, d))
        self.wo = nn.Parameter(torch.empty(d, d))
        for p in (self.wq, self.wk, self.wv):
            nn.init.normal_(p, std=0.02)
        nn.init.normal_(self.wo, std=0.02 / math.sqrt(2 * cfg["n_layers"]))
        if conv:
            self.kernel = nn.Parameter(torch.randn(self.H, self.s) * 0.02)
            self.kernel_gain = nn.Parameter(torch.full((self.H,), 0.1))
            self.kernel_bias = nn.Parameter(torch.zeros(self.H))
        else:
            self.pos_bias = nn.Parameter(torch.zeros(self.s))

    def biases(self):
        """[H, s]: the position biases w as the C loader applies them."""
        if not self.conv:
            return self.pos_bias[None, :]
        mean = self.kernel.mean(1, keepdim=True)
        var = ((self.kernel - mean) ** 2).mean(1, keepdim=True)
        return self.kernel_gain[:, None] * (self.kernel - mean) / torch.sqrt(var + 1e-5) + self.kernel_bias[:, None]

    def forward(self, h):
        B, T, d = h.shape
        H, s = self.H, self.s
        q, k, v = F.linear(h, self.wq), F.linear(h, self.wk), F.linear(h, self.wv)
        t = torch.arange(T)
        dist = t[:, None] - t[None, :]
        w = self.biases().to(h.dtype)                                   # [H, s]
        b = torch.where((dist < s)[None], w[:, dist.clamp(0, s - 1)], torch.zeros((), dtype=h.dtype))
        Wm = torch.exp(b).masked_fill(~(dist >= 0)[None], 0.0)         # [H, T, T]
        e = torch.exp(k - k.amax(1, keepdim=True).detach())             # e^{k − max over the sequence}
        def heads(x):
            return x.view(B, T, H, d // H).transpose(1, 2)              # [B, H, T, d/H]
        num = torch.matmul(Wm, heads(e * v))
        den = torch.matmul(Wm, heads(e))
        y = (num / den).transpose(1, 2).reshape(B, T, d)
        return F.linear(torch.sigmoid(q) * y, self.wo)

    def exported_params(self):
        out = {"wq": self.wq, "wk": self.wk, "wv": self.wv, "wo": self.wo}
        if self.conv:
            out.update({"kernel": self.kernel, "kernel_gain": self.kernel_gain, "kernel_bias": self.kernel_bias})
        else:
            out["pos_bias"] = self.pos_bias
        return out

    def export(self):
        return self.exported_params()


WINDOW_MIXERS = {
    "window": WindowMixer,
    "aft_local": lambda cfg, i: AftWindowMixer(cfg, i, False),
    "aft_conv": lambda cfg, i: AftWindowMixer(cfg, i, True),
}
# ---- the linear-attention family (docs/KINDS.md) ----------------------------
# Each mixer's forward is the parallel (quadratic, causal) form; export()
# returns exactly the tensors recurrent/mixer_<kind>.c loads, and
# load(tensors, prefix, put) takes them back as they are.

def _heads(x, H, dh):
    B, T, _ = x.shape
    return x.view(B, T, H, dh).transpose(1, 2)           # [B, H, T, dh]


def _merge(o):
    B, H, T, dh = o.shape
    return o.transpose(1, 2).reshape(B, T, H * dh)


def _proj(d, n, std=0.02):
    p = nn.Parameter(torch.empty(n, d))
    nn.init.normal_(p, std=std)
    return p


class RetnetMixer(nn.Module):
    """Retention: o_t = dh^-1/2 sum_{j<=t} gamma^{t-j} (q_t.k_j) v_j per head,
    y = Wo (SiLU(Wg h) * GroupNorm_head(o)), group norm eps group_norm_eps."""
    tensor_names = ("wq", "wk", "wv", "wg", "wo", "gn_weight", "gn_bias")

    def __init__(self, d, H, dh, eps, n_layers):
        super().__init__()
        self.H, self.dh, self.eps = H, dh, eps
        self.wq, self.wk, self.wv, self.wg = (_proj(d, H * dh) for _ in range(4))
        self.wo = _proj(H * dh, d, 0.02 / math.sqrt(2 * n_layers))
        self.gn_weight = nn.Parameter(torch.ones(H * dh))
        self.gn_bias = nn.Parameter(torch.zeros(H * dh))
        # the paper's gamma_h = 1 - 2^(-5-h), fixed (not trained)
        self.register_buffer("decay", torch.tensor([1.0 - 2.0 ** (-5 - h) for h in range(H)]))

    def forward(self, h):
        H, dh = self.H, self.dh
        q, k, v = (_heads(F.linear(h, w), H, dh) for w in (self.wq, self.wk, self.wv))
        T = h.shape[1]
        t = torch.arange(T, device=h.device, dtype=h.dtype)
        dist = t[:, None] - t[None, :]
        logd = torch.log(self.decay.to(h.dtype))[:, None, None] * dist.clamp(min=0)
        D = torch.where(dist >= 0, torch.exp(logd), torch.zeros((), dtype=h.dtype))   # [H, T, T]
        o = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * D, v) / math.sqrt(dh)
        mean = o.mean(-1, keepdim=True)
        var = ((o - mean) ** 2).mean(-1, keepdim=True)
        o = _merge((o - mean) / torch.sqrt(var + self.eps)) * self.gn_weight + self.gn_bias
        return F.linear(F.silu(F.linear(h, self.wg)) * o, self.wo)

    def export(self):
        out = {n: getattr(self, n) for n in self.tensor_names}
        out["decay"] = self.decay
        return out

    def load(self, tensors, p, put):
        for n in self.tensor_names:
            put(getattr(self, n), p + n)
        put(self.decay, p + "decay")


def favor_omega(m, dh, seed):
    """The fixed, seeded FAVOR+ projection [m, dh]: blocks of dh orthogonal
    Gaussian directions with chi-distributed norms (Choromanski et al.)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    while len(rows) * dh < m:
        qm, _ = torch.linalg.qr(torch.randn(dh, dh, generator=g, dtype=torch.float64))
        rows.append(qm.T)
    w = torch.cat(rows, 0)[:m]
    norms = torch.randn(m, dh, generator=g, dtype=torch.float64).norm(dim=1)
    return (w * norms[:, None]).float()


class PerformerMixer(nn.Module):
    """FAVOR+ linear attention: phi(x)_f = exp(w_f.x^ - |x^|^2/2)/sqrt(m),
    x^ = x dh^-1/4; o_t = sum_j (phi~(q_t).phi~(k_j)) v_j / (sum_j phi~(q_t).phi~(k_j) + attn_eps)
    with the shifted features phi~ = exp(u - c) of the C side (a query by its
    own max exponent, keys by max_f |w_f|^2/2): the shifts cancel in the ratio
    but not against attn_eps, which is defined on this shifted form
    (docs/KINDS.md)."""
    tensor_names = ("wq", "wk", "wv", "wo")

    def __init__(self, d, H, dh, m, eps, n_layers, seed):
        super().__init__()
        self.H, self.dh, self.m, self.eps = H, dh, m, eps
        self.wq, self.wk, self.wv = (_proj(d, H * dh) for _ in range(3))
        self.wo = _proj(H * dh, d, 0.02 / math.sqrt(2 * n_layers))
        self.register_buffer("omega", favor_omega(m, dh, seed))

    def features(self, x, is_q):
        xs = x * self.dh ** -0.25
        u = torch.matmul(xs, self.omega.to(x.dtype).T) - 0.5 * (xs * xs).sum(-1, keepdim=True)
        if is_q:
            c = u.amax(-1, keepdim=True).detach()
        else:
            c = 0.5 * (self.omega.double() ** 2).sum(-1).max().to(x.dtype)
        return torch.exp(u - c)

    def forward(self, h):
        H, dh = self.H, self.dh
        q, k, v = (_heads(F.linear(h, w), H, dh) for w in (self.wq, self.wk, self.wv))
        fq, fk = self.features(q, True), self.features(k, False)
        T = h.shape[1]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=h.device))
        a = torch.matmul(fq, fk.transpose(-1, -2)).masked_fill(~mask, 0.0)
        o = torch.matmul(a, v) / (a.sum(-1, keepdim=True) + self.eps)
        return F.linear(_merge(o), self.wo)

    def export(self):
        out = {n: getattr(self, n) for n in self.tensor_names}
        out["omega"] = self.omega
        return out

    def load(self, tensors, p, put):
        for n in self.tensor_names:
            put(getattr(self, n), p + n)
        put(self.omega, p + "omega")


class CosformerMixer(nn.Module):
    """cosFormer: weight relu(q_t).relu(k_j) * w(t-j), w = cos(pi/2 (t-j)/M)
    (horizon; sequences of at most M tokens) or 1 + cos(pi (t-j)/M) (periodic)."""
    tensor_names = ("wq", "wk", "wv", "wo")

    def __init__(self, d, H, dh, M, periodic, eps, n_layers):
        super().__init__()
        self.H, self.dh, self.M, self.periodic, self.eps = H, dh, M, periodic, eps
        self.wq, self.wk, self.wv = (_proj(d, H * dh) for _ in range(3))
        self.wo = _proj(H * dh, d, 0.02 / math.sqrt(2 * n_layers))

    def forward(self, h):
        H, dh, T = self.H, self.dh, h.shape[1]
        if not self.periodic and T > self.M:
            raise ValueError("cosformer: %d tokens is past the horizon %d" % (T, self.M))
        q, k, v = (_heads(F.linear(h, w), H, dh) for w in (self.wq, self.wk, self.wv))
        t = torch.arange(T, device=h.device, dtype=h.dtype)
        dist = t[:, None] - t[None, :]
        if self.periodic:
            w = 1.0 + torch.cos(math.pi * dist / self.M)
        else:
            w = torch.cos(0.5 * math.pi * dist / self.M)
        w = torch.where(dist >= 0, w, torch.zeros((), dtype=h.dtype))
        a = torch.matmul(F.relu(q), F.relu(k).transpose(-1, -2)) * w
        o = torch.matmul(a, v) / (a.sum(-1, keepdim=True) + self.eps)
        return F.linear(_merge(o), self.wo)

    def export(self):
        return {n: getattr(self, n) for n in self.tensor_names}

    def load(self, tensors, p, put):
        for n in self.tensor_names:
            put(getattr(self, n), p + n)


class LinformerMixer(nn.Module):
    """Causal Linformer: s_t = sum_{j<=t} (q_t.k_j/sqrt(dh)) E[j],
    o_t = softmax(s_t) . sum_{j<=t} F[j] v_j^T; E, F [max_len, proj_len]."""
    tensor_names = ("wq", "wk", "wv", "wo", "proj_k", "proj_v")

    def __init__(self, d, H, dh, kp, N, n_layers):
        super().__init__()
        self.H, self.dh, self.kp, self.N = H, dh, kp, N
        self.wq, self.wk, self.wv = (_proj(d, H * dh) for _ in range(3))
        self.wo = _proj(H * dh, d, 0.02 / math.sqrt(2 * n_layers))
        self.proj_k = nn.Parameter(torch.randn(N, kp) / math.sqrt(kp))
        self.proj_v = nn.Parameter(torch.randn(N, kp) / math.sqrt(kp))

    def forward(self, h):
        H, dh, T = self.H, self.dh, h.shape[1]
        if T > self.N:
            raise ValueError("linformer: %d tokens is past max_len %d" % (T, self.N))
        q, k, v = (_heads(F.linear(h, w), H, dh) for w in (self.wq, self.wk, self.wv))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=h.device))
        A = (torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dh)).masked_fill(~mask, 0.0)
        E, Fv = self.proj_k[:T].to(h.dtype), self.proj_v[:T].to(h.dtype)
        s = torch.matmul(A, E)                                   # [B, H, T, kp]
        a = torch.softmax(s, -1)
        # o_t = sum_p a_tp sum_{j<=t} F[j, p] v_j = sum_{j<=t} (a_t . F[j]) v_j
        w = torch.matmul(a, Fv.T).masked_fill(~mask, 0.0)        # [B, H, T, T]
        return F.linear(_merge(torch.matmul(w, v)), self.wo)

    def export(self):
        return {n: getattr(self, n) for n in self.tensor_names}

    def load(self, tensors, p, put):
        for n in self.tensor_names:
            put(getattr(self, n), p + n)


class DeltaMixer(nn.Module):
    """Gated DeltaNet (recurrent/mixer_delta.c, docs/KINDS.md), per head:
    q, k, v = SiLU(conv_K(W·h)); q <- q/|q| dh^-1/2, k <- k/|k| (|x| = sqrt(sum x^2 + 1e-6));
    beta = sigmoid(Wb h), alpha = exp(-exp(a_log) softplus(Wa h + a_bias));
    S_t = alpha S_{t-1} (I - beta k k^T) + beta v k^T (S indexed [k][v]), o = S_t^T q;
    y = Wo concat_h(RMSNorm(o_h) * o_norm). The recurrence is stepped token by
    token (T small in training; exact, no chunked form needed here)."""
    tensor_names = ("wq", "wk", "wv", "wb", "wa", "wo", "conv_q", "conv_k", "conv_v", "a_log", "a_bias", "o_norm")

    def __init__(self, d, H, dh, K, eps, n_layers):
        super().__init__()
        self.H, self.dh, self.K, self.eps = H, dh, K, eps
        self.wq, self.wk, self.wv = (_proj(d, H * dh) for _ in range(3))
        self.wb, self.wa = _proj(d, H), _proj(d, H)
        self.wo = _proj(H * dh, d, 0.02 / math.sqrt(2 * n_layers))
        self.conv_q, self.conv_k, self.conv_v = (nn.Parameter(torch.randn(H * dh, K) / math.sqrt(K))
                                                 for _ in range(3))
        # Mamba-2 / Gated DeltaNet initialisation: A in [1, 16], dt in [1e-3, 1e-1]
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, H)))
        dt = torch.exp(torch.linspace(math.log(1e-3), math.log(1e-1), H))
        self.a_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))   # softplus^-1(dt)
        self.o_norm = nn.Parameter(torch.ones(dh))

    def forward(self, h):
        B, T, _ = h.shape
        H, dh, K = self.H, self.dh, self.K

        def conv(x, w):   # causal depthwise, w[:, K-1] weighs the current input
            return F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w[:, None, :], groups=w.shape[0]).transpose(1, 2)
        q, k, v = (F.silu(conv(F.linear(h, w), c)).view(B, T, H, dh)
                   for w, c in ((self.wq, self.conv_q), (self.wk, self.conv_k), (self.wv, self.conv_v)))
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dh)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(F.linear(h, self.wb))                                  # [B, T, H]
        alpha = torch.exp(-torch.exp(self.a_log) * F.softplus(F.linear(h, self.wa) + self.a_bias))
        S = torch.zeros(B, H, dh, dh, dtype=h.dtype, device=h.device)
        outs = []
        for t in range(T):
            kt, vt, qt = k[:, t], v[:, t], q[:, t]                                  # [B, H, dh]
            a, b = alpha[:, t, :, None], beta[:, t, :, None]
            sk = torch.einsum("bhij,bhi->bhj", S, kt)
            u = b * (vt - a * sk)
            S = a[..., None] * S + kt[..., :, None] * u[..., None, :]
            outs.append(torch.einsum("bhij,bhi->bhj", S, qt))
        o = torch.stack(outs, 1)                                                    # [B, T, H, dh]
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + self.eps) * self.o_norm
        return F.linear(o.reshape(B, T, H * dh), self.wo)

    def export(self):
        return {n: getattr(self, n) for n in self.tensor_names}

    def load(self, tensors, p, put):
        for n in self.tensor_names:
            put(getattr(self, n), p + n)


def family_mixer(kind, cfg, i):
    """One of the four, from flat-form config keys (top level), or None."""
    d, H, dh, L = cfg["d_model"], cfg.get("n_heads"), cfg.get("d_head"), cfg["n_layers"]
    if kind == "retnet":
        return RetnetMixer(d, H, dh, cfg.get("group_norm_eps", 1e-5), L)
    if kind == "performer":
        return PerformerMixer(d, H, dh, cfg["n_features"], cfg.get("attn_eps", 0.0), L, cfg.get("seed", 0) + i)
    if kind == "cosformer":
        return CosformerMixer(d, H, dh, cfg["horizon"], cfg.get("cos_mode", "horizon") == "periodic",
                              cfg.get("attn_eps", 1e-6), L)
    if kind == "linformer":
        return LinformerMixer(d, H, dh, cfg["proj_len"], cfg["max_len"], L)
    if kind == "delta":
        return DeltaMixer(d, H, dh, cfg.get("conv_size", 4), cfg.get("head_norm_eps", 1e-5), L)
    return None


class Block(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        d, eps = cfg["d_model"], cfg["norm_eps"]
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.ln2 = nn.LayerNorm(d, eps=eps)
        kind = cfg["mixers"][i]
        if kind == "linear":
            self.mixer = LinearMixer(d, cfg["n_heads"], cfg["d_head"], cfg["attn_eps"], i, cfg["n_layers"])
        elif kind == "aft":
            self.mixer = AftMixer(d, i, cfg["n_layers"])
        elif kind in WINDOW_MIXERS:
            self.mixer = WINDOW_MIXERS[kind](cfg, i)
        else:
            self.mixer = family_mixer(kind, cfg, i)
            if self.mixer is None:
                raise ValueError("unknown mixer %r" % kind)
        self.w1 = nn.Linear(d, cfg["d_ff"])
        self.w2 = nn.Linear(cfg["d_ff"], d)
        nn.init.normal_(self.w1.weight, std=0.02)
        nn.init.zeros_(self.w1.bias)
        nn.init.normal_(self.w2.weight, std=0.02 / math.sqrt(2 * cfg["n_layers"]))
        nn.init.zeros_(self.w2.bias)

    def forward(self, x):
        x = x + self.mixer(self.ln1(x))
        return x + self.w2(F.gelu(self.w1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg["vocab_size"] == 256
        if "linear" in cfg["mixers"]:
            assert cfg["feature_map"] == "elu1" and cfg["token_shift"] is True
        if "aft" in cfg["mixers"]:
            assert cfg["token_shift"] is True and cfg["aft_variant"] == "decay"
        assert len(cfg["mixers"]) == cfg["n_layers"]
        self.cfg = cfg
        d = cfg["d_model"]
        self.embed = nn.Embedding(256, d)
        nn.init.normal_(self.embed.weight, std=0.1)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg["n_layers"]))
        self.ln_f = nn.LayerNorm(d, eps=cfg["norm_eps"])
        self.head = nn.Linear(d, 256, bias=False)
        nn.init.normal_(self.head.weight, std=0.02)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.layers:
            x = blk(x)
        return self.head(self.ln_f(x))

    def export_tensors(self):
        """The tensors lind loads, by name, as float32 numpy arrays."""
        out = {"embed.weight": self.embed.weight, "ln_f.weight": self.ln_f.weight,
               "ln_f.bias": self.ln_f.bias, "head.weight": self.head.weight}
        for i, blk in enumerate(self.layers):
            p = "layers.%d." % i
            out.update({p + "ln1.weight": blk.ln1.weight, p + "ln1.bias": blk.ln1.bias,
                        p + "ln2.weight": blk.ln2.weight, p + "ln2.bias": blk.ln2.bias,
                        p + "ffn.w1": blk.w1.weight, p + "ffn.b1": blk.w1.bias,
                        p + "ffn.w2": blk.w2.weight, p + "ffn.b2": blk.w2.bias})
            for name, t in blk.mixer.export().items():
                out[p + "mixer." + name] = t
        return {k: v.detach().to(torch.float32).contiguous().numpy() for k, v in out.items()}

    @classmethod
    def from_tensors(cls, cfg, tensors, dtype=torch.float64):
        """A model computing with exactly the exported tensors (no reparametrization)."""
        m = cls(cfg)
        used = set()
        def put(param, name):
            src = torch.from_numpy(np.asarray(tensors[name], dtype=np.float32).copy())
            if tuple(param.shape) != tuple(src.shape):
                raise ValueError("%s: shape %s, expected %s" % (name, tuple(src.shape), tuple(param.shape)))
            param.data.copy_(src)
            used.add(name)
        with torch.no_grad():
            put(m.embed.weight, "embed.weight")
            put(m.ln_f.weight, "ln_f.weight"); put(m.ln_f.bias, "ln_f.bias")
            put(m.head.weight, "head.weight")
            for i, blk in enumerate(m.layers):
                p = "layers.%d." % i
                put(blk.ln1.weight, p + "ln1.weight"); put(blk.ln1.bias, p + "ln1.bias")
                put(blk.ln2.weight, p + "ln2.weight"); put(blk.ln2.bias, p + "ln2.bias")
                put(blk.w1.weight, p + "ffn.w1"); put(blk.w1.bias, p + "ffn.b1")
                put(blk.w2.weight, p + "ffn.w2"); put(blk.w2.bias, p + "ffn.b2")
                mx = blk.mixer
                if isinstance(mx, LinearMixer):
                    for n in ("wq", "wk", "wv", "wo", "mu_q", "mu_k", "mu_v"):
                        put(getattr(mx, n), p + "mixer." + n)
                    mx.fixed_gamma = torch.from_numpy(np.asarray(tensors[p + "mixer.decay"], np.float32).copy())
                    used.add(p + "mixer.decay")
                elif hasattr(mx, "exported_params"):
                    for n, prm in mx.exported_params().items():
                        put(prm, p + "mixer." + n)
                elif hasattr(mx, "load"):
                    mx.load(tensors, p + "mixer.", put)
                else:
                    for n in ("wr", "wk", "wv", "wo", "mu_r", "mu_k", "mu_v", "time_first"):
                        put(getattr(mx, n), p + "mixer." + n)
                    mx.fixed_time_decay = torch.from_numpy(np.asarray(tensors[p + "mixer.time_decay"], np.float32).copy())
                    used.add(p + "mixer.time_decay")
        extra = set(tensors) - used
        if extra:
            raise ValueError("unexpected tensors: %s" % sorted(extra))
        m = m.to(dtype)
        for blk in m.layers:
            mx = blk.mixer
            if isinstance(mx, LinearMixer):
                mx.fixed_gamma = mx.fixed_gamma.to(dtype)
            elif isinstance(mx, AftMixer):
                mx.fixed_time_decay = mx.fixed_time_decay.to(dtype)
        return m


# ---- safetensors (numpy only) ----------------------------------------------

def save_safetensors(path, tensors, half=False):
    """Write float32 tensors: 8-byte LE header length, JSON header padded with
    spaces to a multiple of 8, then the raw little-endian data. half: every
    2-D tensor as F16 instead (half the file; lind keeps matrices half in
    memory and widens tables to fp32 when it loads them)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        f16 = half and np.ndim(tensors[name]) == 2
        a = np.ascontiguousarray(tensors[name], dtype="<f2" if f16 else "<f4")
        header[name] = {"dtype": "F16" if f16 else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] not in ("F32", "F16"):
            raise ValueError("%s: dtype %s (only F32 and F16 here)" % (name, meta["dtype"]))
        s, e = meta["data_offsets"]
        dt = "<f4" if meta["dtype"] == "F32" else "<f2"
        out[name] = np.frombuffer(data[base + s:base + e], dtype=dt).astype(np.float32).reshape(meta["shape"])
    return out


def load_model_dir(path, dtype=torch.float64):
    with open(path + "/config.json") as f:
        cfg = json.load(f)
    return cfg, Model.from_tensors(cfg, load_safetensors(path + "/model.safetensors"), dtype)
