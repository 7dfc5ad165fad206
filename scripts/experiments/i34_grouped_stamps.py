#!/usr/bin/env python3
"""Development stamps of the grouped Hopper kernel (issue 34): when each CTA's roles reach
the points of a call's life, in %globaltimer ns, every CTA of every 7th launch.

  scripts/experiments/i34_grouped_stamps.py make SRC_DIR DST_DIR   # stamped copy of cu/
  scripts/experiments/i34_grouped_stamps.py summary STAMPS.txt     # one line per call shape

`make` copies the kernel sources and patches hopper_gemm.cu (the dense kernels are stamped
too, harmlessly): thread 0's start (start) and barrier init done (init), the TMA thread's
first weight tiles issued (pre), its griddep_wait returned (wait: the quantization before
it is done) and its last load issued (loads), the scale warp's griddep_wait (swait), the
first math thread's first full stage (full), its last unit's epilogue start and end (epi0,
epi1) and its walk's end (end); and the units each CTA's math walk took. A kernel
`hopper_stamps_dump`, launched after each GEMM when FP8_LINEAR_STAMPS is set (a
`dev-sources` build), prints each recorded launch's shape (GSM) and, per point, the CTAs'
min / 10th / 50th / 90th percentile / max in ns from the launch's first start (GSE).

On the GPU host, with a bundle built with `dev-sources` (scripts/gpu-bundle.sh):

  FP8_LINEAR_CU_DIR=DST_DIR FP8_LINEAR_STAMPS=1 FP8_BENCH_QUICK=1 \\
      gpu-bundle/unpacked/benches/moe --bench > stamps.txt

`summary` groups the records by call (M, N, K, segments, slab rows, counts on the device,
tile) and prints, per point, the median over the records of the 50th percentile and of the
max.
"""
import collections
import statistics as stt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stamps_common import Patches, cli, copy_stamped  # noqa: E402

EVENTS = ["start", "init", "pre", "wait", "loads", "swait", "full", "epi0", "epi1", "end"]
PATCHES = Patches()
rep = PATCHES.rep


rep("""struct __align__(64) TmaDesc {
    u64 opaque[16];
};
""", """struct __align__(64) TmaDesc {
    u64 opaque[16];
};
// ---- development stamps (globaltimer of each CTA's points in every 7th launch) ----
#define GS_EV 10
__device__ unsigned long long gst[1024][GS_EV];
__device__ int gst_units[1024];
__device__ int gst_meta[12];
__device__ int gst_launch, gst_rec;
__device__ __forceinline__ unsigned long long gs_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ bool gs_on() { return *(volatile int*)&gst_rec && blockIdx.x < 1024; }
// Whether this launch records, and the math walk's units: in shared memory (thread 0 reads
// the global flag once before the barrier init), so a stamp costs no global round trip.
__device__ __forceinline__ int& gs_flag() { __shared__ int f; return f; }
__device__ __forceinline__ int& gs_units() { __shared__ int u; return u; }
#define GS(ev) do { if (gs_flag()) gst[blockIdx.x][ev] = gs_ns(); } while (0)
""")
rep("""    sc.num_n = num_n;
    const int wg = threadIdx.x / 128;
""", """    sc.num_n = num_n;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        gs_flag() = gs_on();
        gs_units() = 0;
        GS(0);
        if (blockIdx.x == 0 && gs_flag()) {
            const int meta[12] = {M, N, K, nseg, m_max, counts != nullptr, BM, BN, STAGES,
                                  (int)gridDim.x, G, 0};
            for (int i = 0; i < 12; ++i) gst_meta[i] = meta[i];
        }
    }
""")
rep("""    __syncthreads();
    // The peers' barriers are initialised""", """    __syncthreads();
    if (threadIdx.x == 0) GS(1);
    // The peers' barriers are initialised""")
rep("""            griddep_wait();
            u32 it = 0;
            Walk<G> walk(sc);""", """            GS(2);
            griddep_wait();
            GS(3);
            u32 it = 0;
            Walk<G> walk(sc);""")
rep("""                    tma_load_2d(sa + s * A_BYTES, ta, bars + 8 * s, kb * BK, w.m0);
                }
            }
        } else if (threadIdx.x / 32 == 1) {
            griddep_wait();  // the activation scales come from the kernel before this one
""", """                    tma_load_2d(sa + s * A_BYTES, ta, bars + 8 * s, kb * BK, w.m0);
                }
            }
            GS(4);
        } else if (threadIdx.x / 32 == 1) {
            griddep_wait();  // the activation scales come from the kernel before this one
            if (threadIdx.x == 32) GS(5);
""")
rep("""                mbar_wait(bars + 8 * s, ph);
                const float* c = scg + s * SC_FLOATS;""", """                mbar_wait(bars + 8 * s, ph);
                if (it == 0 && threadIdx.x == 128) GS(6);
                const float* c = scg + s * SC_FLOATS;""")
rep("""                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
""", """                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
                if (sub == 0 && i == 0 && threadIdx.x == 128) GS(6);
""")
rep("""    epilogue:
        if (live == 0) continue;""", """    epilogue:
        if (threadIdx.x == 128) {
            GS(7);
            ++gs_units();
        }
        if (live == 0) continue;""")
rep("""            store_totals<HOPPER_OUT>(out, tot, r0, r1, w.nb * BN + col_in, bias, rw, w.mend, N);
        }
    }
}""", """            store_totals<HOPPER_OUT>(out, tot, r0, r1, w.nb * BN + col_in, bias, rw, w.mend, N);
        }
        if (threadIdx.x == 128) GS(8);
    }
    if (threadIdx.x == 128) {
        GS(9);
        if (gs_flag()) gst_units[blockIdx.x] = gs_units();
    }
}""")

DUMP = """
// Prints (and clears) a recorded launch's stamps, then decides whether the next launch
// records; the host launches it, <<<1, 1>>>, after each GEMM when FP8_LINEAR_STAMPS is set.
extern "C" __global__ void hopper_stamps_dump() {
    if (gst_rec) {
        const int g = min(gst_meta[9], 1024);
        unsigned long long t0 = ~0ull;
        for (int c = 0; c < g; ++c)
            if (gst[c][0] != 0 && gst[c][0] < t0) t0 = gst[c][0];
        const int* m = gst_meta;
        printf("GSM launch=%d M=%d N=%d K=%d nseg=%d m_max=%d counts=%d BM=%d BN=%d stages=%d "
               "grid=%d grouped=%d\\n",
               gst_launch, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10]);
        unsigned long long v[1024];
        for (int ev = 0; ev < GS_EV; ++ev) {
            int n = 0;
            for (int c = 0; c < g; ++c)
                if (gst[c][ev] != 0) v[n++] = gst[c][ev] - t0;
            for (int i = 1; i < n; ++i)  // insertion sort (n <= grid)
                for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
                    const unsigned long long t = v[j];
                    v[j] = v[j - 1];
                    v[j - 1] = t;
                }
            if (n == 0) continue;
            printf("GSE %d %d %d %llu %llu %llu %llu %llu\\n", gst_launch, ev, n, v[0],
                   v[n / 10], v[n / 2], v[(9 * n) / 10], v[n - 1]);
        }
        int u0 = 1 << 30, u1 = 0;
        for (int c = 0; c < g; ++c) {
            u0 = min(u0, gst_units[c]);
            u1 = max(u1, gst_units[c]);
        }
        printf("GSU %d %d %d\\n", gst_launch, u0, u1);
        for (int c = 0; c < 1024; ++c) {
            gst_units[c] = 0;
            for (int ev = 0; ev < GS_EV; ++ev) gst[c][ev] = 0;
        }
    }
    ++gst_launch;
    gst_rec = gst_launch % 7 == 3;
}
"""


def make(src, dst):
    copy_stamped(src, dst, "hopper_gemm.cu", PATCHES, DUMP)


def summary(path):
    meta, ev, units = {}, collections.defaultdict(dict), {}
    for line in open(path):
        t = line.split()
        if not t:
            continue
        if t[0] == "GSM":
            kv = dict(x.split("=") for x in t[1:])
            meta[int(kv["launch"])] = kv
        elif t[0] == "GSE":
            ev[int(t[1])][int(t[2])] = [int(x) for x in t[3:]]
        elif t[0] == "GSU":
            units[int(t[1])] = (int(t[2]), int(t[3]))
    calls = collections.defaultdict(list)
    for launch, kv in meta.items():
        key = tuple(kv[k] for k in ["M", "N", "K", "nseg", "m_max", "counts", "BM", "BN", "grid"])
        calls[key].append(launch)
    print("ns from the launch's first CTA start: median over records of p50 / max over CTAs")
    print("M N K nseg m_max counts BM BN grid (records) units | " + " | ".join(EVENTS))
    for key in sorted(calls, key=lambda k: tuple(int(x) for x in k)):
        ls = calls[key]
        cells = []
        for e in range(len(EVENTS)):
            rows = [ev[launch][e] for launch in ls if e in ev[launch]]
            if not rows:
                cells.append("-")
                continue
            p50 = stt.median(r[3] for r in rows)
            mx = stt.median(r[5] for r in rows)
            cells.append(f"{p50:.0f}/{mx:.0f}")
        u = units.get(ls[0], ("?", "?"))
        print(" ".join(key) + f" ({len(ls)}) {u[0]}..{u[1]} | " + " | ".join(cells))


if __name__ == "__main__":
    cli(make, summary, __doc__)
