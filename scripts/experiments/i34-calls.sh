#!/usr/bin/env bash
# Issue 34 (grouped FP8 GEMM kernels on the GPU): the calls of its GPU sessions. The kernels
# (`HopperGroupedFp8`, `PortableGroupedFp8`, `MarlinGroupedFp8`) are on main and in
# tables::GROUPED; tests/tests/gpu_grouped.rs and the MoE bench (kernels/benches/moe.rs) skip
# without a GPU. Session 1 (2026-12-06, H100) measured them; session 2 (same day, H100)
# launched the grouped Hopper GEMM overlapped with its quantization and gave its walk a
# segment table in shared memory (docs/perf-log.md, "Issue 34, session 2").
#
# Here, before the bundle (`scripts/gpu-bundle.sh --pack`, carry gpu-bundle and .exp/i34):
#   scripts/experiments/i34-calls.sh prep
# makes .exp/i34/cu-tail (main's kernels with i34-tail.patch: a walk past its last unit
# returns without scanning the segments left, predicted 1-2 us off the device-count decode
# calls, whose stamps put 2.6 us between the last epilogue and the math warpgroups' end) and
# stamped copies of main's and of that (i34_grouped_stamps.py). On the GPU host, under $OUT:
#   1: gpu_grouped and the grouped host models with FP8_REQUIRE_CUDA=1, the dense Hopper
#      overlap tests, then memcheck, racecheck and synccheck of gpu_grouped;
#   2: the MoE bench, whole (contiguous against the dense Hopper kernel and cuBLASLt,
#      masked Hopper and Marlin against reading the touched experts once);
#   3: the quick MoE bench (Qwen3 shapes) of main and of cu-tail, and the stamps of both.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = prep ]; then
    rm -rf .exp/i34 && mkdir -p .exp/i34
    cp -r kernels/src/cuda/cu .exp/i34/cu-tail
    patch -s -p5 -d .exp/i34/cu-tail <scripts/experiments/i34-tail.patch
    for v in main tail; do
        src=kernels/src/cuda/cu
        [ $v = tail ] && src=.exp/i34/cu-tail
        python3 scripts/experiments/i34_grouped_stamps.py make $src .exp/i34/cu-stamps-$v
    done
    exit 0
fi
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
U=$PWD/gpu-bundle/unpacked
case "${1:-}" in
1) OUT=$OUTD/t FP8_RUN_TIMEOUT=120 gpu-bundle/run.sh \
       --only=gpu_grouped,hopper_grouped_host_model,portable_grouped_host_model,marlin_grouped_host_model
   export FP8_LINEAR_CACHE_DIR=$U/kernel-cache
   FP8_REQUIRE_CUDA=1 timeout 150 $U/tests/gpu_hopper --test-threads=1 overlapped_launch \
       selected_first widths_for_the_sanitizers >"$OUTD/gpu_hopper.log" 2>&1
   grep "test result" "$OUTD/gpu_hopper.log"
   OUT=$OUTD/san FP8_RUN_TIMEOUT=80 gpu-bundle/run.sh --no-tests --only=gpu_grouped \
       --memcheck --racecheck=gpu_grouped --synccheck=gpu_grouped ;;
2) export FP8_LINEAR_CACHE_DIR=$U/kernel-cache
   $U/benches/moe --bench | tee "$OUTD/moe.log" | sed -n '/== summary/,$p' ;;
3) export FP8_LINEAR_CACHE_DIR=$U/kernel-cache
   FP8_BENCH_QUICK=1 $U/benches/moe --bench >"$OUTD/quick-main.log" 2>&1
   FP8_LINEAR_CU_DIR=$PWD/.exp/i34/cu-tail FP8_BENCH_QUICK=1 $U/benches/moe --bench \
       >"$OUTD/quick-tail.log" 2>&1
   for v in main tail; do
       FP8_LINEAR_CU_DIR=$PWD/.exp/i34/cu-stamps-$v FP8_LINEAR_STAMPS=1 FP8_BENCH_QUICK=1 \
           $U/benches/moe --bench >"$OUTD/stamps-$v.log" 2>&1
       python3 scripts/experiments/i34_grouped_stamps.py summary "$OUTD/stamps-$v.log" \
           >"$OUTD/stamps-$v-summary.txt"
   done
   for v in main tail; do echo "== $v"; grep "masked .* Hopper" "$OUTD/quick-$v.log"; done ;;
*) echo "usage: $0 prep (here) | 1|2|3 (on the GPU host, after the bundle)"; exit 2 ;;
esac
