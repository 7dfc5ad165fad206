#!/usr/bin/env bash
# One GPU call of Hopper kernel experiments: kernel source variants timed side by side
# through the development knob (FP8_LINEAR_CU_DIR), without rebuilding the Rust binaries.
# Run on the GPU host from the repository root, with the packed bundle
# (scripts/gpu-bundle.sh --pack) in gpu-bundle/ and the source variants in .exp/NAME/
# (copies of kernels/src/cuda/cu, one folder each; git-ignored). Each step writes its log
# under $OUT (or ./exp-out); at the end the logs go into logs.tar.xz and the summaries into
# report.txt (a device call returns at most 8 files), and a short table is printed last.
#
#   scripts/hopper-exp.sh STEP...
#
# Steps:
#   bench:NAME[:ENV=V,...]  the Hopper bench on .exp/NAME (HOPPER_BENCH_SHARED_OUT=1, every
#                           shape and M unless ENV narrows it, e.g. HOPPER_BENCH_M=4096)
#   decode:NAME[:ENV=V,...] the decode bench (M = 1, 4, 8, 16) on .exp/NAME, e.g. with
#                           FP8_DECODE_HOPPER_SWEEP=1 (the Hopper kernel's fixed widths)
#   stamps:NAME[:M,...]     clock64 stamps of .exp/NAME (made by scripts/hopper_stamps.py make)
#                           at M = 64, 512, 4096 (or the M given) on the quick shapes, then
#                           their summary
#   ncu:NAME                Nsight Compute (--clock-control none) of every 256x128 tile launch
#                           at M = 4096 on the quick shapes: time, DRAM and L2 bytes, store
#                           requests, medians per bench instance (default, -q, -s1, -256)
#   points:NAME:M[,M...]    Nsight Compute (--clock-control none) of every GEMM launch of the
#                           Hopper bench (ours, the split finalize and cuBLASLt's) at these M
#                           on the quick shapes: time, grid, SM busy, tensor pipe, DRAM, L2;
#                           medians per bench instance and kernel (scripts/ncu_summary.py)
#   test:BIN[:FILTER]       a bundled test binary (FP8_REQUIRE_CUDA=1)
#   memcheck:BIN[:FILTER]   the same under compute-sanitizer memcheck (racecheck:, synccheck:)
# HOPPER_EXP_BUDGET=S: start no step after S seconds (the rest are listed as not run).
# HOPPER_EXP_END=S: stop the step still running at S seconds (its log kept), so that the
# report is packed inside a device call's limit.
set -u
START=$(date +%s)
BUDGET=${HOPPER_EXP_BUDGET:-0}
END=${HOPPER_EXP_END:-0}
ROOT=$(pwd)
OUTD=${OUT:-$ROOT/exp-out}
mkdir -p "$OUTD"
export FP8_REQUIRE_CUDA=1 FP8_LINEAR_CACHE_DIR=${FP8_LINEAR_CACHE_DIR:-/tmp/fp8-kernel-cache}
PATH=$PATH:/usr/local/cuda/bin
# Unpack the bundle (run.sh --help unpacks on first use and exits).
gpu-bundle/run.sh --help >/dev/null 2>&1
U=$ROOT/gpu-bundle/unpacked
[ -x "$U/benches/hopper" ] || { echo "no bundle at gpu-bundle/ (scripts/gpu-bundle.sh --pack)"; exit 1; }
TABLE=$OUTD/steps.txt
: >"$TABLE"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader \
    | tee "$OUTD/gpu.txt"

# shellcheck source=scripts/exp-step.sh
. "$ROOT/scripts/exp-step.sh"

ncu_step() { # label variant M[,M...] kernel-regex metrics [instance labels]
    step "$1" 300 env FP8_LINEAR_CU_DIR="$ROOT/.exp/$2" FP8_BENCH_QUICK=1 HOPPER_BENCH_M="$3" \
        ncu --clock-control none --csv --page raw -k regex:"$4" --metrics "$5" "$U/benches/hopper"
    python3 scripts/ncu_summary.py "$OUTD/$1.log" "$5" "${6:-}" >"$OUTD/$1.summary" 2>&1
}

for s in "$@"; do
    if [ "$BUDGET" -gt 0 ] && [ $(($(date +%s) - START)) -ge "$BUDGET" ]; then
        echo "$s: not run (HOPPER_EXP_BUDGET=${BUDGET}s spent)" | tee -a "$TABLE"
        continue
    fi
    kind=${s%%:*}
    rest=${s#*:}
    case "$kind" in
    bench | decode)
        # bench: the Hopper bench (every shape and M); decode: the decode bench (M = 1..16)
        name=${rest%%:*}
        envs=""
        [ "$rest" != "$name" ] && envs=${rest#*:}
        # the label names the settings too, so that two benches of one variant keep two logs
        if [ "$kind" = bench ]; then
            label="bench-$name" bin=hopper extra=HOPPER_BENCH_SHARED_OUT=1
        else
            label="bench-decode-$name" bin=decode extra=
        fi
        [ -n "$envs" ] && label="$label-${envs//[^A-Za-z0-9]/_}"
        step "$label" 300 env FP8_LINEAR_CU_DIR="$ROOT/.exp/$name" $extra ${envs//,/ } "$U/benches/$bin"
        ;;
    stamps)
        name=${rest%%:*}
        ms=64,512,4096
        [ "$rest" != "$name" ] && ms=${rest#*:}
        step "stamps-$name-${ms//,/_}" 240 env FP8_LINEAR_CU_DIR="$ROOT/.exp/$name" FP8_LINEAR_STAMPS=1 \
            FP8_BENCH_QUICK=1 HOPPER_BENCH_M="$ms" "$U/benches/hopper"
        python3 scripts/hopper_stamps.py summary "$OUTD/stamps-$name-${ms//,/_}.log" \
            >"$OUTD/stamps-$name-${ms//,/_}.summary" 2>&1
        ;;
    ncu)
        metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,lts__t_sectors_srcunit_tex_op_write.sum,sm__cycles_elapsed.avg.per_second
        ncu_step "ncu-$rest" "$rest" 4096 '^hopper_gemm_bm256_n128$' "$metrics" \
            Hopper,Hopper-q,Hopper-s1,Hopper-256
        ;;
    points)
        name=${rest%%:*}
        ms=${rest#*:}
        # the tensor pipe's counter is named per chip: take the one this ncu knows
        tensor=$(ncu --query-metrics 2>/dev/null | grep -oE '^sm__pipe_tensor_op_gmma_cycles_active|^sm__pipe_tensor_cycles_active' | head -1)
        metrics=gpu__time_duration.sum,launch__grid_size,sm__cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum${tensor:+,$tensor.avg.pct_of_peak_sustained_elapsed}
        ncu_step "points-$name" "$name" "$ms" 'gemm|finalize|Kernel' "$metrics"
        ;;
    test)
        bin=${rest%%:*}
        filt=""
        [ "$rest" != "$bin" ] && filt=${rest#*:}
        step "test-$bin${filt:+-$filt}" 420 "$U/tests/$bin" --test-threads=1 --nocapture $filt
        grep -E "test result|FAILED|panicked" "$OUTD/test-$bin${filt:+-$filt}.log" | head -5
        ;;
    memcheck | racecheck | synccheck)
        bin=${rest%%:*}
        filt=""
        [ "$rest" != "$bin" ] && filt=${rest#*:}
        step "$kind-$bin${filt:+-$filt}" 420 compute-sanitizer --tool "$kind" --error-exitcode 86 \
            "$U/tests/$bin" --test-threads=1 --nocapture $filt
        grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$OUTD/$kind-$bin${filt:+-$filt}.log" | head -4
        ;;
    *) echo "unknown step $s" ;;
    esac
done
# A device call brings back at most 8 files: every log goes into one archive, the summaries
# (stamps, ncu, each bench's summary table, test results) into report.txt beside the step table.
cd "$OUTD"
{
    for f in *.summary; do [ -e "$f" ] && { echo "== $f"; cat "$f"; }; done
    for f in bench-*.log; do [ -e "$f" ] && { echo "== $f"; sed -n '/== summary/,$p' "$f"; }; done
    for f in test-*.log memcheck-*.log racecheck-*.log synccheck-*.log; do
        [ -e "$f" ] && { echo "== $f"; grep -hE "test result|FAILED|panicked|ERROR SUMMARY|RACECHECK SUMMARY" "$f" | head -8; }
    done
} >report.txt
logs=$(ls ./*.log ./*.summary 2>/dev/null || true)
[ -n "$logs" ] && tar -cJf logs.tar.xz $logs && rm -f $logs
cd "$ROOT"
echo "== steps (logs in logs.tar.xz, summaries in report.txt)"
cat "$TABLE"
