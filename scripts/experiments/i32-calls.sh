#!/usr/bin/env bash
# Issue 32 (Marlin at the weight-read floor), session 2's experiment, prepared without device
# time on 2026-12-06: `i32-three-blocks.patch` (beside this script, against main at c88a3d3)
# lets the dense kernel's 8- and 16-row tiles run three blocks per SM (launch bounds of 3:
# 80 and 71 registers, no spills; MarlinPipeline::blocks_per_sm 1..=3, capped by
# plan::register_blocks: two for the taller and the grouped tiles) and adds two tunings to
# MarlinPipeline::SWEEP (three blocks with and without min_range_stages 8). The default
# tuning is unchanged; its 8-row tile's code is 8 instructions shorter under the new launch
# bounds. Prediction in docs/perf-log.md ("Issue 32, session 1", last part).
#
# Here, before the call: on main (without the patch) `cargo bench -p fp8-linear --features
# dev-sources --bench marlin --no-run`, strip the binary to .exp/main-marlin-bench; then
# `git apply scripts/experiments/i32-three-blocks.patch` and `scripts/gpu-bundle.sh --pack`.
# The call (carry gpu-bundle and .exp): `scripts/experiments/i32-calls.sh 1`, which writes
# under $OUT: the sweeps of main and the patch (the patch's last two columns are the new
# tunings), the Marlin bench of both (criterion needs --bench), then gpu_marlin (every
# tuning, the new ones too), memcheck, racecheck and synccheck of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
case "${1:-}" in
1) L=$(mktemp -d) M0=.exp/main-marlin-bench
   export FP8_LINEAR_CACHE_DIR=$PWD/kernel-cache PATH=$PATH:/usr/local/cuda/bin
   gpu-bundle/run.sh --help >/dev/null 2>&1
   P=gpu-bundle/unpacked/benches/marlin
   for v in main new; do
       case $v in main) B=$M0 ;; new) B=$P ;; esac
       MARLIN_SWEEP=1 timeout 90 $B >"$L/sweep-$v.log" 2>&1 || echo "sweep $v: exit $?"
       timeout 150 $B --bench >"$L/bench-$v.log" 2>&1 || echo "bench $v: exit $?"
   done
   for v in main new; do
       echo "== sweep $v"; grep -E '^ *[0-9]+x[0-9]+ +M=' "$L/sweep-$v.log"
       echo "== bench $v"; sed -n '/^Marlin FP8 W8A16/,$p' "$L/bench-$v.log" | awk 'NF>8 && $1 ~ /^[0-9]+$/ {print $1, $2, $5, $6, $8, $10, $11}'
   done
   tar cJf "$OUTD/perf.tar.xz" -C "$L" .
   OUT=$L/t FP8_RUN_TIMEOUT=120 FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-250} gpu-bundle/run.sh \
       --only=gpu_marlin --memcheck --racecheck=gpu_marlin --synccheck=gpu_marlin \
       >/dev/null 2>&1 || true
   cat "$L/t/summary.txt"
   tar cJf "$OUTD/tests.tar.xz" -C "$L" t ;;
*) echo "usage: $0 1 (on the GPU host, after the patch, the bundle and main's bench binary)"; exit 2 ;;
esac
