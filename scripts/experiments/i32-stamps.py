#!/usr/bin/env python3
"""Per-block stamps of the Marlin kernel (i32-stamps.patch) summarized per shape.

Input: the output of the Marlin bench with MARLIN_PROFILE, MARLIN_PROFILE_REPS=30 and
FP8_LINEAR_CU_DIR pointing at a copy of kernels/src/cuda/cu with the patch applied: one line
`STAMP n k smid b q0 count cs t_start t_end t_seg t_split` per block and launch (cs = 10 x cut
segments + sums done; times from %globaltimer in ns; t_seg the last segment's end, t_split the
return of its hand-off). Launches come in runs of REPS per shape (MARLIN_PROFILE_REPS, 30 as
the calls script sets it; two shapes of equal N, K and grid follow each other as two runs);
the first 10 of each run are dropped (clocks ramping).

Prints per shape (median over launches): the in-kernel span, block durations, whether the block
that ends last is one that summed a cut stripe, the latest end of the blocks that did not sum,
the sum (t_end - t_split) and the piece's store + hand-off (t_split - t_seg), and the SMs'
latest end over their average.

    python3 scripts/experiments/i32-stamps.py stamps.txt [...]
"""
import statistics as st
import sys
from collections import defaultdict

WARM = 10
REPS = 30


def launches(path):
    """[(n, k), [fields after n, k]] per launch, in launch order (a block index seen twice
    starts the next launch)."""
    out, cur, seen = [], None, set()
    for line in open(path):
        if not line.startswith("STAMP"):
            continue
        f = list(map(int, line.split()[1:]))
        nk, b = (f[0], f[1]), f[3]
        if cur is None or nk != cur[0] or b in seen:
            cur, seen = [nk, []], set()
            out.append(cur)
        seen.add(b)
        cur[1].append(f[2:])
    return out


def summarize(path):
    groups = []
    for nk, blocks in launches(path):
        if not groups or groups[-1][0] != (nk, len(blocks)) or len(groups[-1][1]) == REPS:
            groups.append([(nk, len(blocks)), []])
        groups[-1][1].append(blocks)
    print("==", path)
    for (nk, nb), runs in groups:
        runs = runs[WARM:] or runs
        span, davg, last_summer, nonsum, sums, splits, spread = [], [], 0, [], [], [], []
        for B in runs:
            t0 = min(r[5] for r in B)
            span.append((max(r[6] for r in B) - t0) / 1e3)
            davg.append(st.mean((r[6] - r[5]) / 1e3 for r in B))
            ends = [(r[6] - t0) / 1e3 for r in B if r[4] % 10 == 0]
            nonsum.append(max(ends) if ends else 0.0)
            sums += [(r[6] - r[8]) / 1e3 for r in B if r[4] % 10 and r[8]]
            splits += [(r[8] - r[7]) / 1e3 for r in B if r[8] and r[8] >= r[7]]
            per_sm = defaultdict(float)
            for r in B:
                per_sm[r[0]] = max(per_sm[r[0]], (r[6] - t0) / 1e3)
            spread.append(max(per_sm.values()) / st.mean(per_sm.values()))
            last_summer += max(B, key=lambda r: r[6])[4] % 10 > 0
        med = lambda v: st.median(v) if v else 0.0
        print(f"{nk[0]}x{nk[1]} blocks {nb}: span {med(span):.1f} us, block avg {med(davg):.1f}, "
              f"last block summed {last_summer}/{len(runs)}, non-summers end {med(nonsum):.1f}, "
              f"sum {med(sums):.2f}, store+hand-off {med(splits):.2f}, SM end max/avg {med(spread):.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarize(p)
