#!/bin/sh
# tools/gpu/check.sh — everything lind checks on a GPU, in one call (docs/CUDA.md).
#
#   sh tools/gpu/check.sh OUTDIR
#
# On the lent GPU machine (`device` tool: carry build-gpu/carry, made here by
# `make gpu-check-build`) or anywhere as a dry run (`make gpu-check-dry`):
#  1. the programs: build-gpu/carry/*.xz unpacked (or build-gpu's own), their
#     libraries resolved, the GPU and toolkit named, the kernels' SASS dumped;
#  2. correctness: build-gpu/tests/test_cuda_backend — every op and whole
#     models on the device against the CPU backend, recorded steps;
#  3. compute-sanitizer memcheck and racecheck over the short run
#     (LIND_CUDA_TEST_SHORT=1: the ops and the recorded steps);
#  4. the ceilings (tools/gpu/ceilings: copy, SGEMM, bf16 GEMM, host link) and
#     the decode step times (tools/gpu/step_bench) of the default model and
#     of a 12 x 768 RWKV-4 (169M) shape, batch 1 to 1024, recorded steps on
#     and off, fp32 and bf16 GEMMs;
#  5. transformers' own RWKV-4 against lind on the device (hf_rwkv4_check.py).
# Each step has its own time limit and says PASS, FAIL or SKIP with why; no
# step waits on a device that is not there. The table (tools/gpu/summary.py)
# comes last. At most 8 files land in OUTDIR: check.log (all of it),
# test_cuda_backend.log, sanitizer.log, bench.txt, hf.log, summary.txt,
# ptxas.txt, sass.txt.gz.
OUT=${1:-${OUT:-build-gpu/check-out}}
mkdir -p "$OUT"
LOG=$OUT/check.log
: >"$LOG"
B=build-gpu
BIN=$B/bin
mkdir -p "$BIN"
results=""
note() { echo "$*" | tee -a "$LOG"; }
result() { results="$results$1|$2|$3
"; note "== $1: $2 $3"; }
# run NAME LIMIT CMD...: the command under a limit, its output in the log
run() {
    name=$1; lim=$2; shift 2
    note "-- $name: $* (limit ${lim}s)"
    t0=$(date +%s)
    timeout -k 5 "$lim" "$@" >>"$LOG" 2>&1
    rc=$?
    note "-- $name: exit $rc after $(( $(date +%s) - t0 ))s"
    return $rc
}

note "# lind GPU check, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# ---- 1. programs ------------------------------------------------------------
for p in test_cuda_backend step_bench ceilings; do
    if [ -f "$B/carry/$p.xz" ]; then xz -dc "$B/carry/$p.xz" >"$BIN/$p" && chmod +x "$BIN/$p"
    elif [ -x "$B/tests/$p" ]; then cp "$B/tests/$p" "$BIN/$p"
    elif [ -x "$B/tools/gpu/$p" ]; then cp "$B/tools/gpu/$p" "$BIN/$p"
    fi
done
[ -f "$B/carry/ptxas.txt" ] && cp "$B/carry/ptxas.txt" "$OUT/ptxas.txt"
[ -f "$B/ptxas.txt" ] && [ ! -f "$OUT/ptxas.txt" ] && cp "$B/ptxas.txt" "$OUT/ptxas.txt"
missing=""
for p in test_cuda_backend step_bench ceilings; do [ -x "$BIN/$p" ] || missing="$missing $p"; done
if [ -n "$missing" ]; then
    result programs FAIL "missing:$missing (run make gpu-check-build here and carry build-gpu/carry)"
else
    result programs PASS "$(ls "$BIN" | tr '\n' ' ')"
fi
# the device's cuBLAS: the toolkit's, else the PyTorch wheel's
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH
ldd "$BIN/test_cuda_backend" >>"$LOG" 2>&1
if ldd "$BIN/test_cuda_backend" 2>/dev/null | grep -q "not found"; then
    result libraries FAIL "$(ldd "$BIN/test_cuda_backend" | grep 'not found' | tr -s ' \t\n' ' ')"
else
    result libraries PASS "every library found"
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)
if [ -n "$gpu" ]; then result device PASS "$gpu"; else result device SKIP "no GPU (nvidia-smi answers nothing)"; fi
note "nvcc: $(nvcc --version 2>/dev/null | tail -n 1)"
if command -v cuobjdump >/dev/null 2>&1 && [ -x "$BIN/step_bench" ]; then
    cuobjdump --dump-sass "$BIN/step_bench" 2>>"$LOG" | gzip -9 >"$OUT/sass.txt.gz"
    result sass PASS "$(zcat "$OUT/sass.txt.gz" | grep -c 'Function :') functions dumped"
else
    result sass SKIP "no cuobjdump here"
fi

# ---- 2. correctness -----------------------------------------------------------
if [ -x "$BIN/test_cuda_backend" ]; then
    timeout -k 5 200 "$BIN/test_cuda_backend" >"$OUT/test_cuda_backend.log" 2>&1
    rc=$?
    p=$(grep -c '^PASS' "$OUT/test_cuda_backend.log"); f=$(grep -c '^FAIL' "$OUT/test_cuda_backend.log")
    if grep -q '^SKIP cuda_backend' "$OUT/test_cuda_backend.log"; then
        result correctness SKIP "$(grep '^SKIP cuda_backend' "$OUT/test_cuda_backend.log" | cut -c1-160)"
    elif [ "$rc" -eq 0 ] && [ "$f" -eq 0 ]; then result correctness PASS "$p cases"
    else result correctness FAIL "$p passed, $f failed, exit $rc"
    fi
    device=1; grep -q '^SKIP cuda_backend' "$OUT/test_cuda_backend.log" && device=0
else
    device=0
fi

# ---- 3. sanitizers ------------------------------------------------------------
: >"$OUT/sanitizer.log"
for tool in memcheck racecheck; do
    if [ "$device" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
        LIND_CUDA_TEST_SHORT=1 timeout -k 5 150 compute-sanitizer --tool "$tool" --error-exitcode 99 \
            "$BIN/test_cuda_backend" >>"$OUT/sanitizer.log" 2>&1
        rc=$?
        s=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -n 1)
        if [ "$rc" -eq 0 ]; then result "$tool" PASS "${s:-clean}"
        elif [ "$rc" -eq 124 ]; then result "$tool" FAIL "timed out after 150s"
        else result "$tool" FAIL "exit $rc: $s"
        fi
    else
        result "$tool" SKIP "no device or no compute-sanitizer"
    fi
done

# ---- 4. ceilings and step times -------------------------------------------------
: >"$OUT/bench.txt"
if [ "$device" = 1 ]; then
    run ceilings 90 sh -c "'$BIN/ceilings' >>'$OUT/bench.txt'" && result ceilings PASS "$(grep -c CEIL "$OUT/bench.txt") figures" \
        || result ceilings FAIL "see check.log"
    sb() { label=$1; shift; run "step $label" 120 sh -c "$* >>'$OUT/bench.txt'" || note "step $label failed"; }
    sb default "'$BIN/step_bench' --model models/default --label default --steps 50"
    sb default_eager "LIND_CUDA_GRAPHS=0 '$BIN/step_bench' --model models/default --label default --steps 50"
    M=/tmp/lind_rwkv4_169m
    if run make_169m 120 python3 tools/rwkv4_make.py "$M" --hidden 768 --layers 12 --vocab 50277 --dtype F32 --seed 7; then
        sb rwkv4_169m "'$BIN/step_bench' --model $M --label rwkv4_169m --steps 20"
        sb rwkv4_169m_eager "LIND_CUDA_GRAPHS=0 '$BIN/step_bench' --model $M --label rwkv4_169m --batches 1,8,64 --steps 20"
        sb rwkv4_169m_bf16 "LIND_CUDA_WEIGHTS=bf16 '$BIN/step_bench' --model $M --label rwkv4_169m_bf16 --steps 20"
    fi
    n=$(grep -c '^STEP' "$OUT/bench.txt")
    if [ "$n" -gt 0 ]; then result steps PASS "$n step timings"; else result steps FAIL "no step timing"; fi
else
    result ceilings SKIP "no device"
    result steps SKIP "no device"
fi

# ---- 5. transformers' RWKV-4 ---------------------------------------------------
if [ "$device" = 1 ]; then
    timeout -k 5 180 python3 tools/gpu/hf_rwkv4_check.py "$BIN/step_bench" cuda >"$OUT/hf.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then result hf_rwkv4 PASS "$(grep -c '^PASS' "$OUT/hf.log") shapes within 1e-4"
    else result hf_rwkv4 FAIL "exit $rc: $(grep -E '^FAIL|Error' "$OUT/hf.log" | head -n 2 | tr '\n' ' ')"
    fi
else
    result hf_rwkv4 SKIP "no device"
fi

# ---- the table --------------------------------------------------------------------
{
    echo "step|result|detail"
    printf "%s" "$results"
    echo
    [ -s "$OUT/bench.txt" ] && python3 tools/gpu/summary.py "$OUT/bench.txt"
} >"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt" >>"$LOG"
cat "$OUT/summary.txt"
! printf "%s" "$results" | grep -q '|FAIL|'
