#!/usr/bin/env bash
# Issue 34 (grouped FP8 GEMM kernels on the GPU): the calls of its GPU sessions. The kernels
# (`HopperGroupedFp8`, `PortableGroupedFp8`, `MarlinGroupedFp8`) are on main and in
# tables::GROUPED; tests/tests/gpu_grouped.rs and the MoE bench (kernels/benches/moe.rs) skip
# without a GPU. Session 1 (2026-12-06, H100) measured them; session 2 (same day, H100)
# launched the grouped Hopper GEMM overlapped with its quantization and gave its walk a
# segment table in shared memory (docs/perf-log.md, "Issue 34, session 2").
#
# Session 3 (same day, H100) merged the tail patch, moved the first weight tiles before the
# block barrier and made masked calls quantize only their routed rows (docs/perf-log.md,
# "Issue 34, session 3"). After the bundle (`scripts/gpu-bundle.sh --pack`, carry
# gpu-bundle), on the GPU host, under $OUT:
#   1: gpu_grouped, gpu_graph, the dense Hopper overlap tests and the group quantization's
#      with FP8_REQUIRE_CUDA=1, then memcheck, racecheck and synccheck of gpu_grouped and of
#      gpu_hopper's sanitizer widths;
#   2: the MoE bench, whole (contiguous against the dense Hopper kernel and cuBLASLt,
#      masked Hopper and Marlin against reading the touched experts once);
#   3: the masked points of the Qwen3 shapes (FP8_BENCH_QUICK=1 FP8_BENCH_MASKED=1) and
#      their stamps (i34_grouped_stamps.py make kernels/src/cuda/cu .exp/i34/cu-stamps here
#      first, carry .exp/i34 too).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
U=$PWD/gpu-bundle/unpacked
# (run.sh unpacks the packed bundle on first use)
[ -x "$U/benches/moe" ] || gpu-bundle/run.sh --help >/dev/null 2>&1 || true
case "${1:-}" in
1) export FP8_LINEAR_CACHE_DIR=$U/kernel-cache FP8_REQUIRE_CUDA=1
   T=$OUTD/tests.log
   t() { echo "== $*" >>"$T"; timeout 200 "$@" >>"$T" 2>&1; echo "$(basename "$1") $2 rc $?"; }
   t "$U/tests/gpu_grouped" --test-threads=1
   t "$U/tests/gpu_hopper" --test-threads=1 overlapped_launch selected_first widths_for_the_sanitizers
   t "$U/tests/gpu_graph" --test-threads=1
   t "$U/tests/gpu_quant" --test-threads=1 groups_bit_exact hand_derived
   S=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
   for tool in memcheck racecheck synccheck; do
       t "$S" --tool $tool --error-exitcode 86 "$U/tests/gpu_grouped" --test-threads=1
       t "$S" --tool $tool --error-exitcode 86 "$U/tests/gpu_hopper" --test-threads=1 \
           widths_for_the_sanitizers
   done
   grep -E "^== |test result|ERROR SUMMARY|RACECHECK SUMMARY" "$T" ;;
2) export FP8_LINEAR_CACHE_DIR=$U/kernel-cache
   $U/benches/moe --bench | tee "$OUTD/moe.log" | sed -n '/== summary/,$p' ;;
3) export FP8_LINEAR_CACHE_DIR=$U/kernel-cache FP8_BENCH_QUICK=1 FP8_BENCH_MASKED=1
   $U/benches/moe --bench >"$OUTD/masked.log" 2>&1
   FP8_LINEAR_CU_DIR=$PWD/.exp/i34/cu-stamps FP8_LINEAR_STAMPS=1 $U/benches/moe --bench \
       >"$OUTD/stamps.log" 2>&1
   python3 scripts/experiments/i34_grouped_stamps.py summary "$OUTD/stamps.log"
   grep "masked .* Hopper" "$OUTD/masked.log" ;;
*) echo "usage: $0 1|2|3 (on the GPU host, after the bundle)"; exit 2 ;;
esac
