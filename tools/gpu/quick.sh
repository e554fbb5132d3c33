#!/bin/sh
# tools/gpu/quick.sh — the short GPU check for one change to the products:
# correctness of the ops and recorded steps on the device
# (LIND_CUDA_TEST_SHORT=1 test_cuda_backend, then the whole default model),
# and batch 1 and 8 decode step times of the default model and the 12 x 768
# RWKV-4 (169M) shape with kb_gemv off (LIND_CUDA_GEMV=0: every fp32 product
# in cuBLAS) and on, in the same run on the same device. For a session with
# a few minutes of device time left; tools/gpu/check.sh is the full check.
#
#   sh tools/gpu/quick.sh OUTDIR     (carry build-gpu/carry: make gpu-check-build)
OUT=${1:-${OUT:-build-gpu/quick-out}}
mkdir -p "$OUT"
B=build-gpu/bin
mkdir -p "$B"
for p in test_cuda_backend step_bench; do
    if [ -f "build-gpu/carry/$p.xz" ]; then xz -dc "build-gpu/carry/$p.xz" >"$B/$p" && chmod +x "$B/$p"; fi
    [ -x "$B/$p" ] || { echo "FAIL programs: $p missing (make gpu-check-build, carry build-gpu/carry)"; exit 1; }
done
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
M=/tmp/lind_rwkv4_169m
timeout -k 5 60 python3 tools/rwkv4_make.py "$M" --hidden 768 --layers 12 --vocab 50277 --dtype F32 --seed 7 \
    >"$OUT/make.log" 2>&1 &
mk=$!
LIND_CUDA_TEST_SHORT=1 timeout -k 5 60 "$B/test_cuda_backend" >"$OUT/test_cuda_backend.log" 2>&1
echo "correctness: exit $? ($(grep -c '^PASS' "$OUT/test_cuda_backend.log") PASS, $(grep -c '^FAIL' "$OUT/test_cuda_backend.log") FAIL)"
grep '^FAIL' "$OUT/test_cuda_backend.log" | head -5
wait $mk; echo "make 169m: exit $?"
: >"$OUT/bench.txt"
for round in 1 2; do
    for g in 0 1; do
        LIND_CUDA_GEMV=$g timeout -k 5 40 "$B/step_bench" --model models/default --label "default_gemv$g" \
            --batches 1,8 --steps 50 >>"$OUT/bench.txt" 2>&1
        [ -d "$M" ] && LIND_CUDA_GEMV=$g timeout -k 5 60 "$B/step_bench" --model "$M" --label "rwkv4_169m_gemv$g" \
            --batches 1,8 --steps 20 >>"$OUT/bench.txt" 2>&1
    done
done
grep '^STEP' "$OUT/bench.txt"
