#!/usr/bin/env bash
# Issue 32 (Marlin at the weight-read floor), the experiment prepared without device time on
# 2026-12-04, measured on none yet. `i32-marlin-ranges.patch` (beside this script, made against
# main at a1a1107; applies with the issue 30 and 31 patches or without them) lets
# the Marlin blocks take their weight ranges from a per-chunk counter (four ranges per block
# by default, the ring running on across a block's ranges) instead of one fixed range per
# block; prediction in docs/perf-log.md ("Issue 32, CPU side"). Its host model
# (tests/tests/marlin_host_model.rs) passes on the CPU; on the GPU it is untried.
#
# The two GPU calls, from a clean tree with the patch applied and `scripts/gpu-bundle.sh
# --pack` run (carry gpu-bundle). This script runs the one it is given (1 or 2) on the GPU
# host, writing under $OUT:
#   1: gpu_marlin (every tuning of MarlinPipeline::SWEEP, the one-range-per-block one last)
#      and the host model, then memcheck and racecheck of gpu_marlin;
#   2: the Marlin bench with MARLIN_SWEEP=1: the default (four ranges per block) against the
#      same tuning with one range per block, in one run (the old kernel's fixed ranges are
#      not in the bundle: its argument block differs).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
case "${1:-}" in
1) OUT=$OUTD FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-520} gpu-bundle/run.sh \
       --only=gpu_marlin,marlin_host_model --memcheck --racecheck=gpu_marlin ;;
2) gpu-bundle/run.sh --help >/dev/null 2>&1 # unpacks the bundle
   MARLIN_SWEEP=1 gpu-bundle/unpacked/benches/marlin 2>&1 | tee "$OUTD/marlin-sweep.log" | tail -60 ;;
*) echo "usage: $0 1|2 (on the GPU host, after git apply of the patch and the bundle)"; exit 2 ;;
esac
