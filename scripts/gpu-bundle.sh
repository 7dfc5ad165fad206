#!/usr/bin/env bash
# Builds every test and bench binary of the workspace (release, CUDA feature on), copies them
# stripped into the git-ignored gpu-bundle/ folder, and writes gpu-bundle/run.sh, which runs
# them on a GPU host with FP8_REQUIRE_CUDA=1 (GPU tests fail instead of skipping) and
# --test-threads=1. See ../shared GPU.md: the GPU host needs no Rust, only the driver and the
# CUDA 13 libraries (libnvrtc.so.13, libcublasLt.so.13) on the loader path.
#
#   scripts/gpu-bundle.sh            # build and bundle
#   gpu-bundle/run.sh [options]      # on the GPU host; --help lists the options
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=gpu-bundle
# Only this script's parts are replaced; other folders in gpu-bundle/ are left alone.
rm -rf "$BUNDLE/tests" "$BUNDLE/benches" "$BUNDLE/run.sh"
mkdir -p "$BUNDLE/tests" "$BUNDLE/benches" target

echo "building test binaries (release)..." >&2
cargo test --release --workspace --no-run --message-format=json >target/gpu-bundle-tests.json
echo "building bench binaries..." >&2
cargo bench --workspace --no-run --message-format=json >target/gpu-bundle-benches.json

copy() { # kind json-file dest-dir
    jq -r --arg kind "$1" 'select(.reason == "compiler-artifact" and .executable != null
        and (.target.kind | index($kind)))
        | "\(.target.name)\t\(.executable)"' "$2" | sort -u |
    while IFS=$'\t' read -r name exe; do
        case "$name" in compiletest) continue ;; esac # trybuild needs cargo: not for the GPU host
        strip -o "$3/$name" "$exe"
        echo "  $3/$name ($(du -h "$3/$name" | cut -f1))" >&2
    done
}
copy test target/gpu-bundle-tests.json "$BUNDLE/tests"
copy lib target/gpu-bundle-tests.json "$BUNDLE/tests"
copy bench target/gpu-bundle-benches.json "$BUNDLE/benches"

cat >"$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled binaries on a GPU host. Options:
#   --all       also the CPU-only test binaries (default: GPU tests and the CUDA crates' unit tests)
#   --memcheck  also run the GPU test binaries under compute-sanitizer --tool memcheck
#   --bench     also run the GPU benchmarks (FP8_BENCH_QUICK=1 for a subset)
# ONLY="gpu_block gpu_quant" restricts the test binaries to those names.
# Logs go to $LOGS (else $OUT, else ./logs); FP8_RUN_TIMEOUT limits each binary (s).
# Compiled kernels are cached in $FP8_LINEAR_CACHE_DIR (default ./kernel-cache); the second
# run of a binary loads its kernels from there.
set -u
cd "$(dirname "$0")"
ALL=0 MEMCHECK=0 BENCH=0
for a in "$@"; do
    case "$a" in
    --all) ALL=1 ;; --memcheck) MEMCHECK=1 ;; --bench) BENCH=1 ;;
    -h | --help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
    esac
done
LOGS=${LOGS:-${OUT:-$PWD/logs}}
LIMIT=${FP8_RUN_TIMEOUT:-900} # seconds per binary
mkdir -p "$LOGS"
export FP8_REQUIRE_CUDA=1
export FP8_LINEAR_CACHE_DIR=${FP8_LINEAR_CACHE_DIR:-$PWD/kernel-cache}
bins_passed=0 bins_failed=0 tests_passed=0 tests_failed=0 failed_list=""
run_one() { # label, command...
    local label=$1; shift
    local log="$LOGS/$label.log"
    local t0=$(date +%s.%N)
    timeout "$LIMIT" "$@" >"$log" 2>&1
    local rc=$?
    local p=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
    local f=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
    tests_passed=$((tests_passed + p)); tests_failed=$((tests_failed + f))
    if [ $rc -eq 0 ]; then bins_passed=$((bins_passed + 1)); else bins_failed=$((bins_failed + 1)); failed_list="$failed_list $label"; fi
    printf '%-34s rc=%-3s %4s passed %3s failed  %6.1fs\n' "$label" "$rc" "$p" "$f" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')"
    if [ $rc -ne 0 ]; then grep -E "panicked|error|FAILED|ERROR SUMMARY" "$log" | head -20; fi
}
is_gpu() {
    if [ -n "${ONLY:-}" ]; then case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; fi
    case "$1" in gpu_*|fp8_linear|fp8_linear_cuda) return 0 ;; *) return 1 ;; esac
}
export FP8_LINEAR_LOG_LOADS=1
for t in tests/*; do
    name=$(basename "$t")
    if is_gpu "$name" || [ $ALL = 1 ]; then run_one "$name" "$t" --test-threads=1 --nocapture; fi
done
# Second run of one binary: its kernels now come from the disk cache.
run_one gpu_errors-second-run tests/gpu_errors --test-threads=1
grep -h "fp8-linear: module" "$LOGS/gpu_errors.log" "$LOGS/gpu_errors-second-run.log" 2>/dev/null | sed 's/^/  cache: /' | head -8
for t in tests/*; do grep -h "rel err\|module cache\|bit-exact\|typed error" "$LOGS/$(basename "$t").log" 2>/dev/null; done >"$LOGS/highlights.txt"
if [ $MEMCHECK = 1 ]; then
    if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
        CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        # Our kernels (quantization, portable GEMM, split-K epilogue, padding); cuBLASLt is
        # NVIDIA's and slow under the sanitizer.
        for spec in gpu_quant: gpu_errors: gpu_block:portable; do
            name=${spec%%:*} filter=${spec#*:}
            [ -x "tests/$name" ] || continue
            run_one "memcheck-$name" "$CS" --tool memcheck --error-exitcode 86 "tests/$name" --test-threads=1 $filter
            grep -h "ERROR SUMMARY" "$LOGS/memcheck-$name.log" | sed 's/^/  /'
        done
    else
        echo "compute-sanitizer not found: memcheck skipped"
    fi
fi
if [ $BENCH = 1 ]; then
    for b in benches/*; do
        name=$(basename "$b")
        if [ "$name" = gpu ] || [ $ALL = 1 ]; then
            run_one "bench-$name" "$b" --bench
            sed -n '/== summary/,$p' "$LOGS/bench-$name.log"
        fi
    done
fi
echo "binaries: $bins_passed ok, $bins_failed failed${failed_list:+ ($failed_list )}"
echo "$tests_passed passed, $tests_failed failed"
[ $bins_failed -eq 0 ]
RUN
chmod +x "$BUNDLE/run.sh"
du -sh "$BUNDLE" >&2
