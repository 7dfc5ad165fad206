#!/usr/bin/env bash
# Issue 31: kernel-source variants of the patched decode kernel for one GPU call, each a
# copy of kernels/src/cuda/cu under .exp/ that FP8_LINEAR_CU_DIR points the bundle at (same
# kernel arguments as the bundle's own source, so no rebuild). Run here with the patch
# applied, after `i31-decode-stamps.py make kernels/src/cuda/cu .exp/decode-stamps`:
#   scripts/experiments/i31-variants.sh NAME=DEFINES... [NAME=stamps:DEFINES]...
# NAME=DEFINES (space-separated `X=V`) copies the plain sources with `#define X V` put on
# top of decode_gemm.cu; NAME=stamps:DEFINES copies the stamped ones; the special DEFINES
# `pre` moves the stamps' first mark (L) from after the first weight loads to before them,
# so the summary's `pre` is the prologue's own code and `wait` the loads' issue.
# i31-call.sh runs them as bench@NAME, qbench@NAME (2 shapes), stamps@NAME, chain@NAME,
# test@NAME.
set -eu
for spec in "$@"; do
    name=${spec%%=*}
    defs=${spec#*=}
    src=${I31_SRC:-kernels/src/cuda/cu}
    case $defs in stamps:*) src=.exp/decode-stamps; defs=${defs#stamps:} ;; esac
    rm -rf ".exp/$name" && cp -r "$src" ".exp/$name"
    f=.exp/$name/decode_gemm.cu
    head=""
    for d in $defs; do
        if [ "$d" = pre ]; then
            python3 - "$f" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
a = "    DSTAMP(1)\n    griddep_wait();"
b = "#pragma unroll\n    for (int j = 0; j < DEPTH; ++j) {\n        Pos p = cur;"
assert s.count(a) == 1 and s.count(b) == 1, "stamps anchors moved"
s = s.replace(a, "    griddep_wait();").replace(b, "    DSTAMP(1)\n" + b)
open(p, "w").write(s)
PY
        else
            head="$head#define ${d%%=*} ${d#*=}
"
        fi
    done
    printf '%s' "$head" | cat - "$f" >"$f.new" && mv "$f.new" "$f"
    echo ".exp/$name: $(printf '%s' "$head" | tr '\n' ' ')"
done
