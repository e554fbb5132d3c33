#!/bin/sh
# Summarise `nvcc -Xptxas -v` output (tools/gpu/check.sh, make gpu-check-build):
# per architecture, the entry functions compiled, the largest register count,
# and any stack frame or spill that is not zero.
f=${1:?usage: ptxas_summary.sh PTXAS_OUTPUT}
awk '
/Compiling entry function/ { fn = $0; sub(/.*function .?_Z[0-9]*/, "", fn); sub(/. for .*/, "", fn);
                             arch = $0; sub(/.* for ./, "", arch); sub(/.$/, "", arch); n[arch]++ }
/bytes stack frame/ { if ($0 !~ /^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/) { bad[arch]++; print "  spill/stack: " arch " " fn ": " $0 } }
/Used [0-9]+ registers/ { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); r += 0;
                          if (r > maxr[arch]) { maxr[arch] = r; maxf[arch] = fn } }
END { for (a in n) printf "ptxas %s: %d entry functions, %d with a stack frame or spills, most registers %d (%s)\n", a, n[a], bad[a] + 0, maxr[a], maxf[a] }
' "$f"
