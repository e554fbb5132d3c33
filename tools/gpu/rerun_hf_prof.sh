#!/bin/sh
# The second call of the GPU check (docs/CUDA.md, "What ran on a device"):
# the transformers comparison again, and the kernel times of one batch-1
# step of the 169M shape under Nsight Compute (eager launches, one duration
# metric per kernel), to split the step time into kernel time and gaps.
OUT=${1:?usage: rerun_hf_prof.sh OUTDIR}
B=build-gpu/bin
mkdir -p $B
for p in step_bench; do xz -dc build-gpu/carry/$p.xz >$B/$p && chmod +x $B/$p; done
timeout -k 5 200 python3 tools/gpu/hf_rwkv4_check.py $B/step_bench cuda >$OUT/hf.log 2>&1; echo "hf exit $?" >>$OUT/hf.log
M=/tmp/m169
python3 tools/rwkv4_make.py $M --hidden 768 --layers 12 --vocab 50277 --dtype F32 --seed 7 >/dev/null
LIND_CUDA_GRAPHS=0 timeout -k 5 120 ncu --metrics gpu__time_duration.sum --csv --print-units base \
    $B/step_bench --model $M --label prof --batches 1 --steps 2 >$OUT/ncu.csv 2>$OUT/ncu.err
echo "ncu exit $?" >>$OUT/ncu.err
python3 - $OUT/ncu.csv <<'PY' >$OUT/ncu_summary.txt 2>&1
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; k = h.index("Kernel Name"); v = h.index("Metric Value")
tot = collections.Counter(); n = collections.Counter()
for r in rows[1:]:
    try: t = float(r[v].replace(",", ""))
    except ValueError: continue
    name = r[k].split("(")[0][:60]; tot[name] += t; n[name] += 1
steps = 5  # 3 warm-up + 2 timed
print("kernels per step %.0f, kernel time per step %.1f us" % (sum(n.values()) / steps, sum(tot.values()) / steps / 1e3))
for name, t in tot.most_common(15): print("%8.1f us/step %4.0f launches/step  %s" % (t / steps / 1e3, n[name] / steps, name))
PY
cat $OUT/hf.log | grep -E "^(PASS|FAIL|SKIP)|exit"; cat $OUT/ncu_summary.txt; tail -3 $OUT/ncu.err
