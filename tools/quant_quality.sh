#!/bin/sh
# tools/quant_quality.sh — held-out bits/byte of every shipped model with
# fp32, q8 and q4 weights (docs/NUMERICS.md, "Quantized weights"). Needs
# build/lind and data/kjv/heldout.txt (tools/corpus.py data/kjv). Prints one
# line per model: name, bits/byte per format, and the changes against f32.
#   usage: tools/quant_quality.sh [BUILD_DIR] [MODEL...]
B=${1:-build}
[ $# -gt 0 ] && shift
MODELS=${*:-$(ls -d models/*/ | sed 's:/$::')}
TEXT=data/kjv/heldout.txt
[ -f "$TEXT" ] || { echo "quant_quality: $TEXT missing (python3 tools/corpus.py data/kjv)" >&2; exit 2; }
printf '%-22s %10s %10s %10s %9s %9s\n' model f32 q8 q4 dq8 dq4
for m in $MODELS; do
  seg=
  case "$m" in *linformer*) seg="--segment 128" ;; esac   # N = 128: it cannot take one stream
  line="$m"
  for t in f32 q8 q4; do
    v=$("$B/lind" score --model "$m" --dtype $t $seg "$TEXT" 2>&1 | awk '/^bits_per_byte:/ {print $2}')
    [ -n "$v" ] || v=nan
    eval "v_$t=$v"
  done
  awk -v m="$m" -v a="$v_f32" -v b="$v_q8" -v c="$v_q4" \
    'BEGIN { printf "%-22s %10.6f %10.6f %10.6f %+9.6f %+9.6f\n", m, a, b, c, b - a, c - a }'
done
