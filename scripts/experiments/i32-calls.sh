#!/usr/bin/env bash
# Issue 32 (Marlin at the weight-read floor), the experiment prepared without device time on
# 2026-12-04, measured on none yet. `i32-marlin-ranges.patch` (beside this script, remade
# against main at 7715c09, after the grouped Marlin kernel; applies with the issue 30 and 31
# patches or without them) lets the Marlin blocks, dense and grouped, take their weight ranges
# from a counter (four ranges per block by default, the ring running on across a block's
# ranges) instead of one fixed range per block; prediction in docs/perf-log.md ("Issue 32,
# CPU side"). Its host models (tests/tests/marlin_host_model.rs and
# marlin_grouped_host_model.rs) pass on the CPU; on the GPU it is untried.
#
# The GPU calls, from a clean tree with the patch applied and `scripts/gpu-bundle.sh --pack`
# run (carry gpu-bundle). This script runs the one it is given (1, 2 or 3) on the GPU host,
# writing under $OUT:
#   1: gpu_marlin (every tuning of MarlinPipeline::SWEEP, the one-range-per-block one last),
#      gpu_grouped (MarlinGroupedFp8 among the grouped kernels) and both Marlin host models,
#      then memcheck, and racecheck of gpu_marlin and gpu_grouped;
#   2: the Marlin bench with MARLIN_SWEEP=1: the default (four ranges per block) against the
#      same tuning with one range per block, in one run (the old kernel's fixed ranges are
#      not in the bundle: its argument block differs);
#   3: the MoE bench: the Marlin grouped masked calls against read-once (compare with
#      i34-calls.sh 2 run from main without the patch).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
case "${1:-}" in
1) OUT=$OUTD FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-520} gpu-bundle/run.sh \
       --only=gpu_marlin,gpu_grouped,marlin_host_model,marlin_grouped_host_model --memcheck \
       --racecheck=gpu_marlin,gpu_grouped ;;
2) gpu-bundle/run.sh --help >/dev/null 2>&1 # unpacks the bundle
   MARLIN_SWEEP=1 gpu-bundle/unpacked/benches/marlin 2>&1 | tee "$OUTD/marlin-sweep.log" | tail -60 ;;
3) OUT=$OUTD gpu-bundle/run.sh --no-tests --bench=moe ;;
*) echo "usage: $0 1|2|3 (on the GPU host, after git apply of the patch and the bundle)"; exit 2 ;;
esac
