#!/usr/bin/env bash
# Builds fp8-linear-candle with its `cuda` feature on a machine with no GPU and no CUDA
# toolkit, and bundles the binaries for a GPU host (x86-64 Linux, glibc >= 2.34, an NVIDIA
# driver for CUDA 13, the CUDA 13 libraries in /usr/local/cuda; no Rust, no network).
#
#   scripts/candle-cuda-bundle.sh            # build and bundle here; prints the bundle's size
#   gpu-bundle-candle/run.sh [options]       # on the GPU host; --help lists the options
#
# What candle's `cuda` feature needs at build time, and where it comes from here:
# - nvcc (candle-kernels compiles its kernels to PTX, embedded in the binary, and its MoE /
#   GGUF kernels to SASS in a static library): NVIDIA's CUDA 13.0 wheels from PyPI
#   (nvcc, crt, nvvm, runtime headers + libcudart, cccl), `pip install --target` into
#   target/cuda-wheels. Pinned to 13.0: the PTX has to be loadable by the host's driver
#   (580 = CUDA 13.0; a newer nvcc writes a PTX ISA that driver cannot JIT).
# - the libraries cudarc links (`dynamic-linking`, asked for by candle): libcuda (the driver,
#   on no index), libnvrtc, libcublas, libcublasLt, libcurand. They are only needed to
#   resolve symbols at link time, so this script makes link-time stubs: tiny shared
#   libraries with the real sonames and symbol versions (checked against NVIDIA's 13.0 /
#   13.1 wheels: libnvrtc.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10, each
#   versioning its symbols with a node named after the soname; libcuda.so.1 unversioned)
#   that define every function cudarc's bindings declare. The binaries record only those
#   sonames (DT_NEEDED), no path: on the host the real libraries are found by the loader.
#   libcudart.so.13 (candle-kernels links it) is the real one from the runtime wheel.
#   (lib64/ also gets the run-time names, libcuda.so.1 & co., and the driver stub answers
#   every call with "no device": the smoke run below runs the binaries here on them.)
# All of it lives in target/ (git-ignored): target/cuda-wheels (the wheels),
# target/cuda-home (a CUDA_HOME made of links into the wheels plus lib64/ with the stubs),
# and the build itself in a target dir of its own, target/candle-cuda (override with
# CARGO_TARGET_DIR), so the main target dir is left alone. JOBS (default 2) caps cargo's
# parallelism; CUDA_COMPUTE_CAP (default 90, the H200: nvcc then targets sm_90a) the arch.
#
# The bundle, gpu-bundle-candle/ (git-ignored through .git/info/exclude), about 6 MB:
#   bundle.tar.xz  tests/{cuda,cpu,unit-fp8_linear_candle}: the test binaries of
#                  fp8-linear-candle built with `cuda`; bin/llama_mlp: the example (it
#                  generates its own checkpoints, no CLI needed); all stripped, ~130 MB
#                  unpacked (each carries candle's kernels), packed as one solid archive
#   run.sh         the runner for the GPU host (unpacks to /tmp on first use)
#   MANIFEST       what was built, from which commit, and the sonames each binary needs
# Before packing, the binaries are run here on the stubs (a machine without a GPU, as far
# as they can tell): SMOKE=0 skips that.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=gpu-bundle-candle
JOBS=${JOBS:-2}
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/candle-cuda}
WHEELS=$ROOT/target/cuda-wheels
CUDA_DIR=$ROOT/target/cuda-home
for a in "$@"; do
    case "$a" in
    -h | --help) sed -n 2,40p "$0"; exit 0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
    esac
done
for tool in jq gcc strip readelf nm objdump tar xz python3; do
    command -v "$tool" >/dev/null || { echo "candle-cuda-bundle.sh needs $tool" >&2; exit 1; }
done
grep -qx "/$BUNDLE" .git/info/exclude 2>/dev/null || git check-ignore -q "$BUNDLE/" ||
    { echo "$BUNDLE/ must be git-ignored (.git/info/exclude)" >&2; exit 1; }
mkdir -p target

# ---- 1. the CUDA 13.0 toolkit pieces, from PyPI (once; again when the pins change) --------
# nvcc: the compiler driver, cudafe++, ptxas, fatbinary, nvlink; nvvm: cicc and libdevice;
# crt: the host/device glue headers nvcc includes; runtime: cuda_runtime.h, cuda.h,
# cuda_fp16/bf16/fp8.h, libcudart.so.13; cccl: cub and libcu++ (candle's sort and MoE
# kernels include them). Everything installs under $WHEELS/nvidia/cu13.
PINS="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85"
if [ "$(cat "$WHEELS/.pins" 2>/dev/null)" != "$PINS" ]; then
    echo "installing the CUDA 13.0 wheels into $WHEELS..." >&2
    rm -rf "$WHEELS"
    # shellcheck disable=SC2086 # one pin per word
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --target "$WHEELS" $PINS
    echo "$PINS" >"$WHEELS/.pins"
fi
CU=$WHEELS/nvidia/cu13
"$CU/bin/nvcc" --version | grep -q "release 13.0," ||
    { echo "$CU/bin/nvcc is not CUDA 13.0" >&2; exit 1; }

# ---- 2. a CUDA_HOME: links into the wheels, lib64/ with libcudart and the stubs -----------
rm -rf "$CUDA_DIR"
mkdir -p "$CUDA_DIR/lib64" "$CUDA_DIR/stub-src"
for d in bin include nvvm; do ln -s "$CU/$d" "$CUDA_DIR/$d"; done
ln -s "$CU/lib/libcudart.so.13" "$CUDA_DIR/lib64/libcudart.so.13"
ln -s libcudart.so.13 "$CUDA_DIR/lib64/libcudart.so"

# The functions cudarc's bindings declare (the `extern "C"` blocks of its sys modules, every
# CUDA version's: a superset of what the 13.0 bindings reference), from the cudarc the
# lock file picks.
CUDARC=$(cargo metadata --format-version 1 |
    jq -r '.packages[] | select(.name == "cudarc") | .manifest_path' | head -1)
CUDARC=$(dirname "$CUDARC")/src
[ -d "$CUDARC/driver/sys" ] || { echo "cudarc sources not found ($CUDARC)" >&2; exit 1; }
symbols() { # cudarc module -> one function name a line (only those in `extern "C"` blocks)
    awk '/extern "C" \{/ { e = 1; next }
        e && /^[[:space:]]*\}/ { e = 0 }
        e && match($0, /^[[:space:]]+fn [A-Za-z_0-9]+\(/) {
            s = substr($0, RSTART, RLENGTH); sub(/^[[:space:]]+fn /, "", s); sub(/\($/, "", s)
            print s
        }' "$CUDARC/$1/sys/mod.rs" | sort -u
}
stub() { # cudarc-module link-name soname versioned(0/1) body
    local module=$1 link=$2 soname=$3 versioned=$4 body=$5
    local src=$CUDA_DIR/stub-src/$link.c map=$CUDA_DIR/stub-src/$link.map
    symbols "$module" | sed "s/.*/$body/" >"$src"
    [ -s "$src" ] || { echo "no symbols for $module in $CUDARC" >&2; exit 1; }
    local flags=(-shared -fPIC -nostdlib -O1 -o "$CUDA_DIR/lib64/lib$link.so" "-Wl,-soname,$soname")
    if [ "$versioned" = 1 ]; then
        # One version node named after the soname, as NVIDIA's libraries have: the binaries
        # then ask for NAME@soname, exactly as if linked against the real library.
        { echo "$soname {"; echo "  global:"; symbols "$module" | sed 's/.*/    &;/'
          echo "  local: *;"; echo "};"; } >"$map"
        flags+=("-Wl,--version-script=$map")
    fi
    gcc "${flags[@]}" "$src"
    # The run-time name too, for the smoke run below (never on the host: the bundle has none).
    ln -sf "lib$link.so" "$CUDA_DIR/lib64/$soname"
}
# The driver stub answers every call with CUDA_ERROR_NO_DEVICE (100): with it the binaries
# can run here as on a machine without a GPU (the smoke run). The others trap if ever called
# (nothing calls them without a device).
stub driver cuda libcuda.so.1 0 'int &(void) { return 100; }'
stub nvrtc nvrtc libnvrtc.so.13 1 'void &(void) { __builtin_trap(); }'
stub cublas cublas libcublas.so.13 1 'void &(void) { __builtin_trap(); }'
stub cublaslt cublasLt libcublasLt.so.13 1 'void &(void) { __builtin_trap(); }'
stub curand curand libcurand.so.10 1 'void &(void) { __builtin_trap(); }'

# ---- 3. the build (its own target dir) ------------------------------------------------------
# cudaforge (candle-kernels' build script) finds nvcc through NVCC; cudarc's build script
# adds CUDA_HOME's lib64 to the link search path (its version comes from the workspace's
# `cuda-13000` feature, so it does not ask nvcc).
export CUDA_HOME=$CUDA_DIR NVCC=$CUDA_DIR/bin/nvcc
export PATH=$CUDA_DIR/bin:$PATH
unset CUDA_PATH CUDA_ROOT CUDA_TOOLKIT_ROOT_DIR CUDARC_CUDA_VERSION NVCC_CCBIN
echo "building fp8-linear-candle --features cuda (release, $CARGO_TARGET_DIR; the first build" \
    "compiles candle's CUDA kernels with nvcc, which takes a while)..." >&2
cargo test -p fp8-linear-candle --features cuda --release --no-run -j "$JOBS" \
    --message-format=json-render-diagnostics >target/candle-cuda-tests.json
cargo build -p fp8-linear-candle --features cuda --release --example llama_mlp -j "$JOBS" \
    --message-format=json-render-diagnostics >target/candle-cuda-example.json

# ---- 4. the binaries, stripped, into a staging folder ------------------------------------
STAGE=target/candle-cuda-stage
rm -rf "$STAGE" "$BUNDLE"
mkdir -p "$STAGE/tests" "$STAGE/bin" "$BUNDLE"
# name <TAB> executable: integration tests by their name (cuda, cpu), the library's unit
# tests as unit-fp8_linear_candle; then the example.
jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
    | (if (.target.kind | index("test")) then .target.name else "unit-" + .target.name end)
      + "\t" + .executable' target/candle-cuda-tests.json | sort -u |
    while IFS=$'\t' read -r name exe; do strip -o "$STAGE/tests/$name" "$exe"; done
example=$(jq -r 'select(.reason == "compiler-artifact" and .executable != null
    and (.target.kind | index("example"))) | .executable' target/candle-cuda-example.json | tail -1)
strip -o "$STAGE/bin/llama_mlp" "$example"
[ -x "$STAGE/tests/cuda" ] || { echo "no tests/cuda binary was built" >&2; exit 1; }

# Every binary may need only the CUDA 13 libraries below and the C/C++ runtime, by soname,
# with no RPATH/RUNPATH (on the host they come from LD_LIBRARY_PATH and the driver's dir).
ALLOWED=(libcuda.so.1 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10
    libcudart.so.13 libstdc++.so.6 libgcc_s.so.1 libm.so.6 libc.so.6 ld-linux-x86-64.so.2)
allowed() { local x; for x in "${ALLOWED[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
{
    echo "fp8-linear-candle --features cuda, release; built $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')"
    kout=$(jq -r 'select(.reason == "build-script-executed"
        and (.package_id | test("candle-kernels"))) | .out_dir' target/candle-cuda-tests.json | tail -1)
    echo "nvcc $("$CU/bin/nvcc" --version | grep -o 'V[0-9][0-9.]*'); candle's PTX: $(grep -h -m1 -E '^\.version' "$kout"/affine.ptx) $(grep -h -m1 -E '^\.target' "$kout"/affine.ptx) (CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP)"
    for f in "$STAGE"/tests/* "$STAGE"/bin/*; do
        needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
        glibc=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
        echo "${f#"$STAGE"/} ($(du -h "$f" | cut -f1), needs $glibc): $needed"
        for lib in $needed; do
            allowed "$lib" ||
                { echo "${f#"$STAGE"/} needs $lib, not one the host is known to have" >&2; exit 1; }
        done
        if readelf -d "$f" | grep -qE 'RPATH|RUNPATH'; then
            echo "${f#"$STAGE"/} has an RPATH/RUNPATH" >&2; exit 1
        fi
    done
} >"$STAGE/MANIFEST"
cat "$STAGE/MANIFEST" >&2

# ---- 5. a smoke run here, on the stubs: as on a machine without a GPU ---------------------
# Proves that every binary loads (all its symbols bind: Rust links with -z now), that the
# CPU paths of the CUDA build work, and that no GPU is an error value, not a crash: the CUDA
# tests skip (they fail instead under FP8_REQUIRE_CUDA=1, as on the host), the example runs
# on the CPU only (and fails under FP8_REQUIRE_CUDA=1).
if [ "${SMOKE:-1}" = 1 ]; then
    echo "smoke run here on the stubs (SMOKE=0 skips it)..." >&2
    smoke() { # expect(ok/fail) log command...
        local expect=$1 log=target/candle-cuda-smoke-$2.log rc=0
        shift 2
        env -u FP8_REQUIRE_CUDA LD_LIBRARY_PATH="$CUDA_DIR/lib64" "$@" >"$log" 2>&1 || rc=$?
        if { [ "$expect" = ok ] && [ $rc -ne 0 ]; } || { [ "$expect" = fail ] && [ $rc -eq 0 ]; }; then
            echo "smoke: $* (expected $expect) gave rc=$rc; see $log:" >&2
            tail -20 "$log" >&2
            exit 1
        fi
        echo "  smoke ok ($expect, rc=$rc): ${*#"$STAGE"/}" >&2
    }
    for t in "$STAGE"/tests/*; do smoke ok "$(basename "$t")" "$t" --test-threads=1; done
    grep -q "SKIPPED" target/candle-cuda-smoke-cuda.log ||
        { echo "smoke: tests/cuda did not skip without a GPU" >&2; exit 1; }
    smoke fail cuda-required env FP8_REQUIRE_CUDA=1 "$STAGE/tests/cuda" --test-threads=1
    smoke ok llama_mlp "$STAGE/bin/llama_mlp"
    grep -q "no usable CUDA device, CPU only" target/candle-cuda-smoke-llama_mlp.log ||
        { echo "smoke: llama_mlp did not report the missing GPU" >&2; exit 1; }
    smoke fail llama_mlp-required env FP8_REQUIRE_CUDA=1 "$STAGE/bin/llama_mlp"
    # Those two failed for the right reason (not, say, a crash).
    for l in cuda-required llama_mlp-required; do
        grep -q "FP8_REQUIRE_CUDA=1 but" "target/candle-cuda-smoke-$l.log" ||
            { echo "smoke: $l failed otherwise than for the missing GPU" >&2; exit 1; }
    done
fi

# ---- 6. the bundle: one xz archive (solid: the binaries share most of their bytes) + run.sh --
# Each binary carries candle's kernels (~33 MB of SASS for the MoE / GGUF kernels, ~11 MB of
# PTX), 42 MB stripped; packed together they take a small fraction of that.
echo "packing..." >&2
# tests/cuda and bin/llama_mlp first (xz -9's 64 MiB window spans two binaries), one thread
# (a solid stream: blocks of a threaded xz would not see each other's bytes).
members=(MANIFEST tests/cuda bin/llama_mlp)
for t in "$STAGE"/tests/*; do [ "${t##*/}" = cuda ] || members+=("tests/${t##*/}"); done
tar -cf - -C "$STAGE" "${members[@]}" | xz -9 -T1 >"$BUNDLE/bundle.tar.xz"
cp "$STAGE/MANIFEST" "$BUNDLE/MANIFEST"
cat >"$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# fp8-linear-candle's CUDA build on a GPU host: unpacks bundle.tar.xz (to
# $FP8_UNPACK_DIR, default ${TMPDIR:-/tmp}/fp8-candle-bundle-<checksum>, so this folder stays
# small), puts the CUDA 13 libraries on the loader path ($CUDA_HOME, default /usr/local/cuda:
# lib64 and targets/x86_64-linux/lib; the driver's libcuda.so.1 from the system), checks that
# every binary finds its libraries, then runs, with a pass/fail table last:
#   1. tests/cuda (candle CUDA tensors through Fp8Linear), FP8_REQUIRE_CUDA=1, --test-threads=1
#   2. tests/cpu and the unit tests (the CPU paths of the same build)
#   3. llama_mlp on the CPU, then GPU 0 (FP8_REQUIRE_CUDA=1: no GPU is a failure), on
#      generated checkpoints with 128x128 block scales: the tiny preset at 4 tokens, and
#      small-4096 (Llama-3-8B layer shapes) at 1 and 64 tokens
# Options:
#   --memcheck     also compute-sanitizer --tool memcheck on tests/cuda
#   --no-tests     skip 1 and 2        --no-example   skip 3
#   --check        only unpack and check the libraries (ldd)
# Logs go to $OUT when set, else ./logs next to this script. FP8_RUN_TIMEOUT limits each run
# (s, default 900; memcheck gets 3x). fp8-linear's NVRTC kernels are cached in
# $FP8_LINEAR_CACHE_DIR (default: kernel-cache in the unpacked folder).
set -u
HERE=$(cd "$(dirname "$0")" && pwd) || exit 1
TESTS=1 EXAMPLE=1 MEMCHECK=0 CHECK_ONLY=0
for a in "$@"; do
    case "$a" in
    --memcheck) MEMCHECK=1 ;;
    --no-tests) TESTS=0 ;;
    --no-example) EXAMPLE=0 ;;
    --check) CHECK_ONLY=1 ;;
    -h | --help) sed -n 2,18p "$HERE/run.sh"; exit 0 ;;
    *) echo "unknown option $a (--help lists them)" >&2; exit 2 ;;
    esac
done

# Unpack (again whenever the archive changed).
sum=$(cksum <"$HERE/bundle.tar.xz" | cut -d' ' -f1)
DIR=${FP8_UNPACK_DIR:-${TMPDIR:-/tmp}/fp8-candle-bundle-$sum}
if [ "$(cat "$DIR/.cksum" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$DIR"
    mkdir -p "$DIR" || exit 1
    # tar with xz, else Python's tarfile (lzma).
    if ! tar -xJf "$HERE/bundle.tar.xz" -C "$DIR" 2>/dev/null; then
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$HERE/bundle.tar.xz" "$DIR" || { echo "cannot unpack bundle.tar.xz" >&2; exit 1; }
    fi
    echo "$sum" >"$DIR/.cksum"
fi
cd "$DIR" || exit 1
echo "== bundle: $(head -2 MANIFEST | paste -sd';' -), unpacked in $DIR"

CUDA=${CUDA_HOME:-/usr/local/cuda}
for d in "$CUDA/targets/x86_64-linux/lib" "$CUDA/lib64"; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
PATH=$PATH:$CUDA/bin
LOGS=${OUT:-$HERE/logs}
LIMIT=${FP8_RUN_TIMEOUT:-900}
mkdir -p "$LOGS"
export FP8_LINEAR_LOG_LOADS=1
export FP8_LINEAR_CACHE_DIR=${FP8_LINEAR_CACHE_DIR:-$DIR/kernel-cache}
START=$(date +%s)
TABLE="$LOGS/summary.txt"
printf '%-30s %-8s %6s %6s %8s\n' run result passed failed seconds >"$TABLE"
FAILED=0
row() { # label result passed failed seconds
    printf '%-30s %-8s %6s %6s %8s\n' "$@" >>"$TABLE"
    [ "$2" = ok ] || FAILED=$((FAILED + 1))
}

# The libraries: each binary's, resolved by the loader as it will be at run time.
echo "== libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
missing=0
for f in tests/* bin/*; do
    nf=$(ldd "$f" 2>&1 | grep -E "not found|version .* not found" || true)
    if [ -n "$nf" ]; then
        echo "$f:"
        while IFS= read -r l; do echo "    $l"; done <<<"$nf"
        missing=1
    fi
done
ldd tests/cuda | grep -E "libcuda\.|libnvrtc|libcublas|libcurand|libcudart" | sed 's/^\s*/  /'
if [ $missing = 1 ]; then
    row libraries missing - - -
    echo "libraries missing (set CUDA_HOME to the CUDA 13 toolkit's root)"
else
    row libraries ok - - -
fi
[ $CHECK_ONLY = 1 ] && { cat "$TABLE"; [ $FAILED -eq 0 ]; exit; }

run_one() { # label timeout command...
    local label=$1 limit=$2
    shift 2
    local log="$LOGS/$label.log" t0 rc secs p f result=ok
    t0=$(date +%s.%N)
    timeout "$limit" "$@" >"$log" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    p=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
    f=$(grep -Eo '; [0-9]+ failed' "$log" | awk '{s+=$2} END {print s+0}')
    if [ $rc -eq 124 ]; then result=timeout; elif [ $rc -ne 0 ]; then result="rc=$rc"; fi
    row "$label" "$result" "$p" "$f" "$secs"
    printf '%-30s %-8s %4s passed %3s failed %7ss\n' "$label" "$result" "$p" "$f" "$secs"
    if [ $rc -ne 0 ]; then
        grep -E -A2 "panicked at|^Error|error:" "$log" | grep -v '^--$' | head -16 | sed 's/^/    /'
        grep -E "ERROR SUMMARY|Invalid" "$log" | head -8 | sed 's/^/    /'
    fi
}

export FP8_REQUIRE_CUDA=1
if [ $TESTS = 1 ]; then
    echo "== tests (FP8_REQUIRE_CUDA=1, --test-threads=1); logs in $LOGS"
    run_one tests-cuda "$LIMIT" tests/cuda --test-threads=1 --nocapture
    grep -hE "rel err|^(->|  ->)|kernel" "$LOGS/tests-cuda.log" | head -12 | sed 's/^/  /'
    for t in tests/*; do
        [ "$t" = tests/cuda ] && continue
        run_one "tests-$(basename "$t")" "$LIMIT" "$t" --test-threads=1
    done
fi
if [ $EXAMPLE = 1 ]; then
    echo "== llama_mlp (CPU, then GPU 0)"
    run_one llama_mlp-tiny "$LIMIT" bin/llama_mlp
    run_one llama_mlp-small-4096-m1 "$LIMIT" bin/llama_mlp --preset small-4096 1
    run_one llama_mlp-small-4096-m64 "$LIMIT" bin/llama_mlp --preset small-4096 64
    for l in tiny small-4096-m1 small-4096-m64; do
        grep -hE "^Cuda|worst relative error" "$LOGS/llama_mlp-$l.log" | sed "s/^/  $l: /"
    done
fi
if [ $MEMCHECK = 1 ]; then
    SAN=$(command -v compute-sanitizer || true)
    if [ -z "$SAN" ]; then
        echo "compute-sanitizer not found (PATH, $CUDA/bin): memcheck skipped"
        row memcheck-tests-cuda missing - - -
    else
        echo "== memcheck"
        run_one memcheck-tests-cuda $((LIMIT * 3)) "$SAN" --tool memcheck --error-exitcode 86 \
            tests/cuda --test-threads=1 --nocapture
        grep -h "ERROR SUMMARY" "$LOGS/memcheck-tests-cuda.log" | sed 's/^/  /'
    fi
fi

echo "== summary ($(($(date +%s) - START))s; logs in $LOGS)"
cat "$TABLE"
[ $FAILED -eq 0 ] && echo "all passed" || echo "$FAILED failed"
[ $FAILED -eq 0 ]
RUN
chmod +x "$BUNDLE/run.sh"

# run.sh itself, here: it unpacks and finds every library (the stubs, through CUDA_HOME).
if [ "${SMOKE:-1}" = 1 ]; then
    rm -rf target/candle-cuda-unpacked
    CUDA_HOME=$CUDA_DIR FP8_UNPACK_DIR=$ROOT/target/candle-cuda-unpacked \
        OUT=$ROOT/target/candle-cuda-smoke-logs "$BUNDLE/run.sh" --check >target/candle-cuda-smoke-run.log 2>&1 ||
        { echo "smoke: $BUNDLE/run.sh --check failed:" >&2; cat target/candle-cuda-smoke-run.log >&2; exit 1; }
    echo "  smoke ok: $BUNDLE/run.sh --check (unpacked, every library found)" >&2
    rm -rf target/candle-cuda-unpacked target/candle-cuda-smoke-logs
fi

size=$(du -sm "$BUNDLE" | cut -f1)
echo "bundle: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE/ (bundle.tar.xz, run.sh, MANIFEST; unpacked" \
    "$(du -sh "$STAGE" | cut -f1))" >&2
[ "$size" -lt 60 ] || { echo "the bundle is over 60 MiB" >&2; exit 1; }
echo "on the GPU host: $BUNDLE/run.sh [--memcheck]" >&2
