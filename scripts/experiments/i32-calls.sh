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
a) # One call for a scarce machine: gpu_marlin and the host models, the Marlin bench on main's
   # binary (.exp/main-marlin-bench: `cargo bench --bench marlin --no-run` on main, stripped)
   # and on the patch's (paired, then .exp/unpaired), the tuning sweep, gpu_grouped; logs
   # tarred into $OUT/logs.tar.xz (a call returns few files).
   L=$(mktemp -d)
   gpu-bundle/run.sh --help >/dev/null 2>&1
   B=gpu-bundle/unpacked/benches/marlin
   OUT=$L/t FP8_RUN_TIMEOUT=150 gpu-bundle/run.sh \
       --only=gpu_marlin,marlin_host_model,marlin_grouped_host_model >/dev/null 2>&1 || true
   cat "$L/t/summary.txt"
   for v in main paired unpaired; do
       case $v in
       main) timeout 150 .exp/main-marlin-bench >"$L/marlin-$v.log" 2>&1 ;;
       paired) timeout 150 $B >"$L/marlin-$v.log" 2>&1 ;;
       unpaired) FP8_LINEAR_CU_DIR=$PWD/.exp/unpaired timeout 150 $B >"$L/marlin-$v.log" 2>&1 ;;
       esac || echo "bench $v: exit $?"
       echo "== $v"; sed -n '/^Marlin FP8 W8A16/,$p' "$L/marlin-$v.log" | awk 'NF>8 {print $1, $2, $5, $6, $8, $12}'
   done
   MARLIN_SWEEP=1 timeout 90 $B >"$L/marlin-sweep.log" 2>&1 || echo "sweep: exit $?"
   OUT=$L/g FP8_RUN_TIMEOUT=150 gpu-bundle/run.sh --only=gpu_grouped >/dev/null 2>&1 || true
   cat "$L/g/summary.txt"
   tar cJf "$OUTD/logs.tar.xz" -C "$L" . ;;
b) # The second call: the tuning sweeps of main's binary and the patch's (paired, unpaired),
   # Nsight Compute of main's kernel and the patch's (default; one range per block) at two
   # M = 1 layers, then the Marlin bench (criterion needs --bench) on main's and the patch's.
   L=$(mktemp -d) P=.exp/patched-marlin-bench M0=.exp/main-marlin-bench
   export FP8_LINEAR_CACHE_DIR=$PWD/kernel-cache PATH=$PATH:/usr/local/cuda/bin
   MARLIN_SWEEP=1 timeout 90 $M0 >"$L/sweep-main.log" 2>&1 || echo "sweep main: exit $?"
   MARLIN_SWEEP=1 timeout 90 $P >"$L/sweep-paired.log" 2>&1 || echo "sweep paired: exit $?"
   MARLIN_SWEEP=1 FP8_LINEAR_CU_DIR=$PWD/.exp/unpaired timeout 90 $P >"$L/sweep-unpaired.log" 2>&1 \
       || echo "sweep unpaired: exit $?"
   for v in main paired unpaired; do echo "== sweep $v"; grep -E '^ *[0-9]+x[0-9]+ +M=' "$L/sweep-$v.log"; done
   NCU="ncu --clock-control none -k regex:marlin --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,smsp__inst_executed.sum"
   for shape in 1,18432,7168 1,4096,4096; do
       for v in main t0 t6; do
           f="$L/ncu-$v-${shape//,/_}.log"
           case $v in
           main) MARLIN_PROFILE=$shape timeout 60 $NCU $M0 >"$f" 2>&1 ;;
           t0) MARLIN_PROFILE=$shape MARLIN_PROFILE_TUNING=0 timeout 60 $NCU $P >"$f" 2>&1 ;;
           t6) MARLIN_PROFILE=$shape MARLIN_PROFILE_TUNING=6 timeout 60 $NCU $P >"$f" 2>&1 ;;
           esac || echo "ncu $v $shape: exit $?"
           echo "== ncu $v $shape"
           grep -E 'Duration|DRAM Throughput|Registers Per|Achieved Occ|Grid Size|cycles_active|inst_executed|Issued Warp Per|No Eligible|Warp Cycles Per Issued' "$f" | sed 's/  */ /g'
       done
   done
   for v in main paired; do
       case $v in main) B=$M0 ;; paired) B=$P ;; esac
       timeout 150 $B --bench >"$L/bench-$v.log" 2>&1 || echo "bench $v: exit $?"
       echo "== bench $v"; sed -n '/^Marlin FP8 W8A16/,$p' "$L/bench-$v.log" | awk 'NF>8 && $1 ~ /^[0-9]+$/ {print $1, $2, $5, $6, $8, $10, $11}'
   done
   tar cJf "$OUTD/logs.tar.xz" -C "$L" . ;;
c) # The third call (v2: the next range taken TAKE_LEAD stages before it is needed, ranges of
   # at least 8 stages, the pieces' sum with 32 loads in flight): the sweeps and the Marlin
   # bench of main's binary and the patch's (paired, unpaired), Nsight Compute at M = 1, then
   # gpu_marlin and gpu_grouped, memcheck of both and racecheck of gpu_marlin.
   L=$(mktemp -d) P=.exp/patched-marlin-bench M0=.exp/main-marlin-bench U=$PWD/.exp/unpaired
   export FP8_LINEAR_CACHE_DIR=$PWD/kernel-cache PATH=$PATH:/usr/local/cuda/bin
   gpu-bundle/run.sh --help >/dev/null 2>&1
   MARLIN_SWEEP=1 timeout 90 $M0 >"$L/sweep-main.log" 2>&1 || echo "sweep main: exit $?"
   MARLIN_SWEEP=1 timeout 90 $P >"$L/sweep-paired.log" 2>&1 || echo "sweep paired: exit $?"
   MARLIN_SWEEP=1 FP8_LINEAR_CU_DIR=$U timeout 90 $P >"$L/sweep-unpaired.log" 2>&1 || echo "sweep unpaired: exit $?"
   for v in main paired unpaired; do echo "== sweep $v"; grep -E '^ *[0-9]+x[0-9]+ +M=' "$L/sweep-$v.log"; done
   for v in main paired unpaired; do
       case $v in main) timeout 150 $M0 --bench ;; paired) timeout 150 $P --bench ;;
       unpaired) FP8_LINEAR_CU_DIR=$U timeout 150 $P --bench ;; esac >"$L/bench-$v.log" 2>&1 || echo "bench $v: exit $?"
       echo "== bench $v"; sed -n '/^Marlin FP8 W8A16/,$p' "$L/bench-$v.log" | awk 'NF>8 && $1 ~ /^[0-9]+$/ {print $1, $2, $5, $6, $8, $10, $11}'
   done
   NCU="ncu --clock-control none -k regex:marlin --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,smsp__inst_executed.sum"
   for shape in 1,18432,7168 1,4096,4096; do
       for v in main v2; do
           f="$L/ncu-$v-${shape//,/_}.log"
           case $v in main) B=$M0 ;; v2) B=$P ;; esac
           MARLIN_PROFILE=$shape timeout 60 $NCU $B >"$f" 2>&1 || echo "ncu $v $shape: exit $?"
           echo "== ncu $v $shape"
           grep -E 'Duration|DRAM Throughput|Registers Per|cycles_active|inst_executed' "$f" | sed 's/  */ /g' | tr '\n' ';'; echo
       done
   done
   tar cJf "$OUTD/perf.tar.xz" -C "$L" .
   OUT=$L/t FP8_RUN_TIMEOUT=100 FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-240} gpu-bundle/run.sh \
       --only=gpu_marlin,gpu_grouped --memcheck --racecheck=gpu_marlin >/dev/null 2>&1 || true
   cat "$L/t/summary.txt"
   tar cJf "$OUTD/tests.tar.xz" -C "$L" t ;;
d) # The fourth call: main's Marlin with only the cut stripe's pieces summed with their loads
   # in flight (the bundle) against main's binary: sweeps, benches, Nsight Compute at M = 1,
   # then gpu_marlin and gpu_grouped, memcheck of both, racecheck and synccheck of gpu_marlin.
   L=$(mktemp -d) M0=.exp/main-marlin-bench
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
   NCU="ncu --clock-control none -k regex:marlin --launch-skip 1 --launch-count 1 --section SpeedOfLight --metrics sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,smsp__inst_executed.sum"
   for shape in 1,4096,4096 1,7168,16384 16,4096,7168; do
       for v in main new; do
           case $v in main) B=$M0 ;; new) B=$P ;; esac
           f="$L/ncu-$v-${shape//,/_}.log"
           MARLIN_PROFILE=$shape timeout 60 $NCU $B >"$f" 2>&1 || echo "ncu $v $shape: exit $?"
           echo "== ncu $v $shape"
           grep -E 'Duration|cycles_active|inst_executed' "$f" | sed 's/  */ /g' | tr '\n' ';'; echo
       done
   done
   tar cJf "$OUTD/perf.tar.xz" -C "$L" .
   OUT=$L/t FP8_RUN_TIMEOUT=100 FP8_RUN_BUDGET=${FP8_RUN_BUDGET:-250} gpu-bundle/run.sh \
       --only=gpu_marlin,gpu_grouped --memcheck --racecheck=gpu_marlin --synccheck=gpu_marlin \
       >/dev/null 2>&1 || true
   cat "$L/t/summary.txt"
   tar cJf "$OUTD/tests.tar.xz" -C "$L" t ;;
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
*) echo "usage: $0 prep|a|b|c|d|1|2|3 (prep here, the calls on the GPU host, after git apply of the patch and the bundle)"; exit 2 ;;
esac
