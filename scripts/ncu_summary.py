#!/usr/bin/env python3
"""Medians of an Nsight Compute CSV (`ncu --csv --page raw`) of the Hopper bench, per bench
instance: every instance (one kernel of the bench at one M on one shape) is 28 calls, 3
warm-up and 25 timed (`WARMUP` and `SAMPLES` in kernels/benches/common), each launching one
or more kernels (a split GEMM and its finalize). An instance ends when a kernel of it has been
seen 28 times and is launched again, or when a new kernel comes after all of its kernels have.

    scripts/ncu_summary.py LOG METRICS [LABEL,...]

METRICS: the comma-separated list given to ncu (medians of every one the CSV holds, the grid
size shown as it is). LABELS, when given, name the instances in turn, once per shape (the
instances the kernel filter keeps); else they are numbered.
"""
import csv
import statistics
import sys

CALLS, WARMUP = 28, 3


def instances(rows):
    """Splits the launches into instances: lists of (kernel, grid) -> rows, in launch order."""
    out, cur = [], {}
    for r in rows:
        key = (r.get("Kernel Name", "?"), r.get("launch__grid_size", "?"))
        full = len(cur.get(key, [])) >= CALLS
        new_after_all = key not in cur and cur and all(len(v) >= CALLS for v in cur.values())
        if full or new_after_all:
            out.append(cur)
            cur = {}
        cur.setdefault(key, []).append(r)
    if cur:
        out.append(cur)
    return out


def median(rows, col):
    try:
        return statistics.median(float(r[col].replace(",", "")) for r in rows[WARMUP:] or rows)
    except (ValueError, KeyError):
        return float("nan")


def main():
    log, metrics = sys.argv[1], sys.argv[2].split(",")
    labels = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else []
    rows = list(csv.DictReader(l for l in open(log) if l.startswith('"')))
    cols = [c for c in metrics if rows and c in rows[0] and c != "launch__grid_size"]
    print("instance launches kernel grid", " ".join(c.split(".")[0] for c in cols))
    for i, inst in enumerate(instances(rows)):
        tag = f"shape {i // len(labels)} {labels[i % len(labels)]}" if labels else f"{i}"
        for (name, grid), chunk in inst.items():
            meds = " ".join(f"{median(chunk, c):.4g}" for c in cols)
            print(f"{tag:<18} {len(chunk):3d} {name[:48]:<48} {grid:>5} {meds}")


if __name__ == "__main__":
    main()
