#!/bin/sh
# bench/kernel_ab.sh — an A/B of the CPU kernels of two git revisions, call
# by call in one process (bench/kernel_ab_bench.c says why).
#
#   sh bench/kernel_ab.sh REV_A REV_B [kernel_ab_bench options]
#
# REV is any git revision, or "." for the working tree. Each side's
# kernels/cpu/gemm.c, quant.c and pool.c (with that revision's headers) are
# built into a shared object under build/kernel_ab/ with the Makefile's
# flags; then build/bench/kernel_ab_bench times them. Example: the AMX
# kernel at B = 64 on the head's shape, the last commit against the tree:
#
#   sh bench/kernel_ab.sh HEAD . --kernel amx --n 50277 --k 768 --batch 64 --calls 60
set -eu
[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build/kernel_ab
mkdir -p "$out"
make -s build/bench/kernel_ab_bench
so() {   # rev name
    src=$out/src-$2
    rm -rf "$src"
    mkdir -p "$src"
    if [ "$1" = . ]; then
        cp -r kernels "$src/"
    else
        git archive "$1" kernels | tar -x -C "$src"
    fi
    ${CC:-cc} -std=gnu11 -O3 -march=native -D_GNU_SOURCE -fno-strict-aliasing -fPIC -shared \
        -Wl,-Bsymbolic -I"$src" "$src/kernels/cpu/gemm.c" "$src/kernels/cpu/quant.c" \
        "$src/kernels/cpu/pool.c" -o "$out/$2.so" -lpthread -lm
    rm -rf "$src"
}
so "$1" a
so "$2" b
shift 2
echo "| kernel | N × K | B | threads | weights | A µs | B µs | A/B | A/B, quartiles | GFLOP/s A / B | same bits |"
echo "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
exec build/bench/kernel_ab_bench "$out/a.so" "$out/b.so" "$@"
