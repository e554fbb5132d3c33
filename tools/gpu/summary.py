#!/usr/bin/python3
"""The GPU check's table (tools/gpu/check.sh): each STEP line of step_bench
against the ceilings (CEIL lines of tools/gpu/ceilings) measured in the same
run.

Per step of B sessions:
  memory roofline  = (weight bytes + 2 x state bytes x B) / copy bandwidth
                     (the weights read once, each state read and written);
  host link        = B x vocab x 4 logits bytes / pinned device-to-host rate
                     (lind downloads every row's logits to sample on the host,
                     into page-locked memory: model_logits_alloc);
  arithmetic       = B x FLOP per token / cuBLAS rate (fp32, or bf16 with
                     LIND_CUDA_WEIGHTS=bf16 — label ending "bf16").
The bound is the largest of the three; "% of bound" is bound / measured.

    summary.py BENCH_TXT
"""
import sys


def main():
    ceil, rows = {}, []
    for line in open(sys.argv[1]):
        f = line.split()
        if not f:
            continue
        if f[0] == "CEIL":
            ceil[f[1]] = float(f[2])
        elif f[0] == "STEP":
            rows.append(f[1:])
    bw = ceil.get("copy_d2d", 0) * 1e9
    d2h = ceil.get("copy_d2h_pinned", 0) * 1e9
    print("ceilings: copy %.0f GB/s (read + write), d2h pinned %.1f GB/s (pageable %.1f), SGEMM fp32 %.1f TFLOP/s, "
          "bf16 %.1f TFLOP/s" % (bw / 1e9, d2h / 1e9, ceil.get("copy_d2h_pageable", 0), ceil.get("sgemm_fp32", 0),
                                 ceil.get("gemm_bf16", 0)))
    print("%-22s %-5s %5s %9s %10s %9s %9s %9s %-6s %7s" % ("model", "mode", "B", "ms/step", "tok/s", "mem ms",
                                                             "d2h ms", "flop ms", "bound", "% bound"))
    for r in rows:
        label, _backend, mode, B = r[0], r[1], r[2], int(r[3])
        ms, wmb, skb, lmb, gf = float(r[4]), float(r[7]), float(r[8]), float(r[9]), float(r[10])
        tps = B / (ms / 1e3)
        mem = (wmb * 1e6 + 2 * skb * 1e3 * B) / bw * 1e3 if bw else float("nan")
        link = lmb * 1e6 / d2h * 1e3 if d2h else float("nan")
        rate = ceil.get("gemm_bf16" if label.endswith("bf16") else "sgemm_fp32", 0) * 1e12
        flop = B * gf * 1e9 / rate * 1e3 if rate else float("nan")
        bounds = {"mem": mem, "d2h": link, "flop": flop}
        which = max(bounds, key=lambda k: bounds[k])
        print("%-22s %-5s %5d %9.4f %10.0f %9.4f %9.4f %9.4f %-6s %6.1f%%" % (label[:22], mode, B, ms, tps, mem, link,
                                                                          flop, which, 100 * bounds[which] / ms))


if __name__ == "__main__":
    main()
