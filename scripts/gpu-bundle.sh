#!/usr/bin/env bash
# The one bundle for every GPU run. Builds here, in release mode, every test binary of the
# workspace and the GPU benches (hopper, overlap, quant, gpu, marlin, graph, layouts, decode, portable, moe), lists them from cargo's JSON
# messages, copies them stripped into the git-ignored gpu-bundle/ folder together with the
# CLI binary, and writes gpu-bundle/run.sh. On the GPU host (no Rust needed: the NVIDIA
# driver and the CUDA 13 libraries libnvrtc.so.13 and libcublasLt.so.13 on the loader path;
# cuobjdump and compute-sanitizer from a CUDA toolkit for the optional parts) run.sh runs
# every test binary with FP8_REQUIRE_CUDA=1 (GPU tests fail instead of skipping) and
# --test-threads=1, then the parts asked for (sanitizers, benches), and prints a pass/fail
# table last.
#
#   scripts/gpu-bundle.sh [--pack]   # build and bundle here; prints the bundle's size
#   gpu-bundle/run.sh [options]      # on the GPU host; --help lists the options
#
# --pack leaves gpu-bundle/ holding one xz archive and a run.sh that unpacks it on first
# use (about a ninth of the size, for hosts the bundle is copied to).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=gpu-bundle
PACK=0
for a in "$@"; do
    case "$a" in
    --pack) PACK=1 ;;
    -h | --help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null || { echo "gpu-bundle.sh needs jq" >&2; exit 1; }
git check-ignore -q "$BUNDLE/" || { echo "$BUNDLE/ must be git-ignored (.gitignore)" >&2; exit 1; }
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/tests" "$BUNDLE/benches" "$BUNDLE/bin" target

echo "building the test binaries (release)..." >&2
# (with the development knob: FP8_LINEAR_CU_DIR=DIR compiles the CUDA modules from DIR; the
# bundle's cu/ holds the sources it was built from, to copy and edit on the GPU host)
cargo test --release --workspace --features fp8-linear/dev-sources --no-run \
    --message-format=json >target/gpu-bundle-tests.json
echo "building the GPU benches (hopper, overlap, quant, gpu, marlin, graph, layouts, decode, portable, moe) and the CLI..." >&2
cargo bench -p fp8-linear --features dev-sources --bench hopper --bench overlap --bench quant --bench gpu --bench marlin --bench graph --bench layouts --bench decode --bench portable --bench moe --no-run \
    --message-format=json >target/gpu-bundle-benches.json
cargo build --release -p fp8-linear-cli --bin fp8-linear --message-format=json \
    >target/gpu-bundle-cli.json

# name <TAB> executable for each test binary: integration tests by their name, the unit
# tests of a library as unit-<crate>, of a binary as bin-<name>.
jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
    | (if (.target.kind | index("test")) then .target.name
       elif (.target.kind | index("bin")) then "bin-" + .target.name
       else "unit-" + .target.name end)
      + "\t" + .executable' target/gpu-bundle-tests.json | sort -u >target/gpu-bundle-tests.txt
while IFS=$'\t' read -r name exe; do
    # trybuild needs cargo, and a proc-macro crate's unit tests link libstd dynamically:
    # neither is for the GPU host (both run in CI).
    case "$name" in compiletest | unit-fp8_linear_macros) continue ;; esac
    strip -o "$BUNDLE/tests/$name" "$exe"
done <target/gpu-bundle-tests.txt
jq -r 'select(.reason == "compiler-artifact" and .executable != null
    and (.target.kind | index("bench"))) | .target.name + "\t" + .executable' \
    target/gpu-bundle-benches.json | sort -u |
while IFS=$'\t' read -r name exe; do strip -o "$BUNDLE/benches/$name" "$exe"; done
cli=$(jq -r 'select(.reason == "compiler-artifact" and .executable != null) | .executable' \
    target/gpu-bundle-cli.json | tail -1)
strip -o "$BUNDLE/bin/fp8-linear" "$cli"
# The CLI's integration tests run the binary at the path cargo compiled into them; run.sh
# links the bundled one there when it can.
echo "$cli" >"$BUNDLE/bin/compiled-path"
cp -r kernels/src/cuda/cu "$BUNDLE/cu"
jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test
    and (.package_id | test("fp8-linear-cli")) and (.target.kind | index("test")))
    | .target.name' target/gpu-bundle-tests.json | sort -u >"$BUNDLE/bin/cli-tests"

cat >"$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled binaries on a GPU host; prints a pass/fail table last. Options:
#   (none)              every test binary (FP8_REQUIRE_CUDA=1, --test-threads=1)
#   --no-tests          skip that (to run only the parts below, e.g. in a second call)
#   --memcheck          compute-sanitizer memcheck on each GPU test binary (gpu_*)
#   --racecheck[=SPEC]  racecheck on chosen binaries (default gpu_matrix,gpu_hopper:repeated)
#   --synccheck[=SPEC]  synccheck on chosen binaries (default gpu_matrix,gpu_hopper:repeated)
#   --bench             the benchmarks: hopper, overlap, quant, gpu, marlin, graph, layouts, decode, portable, moe (FP8_BENCH_QUICK=1: subsets)
#   --bench=A,B         only these benchmarks (names in benches/), e.g. --no-tests --bench=graph
#   --only=A,B          only these test binaries (names in tests/)
# SPEC: comma-separated BINARY[:TEST_FILTER]. Under a sanitizer the matrix runs its small
# layers (FP8_MATRIX=quick) and our own kernels only (FP8_MATRIX_KERNELS, default
# HopperBlockFp8,PortableBlockFp8,MarlinFp8; SAN_KERNELS=all for every kernel).
# Logs go to $OUT when set, else ./logs. FP8_RUN_TIMEOUT limits each run (s, default 900;
# sanitizer runs get 3x); FP8_RUN_BUDGET (s) stops starting new runs after that long (the
# rest are listed as not run). Compiled kernels are cached in $FP8_LINEAR_CACHE_DIR (default
# ./kernel-cache).
set -u
HERE=$(cd "$(dirname "$0")" && pwd) && cd "$HERE" || exit 1
TESTS=1 MEMCHECK=0 RACE="" SYNC="" BENCH=0 BENCHES=hopper,overlap,quant,gpu,marlin,graph,layouts,decode ONLY=""
DEFAULT_SAN=gpu_matrix,gpu_hopper:repeated
for a in "$@"; do
    case "$a" in
    --no-tests) TESTS=0 ;;
    --memcheck) MEMCHECK=1 ;;
    --racecheck) RACE=$DEFAULT_SAN ;;
    --racecheck=*) RACE=${a#--racecheck=} ;;
    --synccheck) SYNC=$DEFAULT_SAN ;;
    --synccheck=*) SYNC=${a#--synccheck=} ;;
    --bench) BENCH=1 ;;
    --bench=*) BENCH=1 BENCHES=${a#--bench=} ;;
    --only=*) ONLY=${a#--only=} ;;
    -h | --help) sed -n 2,18p "$HERE/run.sh"; exit 0 ;;
    *) echo "unknown option $a (--help lists them)" >&2; exit 2 ;;
    esac
done
LOGS=${OUT:-$PWD/logs}
LIMIT=${FP8_RUN_TIMEOUT:-900}
BUDGET=${FP8_RUN_BUDGET:-0}
mkdir -p "$LOGS"
export FP8_REQUIRE_CUDA=1 FP8_LINEAR_LOG_LOADS=1
# A host with one GPU cannot run the two-GPU test: its hardware skip is allowed, and said.
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${GPUS:-0}" -lt 2 ]; then
    case "${FP8_ALLOW_ARCH_SKIPS:-}" in
    1 | all | ALL) ;;
    "") export FP8_ALLOW_ARCH_SKIPS=each_gpu_runs_its_own_layer ;;
    *) export FP8_ALLOW_ARCH_SKIPS=$FP8_ALLOW_ARCH_SKIPS,each_gpu_runs_its_own_layer ;;
    esac
    echo "note: ${GPUS:-0} GPU(s) here: each_gpu_runs_its_own_layer (gpu_tensor_parallel) may skip"
fi
export FP8_LINEAR_CACHE_DIR=${FP8_LINEAR_CACHE_DIR:-$PWD/kernel-cache}
PATH=$PATH:/usr/local/cuda/bin
SAN_KERNELS=${SAN_KERNELS:-HopperBlockFp8,PortableBlockFp8,MarlinFp8}
[ "$SAN_KERNELS" = all ] && SAN_KERNELS=""
START=$(date +%s)
TABLE="$LOGS/summary.txt"
printf '%-34s %-8s %6s %6s %8s\n' run result passed failed seconds >"$TABLE"
FAILED=0

row() { # label result passed failed seconds
    printf '%-34s %-8s %6s %6s %8s\n' "$@" >>"$TABLE"
    [ "$2" = ok ] || [ "$2" = skipped ] || FAILED=$((FAILED + 1))
}

over_budget() {
    [ "$BUDGET" -gt 0 ] && [ $(($(date +%s) - START)) -ge "$BUDGET" ]
}

run_one() { # label timeout command...
    local label=$1 limit=$2
    shift 2
    local log="$LOGS/$label.log"
    if over_budget; then
        row "$label" "not-run" - - -
        echo "$label: not run (FP8_RUN_BUDGET=${BUDGET}s spent)"
        return
    fi
    local t0=$(date +%s.%N)
    timeout "$limit" "$@" >"$log" 2>&1
    local rc=$?
    local secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    local p=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
    local f=$(grep -Eo '; [0-9]+ failed' "$log" | awk '{s+=$2} END {print s+0}')
    local result=ok
    if [ $rc -eq 124 ]; then result=timeout; elif [ $rc -ne 0 ]; then result="rc=$rc"; fi
    row "$label" "$result" "$p" "$f" "$secs"
    printf '%-34s %-8s %4s passed %3s failed %7ss\n' "$label" "$result" "$p" "$f" "$secs"
    if [ $rc -ne 0 ]; then
        grep -E -A1 "panicked at" "$log" | grep -v '^--$' | head -12 | sed 's/^/    /'
        grep -E "FAIL$|Invalid|hazard" "$log" | head -8 | sed 's/^/    /'
    fi
}

selected() { # test binary name: in --only, or every one
    [ -z "$ONLY" ] && return 0
    case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac
}

# The CLI's integration tests run the binary at the path cargo compiled into them: a binary
# there (the build machine itself) is used as it is, else the bundled one is linked there.
CLI_PATH=$(cat bin/compiled-path 2>/dev/null || true)
CLI_OK=0
if [ -n "$CLI_PATH" ]; then
    if [ -f "$CLI_PATH" ] && [ ! -L "$CLI_PATH" ] && [ -x "$CLI_PATH" ]; then
        CLI_OK=1
    elif { mkdir -p "$(dirname "$CLI_PATH")" && ln -sfn "$HERE/bin/fp8-linear" "$CLI_PATH"; } 2>/dev/null; then
        CLI_OK=1
    fi
fi
cli_test() { grep -qx "$1" bin/cli-tests 2>/dev/null; }

if [ $TESTS = 1 ]; then
    echo "== tests (FP8_REQUIRE_CUDA=1, --test-threads=1); logs in $LOGS"
    for t in tests/*; do
        name=$(basename "$t")
        selected "$name" || continue
        if cli_test "$name" && [ $CLI_OK = 0 ]; then
            row "$name" skipped - - -
            echo "$name: skipped (cannot place the CLI binary at $CLI_PATH)"
            continue
        fi
        run_one "$name" "$LIMIT" "$t" --test-threads=1 --nocapture
    done
    # A second run of one binary: its kernels now come from the disk cache.
    if selected gpu_errors && [ -x tests/gpu_errors ]; then
        run_one gpu_errors-second-run "$LIMIT" tests/gpu_errors --test-threads=1
        grep -h "fp8-linear: module" "$LOGS/gpu_errors-second-run.log" 2>/dev/null | head -4 | sed 's/^/  cache: /'
    fi
    for t in tests/*; do
        grep -h "rel err\|module cache\|bit-exact\|typed error\|captured\|matrix:\|entry " \
            "$LOGS/$(basename "$t").log" 2>/dev/null
    done >"$LOGS/highlights.txt"
    grep -h "^matrix:\|^entry .*cells passed\|FAIL$" "$LOGS/gpu_matrix.log" 2>/dev/null | head -30 | sed 's/^/  /'
fi

SAN=""
if [ $MEMCHECK = 1 ] || [ -n "$RACE" ] || [ -n "$SYNC" ]; then
    SAN=$(command -v compute-sanitizer || true)
    if [ -z "$SAN" ]; then
        echo "compute-sanitizer not found (PATH, /usr/local/cuda/bin): sanitizer runs skipped"
        row compute-sanitizer missing - - -
    fi
fi
sanitize() { # tool exit-code label binary [filter]
    local tool=$1 code=$2 label=$3 bin=$4 filter=${5:-}
    [ -x "tests/$bin" ] || { echo "$label: no binary tests/$bin"; row "$label" missing - - -; return; }
    run_one "$label" $((LIMIT * 3)) env FP8_MATRIX=quick FP8_MATRIX_KERNELS="$SAN_KERNELS" \
        "$SAN" --tool "$tool" --error-exitcode "$code" "tests/$bin" --test-threads=1 --nocapture $filter
    grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^matrix:|cells passed" "$LOGS/$label.log" | head -8 | sed 's/^/    /'
}
san_spec() { # tool exit-code spec
    local item
    for item in ${3//,/ }; do
        local bin=${item%%:*} filter=""
        [ "$item" != "$bin" ] && filter=${item#*:}
        sanitize "$1" "$2" "$1-$bin${filter:+-$filter}" "$bin" "$filter"
    done
}
if [ -n "$SAN" ]; then
    if [ $MEMCHECK = 1 ]; then
        echo "== memcheck (each GPU test binary; matrix: quick, kernels ${SAN_KERNELS:-all})"
        for t in tests/gpu_*; do
            name=$(basename "$t")
            selected "$name" || continue
            sanitize memcheck 86 "memcheck-$name" "$name"
        done
    fi
    [ -n "$RACE" ] && { echo "== racecheck"; san_spec racecheck 87 "$RACE"; }
    [ -n "$SYNC" ] && { echo "== synccheck"; san_spec synccheck 88 "$SYNC"; }
fi

if command -v cuobjdump >/dev/null && ls "$FP8_LINEAR_CACHE_DIR"/*.cubin >/dev/null 2>&1; then
    echo "== SASS of the NVRTC-compiled modules (details in $LOGS/sass.txt)"
    : >"$LOGS/sass.txt"
    for f in "$FP8_LINEAR_CACHE_DIR"/*.cubin; do
        cuobjdump -sass "$f" >"$LOGS/sass.tmp" 2>&1
        echo "$(basename "$f"): GMMA $(grep -cE 'QGMMA|HGMMA' "$LOGS/sass.tmp"), LDL/STL $(grep -cE '\b(LDL|STL)' "$LOGS/sass.tmp")"
        cuobjdump -res-usage "$f" 2>&1 | grep -oE "Function [A-Za-z0-9_]+|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" |
            paste -sd' ' | sed 's/ Function/\n  Function/g; s/^Function/  Function/' >>"$LOGS/sass.txt"
    done | tee -a "$LOGS/sass.txt" | sed 's/^/  /'
    rm -f "$LOGS/sass.tmp"
fi

if [ $BENCH = 1 ]; then
    echo "== benches"
    for b in ${BENCHES//,/ }; do
        [ -x "benches/$b" ] || { row "bench-$b" missing - - -; continue; }
        run_one "bench-$b" "$LIMIT" "benches/$b" --bench
        sed -n '/== summary/,$p' "$LOGS/bench-$b.log" | head -60
    done
fi

echo "== summary ($(($(date +%s) - START))s; logs in $LOGS)"
cat "$TABLE"
[ $FAILED -eq 0 ] && echo "all passed" || echo "$FAILED failed"
[ $FAILED -eq 0 ]
RUN
chmod +x "$BUNDLE/run.sh"
echo "bundle: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE/ ($(ls "$BUNDLE/tests" | wc -l) test binaries, $(ls "$BUNDLE/benches" | wc -l) benches)" >&2
du -h "$BUNDLE"/tests/* "$BUNDLE"/benches/* "$BUNDLE"/bin/fp8-linear | sort -h | tail -3 >&2

if [ $PACK = 1 ]; then
    tar -cJf target/gpu-bundle.tar.xz -C "$BUNDLE" .
    rm -rf "${BUNDLE:?}"/*
    mv target/gpu-bundle.tar.xz "$BUNDLE/bundle.tar.xz"
    cat >"$BUNDLE/run.sh" <<'STUB'
#!/usr/bin/env bash
# Unpacks bundle.tar.xz into ./unpacked (again whenever the archive changed), then runs
# unpacked/run.sh "$@".
cd "$(dirname "$0")" || exit 1
sum=$(cksum <bundle.tar.xz)
if [ ! -x unpacked/run.sh ] || [ "$(cat unpacked/.cksum 2>/dev/null)" != "$sum" ]; then
    rm -rf unpacked && mkdir unpacked &&
        { tar -xJf bundle.tar.xz -C unpacked 2>/dev/null ||
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                bundle.tar.xz unpacked; } || { echo "cannot unpack bundle.tar.xz" >&2; exit 1; }
    echo "$sum" >unpacked/.cksum
fi
exec unpacked/run.sh "$@"
STUB
    chmod +x "$BUNDLE/run.sh"
    echo "packed: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE/ (bundle.tar.xz, run.sh unpacks it)" >&2
fi
