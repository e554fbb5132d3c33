"""tests/test_model_rwkv4_torch.py — lind against a live PyTorch reference on
fresh random Hugging Face RWKV-4 models.

The committed fixtures (tests/test_model_rwkv4.c) pin three shapes; this
draws other ones each run — attention_hidden_size below and above
hidden_size, rescale_every 1 and 3 and one larger than the depth, F16 / BF16 /
F32 files, one to four shards — writes them with tools/rwkv4_make.py, and
checks:
  - the reference's two forms agree (tools/rwkv4_ref.py: the token-by-token
    num/den/max recurrence in numpy vs the causal-softmax parallel form in
    torch), and its rescale_every matches a third formulation written here:
    the un-rescaled model whose LayerNorms see x / 2^(halvings so far) —
    what halving the stream and scaling the output weights amounts to;
  - the written directory is HF's layout (names, shapes, index, tokenizer);
  - `lind logits --model DIR --tokens FILE --out FILE` (float32 logits for
    every position) is within 1e-4 relative of the reference at every
    position. SKIPs that case while build/lind has no `logits` command.
Skips entirely when python3-torch is not installed.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP rwkv4_torch: %s (python3-torch / python3-numpy not installed)" % e)
    sys.exit(0)

import rwkv4_make  # noqa: E402
import rwkv4_ref  # noqa: E402

TOL = 1e-4
POSITIONS = 300
SHAPES = [
    dict(name="h32_a48_l4_r1_f16", hidden=32, attention=48, intermediate=96, layers=4, vocab=290,
         eps=1e-5, rescale_every=1, dtype="F16", shards=1, seed=11),
    dict(name="h80_a40_l5_r3_bf16_2shards", hidden=80, attention=40, intermediate=200, layers=5, vocab=400,
         eps=5e-4, rescale_every=3, dtype="BF16", shards=2, seed=12),
    dict(name="h96_l1_r6_f32_4shards", hidden=96, attention=96, intermediate=384, layers=1, vocab=277,
         eps=1e-5, rescale_every=6, dtype="F32", shards=4, seed=13),
]

failed = 0


def case(name, ok, why=""):
    global failed
    if ok:
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def ln_scaled_logits(cfg, t, tokens):
    """HF's rescale_every, formulated differently: the *un-rescaled* model,
    whose LayerNorms (ln1, ln2 of block i, and ln_out) see the residual stream
    divided by 2^(number of halvings HF has done by then). Equal to HF's
    rescaled model because division by 2 is exact and every block is linear in
    its residual contribution's output weight."""
    R, L = cfg["rescale_every"], cfg["num_hidden_layers"]
    tt = {k: torch.from_numpy(v) for k, v in t.items()}
    eps = cfg["layer_norm_epsilon"]

    def ln(x, p, e, scale):
        return torch.nn.functional.layer_norm(x / scale, x.shape[-1:], tt[p + ".weight"], tt[p + ".bias"], e)

    def shift(h):
        return torch.cat([torch.zeros_like(h[:1]), h[:-1]], 0)

    x = tt["rwkv.embeddings.weight"][torch.as_tensor(np.asarray(tokens, np.int64))]
    x = ln(x, "rwkv.blocks.0.pre_ln", eps, 1.0)
    for i in range(L):
        p = "rwkv.blocks.%d." % i
        s = 2.0 ** (i // R) if R > 0 else 1.0
        h = ln(x, p + "ln1", eps, s)
        hp = shift(h)
        g = lambda n: tt[p + n]  # noqa: E731
        mix = lambda m: m.reshape(-1) * h + (1 - m.reshape(-1)) * hp  # noqa: E731
        k = mix(g("attention.time_mix_key")) @ g("attention.key.weight").T
        v = mix(g("attention.time_mix_value")) @ g("attention.value.weight").T
        r = torch.sigmoid(mix(g("attention.time_mix_receptance")) @ g("attention.receptance.weight").T)
        w, u = -torch.exp(g("attention.time_decay")), g("attention.time_first")
        num, den, mx = torch.zeros_like(k[0]), torch.zeros_like(k[0]), torch.full_like(k[0], -1e38)
        out = []
        for j in range(k.shape[0]):
            q = torch.maximum(mx, u + k[j])
            a, b = torch.exp(mx - q), torch.exp(u + k[j] - q)
            out.append((a * num + b * v[j]) / (a * den + b))
            q = torch.maximum(mx + w, k[j])
            a, b = torch.exp(mx + w - q), torch.exp(k[j] - q)
            num, den, mx = a * num + b * v[j], a * den + b, q
        x = x + (r * torch.stack(out)) @ g("attention.output.weight").T
        h = ln(x, p + "ln2", eps, s)
        hp = shift(h)
        kk = torch.relu(mix(g("feed_forward.time_mix_key")) @ g("feed_forward.key.weight").T) ** 2
        rr = torch.sigmoid(mix(g("feed_forward.time_mix_receptance")) @ g("feed_forward.receptance.weight").T)
        x = x + rr * (kk @ g("feed_forward.value.weight").T)
    s_out = 2.0 ** (L // R) if R > 0 else 1.0
    x = ln(x, "rwkv.ln_out", rwkv4_ref.LN_OUT_EPS, s_out)
    return (x @ tt["head.weight"].T).numpy()


def expected_shapes(cfg):
    H, A, I, V, L = (cfg[k] for k in ("hidden_size", "attention_hidden_size", "intermediate_size",
                                       "vocab_size", "num_hidden_layers"))
    e = {"rwkv.embeddings.weight": [V, H], "rwkv.ln_out.weight": [H], "rwkv.ln_out.bias": [H],
         "head.weight": [V, H], "rwkv.blocks.0.pre_ln.weight": [H], "rwkv.blocks.0.pre_ln.bias": [H]}
    for i in range(L):
        p = "rwkv.blocks.%d." % i
        for n in ("ln1", "ln2"):
            e[p + n + ".weight"] = e[p + n + ".bias"] = [H]
        a, f = p + "attention.", p + "feed_forward."
        e.update({a + "time_decay": [A], a + "time_first": [A], a + "time_mix_key": [1, 1, H],
                  a + "time_mix_value": [1, 1, H], a + "time_mix_receptance": [1, 1, H],
                  a + "key.weight": [A, H], a + "value.weight": [A, H], a + "receptance.weight": [A, H],
                  a + "output.weight": [H, A], f + "time_mix_key": [1, 1, H], f + "time_mix_receptance": [1, 1, H],
                  f + "key.weight": [I, H], f + "receptance.weight": [H, H], f + "value.weight": [H, I]})
    return e


def headers(mdir):
    """file -> safetensors header dict, for every weight file of mdir."""
    out = {}
    for fn in sorted(os.listdir(mdir)):
        if fn.endswith(".safetensors"):
            with open(os.path.join(mdir, fn), "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                out[fn] = (n, json.loads(f.read(n)))
    return out


def check_layout(sh, mdir):
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    why = []
    for k, v in (("model_type", "rwkv"), ("architectures", ["RwkvForCausalLM"]), ("bos_token_id", 0),
                 ("eos_token_id", 0), ("tie_word_embeddings", False), ("hidden_size", sh["hidden"]),
                 ("attention_hidden_size", sh["attention"]), ("rescale_every", sh["rescale_every"])):
        if cfg.get(k) != v:
            why.append("config %s = %r, want %r" % (k, cfg.get(k), v))
    want = expected_shapes(cfg)
    got, where = {}, {}
    for fn, (n, h) in headers(mdir).items():
        if n % 8:
            why.append("%s: header length %d not a multiple of 8" % (fn, n))
        for name, d in h.items():
            if name == "__metadata__":
                continue
            got[name], where[name] = d["shape"], fn
            if d["dtype"] != sh["dtype"]:
                why.append("%s: %s dtype %s" % (fn, name, d["dtype"]))
    if got != want:
        why.append("tensors differ from HF's: missing %s, extra %s, shapes %s" % (
            sorted(set(want) - set(got))[:3], sorted(set(got) - set(want))[:3],
            [k for k in want if k in got and got[k] != want[k]][:3]))
    idx = os.path.join(mdir, "model.safetensors.index.json")
    if sh["shards"] > 1:
        wm = json.load(open(idx))["weight_map"] if os.path.exists(idx) else {}
        if wm != where:
            why.append("index weight_map does not match the shards' contents")
        names = sorted(set(where.values()))
        if names != ["model-%05d-of-%05d.safetensors" % (k + 1, sh["shards"]) for k in range(sh["shards"])]:
            why.append("shard files %s" % names)
    elif os.path.exists(idx) or list(headers(mdir)) != ["model.safetensors"]:
        why.append("single-file model should be model.safetensors alone")
    tok = json.load(open(os.path.join(mdir, "tokenizer.json"), encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    b2u = rwkv4_make.bytes_to_unicode()
    if (tok["added_tokens"][0]["content"], tok["added_tokens"][0]["id"]) != ("<|endoftext|>", 0) \
            or any(vocab[b2u[b]] != 1 + b for b in range(256)) or len(set(vocab.values())) != len(vocab) \
            or len(vocab) > cfg["vocab_size"]:
        why.append("tokenizer.json is not the byte-level BPE expected")
    case("rwkv4_make_hf_layout_" + sh["name"], not why, "; ".join(why))


def lind_binary():
    b = os.path.join(ROOT, os.environ.get("LIND_BUILD", "build"), "lind")
    if not os.path.exists(b):
        return None, "%s not built" % b
    h = subprocess.run([b, "--help"], capture_output=True, text=True)
    if not any(line.strip().startswith("logits ") for line in h.stdout.splitlines()):
        return None, "%s has no `logits` subcommand yet (`lind logits --model DIR --tokens FILE --out FILE`)" % b
    return b, ""


def main():
    torch.set_num_threads(2)
    lind, why_not = lind_binary()
    with tempfile.TemporaryDirectory(prefix="lind_rwkv4_") as tmp:
        for sh in SHAPES:
            mdir = os.path.join(tmp, sh["name"])
            args = {k: v for k, v in sh.items() if k != "name"}
            rwkv4_make.make(mdir, **args)
            check_layout(sh, mdir)
            cfg, t = rwkv4_ref.load_dir(mdir)
            rng = np.random.default_rng(sh["seed"] + 500)
            tokens = rng.integers(0, sh["vocab"], POSITIONS).astype("<i4")
            tokens[0] = 0
            ref = rwkv4_ref.rnn_logits(cfg, t, tokens)
            e_par = rwkv4_ref.rel_err(rwkv4_ref.parallel_logits(cfg, t, tokens), ref)
            e_ln = rwkv4_ref.rel_err(ln_scaled_logits(cfg, t, tokens), ref)
            case("rwkv4_ref_forms_agree_" + sh["name"], e_par < 1e-12 and e_ln < 1e-12,
                 "parallel form %.3g, LN-scaled rescale %.3g (want < 1e-12)" % (e_par, e_ln))
            name = "rwkv4_lind_logits_" + sh["name"]
            if lind is None:
                print("SKIP %s: %s" % (name, why_not))
                continue
            tok_path, out_path = os.path.join(tmp, "tokens.i32"), os.path.join(tmp, "logits.f32")
            tokens.tofile(tok_path)
            r = subprocess.run([lind, "logits", "--model", mdir, "--tokens", tok_path, "--out", out_path],
                               capture_output=True, text=True)
            if r.returncode != 0:
                case(name, False, "lind logits exited %d: %s" % (r.returncode, (r.stderr or r.stdout).strip()[-300:]))
                continue
            got = np.fromfile(out_path, dtype="<f4")
            if got.size != POSITIONS * sh["vocab"]:
                case(name, False, "%d floats, want %d x %d" % (got.size, POSITIONS, sh["vocab"]))
                continue
            got = got.reshape(POSITIONS, sh["vocab"])
            rows = np.abs(got - ref).max(1) / np.abs(ref).max(1)
            worst = int(np.nanargmax(rows)) if not np.isnan(rows).any() else int(np.argmax(np.isnan(rows)))
            print("NOTE rwkv4_lind_logits %s: worst relative error %.3g (position %d)" % (
                sh["name"], rows[worst], worst))
            case(name, bool(np.all(rows <= TOL)), "relative error %.3g at position %d > %g" % (
                rows[worst], worst, TOL))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
