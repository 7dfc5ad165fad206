#!/usr/bin/env bash
# Issue 32 (Marlin at the weight-read floor), the experiment prepared without device time on
# 2026-12-04 and 2026-12-05, measured on none yet. `i32-marlin-ranges.patch` (beside this
# script, against main; applies with the issue 30 and 31 patches or without them) makes two
# changes to cu/marlin.cu, dense and grouped, each with its prediction in docs/perf-log.md
# ("Issue 32, CPU side"):
#   - ranges: the blocks take their weight ranges from a counter (four ranges per block by
#     default, the ring running on across a block's ranges) instead of one fixed range each;
#   - paired tiles: at the 32- and 64-row tiles each warp computes two 16-channel tiles over
#     half the rows (MARLIN_PAIR_MT = 4), so the block reads its activation tile from shared
#     memory 4 times per K step instead of 8.
# Its host models (tests/tests/marlin_host_model.rs and marlin_grouped_host_model.rs) pass on
# the CPU; on the GPU it is untried.
#
# Here, from a clean tree with the patch applied: `scripts/gpu-bundle.sh --pack` and
# `scripts/experiments/i32-calls.sh prep` (writes .exp/unpaired: the patched sources with the
# tiles unpaired, MARLIN_PAIR_MT 16). Then the GPU calls (carry gpu-bundle and .exp); this
# script runs the one it is given on the GPU host, writing under $OUT:
#   1: gpu_marlin (every tuning of MarlinPipeline::SWEEP, the one-range-per-block one last),
#      gpu_grouped (MarlinGroupedFp8 among the grouped kernels) and both Marlin host models,
#      then memcheck, and racecheck of gpu_marlin and gpu_grouped;
#   2: the Marlin bench (the issue's points: read-once and bf16 cuBLAS in the same run) with
#      the compiled-in sources (ranges + paired tiles), then the same bench on .exp/unpaired
#      (ranges only: the pairing's effect at M = 32 and 64), then MARLIN_SWEEP=1: the default
#      (four ranges per block) against one range per block, in one run (the old kernel's fixed
#      ranges are not in the bundle: its argument block differs);
#   3: the MoE bench: the Marlin grouped masked calls against read-once (compare with
#      i34-calls.sh 2 run from main without the patch).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
SRC=kernels/src/cuda/cu
case "${1:-}" in
prep)
    grep -q '#define MARLIN_PAIR_MT 4' "$SRC/marlin.cu" || {
        echo "apply scripts/experiments/i32-marlin-ranges.patch first"
        exit 1
    }
    rm -rf .exp/unpaired && mkdir -p .exp && cp -r "$SRC" .exp/unpaired
    sed -i 's/#define MARLIN_PAIR_MT 4/#define MARLIN_PAIR_MT 16/' .exp/unpaired/marlin.cu
    grep -q '#define MARLIN_PAIR_MT 16' .exp/unpaired/marlin.cu && echo ".exp/unpaired written" ;;
1) OUT=$OUTD FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-520} gpu-bundle/run.sh \
       --only=gpu_marlin,gpu_grouped,marlin_host_model,marlin_grouped_host_model --memcheck \
       --racecheck=gpu_marlin,gpu_grouped ;;
2) gpu-bundle/run.sh --help >/dev/null 2>&1 # unpacks the bundle
   B=gpu-bundle/unpacked/benches/marlin
   [ -d .exp/unpaired ] || { echo "no .exp/unpaired: run '$0 prep' before the call"; exit 1; }
   timeout 200 $B > "$OUTD/marlin-paired.log" 2>&1 || echo "paired bench: exit $?"
   FP8_LINEAR_CU_DIR=$PWD/.exp/unpaired timeout 200 $B > "$OUTD/marlin-unpaired.log" 2>&1 \
       || echo "unpaired bench: exit $?"
   MARLIN_SWEEP=1 timeout 180 $B > "$OUTD/marlin-sweep.log" 2>&1 || echo "sweep: exit $?"
   for f in paired unpaired; do echo "== $f"; sed -n '/^Marlin FP8 W8A16/,$p' "$OUTD/marlin-$f.log" | grep -E 'M +N x K| (32|64) '; done ;;
3) OUT=$OUTD gpu-bundle/run.sh --no-tests --bench=moe ;;
*) echo "usage: $0 prep|1|2|3 (prep here, the calls on the GPU host, after git apply of the patch and the bundle)"; exit 2 ;;
esac
