#!/usr/bin/env bash
# A small variant of gpu-bundle.sh for the Hopper wgmma kernel alone: builds the gpu_hopper
# test binary and the hopper bench (release), copies them stripped into the git-ignored
# gpu-bundle/hopper/, and writes gpu-bundle/hopper/run.sh, which on an H100/H200 host runs the
# tests with FP8_REQUIRE_CUDA=1, then compute-sanitizer memcheck and racecheck on the small
# tests (synccheck too), dumps the compiled kernel's SASS facts (QGMMA count, registers, local memory), and
# runs the benchmark last.
#
#   scripts/hopper-bundle.sh                    # build and bundle
#   gpu-bundle/hopper/run.sh [--no-sanitize] [--no-bench]   # on the GPU host
set -euo pipefail
cd "$(dirname "$0")/.."
B=gpu-bundle/hopper
rm -rf "$B"
mkdir -p "$B" target

exe() { # json-file target-name
    jq -r --arg n "$2" 'select(.reason == "compiler-artifact" and .executable != null
        and .target.name == $n) | .executable' "$1" | tail -1
}
cargo test --release -p fp8-linear-tests --test gpu_hopper --no-run --message-format=json \
    >target/hopper-bundle-tests.json
cargo bench -p fp8-linear --bench hopper --no-run --message-format=json \
    >target/hopper-bundle-bench.json
strip -o "$B/gpu_hopper" "$(exe target/hopper-bundle-tests.json gpu_hopper)"
strip -o "$B/bench_hopper" "$(exe target/hopper-bundle-bench.json hopper)"

cat >"$B/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the Hopper kernel's tests, sanitizers, SASS check and benchmark; logs to $OUT or ./logs.
set -u
cd "$(dirname "$0")"
SAN=1 BENCH=1
for a in "$@"; do
    case "$a" in --no-sanitize) SAN=0 ;; --no-bench) BENCH=0 ;; *) echo "unknown $a"; exit 2 ;; esac
done
LOGS=${OUT:-$PWD/logs}
mkdir -p "$LOGS"
export FP8_REQUIRE_CUDA=1 FP8_LINEAR_CACHE_DIR=$PWD/kernel-cache
PATH=$PATH:/usr/local/cuda/bin
rc=0
echo "== tests"
timeout 60 ./gpu_hopper --test-threads=1 --nocapture >"$LOGS/tests.log" 2>&1 || rc=$?
grep -E "rel err|diag M|test result|panicked|FAILED" "$LOGS/tests.log" | tail -50
# A hang (timeout) would hang the sanitizers too: skip them.
[ $rc = 124 ] && { echo "tests timed out"; SAN=0; }
if [ $SAN = 1 ]; then
    echo "== memcheck (small tests; the f32-input test alone; model shapes run last)"
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 86 ./gpu_hopper --test-threads=1 \
        diagnose repeated selected tiny_and_odd with_bias >"$LOGS/memcheck.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|test result|Invalid|panicked" "$LOGS/memcheck.log" | head -20
    timeout 40 compute-sanitizer --tool memcheck --error-exitcode 86 ./gpu_hopper --test-threads=1 \
        dtypes >"$LOGS/memcheck-dtypes.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|test result|Invalid|at [a-z_0-9]+\+0x" "$LOGS/memcheck-dtypes.log" | head -8
    echo "== racecheck, synccheck"
    timeout 40 compute-sanitizer --tool racecheck --error-exitcode 87 ./gpu_hopper --test-threads=1 \
        tiny_and_odd repeated >"$LOGS/racecheck.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|hazard|panicked" "$LOGS/racecheck.log" | head -20
    timeout 30 compute-sanitizer --tool synccheck --error-exitcode 88 ./gpu_hopper --test-threads=1 \
        tiny_and_odd >"$LOGS/synccheck.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|test result|panicked" "$LOGS/synccheck.log" | head -5
fi
echo "== SASS of the NVRTC-compiled module"
for f in kernel-cache/fp8_hopper_gemm-*.cubin; do
    [ -f "$f" ] || continue
    cuobjdump -sass "$f" >"$LOGS/hopper.sass" 2>&1
    echo "$f: QGMMA $(grep -c QGMMA "$LOGS/hopper.sass"), LDL/STL $(grep -cE '\b(LDL|STL)' "$LOGS/hopper.sass")"
    cuobjdump -res-usage "$f" 2>&1 | grep -A1 hopper_gemm | grep -oE "Function [a-z0-9_]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste -sd' ' | sed 's/Function/\nFunction/g'
    echo
done
if [ $BENCH = 1 ] && [ $rc != 124 ]; then
    echo "== bench"
    timeout 80 ./bench_hopper >"$LOGS/bench.log" 2>&1 || rc=1
    sed -n '/== summary/,$p' "$LOGS/bench.log"
    grep -E "failed|not run" "$LOGS/bench.log" | head
fi
if [ $SAN = 1 ]; then
    echo "== memcheck: model shapes"
    timeout 45 compute-sanitizer --tool memcheck --error-exitcode 86 ./gpu_hopper --test-threads=1 \
        model_shapes >"$LOGS/memcheck-models.log" 2>&1 || rc=1
    grep -E "ERROR SUMMARY|test result|Invalid|panicked" "$LOGS/memcheck-models.log" | head -8
fi
exit $rc
RUN
chmod +x "$B/run.sh"
du -sh "$B" >&2
