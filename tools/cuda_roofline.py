#!/usr/bin/python3
"""Roofline of one lind decode step on the CUDA backend (docs/CUDA.md).

Counts, for a model config and a batch of B sessions stepping one token:
the bytes the step must move through device memory (weights once, each
session's state read and written, the activations between kernels) and the
FLOPs (GEMMs in fp32, mixer updates in fp64), then the time each implies on
a device with the given bandwidth and peak rates, and the tokens/s bound.

    /usr/bin/python3 tools/cuda_roofline.py                    # the docs' table
    /usr/bin/python3 tools/cuda_roofline.py models/default/config.json
    /usr/bin/python3 tools/cuda_roofline.py --weights bf16     # LIND_CUDA_WEIGHTS=bf16

Device defaults are the NVIDIA H100 SXM5 datasheet figures (not measured).
The byte counts follow kernels/cuda/ exactly: fp32 weights, states laid
out as recurrent/ lays them (S, z per linear layer in fp64; num, den, max
per AFT layer, fp32 where the decay allows, which the shipped model's does;
one fp32 token-shift vector per layer), and every activation
buffer written by one kernel and read by the next through device memory.
"""
import argparse
import json
import os
import sys

H100 = {"name": "H100 SXM5", "bw": 3.35e12, "fp32": 66.9e12, "fp64": 33.5e12, "bf16": 989.4e12}


DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "default", "config.json")


def config(d, L, H, ff, mixers, shift=True):
    return {"d_model": d, "n_layers": L, "n_heads": H, "d_head": d // H, "d_ff": ff,
            "mixers": (mixers * L)[:L], "token_shift": shift, "aft_variant": "decay"}


def default_model():
    """The shipped model: models/default/config.json when present, else its
    shape as shipped (4 × 192, linear/aft, 6 heads × 32, d_ff 768)."""
    try:
        with open(DEFAULT_CONFIG) as f:
            c = json.load(f)
    except FileNotFoundError:
        c = config(192, 4, 6, 768, ["linear", "aft"])
    kinds = list(dict.fromkeys(c["mixers"]))
    return ("default (%d×%d, %s, d_ff %d)" % (c["n_layers"], c["d_model"], "/".join(kinds), c["d_ff"]), c)


def step_cost(c, B, bf16=False):
    """bf16: LIND_CUDA_WEIGHTS=bf16 — matrices read as bf16 (2 bytes), and
    each GEMM input read once more in fp32 and written and read in bf16
    (one extra float's worth of bytes per input element)."""
    d, H, dh, ff = c["d_model"], c["n_heads"], c["d_head"], c["d_ff"]
    HD = H * dh
    shift = bool(c["token_shift"])
    mat_params = 256 * d                    # head (embedding: only B rows are read)
    vec_params = 2 * d                      # ln_f
    state = 0                               # bytes per session
    act = 0                                 # floats moved per session
    gemm_flops = 2 * 256 * d                # head, per session
    mix_flops = 0                           # fp64, per session
    launches = 3                            # embed, ln_f, head GEMM
    aft_vec = 2 * d if c.get("aft_variant", "decay") == "decay" else 0   # time_decay, time_first
    for kind in c["mixers"]:
        n = HD if kind == "linear" else d   # width of q/k/v (r/k/v)
        mat_params += 3 * n * d + d * n + 2 * d * ff
        vec_params += 4 * d + ff + d + (3 * d if shift else 0) + (H if kind == "linear" else aft_vec)
        gemm_flops += 2 * (3 * n * d + d * n + 2 * d * ff)
        if kind == "linear":
            state += 8 * H * dh * (dh + 1)  # S and z, fp64
            mix_flops += 5 * H * dh * dh    # γS + φk·v and Σ φq·S per element
        elif c.get("aft_variant", "decay") == "decay":
            # num, den, max in fp32: lind keeps them so when every channel's
            # memory is short (docs/NUMERICS.md; the shipped model's is); a
            # config cannot say, so a slower-decaying model has 12·d more
            state += 4 * 3 * d
        else:
            state += 8 * 3 * d              # AFT-simple: never decays, fp64
        if kind != "linear":
            mix_flops += 100 * d            # ≈20 operations and 4 exp (≈20 each) per channel, in double
        if shift:
            state += 4 * d
        # floats each kernel reads + writes, per session:
        act += 2 * d                        # LN1: x → h
        act += 6 * d if shift else 0        # shift_mix: h, prev → 3 mixes, prev
        act += (3 * d if shift else d) + 3 * n   # q/k/v GEMMs
        act += 4 * n                        # mixer step: 3n in, n out
        act += n + 2 * d                    # Wo GEMM, accumulating into x
        act += 2 * d                        # LN2
        act += d + 3 * ff                   # bias rows + W1 GEMM (β = 1)
        act += 2 * ff                       # GELU in place
        act += ff + 4 * d                   # bias rows + W2 GEMM accumulating
        launches += 13 if shift else 11
        if bf16:                            # GEMM inputs: q/k/v, Wo, W1, W2
            act += (3 * d if shift else d) + n + d + ff
            launches += 6 if shift else 4
    act += 2 * d + 2 * d + d + 256          # embed, ln_f, head
    if bf16:
        act += d
        launches += 1
    wbytes = (2 if bf16 else 4) * mat_params + 4 * vec_params
    return {
        "weights": wbytes,
        "state_rw": 2 * state * B,
        "state": state,
        "act": 4 * act * B,
        "flops32": gemm_flops * B,
        "flops64": mix_flops * B,
        "launches": launches,
        "params": mat_params + vec_params + 256 * d,
    }


def roofline(c, B, dev, bf16=False):
    s = step_cost(c, B, bf16)
    t_mem = (s["weights"] + s["state_rw"] + s["act"]) / dev["bw"]
    t_cmp = s["flops32"] / dev["bf16" if bf16 else "fp32"] + s["flops64"] / dev["fp64"]
    return s, t_mem, t_cmp, max(t_mem, t_cmp)


def fmt_bytes(x):
    return "%.1f MB" % (x / 1e6) if x >= 1e5 else "%.1f kB" % (x / 1e3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", help="config.json files (default: models/default and the two 12×768 models of docs/CUDA.md)")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--bw", type=float, default=H100["bw"], help="memory bandwidth, bytes/s")
    ap.add_argument("--fp32", type=float, default=H100["fp32"], help="fp32 peak, FLOP/s")
    ap.add_argument("--fp64", type=float, default=H100["fp64"], help="fp64 peak, FLOP/s")
    ap.add_argument("--bf16", type=float, default=H100["bf16"], help="bf16 tensor-core peak (dense), FLOP/s")
    ap.add_argument("--weights", choices=["fp32", "bf16"], default="fp32", help="GEMM precision (LIND_CUDA_WEIGHTS)")
    a = ap.parse_args()
    dev = {"bw": a.bw, "fp32": a.fp32, "fp64": a.fp64, "bf16": a.bf16}
    models = []
    for p in a.configs:
        with open(p) as f:
            models.append((p, json.load(f)))
    if not models:
        models = [default_model(),
                  ("12×768, linear/aft, d_ff 3072", config(768, 12, 12, 3072, ["linear", "aft"])),
                  ("12×768, all linear, d_ff 3072", config(768, 12, 12, 3072, ["linear"]))]
    print("| model | B | weights | state r+w | activations | GEMM FLOP | fp64 FLOP | t_mem | t_compute "
          "| bound | tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, c in models:
        for B in (int(x) for x in a.batches.split(",")):
            s, tm, tc, t = roofline(c, B, dev, a.weights == "bf16")
            print("| %s | %d | %s | %s | %s | %.3g G | %.3g M | %.1f µs | %.1f µs | %s | %s |" % (
                name, B, fmt_bytes(s["weights"]), fmt_bytes(s["state_rw"]), fmt_bytes(s["act"]),
                s["flops32"] / 1e9, s["flops64"] / 1e6, tm * 1e6, tc * 1e6,
                "memory" if tm >= tc else "compute", "{:,.0f}".format(B / t)))
    print()
    for name, c in models:
        s = step_cost(c, 1, a.weights == "bf16")
        print("%s: %d parameters, %d state bytes per session, %d kernel launches per step"
              % (name, s["params"], s["state"], s["launches"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
