#!/usr/bin/env bash
# Issue 32 (Marlin at the weight-read floor), session 3's calls, prepared on 2026-12-06 after
# session 2 (whose calls all landed on an H100; the issue's targets are the H200's).
#
# 1: `i32-three-blocks.patch` (beside this script, against main at 7ec7c49 + debd444) lets the
#    dense kernel's 8- and 16-row tiles run three blocks per SM (launch bounds of 3: 80
#    registers, no spills; MarlinPipeline::blocks_per_sm 1..=3, capped by
#    plan::register_blocks) and adds two tunings to the end of MarlinPipeline::SWEEP (three
#    blocks with and without min_range_stages 8); the default is unchanged. On the H100 it lost
#    in two calls (18432x7168 M = 1: 59.0 / 59.2 us against the default's 55.5; 7168x16384
#    51.6 / 52.5 against 50.8); the H200, where two blocks beat one by 7 %, decides. The call
#    writes the sweeps of main and the patch (the patch's last two columns are the new tunings;
#    the two before them, the deeper rings on main, lost 4-7 % on the H100), the Marlin bench
#    of both (criterion needs --bench), then gpu_marlin (every tuning), memcheck, racecheck and
#    synccheck of it.
#    Here, before the call: on main `cargo bench -p fp8-linear --features dev-sources --bench
#    marlin --no-run`, strip the binary to .exp/main-marlin-bench; then `git apply
#    scripts/experiments/i32-three-blocks.patch` and `scripts/gpu-bundle.sh --pack`.
# 2: per-block stamps of main's kernel (`i32-stamps.patch`, printf of %globaltimer at the
#    range's start, its last segment's end, its hand-off's return and its end; applied to a copy
#    of the bundle's sources, main's unless a patch was applied before packing, compiled
#    through FP8_LINEAR_CU_DIR), 30 flushed launches per shape
#    at the default tuning and at one block per SM (SWEEP[4]), summarized by i32-stamps.py. On
#    the H100 only the one-block runs were sane (with two blocks per SM the stamped kernel ran
#    4-8x slower at the large layers, cause not found).
# Carry gpu-bundle and .exp.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
export FP8_LINEAR_CACHE_DIR=$PWD/kernel-cache PATH=$PATH:/usr/local/cuda/bin
gpu-bundle/run.sh --help >/dev/null 2>&1
P=gpu-bundle/unpacked/benches/marlin
L=$(mktemp -d)
case "${1:-}" in
1) for v in main new; do
       case $v in main) B=.exp/main-marlin-bench ;; new) B=$P ;; esac
       MARLIN_SWEEP=1 timeout 90 $B >"$L/sweep-$v.log" 2>&1 || echo "sweep $v: exit $?"
       timeout 150 $B --bench >"$L/bench-$v.log" 2>&1 || echo "bench $v: exit $?"
   done
   for v in main new; do
       echo "== sweep $v"; grep -E '^ *[0-9]+x[0-9]+ +M=' "$L/sweep-$v.log"
       echo "== bench $v"; sed -n '/^Marlin FP8 W8A16/,$p' "$L/bench-$v.log" | awk 'NF>8 && $1 ~ /^[0-9]+$/ {print $1, $2, $5, $6, $8, $10, $11, $13}'
   done
   tar cJf "$OUTD/perf.tar.xz" -C "$L" .
   OUT=$L/t FP8_RUN_TIMEOUT=120 FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-250} gpu-bundle/run.sh \
       --only=gpu_marlin --memcheck --racecheck=gpu_marlin --synccheck=gpu_marlin \
       >/dev/null 2>&1 || true
   cat "$L/t/summary.txt"
   tar cJf "$OUTD/tests.tar.xz" -C "$L" t ;;
2) cp -r gpu-bundle/unpacked/cu "$L/cu"
   (cd "$L/cu" && patch -s -p5) <scripts/experiments/i32-stamps.patch
   for t in 0 4; do
       FP8_LINEAR_CU_DIR=$L/cu MARLIN_PROFILE_REPS=30 MARLIN_PROFILE_TUNING=$t \
           MARLIN_PROFILE="1,4096,4096;1,4096,7168;1,7168,16384;1,18432,7168;16,18432,7168;16,4096,4096;64,18432,7168;64,4096,4096" \
           timeout 150 $P >"$L/stamps-$t.txt" 2>&1 || echo "stamps $t: exit $?"
   done
   python3 scripts/experiments/i32-stamps.py "$L"/stamps-0.txt "$L"/stamps-4.txt
   tar cJf "$OUTD/stamps.tar.xz" -C "$L" . ;;
*) echo "usage: $0 1|2 (on the GPU host; see the header)"; exit 2 ;;
esac
