#!/usr/bin/env bash
# Issue 31 (decode near the weight-read floor), the experiment prepared without device time on
# 2026-12-04, measured on none yet. `i31-wgmma-decode.patch` (beside this script, made against
# main at 91cbd94; applies with or without the issue 30 patch) moves `DecodeBlockFp8` from
# mma.sync (which runs e4m3 as conversions and f16 MMAs on sm_90: 48 HMMA and 216 F2FP per
# unrolled loop of the 16-row kernel) to native FP8 wgmma with the weight in registers (swap
# AB: m64n8k32 / m64n16k32, the activation codes in wgmma's swizzled B layout); prediction in
# docs/perf-log.md ("Issue 31, CPU side"). Its host model (tests/tests/decode_host_model.rs,
# wgmma emulated by the PTX fragment layouts) passes on the CPU; on the GPU it is untried.
# Added on 2026-12-05 (same patch): the decode kernel launched overlapped with the kernel
# before it on the stream (programmatic dependent launch, KernelOptions::overlap, default
# on): its first weight loads before griddepcontrol.wait, launch_dependents once its weight
# is streamed; gpu_decode's overlapped_layers_in_a_chain_match_ordinary_launches checks a
# two-layer chain against ordinary launches, eager and in a graph; the decode bench's
# FP8_DECODE_CHAIN=1 mode times a decode step of 8 layers per shape (graph and eager; Decode
# overlapped, Decode plain, cuBLASLt block) against the read-once floor.
# This script writes, after `git apply` of the patch, the comparison variant that the decode
# bench times from the same bundle:
#   .exp/decode-mma  the patched sources with main's mma.sync decode_gemm.cu (the baseline)
# Then, from a clean tree with the patch applied:
#   scripts/gpu-bundle.sh --pack && scripts/experiments/i31-variants.sh
#   GPU call 1 (carry gpu-bundle): correctness first,
#     OUT=$OUT FP8_RUN_BUDGET=500 gpu-bundle/run.sh --only=gpu_decode,gpu_graph --memcheck \
#       --racecheck=gpu_decode:every_m --synccheck=gpu_decode:every_m
#   GPU call 2 (carry gpu-bundle and .exp): the decode bench, new and baseline in one call,
#   then the decode step (the baseline source has no griddepcontrol.wait: never launch it
#   overlapped),
#     U=gpu-bundle/unpacked; $U/benches/decode > $OUT/decode-wgmma.log;
#     FP8_LINEAR_OVERLAP=0 FP8_LINEAR_CU_DIR=$PWD/.exp/decode-mma $U/benches/decode \
#       > $OUT/decode-mma.log;
#     FP8_DECODE_CHAIN=1 $U/benches/decode > $OUT/decode-chain.log
# If the first call's results are wrong everywhere, suspect first what the host model takes
# as given: wgmma's register fragment of an 8-bit A (per warp, lane 4g + q holds row g,
# columns 4q.. (a[0]) and 16 + 4q.. (a[2]), row g + 8 in a[1], a[3]; CUTLASS's ALayout_64x32
# for 8-bit register A decodes to the same), and the 128-byte swizzle of a B operand written
# with ordinary stores (chunk c of row r at c ^ (r % 8), as TMA writes the Hopper GEMM's).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=kernels/src/cuda/cu
grep -q 'WgmmaRs<ROWS>' "$SRC/decode_gemm.cu" || {
    echo "apply scripts/experiments/i31-wgmma-decode.patch first"
    exit 1
}
rm -rf .exp/decode-mma
mkdir -p .exp
cp -r "$SRC" .exp/decode-mma
git show "HEAD:$SRC/decode_gemm.cu" >.exp/decode-mma/decode_gemm.cu
