#!/usr/bin/env bash
# Issue 34 (grouped FP8 GEMM kernels on the GPU), prepared without device time on 2026-12-04:
# `HopperGroupedFp8` (kernels/src/cuda/gemm/hopper/grouped.rs, the `hopper_grouped_*` kernels
# of cu/hopper_gemm.cu built with -DHOPPER_GROUPED) and `PortableGroupedFp8`
# (kernels/src/cuda/gemm/portable/grouped.rs, `block_grouped_*` of cu/block_gemm.cu built with
# -DBLOCK_GROUPED) are on main, tested on their host models
# (tests/tests/{hopper,portable}_grouped_host_model.rs) and not yet run on a GPU, so they are
# in no built-in table. Added in the next session without device time: `MarlinGroupedFp8`
# (kernels/src/cuda/gemm/marlin/grouped.rs, `marlin_grouped_*` of cu/marlin.cu built with
# -DMARLIN_GROUPED; W8A16, forced on the H200 by its force_arch; host model
# tests/tests/marlin_grouped_host_model.rs). Its GPU test (tests/tests/gpu_grouped.rs) and the MoE bench (kernels/benches/moe.rs)
# skip without one. No patch: run from main after `scripts/gpu-bundle.sh --pack` (carry
# gpu-bundle). This script runs the call it is given on the GPU host, writing under $OUT:
#   1: gpu_grouped (the three kernels) and the grouped host models, then memcheck, racecheck
#      and synccheck of gpu_grouped (shared memory, barriers, mbarriers);
#   2: the MoE bench: contiguous against the dense Hopper kernel on the same rows, masked
#      (Hopper's, and Marlin's sm_80 code) against the read-once time of the experts touched.
# Run (2026-12-06, issue 34 session 1, H100): both calls, clean; the kernels are in
# tables::GROUPED since, the figures in BENCHMARKS.md and docs/perf-log.md ("Issue 34,
# session 1"). That session's last change (the grouped TMA thread pre-issues only its first
# unit's weights) ran gpu_grouped and the sanitizers only with a dropped change on top, and
# the bench on the Qwen3 shapes only (its device time ran out): run 1 and 2 first next time.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${OUT:-$PWD/exp-out}
mkdir -p "$OUTD"
case "${1:-}" in
1) OUT=$OUTD FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-520} gpu-bundle/run.sh \
       --only=gpu_grouped,hopper_grouped_host_model,portable_grouped_host_model,marlin_grouped_host_model \
       --memcheck \
       --racecheck=gpu_grouped --synccheck=gpu_grouped ;;
2) OUT=$OUTD gpu-bundle/run.sh --no-tests --bench=moe ;;
*) echo "usage: $0 1|2 (on the GPU host, after the bundle)"; exit 2 ;;
esac
