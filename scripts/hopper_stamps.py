#!/usr/bin/env python3
"""Development stamps of the Hopper GEMM: clock64 of each stage's life in two CTAs.

  scripts/hopper_stamps.py make SRC_DIR DST_DIR   # a copy of kernels/src/cuda/cu, stamped
  scripts/hopper_stamps.py summary STAMPS.txt     # one line per recorded launch and CTA

`make` copies the kernel sources and patches hopper_gemm.cu: in every 30th launch (launch
index % 30 == 10, counted over the module's kernels) CTA 0 and CTA gridDim/2 record, per
stage iteration, when the producer's empty wait ended (P), when the scale warp's copies
were issued (S), when the first math thread's full wait ended (F), when the first and the
last wave's MMAs were done (W0, W1) and when the stage was released (R), and per work unit
the epilogue's start and end, and every CTA of those launches its start, end (globaltimer)
and units; a kernel `hopper_stamps_dump` prints them (in the two-set tiles W0 and W1 are the
first and last scale block's promotion start).
The patch matches the source's text exactly and stops with the line it did not find when
the source moved on.

On the GPU host, with a bundle built with the `dev-sources` feature (scripts/gpu-bundle.sh):

  FP8_LINEAR_CU_DIR=DST_DIR FP8_LINEAR_STAMPS=1 HOPPER_BENCH_M=4096 \
      gpu-bundle/unpacked/benches/hopper > stamps.txt

(FP8_LINEAR_STAMPS makes the layer launch the dump kernel after each GEMM when the module
has it.) Then `summary stamps.txt`: medians over a CTA's stage iterations, in SM cycles, of
the period (F to the next F), the math warpgroup's wait for a full stage (F - previous R),
the load latency (F - max(P, S)), the MMAs (W1 - F), the last promotion (R - W1), the
producer's wait for a released stage (P - R of STAGES iterations before) and the epilogue,
with the epilogue's share of the CTA's time; then each recorded launch's CTAs: the spread
of their starts, the first, median and last end (ns from the first start) and the units
per CTA (a late last end against the median: some SMs slower, or more units on them).
"""
import collections
import statistics as stt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stamps_common import Patches, cli, copy_stamped  # noqa: E402

# (text of hopper_gemm.cu, its replacement, how many times the text must occur)
PATCHES = Patches()
rep = PATCHES.rep


# globals + helpers after the TmaDesc struct
rep("""struct __align__(64) TmaDesc {
    u64 opaque[16];
};
""", """struct __align__(64) TmaDesc {
    u64 opaque[16];
};
// ---- development stamps (clock64 of a stage's life in two CTAs of chosen launches) ----
#define ST_N 4096
__device__ unsigned long long hst[2][6][ST_N];  // P S F W0 W1 R per stage iteration
__device__ unsigned long long hsu[2][2][1024];  // epilogue start / end per unit
__device__ unsigned long long hsc[2][4];        // cta start, end, units
__device__ unsigned int hst_ctr;
__device__ __forceinline__ unsigned long long st_clk() { return clock64(); }
// Every CTA of a recorded launch: start and end (globaltimer, ns) and its units.
__device__ unsigned long long hall[1024][2];
__device__ int hall_u[1024];
__device__ unsigned long long hall_launch;
__device__ int hall_grid, hall_ready;
__device__ __forceinline__ unsigned long long st_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define STAMP(slot, kind, it) do { if ((slot) >= 0 && (it) < ST_N) hst[slot][kind][it] = st_clk(); } while (0)
""")
# math(): receive rec slot via a shared variable read
rep("""    using F = Fac<BM, BN>;
    const int wg = threadIdx.x / 128;
""", """    using F = Fac<BM, BN>;
    const int wg = threadIdx.x / 128;
    extern __shared__ int st_rec_dummy[];
    const int rec = (threadIdx.x == 128) ? st_slot_get() : -1;
""")
# non-PIPE loop stamps
rep("""                const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                mbar_wait(bars + 8 * s, ph);
                const float* c = scg + s * SC_FLOATS;""", """                const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                mbar_wait(bars + 8 * s, ph);
                STAMP(rec, 2, it);
                const float* c = scg + s * SC_FLOATS;""")
rep("""                            wgmma_commit();
                            wgmma_wait0();
                            promote<BM, BN>(tot[v], acc, F(c, sub, 64 * NWG * v + row_in), second);""",
"""                            wgmma_commit();
                            wgmma_wait0();
                            if (v == 0 && sub == 0) STAMP(rec, 3, it);
                            if (v == WAVES - 1 && sub == SUBS - 1) STAMP(rec, 4, it);
                            promote<BM, BN>(tot[v], acc, F(c, sub, 64 * NWG * v + row_in), second);""")
rep("""                release(s);
            }
        }
    epilogue:""", """                release(s);
                STAMP(rec, 5, it);
            }
        }
    epilogue:""")
rep("""    epilogue:
        if (live == 0) continue;""", """    epilogue:
        const int uu = (walk.u - sc.step - sc.first) / sc.step;  // (walk.u: the next unit)
        if (rec >= 0 && uu < 1024) hsu[rec][0][uu] = st_clk();
        if (live == 0) continue;""")
rep("""            store_totals<HOPPER_OUT>(out, tot, r0, r1, w.nb * BN + col_in, bias, rw, w.mend, N);
        }
    }
}""", """            store_totals<HOPPER_OUT>(out, tot, r0, r1, w.nb * BN + col_in, bias, rw, w.mend, N);
        }
        if (rec >= 0 && uu < 1024) hsu[rec][1][uu] = st_clk();
    }
}""")
# slot: shared variable set by thread 0
rep("""// ---- the kernel -----""", """__device__ __forceinline__ int& st_slot_ref() { __shared__ int v; return v; }
__device__ __forceinline__ int& st_all_ref() { __shared__ int v; return v; }
__device__ __forceinline__ int st_slot_get() { return st_slot_ref(); }
// ---- the kernel -----""")
rep("""    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {""", """    const unsigned long long st_t0 = st_clk();
    if (threadIdx.x == 0) {
        const unsigned old = atomicAdd(&hst_ctr, 1u);
        const unsigned launch = old / gridDim.x;
        const int slot = blockIdx.x == 0 ? 0 : (blockIdx.x == gridDim.x / 2 ? 1 : -1);
        st_slot_ref() = (slot >= 0 && launch % 30 == 10) ? slot : -1;
        st_all_ref() = launch % 30 == 10 && blockIdx.x < 1024;
        if (st_all_ref()) {
            hall[blockIdx.x][0] = st_ns();
            if (blockIdx.x == 0) { hall_launch = launch; hall_grid = gridDim.x; }
        }
        if (st_slot_ref() >= 0) { hsc[slot][0] = st_t0; hsc[slot][3] = launch; }
        for (int s = 0; s < STAGES; ++s) {""")
# producer stamps
rep("""                    mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
                    if (it >= pre) load_b(it, w, kb);""", """                    mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
                    STAMP(st_slot_get(), 0, it);
                    if (it >= pre) load_b(it, w, kb);""")
rep("""            cp_async_arrive(bars + 8 * s);
        }""", """            cp_async_arrive(bars + 8 * s);
            if (lane == 0) STAMP(st_slot_get(), 1, it);
        }""")
# end: store the record's size and a ready flag; a separate kernel prints it
rep("""    // No CTA leaves while a peer may still multicast into it or arrive on its barriers.
    if constexpr (CL > 1) cluster_sync();
}""", """    // No CTA leaves while a peer may still multicast into it or arrive on its barriers.
    if constexpr (CL > 1) cluster_sync();
    __syncthreads();
    if (threadIdx.x == 0 && st_all_ref()) {
        int nu = 0;
        for (int u = sc.first; u < sc.units; u += sc.step) ++nu;
        hall[blockIdx.x][1] = st_ns();
        hall_u[blockIdx.x] = nu;
        __threadfence();
        atomicAdd(&hall_ready, 1);
    }
    const int slot = st_slot_get();
    if (threadIdx.x == 0 && slot >= 0) {
        u32 its = 0, nu = 0;
        for (int u = sc.first; u < sc.units; u += sc.step, ++nu) { const Unit w = sc.at(u); its += w.kb1 - w.kb0; }
        hsm[slot][0] = blockIdx.x; hsm[slot][1] = gridDim.x; hsm[slot][2] = BM; hsm[slot][3] = BN;
        hsm[slot][4] = M; hsm[slot][5] = N; hsm[slot][6] = K; hsm[slot][7] = its; hsm[slot][8] = nu; hsm[slot][9] = STAGES;
        hsc[slot][1] = st_clk();
        __threadfence();
        hsc[slot][2] = 1;
    }
}""")
rep("""__device__ unsigned int hst_ctr;""", """__device__ unsigned int hst_ctr;
__device__ int hsm[2][10];""")
# The two-set (PIPE) loop: full wait in `issue`, MMAs done / released in `retire`.
rep("""                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
""", """                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
                if (sub == 0) STAMP(rec, 2, i);
""")
rep("""                const F f(scg + s * SC_FLOATS, sub, row_in);
                promote<BM, BN>(tot[0], d, f, second);
                if (sub == SUBS - 1) release(s);
""", """                if (sub == 0) STAMP(rec, 3, i);
                if (sub == SUBS - 1) STAMP(rec, 4, i);
                const F f(scg + s * SC_FLOATS, sub, row_in);
                promote<BM, BN>(tot[0], d, f, second);
                if (sub == SUBS - 1) release(s);
                if (sub == SUBS - 1) STAMP(rec, 5, i);
""")

# Appended: the kernel that prints (and clears) the records.
DUMP = """
// Prints (and clears) the records of the stamped CTAs; the host launches it, <<<1, 1>>>, after
// each GEMM when FP8_LINEAR_STAMPS is set (development knob).
extern "C" __global__ void hopper_stamps_dump() {
    if (hall_ready > 0) {
        // Every CTA: the spread of the starts, the ends (median and last), the units per CTA.
        const int g = min(hall_grid, 1024);
        unsigned long long s0 = ~0ull, s1 = 0, e0 = ~0ull, e1 = 0;
        int u0 = 1 << 30, u1 = 0;
        for (int c = 0; c < g; ++c) {
            s0 = min(s0, hall[c][0]); s1 = max(s1, hall[c][0]);
            e0 = min(e0, hall[c][1]); e1 = max(e1, hall[c][1]);
            u0 = min(u0, hall_u[c]); u1 = max(u1, hall_u[c]);
        }
        // The median end: the smallest end with at least half the CTAs ended by then.
        unsigned long long med = e1;
        for (int c = 0; c < g; ++c) {
            int before = 0;
            for (int d = 0; d < g; ++d) before += hall[d][1] <= hall[c][1];
            if (2 * before >= g && hall[c][1] < med) med = hall[c][1];
        }
        printf("STA launch=%llu grid=%d ready=%d start_spread_ns=%llu end_first_ns=%llu end_median_ns=%llu end_last_ns=%llu units=%d..%d\\n",
               hall_launch, hall_grid, hall_ready, s1 - s0, e0 - s0, med - s0, e1 - s0, u0, u1);
        hall_ready = 0;
    }
    for (int slot = 0; slot < 2; ++slot) {
        if (hsc[slot][2] != 1) continue;
        hsc[slot][2] = 0;
        const unsigned long long t0 = hsc[slot][0];
        const int* m = hsm[slot];
        printf("STC launch=%llu slot=%d cta=%d grid=%d BM=%d BN=%d M=%d N=%d K=%d its=%d units=%d stages=%d total=%llu\\n",
               hsc[slot][3], slot, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], hsc[slot][1] - t0);
        for (int i = 0; i < m[7] && i < ST_N; ++i)
            printf("ST %llu %d %d %llu %llu %llu %llu %llu %llu\\n", hsc[slot][3], slot, i, hst[slot][0][i] - t0,
                   hst[slot][1][i] - t0, hst[slot][2][i] - t0, hst[slot][3][i] - t0, hst[slot][4][i] - t0,
                   hst[slot][5][i] - t0);
        for (int u = 0; u < m[8] && u < 1024; ++u)
            printf("SU %llu %d %d %llu %llu\\n", hsc[slot][3], slot, u, hsu[slot][0][u] - t0, hsu[slot][1][u] - t0);
    }
}
"""


def make(src, dst):
    copy_stamped(src, dst, "hopper_gemm.cu", PATCHES, DUMP)


def summary(path):
    recs = collections.defaultdict(dict)
    hdr = {}
    every = []
    for line in open(path):
        t = line.split()
        if not t: continue
        if t[0] == 'STA':
            every.append(line.rstrip())
            continue
        if t[0] == 'STC':
            kv = dict(x.split('=') for x in t[1:])
            hdr[(int(kv['launch']), int(kv['slot']))] = kv
        elif t[0] == 'ST':
            L, sl, i = int(t[1]), int(t[2]), int(t[3])
            recs[(L, sl)].setdefault('st', []).append([int(x) for x in t[4:10]])
        elif t[0] == 'SU':
            L, sl, u = int(t[1]), int(t[2]), int(t[3])
            recs[(L, sl)].setdefault('su', []).append((int(t[4]), int(t[5])))
    print("launch slot  BM  BN     N     K its units | total Mcyc | period  wait_full  lat(F-max(P,S))  mma(W1-F)  promo(R-W1)  P-R[i-S]  S-P | epi cyc (n)  epi%")
    for key in sorted(hdr):
        h = hdr[key]; r = recs.get(key, {})
        st = r.get('st', []); su = r.get('su', [])
        if not st: continue
        P, S, F, W0, W1, R = zip(*st)
        n = len(st)
        stages = int(h['stages'])
        per = [F[i] - F[i-1] for i in range(1, n)]
        wait = [F[i] - R[i-1] for i in range(1, n)]
        lat = [F[i] - max(P[i], S[i]) for i in range(n)]
        mma = [W1[i] - F[i] for i in range(n)]
        pro = [R[i] - W1[i] for i in range(n)]
        prw = [P[i] - R[i-stages] for i in range(stages, n)]
        sp = [S[i] - P[i] for i in range(n)]
        epi = [b - a for a, b in su if b > a]
        tot = int(h['total'])
        med = lambda x: stt.median(x) if x else 0
        print(f"{key[0]:6d} {key[1]:4d} {h['BM']:>3} {h['BN']:>3} {h['N']:>5} {h['K']:>5} {n:3d} {h['units']:>5} | {tot/1e6:6.3f} | {med(per):6.0f} {med(wait):9.0f} {med(lat):16.0f} {med(mma):10.0f} {med(pro):12.0f} {med(prw):9.0f} {med(sp):5.0f} | {med(epi):7.0f} ({len(epi)}) {100*sum(epi)/tot:5.1f}")

    if every:
        print("\nevery CTA of the recorded launches (ns from the first start):")
        for line in every:
            print(line)

if __name__ == "__main__":
    cli(make, summary, __doc__)
