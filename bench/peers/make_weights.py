#!/usr/bin/python3
"""bench/peers/make_weights.py — one set of random weights in both engines'
formats, for `make bench-peers` (bench/peers/peers_bench.c).

    usage: bench/peers/make_weights.py OUTDIR {rwkv4-169m|rwkv7-0.1b|rwkv7-1.5b|mamba2-130m}

Draws the model once (numpy, a fixed seed), rounds every value to bfloat16,
and writes the same values as
  OUTDIR/lind/                 what lind loads, stored as BF16:
                               RWKV-4: a Hugging Face RwkvForCausalLM directory
                               (config.json + model.safetensors, via
                               tools/rwkv4_make.py's writer);
                               RWKV-7: BlinkDL's x070 .pth (torch.save) and
                               a small World vocabulary beside it
  OUTDIR/rwkv_cpp-FP32.bin     rwkv.cpp's ggml file (magic 'ggmf', version 101)
  OUTDIR/rwkv_cpp-FP16.bin     the same with its matrices in FP16, as rwkv.cpp's
                               convert_pytorch_to_ggml.py writes them
mamba2-130m: lind's directory only (a Hugging Face Mamba2ForCausalLM, via
tools/mamba2_ref.py's writer), rwkv.cpp having no Mamba.
(rwkv.cpp's Q8_0 and Q5_1 files are made from the FP32 one by rwkv.cpp's own
rwkv_quantize_model_file, called by the bench.) Because the values are
bf16-representable, the FP32 file and lind's BF16 file hold the same numbers.
The rwkv.cpp writer is this file's own, following rwkv.cpp's file format
(rwkv_file_format.inc) and the transformations of its converter: RWKV-4
time_decay stored as -exp(time_decay); RWKV-7's six att.x_* concatenated
into att.x_rwkvag and the LoRA matrices transposed; vectors, time_* and the
x070 small tensors kept FP32 in the FP16 file.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import rwkv4_make  # noqa: E402

SHAPES = {
    # RWKV-4 Pile 169M: d 768, 12 layers, ffn 3072, vocab 50277
    "rwkv4-169m": dict(arch=4, C=768, L=12, F=3072, V=50277),
    # RWKV-7 World 0.1B: d 768, 12 layers, heads of 64, ffn 3072, vocab 65536, LoRA 64/64/32/128
    "rwkv7-0.1b": dict(arch=7, C=768, L=12, F=3072, V=65536, N=64, dw=64, da=64, dv=32, dg=128),
    # RWKV-7 World 1.5B: d 2048, 24 layers, ffn 8192, LoRA 96/96/64/256
    "rwkv7-1.5b": dict(arch=7, C=2048, L=24, F=8192, V=65536, N=64, dw=96, da=96, dv=64, dg=256),
    # Mamba-2 130M (state-spaces/mamba2-130m): d 768, 24 layers, state 128, heads of 64, expand 2,
    # vocab 50288, tied embeddings; lind only (rwkv.cpp has no Mamba)
    "mamba2-130m": dict(arch="mamba2", C=768, L=24, V=50288, state=128, head_dim=64),
}


def bf16(a):
    return rwkv4_make.bf16_round(np.asarray(a, dtype=np.float32)).astype(np.float32)


def write_ggml(path, tensors, V, C, L, fp16):
    """tensors: list of (BlinkDL name, float32 array already in rwkv.cpp's layout)."""
    small = (".time_", ".k_k", ".k_a", ".r_k", ".x_rwkvag", ".x_k", ".w0", ".a0", ".v0")
    with open(path, "wb") as f:
        f.write(struct.pack("=iiiiii", 0x67676d66, 101, V, C, L, 1 if fp16 else 0))
        for name, a in tensors:
            half = fp16 and a.ndim > 1 and not any(s in name for s in small)
            data = a.astype("<f2" if half else "<f4")
            key = name.encode()
            f.write(struct.pack("=iii", a.ndim, len(key), 1 if half else 0))
            for dim in reversed(a.shape):   # ggml's order: the row length first
                f.write(struct.pack("=i", dim))
            f.write(key)
            f.write(np.ascontiguousarray(data).tobytes())


def rwkv4(outdir, s, seed):
    C, L, F, V = s["C"], s["L"], s["F"], s["V"]
    hf = [(n, bf16(a)) for n, a in rwkv4_make.random_tensors(C, C, F, L, V, seed)]
    cfg = rwkv4_make.config_json(C, C, F, L, V, 1e-5, 0, "BF16")
    rwkv4_make.write_model(os.path.join(outdir, "lind"), hf, cfg, "BF16")
    ren = {"rwkv.embeddings.weight": "emb.weight", "rwkv.ln_out.weight": "ln_out.weight",
           "rwkv.ln_out.bias": "ln_out.bias", "head.weight": "head.weight"}
    sub = [("pre_ln", "ln0"), ("attention.time_mix_key", "att.time_mix_k"),
           ("attention.time_mix_value", "att.time_mix_v"), ("attention.time_mix_receptance", "att.time_mix_r"),
           ("feed_forward.time_mix_key", "ffn.time_mix_k"), ("feed_forward.time_mix_receptance", "ffn.time_mix_r"),
           ("attention.", "att."), ("feed_forward.", "ffn.")]
    out = []
    for n, a in hf:
        if n in ren:
            k = ren[n]
        else:
            k = n[len("rwkv."):]
            for x, y in sub:
                if x in k:
                    k = k.replace(x, y)
                    break
        if ".time_" in k:
            a = a.reshape(-1)
        if k.endswith(".time_decay"):
            a = -np.exp(a.astype(np.float32))
        out.append((k, a.astype(np.float32)))
    return out


def rwkv7(outdir, s, seed):
    import torch
    import rwkv7_ref
    C, L, F, V, N = s["C"], s["L"], s["F"], s["V"], s["N"]
    rng = np.random.default_rng(seed)

    def rn(*shape, scale=1.0, mean=0.0):
        return bf16(rng.standard_normal(shape, dtype=np.float32) * scale + mean)

    def un(*shape):
        return bf16(rng.random(shape, dtype=np.float32))

    # BlinkDL's x070 layout (tools/rwkv7_ref.py), drawn here in float32 and
    # rounded to bf16; as BlinkDL's files, block 0 has no v LoRA (its value
    # is the residual's source)
    sd = {}
    for name, shp, scale, mean in rwkv7_ref.layout(V, C, C // N, L, F, s["dw"], s["da"], s["dv"], s["dg"],
                                                   emb_scale=1e-2, lora_scale=0.1, block0_v_lora=False):
        sd[name] = un(*shp) if scale is None else rn(*shp, scale=scale, mean=mean)
    os.makedirs(os.path.join(outdir, "lind"), exist_ok=True)
    # lind reads the World vocabulary beside a .pth: the small one of the
    # tests (token ids beyond it are still valid model inputs)
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "world_small.txt"),
                os.path.join(outdir, "lind", "rwkv_vocab_v20230424.txt"))
    torch.save({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in sd.items()},
               os.path.join(outdir, "lind", "RWKV-x070-bench-%s.pth" % os.path.basename(outdir.rstrip("/"))))
    out, xcat = [], {}
    for k, v in sd.items():   # convert_pytorch_to_ggml.py's x070 transformations
        if ".att.x_" in k:
            lk = k[:k.index(".att.")] + ".att.x_rwkvag"
            if lk not in xcat:
                xcat[lk] = []
                out.append((lk, None))
            xcat[lk].append(v)
            continue
        if any(t in k for t in (".w1", ".w2", ".a1", ".a2", ".v1", ".v2", ".g1", ".g2")):
            v = np.ascontiguousarray(v.T)
        out.append((k, v))
    return [(k, np.concatenate(xcat[k], axis=0) if v is None else v) for k, v in out]


def mamba2(outdir, s, seed):
    import mamba2_ref
    mamba2_ref.make(os.path.join(outdir, "lind"), hidden=s["C"], layers=s["L"], vocab=s["V"], state=s["state"],
                    head_dim=s["head_dim"], expand=2, n_groups=1, conv_kernel=4, tie=True, chunk_size=256,
                    dtype="BF16", seed=seed)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SHAPES:
        sys.exit("usage: make_weights.py OUTDIR {%s}" % "|".join(SHAPES))
    outdir, s = sys.argv[1], SHAPES[sys.argv[2]]
    os.makedirs(outdir, exist_ok=True)
    if s["arch"] == "mamba2":
        mamba2(outdir, s, 29)
    else:
        t = rwkv4(outdir, s, 29) if s["arch"] == 4 else rwkv7(outdir, s, 29)
    for fp16 in (0, 1) if s["arch"] != "mamba2" else ():
        write_ggml(os.path.join(outdir, "rwkv_cpp-%s.bin" % ("FP16" if fp16 else "FP32")), t, s["V"], s["C"],
                   s["L"], fp16)
    with open(os.path.join(outdir, "shape.json"), "w") as f:
        json.dump(dict(s, name=sys.argv[2]), f)
        f.write("\n")


if __name__ == "__main__":
    main()
