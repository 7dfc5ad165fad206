#!/usr/bin/env bash
# Issue 30 (Hopper GEMM), the experiment prepared without device time on 2026-12-04 (session 4),
# measured on none yet. `i30-turns-and-tall-widths.patch` (beside this script, made against
# main at 4a1f2cf) changes the kernel in two ways, each with its prediction in
# docs/perf-log.md ("Issue 30, session 4"):
#   - turns: where a math warpgroup keeps one accumulator set (the 192- and 256-row tiles,
#     the 144-column ones), the warpgroups take turns at the tensor cores (named barriers),
#     so one's wait and promotion run under the others' MMAs;
#   - 256-row tiles 96 and 112 columns wide (the planner takes them at M = 512 where
#     128-column tiles leave a wave short, as DeepGEMM does);
#   - (added 2026-12-05, "Issue 30, session 5") K splits summed inside the GEMM launch: the
#     split that arrives last at a tile's counter sums the partials, no hopper_finalize
#     kernel (in every variant below: the host code no longer launches one).
# The Hopper host model (tests/tests/hopper_host_model.rs, with the patch's cases for the new
# tiles) passes on the patched source and on the `nopipe2` variant below, under ASan/UBSan
# and TSan: the turns neither deadlock nor change a result.
# This script writes the kernel source variants that `scripts/hopper-exp.sh` times side by
# side from one bundle (run from the repository root after `git apply` of the patch):
#   .exp/order     the patched source (turns, as the patch's compiled-in copy)
#   .exp/noturn    the same with the turns off (the warpgroups in step, as on main; the new
#                  tiles kept, so the bundle's host code finds every kernel it lists)
#   .exp/nopipe2   turns, and the 128-row tiles without two accumulator sets (DeepGEMM's
#                  order: MMAs, wait, promote, with the other warpgroup's MMAs in between)
#   .exp/NAME-stamped  each of them with scripts/hopper_stamps.py's stamps
# Then, from a clean tree with the patch applied:
#   scripts/gpu-bundle.sh --pack && scripts/experiments/i30-variants.sh
#   GPU call 1 (carry gpu-bundle and .exp):
#     HOPPER_EXP_BUDGET=520 scripts/hopper-exp.sh bench:noturn bench:order bench:nopipe2 \
#       stamps:noturn-stamped stamps:order-stamped stamps:nopipe2-stamped \
#       bench:order:HOPPER_BENCH_SWEEP=1,HOPPER_BENCH_M=512
#   GPU call 2 (the winner compiled in, or FP8_LINEAR_CU_DIR=.exp/WINNER exported):
#     scripts/hopper-exp.sh test:gpu_hopper memcheck:gpu_hopper:tall_tiles \
#       racecheck:gpu_hopper:tall_tiles synccheck:gpu_hopper:tall_tiles \
#       memcheck:gpu_hopper:widths_for_the_sanitizers \
#       racecheck:gpu_hopper:widths_for_the_sanitizers synccheck:gpu_hopper:widths_for_the_sanitizers
#   (the last two: the split tiles' counter, barrier.red and in-launch sum)
# hopper-exp.sh returns steps.txt, report.txt (every summary) and logs.tar.xz (every log).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=kernels/src/cuda/cu
grep -q 'struct Turn' "$SRC/hopper_gemm.cu" || {
    echo "apply scripts/experiments/i30-turns-and-tall-widths.patch first"
    exit 1
}
rm -rf .exp/order .exp/noturn .exp/nopipe2 .exp/order-stamped .exp/noturn-stamped .exp/nopipe2-stamped
mkdir -p .exp
cp -r "$SRC" .exp/order
cp -r "$SRC" .exp/noturn
cp -r "$SRC" .exp/nopipe2
python3 - <<'PY'
import re
p = '.exp/noturn/hopper_gemm.cu'
s = open(p).read()
i = s.index('template <int NWG> struct Turn {')
j = s.index('};', i)
body = re.sub(r'named_(arrive|sync)\([^;]*\);', ';', s[i:j])
assert 'named_' not in body, body
open(p, 'w').write(s[:i] + body + s[j:])
p = '.exp/nopipe2/hopper_gemm.cu'
s = open(p).read()
old = 'constexpr bool PIPE = WAVES == 1 && NWG <= 2 && BN <= 128;'
assert s.count(old) == 1
open(p, 'w').write(s.replace(old, 'constexpr bool PIPE = WAVES == 1 && NWG == 1 && BN <= 128;'))
PY
for v in order noturn nopipe2; do python3 scripts/hopper_stamps.py make ".exp/$v" ".exp/$v-stamped"; done
