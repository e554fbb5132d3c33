#!/usr/bin/python3
"""tools/rwkv4_make.py — write a random RWKV-4 model in the Hugging Face layout.

The directory looks like what Hugging Face publishes for RwkvForCausalLM
(RWKV/rwkv-4-*-pile, converted by transformers' convert_rwkv_checkpoint_to_hf):

  config.json                    model_type "rwkv", architectures
                                 ["RwkvForCausalLM"], hidden_size, ...
  model.safetensors              one file, or
  model-0000N-of-0000M.safetensors + model.safetensors.index.json  (sharded)
  tokenizer.json                 a small byte-level BPE (GPT-2 byte<->unicode
                                 map, a few merges, <|endoftext|> = id 0)
  special_tokens_map.json, tokenizer_config.json   as HF repos carry them

Tensor names and shapes are HF's (H = hidden_size, A = attention_hidden_size,
I = intermediate_size, V = vocab_size):

  rwkv.embeddings.weight                       [V, H]
  rwkv.blocks.0.pre_ln.weight / .bias          [H]      block 0 only
  rwkv.blocks.i.ln1.weight / .bias             [H]
  rwkv.blocks.i.ln2.weight / .bias             [H]
  rwkv.blocks.i.attention.time_decay           [A]      raw: w = -exp(time_decay)
  rwkv.blocks.i.attention.time_first           [A]      the bonus u
  rwkv.blocks.i.attention.time_mix_key         [1, 1, H]
  rwkv.blocks.i.attention.time_mix_value       [1, 1, H]
  rwkv.blocks.i.attention.time_mix_receptance  [1, 1, H]
  rwkv.blocks.i.attention.key.weight           [A, H]
  rwkv.blocks.i.attention.value.weight         [A, H]
  rwkv.blocks.i.attention.receptance.weight    [A, H]
  rwkv.blocks.i.attention.output.weight        [H, A]
  rwkv.blocks.i.feed_forward.time_mix_key      [1, 1, H]
  rwkv.blocks.i.feed_forward.time_mix_receptance [1, 1, H]
  rwkv.blocks.i.feed_forward.key.weight        [I, H]
  rwkv.blocks.i.feed_forward.receptance.weight [H, H]
  rwkv.blocks.i.feed_forward.value.weight      [H, I]
  rwkv.ln_out.weight / .bias                   [H]
  head.weight                                  [V, H]   not tied to the embedding

Weights are stored un-rescaled (as trained): rescale_every is applied by the
runtime at inference (see tools/rwkv4_ref.py).

The random weights are drawn to give a well-conditioned model, so relative
errors measured on it mean something: LayerNorm gains near 1, time_decay
spread over [-6, 1.5] like trained checkpoints, time_first in [-1.5, 1.5],
projections scaled so each block adds O(1) to the residual and the logits
spread over a few units.

The safetensors writer is here (numpy only, no torch): 8-byte little-endian
header length, the JSON header (padded with spaces to a multiple of 8, with
"__metadata__": {"format": "pt"} as save_pretrained writes), then the data.
F32, F16 and BF16 (round to nearest even).

    usage: tools/rwkv4_make.py OUTDIR [--hidden 64] [--attention 64]
             [--intermediate 256] [--layers 2] [--vocab 300] [--eps 1e-5]
             [--rescale-every 0] [--dtype F32|F16|BF16] [--shards 1] [--seed 1]
"""
import argparse
import json
import os
import struct

import numpy as np

DTYPES = ("F32", "F16", "BF16")


# ---- safetensors -----------------------------------------------------------

def bf16_bits(a):
    """float array -> uint16 bfloat16 bit patterns, round to nearest even."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def bf16_round(a):
    """The float64 values of a rounded to bfloat16 (what a BF16 file holds)."""
    return (bf16_bits(a).astype("<u4") << 16).view("<f4").astype(np.float64)


def encode(a, dtype):
    """Raw little-endian bytes of array a stored as dtype."""
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    if dtype == "BF16":
        return bf16_bits(a).tobytes()
    raise ValueError("dtype %r: want one of %s" % (dtype, ", ".join(DTYPES)))


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float ndarray); all stored as dtype. Returns the
    data bytes written (for the index's total_size)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        b = encode(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return off


# ---- tokenizer.json ----------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's byte -> printable unicode character map (ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


# A few merges in ByteLevel spelling ("Ġ" is the space byte); each result is
# the next id after the 256 byte tokens.
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"),
          ("o", "n"), ("r", "e"), ("Ġ", "s"), ("a", "t"), ("e", "n"), ("Ġ", "w"),
          ("o", "r"), ("i", "s"), ("Ġ", "o"), ("e", "s"), ("Ġ", "c"), ("a", "n"),
          ("Ġ", "b"), ("e", "d")]


def tokenizer_json():
    """A Hugging Face tokenizer.json: id 0 <|endoftext|> (special), ids 1..256
    the bytes 0..255 in ByteLevel spelling, then one token per merge."""
    b2u = bytes_to_unicode()
    vocab = {"<|endoftext|>": 0}
    for b in range(256):
        vocab[b2u[b]] = 1 + b
    for a, b in MERGES:
        assert a in vocab and b in vocab and a + b not in vocab
        vocab[a + b] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                           "use_regex": True},
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in MERGES]},
    }


TOKENIZER_VOCAB = 1 + 256 + len(MERGES)


# ---- the model -------------------------------------------------------------

def random_tensors(H, A, I, L, V, seed):
    """HF-named tensors (name, float64 array), in HF's state-dict order."""
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    def ln(prefix):
        return [(prefix + ".weight", 1.0 + normal(H, 0.1)), (prefix + ".bias", normal(H, 0.05))]

    t = [("rwkv.embeddings.weight", normal((V, H), 1.0))]
    for i in range(L):
        p = "rwkv.blocks.%d." % i
        if i == 0:
            t += ln(p + "pre_ln")
        t += ln(p + "ln1") + ln(p + "ln2")
        a = p + "attention."
        t += [(a + "time_decay", rng.uniform(-6.0, 1.5, A)),
              (a + "time_first", rng.uniform(-1.5, 1.5, A)),
              (a + "time_mix_key", rng.uniform(0.0, 1.0, (1, 1, H))),
              (a + "time_mix_value", rng.uniform(0.0, 1.0, (1, 1, H))),
              (a + "time_mix_receptance", rng.uniform(0.0, 1.0, (1, 1, H))),
              # keys a bit wider than unit so the exp weights of wkv differ
              (a + "key.weight", normal((A, H), 1.5 / np.sqrt(H))),
              (a + "value.weight", normal((A, H), 1.0 / np.sqrt(H))),
              (a + "receptance.weight", normal((A, H), 1.0 / np.sqrt(H))),
              (a + "output.weight", normal((H, A), 0.8 / np.sqrt(A)))]
        f = p + "feed_forward."
        t += [(f + "time_mix_key", rng.uniform(0.0, 1.0, (1, 1, H))),
              (f + "time_mix_receptance", rng.uniform(0.0, 1.0, (1, 1, H))),
              (f + "key.weight", normal((I, H), 1.0 / np.sqrt(H))),
              (f + "receptance.weight", normal((H, H), 1.0 / np.sqrt(H))),
              (f + "value.weight", normal((H, I), 1.0 / np.sqrt(I)))]
    t += ln("rwkv.ln_out")
    t += [("head.weight", normal((V, H), 3.0 / np.sqrt(H)))]
    return t


def config_json(H, A, I, L, V, eps, rescale_every, dtype):
    return {
        "architectures": ["RwkvForCausalLM"],
        "attention_hidden_size": A,
        "bos_token_id": 0,
        "context_length": 1024,
        "eos_token_id": 0,
        "hidden_size": H,
        "intermediate_size": I,
        "layer_norm_epsilon": eps,
        "model_type": "rwkv",
        "num_hidden_layers": L,
        "rescale_every": rescale_every,
        "tie_word_embeddings": False,
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
        "transformers_version": "4.30.0",
        "use_cache": True,
        "vocab_size": V,
    }


def write_model(outdir, tensors, cfg, dtype="F32", shards=1):
    """Write config.json, the weights (one file or `shards` files + index) and
    tokenizer.json into outdir."""
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(outdir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f, indent=1, ensure_ascii=False)
        f.write("\n")
    # The two small files HF repos carry beside tokenizer.json.
    eot = "<|endoftext|>"
    side = {"special_tokens_map.json": {"bos_token": eot, "eos_token": eot, "unk_token": eot},
            "tokenizer_config.json": {"add_prefix_space": False, "bos_token": eot, "eos_token": eot,
                                      "unk_token": eot, "tokenizer_class": "GPTNeoXTokenizer"}}
    for name, obj in side.items():
        with open(os.path.join(outdir, name), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
    if shards <= 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), tensors, dtype)
        return
    # Consecutive runs of tensors, about equal in count, like HF's shard split.
    n = len(tensors)
    bounds = [round(k * n / shards) for k in range(shards + 1)]
    weight_map, total = {}, 0
    for k in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        part = tensors[bounds[k]:bounds[k + 1]]
        total += write_safetensors(os.path.join(outdir, name), part, dtype)
        for tname, _ in part:
            weight_map[tname] = name
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def make(outdir, hidden=64, attention=None, intermediate=None, layers=2, vocab=300, eps=1e-5,
         rescale_every=0, dtype="F32", shards=1, seed=1):
    """Draw a random model and write it; returns (config dict, tensors)."""
    A = attention if attention else hidden
    I = intermediate if intermediate else 4 * hidden
    if vocab < TOKENIZER_VOCAB:
        raise ValueError("vocab %d is below the tokenizer's %d tokens" % (vocab, TOKENIZER_VOCAB))
    tensors = random_tensors(hidden, A, I, layers, vocab, seed)
    cfg = config_json(hidden, A, I, layers, vocab, eps, rescale_every, dtype)
    write_model(outdir, tensors, cfg, dtype, shards)
    return cfg, tensors


def main():
    ap = argparse.ArgumentParser(description="write a random RWKV-4 model in the Hugging Face layout")
    ap.add_argument("outdir")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--attention", type=int, default=0, help="attention_hidden_size (default: hidden)")
    ap.add_argument("--intermediate", type=int, default=0, help="default: 4 * hidden")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--eps", type=float, default=1e-5, help="layer_norm_epsilon")
    ap.add_argument("--rescale-every", type=int, default=0)
    ap.add_argument("--dtype", choices=DTYPES, default="F32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    make(a.outdir, a.hidden, a.attention, a.intermediate, a.layers, a.vocab, a.eps, a.rescale_every,
         a.dtype, a.shards, a.seed)


if __name__ == "__main__":
    main()
