#!/usr/bin/env bash
# Issue 31, one GPU call. Prepare here (the baseline is main's own bundle, since the patch
# changes the decode kernel's arguments and grid):
#   scripts/gpu-bundle.sh --pack && rm -rf .exp/bundle-main && mkdir -p .exp &&
#     mv gpu-bundle .exp/bundle-main
#   git apply scripts/experiments/i31-wgmma-decode.patch && scripts/gpu-bundle.sh --pack &&
#     scripts/experiments/i31-decode-stamps.py make kernels/src/cuda/cu .exp/decode-stamps
# then, with carry [gpu-bundle, .exp]:  OUT=$OUT scripts/experiments/i31-call.sh [STEP...]
# Steps (default: all, in this order):
#   test    gpu_decode and gpu_graph (no sanitizer)
#   bench   the decode bench (Decode, cuBLASLt block, Hopper, read-once floor)
#   stamps  the decode bench on the stamped kernel (.exp/decode-stamps), then its summary:
#           where each CTA's time goes
#   stamps-chain  the same in the decode-step chain (8 layers back to back, no flush between
#           them: the kernel's code warm after the first layer; the prologue's cost cold
#           against warm)
#   base    the decode bench of main's bundle (.exp/bundle-main: main's decode kernel)
#   chain   the decode-step chain (FP8_DECODE_CHAIN=1: overlapped launch against plain)
#   memcheck, race, sync   compute-sanitizer on gpu_decode (race, sync: every_m only)
#   ncu     Nsight Compute --set full of one M <= 8 and one M = 16 launch (quick shapes)
#   bench@V, qbench@V (2 shapes), stamps@V (2 shapes), chain@V (2 shapes), test@V (gpu_decode)
#           the same on the kernel-source variant .exp/V (scripts/experiments/i31-variants.sh)
# Every step bounded (I31_END, default 560 s, the call's end); the logs go into
# logs.tar.xz (a call returns at most 8 files), a table of steps last.
set -u
ROOT=$(pwd)
OUTD=${OUT:-$ROOT/exp-out}
mkdir -p "$OUTD"
export FP8_REQUIRE_CUDA=1 FP8_LINEAR_CACHE_DIR=${FP8_LINEAR_CACHE_DIR:-/tmp/fp8-kernel-cache}
PATH=$PATH:/usr/local/cuda/bin
START=$(date +%s)
END=${I31_END:-560}
gpu-bundle/run.sh --help >/dev/null 2>&1
U=$ROOT/gpu-bundle/unpacked
# main's bundle, the baseline
[ -d .exp/bundle-main ] && .exp/bundle-main/run.sh --help >/dev/null 2>&1
B=$ROOT/.exp/bundle-main/unpacked
TABLE=$OUTD/steps.table
: >"$TABLE"
# shellcheck source=scripts/exp-step.sh
. "$ROOT/scripts/exp-step.sh"
SAN="compute-sanitizer --error-exitcode 9"
steps=${*:-test bench stamps stamps-chain base chain memcheck race sync ncu}
for s in $steps; do
    if [ $((END - ($(date +%s) - START))) -lt 5 ]; then
        echo "$s: not run" | tee -a "$TABLE"
        continue
    fi
    case $s in
    test) step test 120 "$U/tests/gpu_decode" --test-threads=1 ;
          grep -E "^test |test result" "$OUTD/test.log" | tail -8
          step test-graph 120 "$U/tests/gpu_graph" --test-threads=1 ;;
    bench) step bench 120 "$U/benches/decode" ;;
    base) step base 120 "$B/benches/decode" ;;
    stamps) step stamps 120 env FP8_LINEAR_CU_DIR="$ROOT/.exp/decode-stamps" FP8_LINEAR_STAMPS=1 "$U/benches/decode"
            python3 scripts/experiments/i31-decode-stamps.py summary "$OUTD/stamps.log" >"$OUTD/stamps.summary" 2>&1
            tail -40 "$OUTD/stamps.summary" ;;
    stamps-chain) step stamps-chain 120 env FP8_LINEAR_CU_DIR="$ROOT/.exp/decode-stamps" FP8_LINEAR_STAMPS=1 FP8_DECODE_CHAIN=1 "$U/benches/decode"
            python3 scripts/experiments/i31-decode-stamps.py summary "$OUTD/stamps-chain.log" >"$OUTD/stamps-chain.summary" 2>&1
            tail -20 "$OUTD/stamps-chain.summary" ;;
    chain) step chain 120 env FP8_DECODE_CHAIN=1 "$U/benches/decode" ;;
    ncu)
        for k in m8 m16; do
            step "ncu-$k" 90 env FP8_BENCH_QUICK=1 ncu --clock-control none --set full \
                -k regex:"decode_gemm_$k" --launch-skip 3 -c 1 -o "$OUTD/ncu-$k" "$U/benches/decode"
            ncu --import "$OUTD/ncu-$k.ncu-rep" --page details >"$OUTD/ncu-$k.txt" 2>&1
        done ;;
    bench@* | qbench@* | stamps@* | chain@* | test@*)
        v=${s#*@}
        vdir=$ROOT/.exp/$v
        [ -d "$vdir" ] || { echo "$s: no $vdir" | tee -a "$TABLE"; continue; }
        case $s in
        bench@*) step "bench-$v" 120 env FP8_LINEAR_CU_DIR="$vdir" "$U/benches/decode" ;;
        qbench@*) step "qbench-$v" 90 env FP8_LINEAR_CU_DIR="$vdir" FP8_BENCH_QUICK=1 "$U/benches/decode" ;;
        chain@*) step "chain-$v" 120 env FP8_LINEAR_CU_DIR="$vdir" FP8_BENCH_QUICK=1 FP8_DECODE_CHAIN=1 "$U/benches/decode" ;;
        test@*) step "test-$v" 120 env FP8_LINEAR_CU_DIR="$vdir" "$U/tests/gpu_decode" --test-threads=1 ;;
        stamps@*) step "stamps-$v" 90 env FP8_LINEAR_CU_DIR="$vdir" FP8_LINEAR_STAMPS=1 FP8_BENCH_QUICK=1 "$U/benches/decode"
            python3 scripts/experiments/i31-decode-stamps.py summary "$OUTD/stamps-$v.log" >"$OUTD/stamps-$v.summary" 2>&1
            tail -12 "$OUTD/stamps-$v.summary" ;;
        esac ;;
    memcheck) step memcheck 200 $SAN --tool memcheck "$U/tests/gpu_decode" --test-threads=1 ;;
    race) step race 150 $SAN --tool racecheck "$U/tests/gpu_decode" --test-threads=1 every_m ;;
    sync) step sync 150 $SAN --tool synccheck "$U/tests/gpu_decode" --test-threads=1 every_m ;;
    esac
done
for f in "$OUTD"/*.log; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$f" | sed "s|^|$(basename "$f"): |" | tail -3; done
# a device call returns at most 8 files: the logs go into one archive
(cd "$OUTD" && tar -cJf logs.tar.xz --remove-files ./*.log ./*.summary ./*.txt 2>/dev/null)
cat "$TABLE"
