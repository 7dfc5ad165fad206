// Hopper block-scaled FP8 GEMM (sm_90a): TMA loads into a STAGES-deep shared-memory ring
// guarded by mbarriers, one producer warpgroup (one thread issues the TMA loads, a second
// warp copies each stage's scales; few registers through setmaxnreg), NWG math warpgroups
// issuing wgmma m64nBNk32 e4m3 x e4m3 -> f32 (wgmma.cuh) from 128B-swizzled K-major
// shared-memory descriptors. Each SBK-long scale block of a 128-long K tile is multiplied
// into fresh accumulators and then promoted into f32 totals with As[m, kb] * Bs[n / SBN, kb]
// (scale blocks SBN x SBK: SBN 32, 64 or 128 along N, SBK 32, 64 or 128 along K); a stage
// goes back to the producer after its last promotion (released as soon as its last MMAs were
// done, the 256-row tile measured 5 % slower on the H200). The 64- and 128-row tiles of up
// to 128 columns keep two accumulator sets, so a scale block's MMAs run while the previous
// block is promoted. Tiles
// are BM x BN with BM = 64 x NWG x WAVES (64, 128, 192 or 256 rows) and BN 16 to 144
// columns; the host picks both per call. Persistent: a grid of at most one CTA per SM walks
// the (tile, K split) work units. Launched overlapped with the activation quantization
// before it (programmatic dependent launch): the TMA thread loads the first round of weight
// tiles while that kernel runs, then waits for it (griddep_wait) before the first activation
// tile; the scale warp waits before it reads the activation scales.
//
//   out[m, n] = sum_kb As[m, kb] * Bs[n / SBN, kb] * sum_{k in kb} A[m, k] * B[n, k]  (+ bias[n])
//
// The epilogue leaves each tile through a 512-byte shared buffer per math warp as 16-byte row
// pieces (`store_staged`) where the output's rows allow it (N * sizeof(out) % 16 == 0), the
// split partial sums too (N % 4 == 0): the direct stores of the accumulators' layout wrote
// 16 bytes of a row per instruction and cost the 256-row tile up to a fifth of its time on
// short-K layers (H200, 24576x1536 at M = 4096: 972 TFLOP/s staged against 799 direct).
//
// A: [M, ldk] e4m3 codes through tensor map `ta` (box 128 x BM), columns K..ldk zero.
// B: [N, ldk] e4m3 codes through tensor map `tb` (box 128 x BN). TMA zero-fills rows past
// M / N and columns past ldk, so partial tiles need no masking on the load side.
// As: [Kbs, M] f32 (M fastest), Bs: [ceil(N/SBN), ldbs] f32 (rows of Kbs, ldbs >= Kbs: the
// layer's copy may pad them), Kbs = ceil(K / SBK). Stores
// are masked. With more than one K split (tiles of at most 128 rows), split s stores its
// partial sums to ws[s][M][N] (every valid element of its tile) and `hopper_finalize_*`
// sums the splits in order (deterministic). The output is of dtype HOPPER_OUT, fixed per module.
//
// Grouped (a module compiled with -DHOPPER_GROUPED: `hopper_grouped_*` kernels instead of the
// dense ones): E experts' weights stacked, B [E * N, ldk] and Bs [E * ceil(N/SBN), ldbs], bias
// [E * N]; `segs` lists S segments of the input's M rows as (expert, first row, rows) int
// triples, read on the device, or, masked with the counts on the device (`counts` not null,
// S = E), segment e is (e, e * m_max, counts[e] clamped to 0..m_max). A work unit is one tile of one segment (its rows from the
// segment's first, rows past its end masked like rows past M: they may be another segment's,
// loaded but never stored), never split along K; an empty segment has none. Rows no segment
// covers are not written. Each stored value is (sum + bias[e, n]) * rw[m] when the per-row
// routing weights `rw` are given.

#define BK 128
#define SUBS (BK / SBK)  // scale blocks per K tile
// The output dtype of the module's kernels (0 f32, 1 f16, 2 bf16; `-DHOPPER_OUT=` from the
// host: a layer has one, and compiling only its kernels keeps the module small).
#ifndef HOPPER_OUT
#define HOPPER_OUT 2
#endif

struct __align__(64) TmaDesc {
    u64 opaque[16];
};

// The PTX that other kernels share (smem addresses, cp.async, mbarrier, fences) is in
// ptx.cuh, the wgmma wrappers and helpers in wgmma.cuh; this kernel's own (TMA, cluster,
// shared-memory vectors, register reallocation) are below, under `#ifndef FP8_HOST_MODEL`
// like theirs: the host model (tests/host_model) runs them as C++.

#ifndef FP8_HOST_MODEL
// ---- TMA ------------------------------------------------------------------------------
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"((u64)map), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

// The same box into the shared memory of every CTA in `mask` (same offsets), each CTA's
// barrier at `bar` counting its bytes.
__device__ __forceinline__ void tma_load_2d_mc(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1,
                                               u16 mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
        "l"((u64)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
        : "memory");
}

// ---- cluster ----------------------------------------------------------------------------
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster (release / acquire).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// The shared::cluster address of `addr` (a shared::cta address) in CTA `rank` of the cluster.
__device__ __forceinline__ u32 peer_addr(u32 addr, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

// ---- shared-memory vectors and register reallocation -----------------------------------
__device__ __forceinline__ void st_shared_v2(u32 at, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_shared_u32(u32 at, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(at), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(u32 at) {
    uint4 x;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                 : "r"(at)
                 : "memory");
    return x;
}
// The warpgroup's registers per thread raised (math) or lowered (producer) to R.
template <int R> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
__device__ __forceinline__ void prefetch_tensormap(const TmaDesc* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"((u64)map) : "memory");
}
#endif  // FP8_HOST_MODEL

// ---- the kernel -----------------------------------------------------------------------
// Work unit u -> (n block, m block, split): units sharing a weight tile are adjacent, so
// CTAs running at the same time read each weight tile from HBM about once. With clusters of
// CL CTAs along M, a unit is CL vertically adjacent tiles of one n block, one per CTA of the
// cluster (CTA `rank` takes the rank-th), and the clusters walk the units round-robin.
// A unit's rows are m0 .. min(m0 + BM, mend) (mend: M, or its segment's end when grouped) of
// expert e (0 when dense).
struct Unit {
    int m0, mend, e, nb, kb0, kb1, sp;
};
struct Seg {
    int e, r0, rows;
};
struct Sched {
    int num_mc, splits, kbps, Kb, bm, cl, rank, first, step, units, M;
    // Grouped: the segments (expert, first row, rows) or the masked counts, and the tiles
    // across N; `tab` their table in shared memory (segment_table) or null.
    const int* segs;
    const int* counts;
    const int* tab;
    int nseg, m_max, num_n;
    __device__ __forceinline__ Seg seg(int s) const {
        if (counts != nullptr) {
            const int c = counts[s];
            return Seg{s, s * m_max, c < 0 ? 0 : (c > m_max ? m_max : c)};
        }
        return Seg{segs[3 * s], segs[3 * s + 1], segs[3 * s + 2]};
    }
    __device__ __forceinline__ Unit at(int u) const {
        const int sp = u % splits, t = u / splits;
        Unit r;
        r.nb = t / num_mc;
        r.m0 = ((t % num_mc) * cl + rank) * bm;
        r.mend = M;
        r.e = 0;
        r.kb0 = sp * kbps;
        r.kb1 = min(Kb, r.kb0 + kbps);
        r.sp = sp;
        return r;
    }
};

// The segments of a grouped launch with at most SEG_TAB of them are read once per CTA, by
// one warp, into a table in shared memory (after the epilogue buffers; SEGMENT_TABLE_BYTES
// on the host): entry s is 4 ints, the work units of segments 0..s, then the segment's
// expert, first row and rows. The roles' walks then find each unit's segment there instead
// of reading the segments ahead of it from global memory one after another (a CTA's first
// unit lay behind up to E such round trips, the math warpgroups' walk past the empty
// experts of a masked launch behind as many).
#define SEG_TAB 256

// A role's walk over its units: first, first + step, ... (every role of a CTA walks the
// same ones). Grouped (G), unit u is tile u - before of the segment whose tiles cover it
// (`before`: the tiles of the segments ahead of it), tiles of one column block adjacent; the
// walk only moves forward, so each segment is read once per role (from the table when there
// is one).
template <bool G> struct Walk {
    const Sched& sc;
    int u, s = 0, before = 0;
    __device__ __forceinline__ explicit Walk(const Sched& sched) : sc(sched), u(sched.first) {}
    __device__ __forceinline__ bool next(Unit& w) {
        if constexpr (G) {
            Seg g{0, 0, 0};
            int num_m = 0;
            if (sc.tab != nullptr) {
                // Past the last unit: done without scanning the segments left.
                if (sc.nseg == 0 || u >= sc.tab[4 * (sc.nseg - 1)]) return false;
                while (u >= sc.tab[4 * s]) ++s;
                before = s > 0 ? sc.tab[4 * (s - 1)] : 0;
                g = Seg{sc.tab[4 * s + 1], sc.tab[4 * s + 2], sc.tab[4 * s + 3]};
                num_m = (g.rows + sc.bm - 1) / sc.bm;
            } else {
                for (;; ++s) {
                    if (s >= sc.nseg) return false;
                    g = sc.seg(s);
                    num_m = (g.rows + sc.bm - 1) / sc.bm;
                    if (u < before + num_m * sc.num_n) break;
                    before += num_m * sc.num_n;
                }
            }
            const int t = u - before;
            w.nb = t / num_m;
            w.m0 = g.r0 + (t % num_m) * sc.bm;
            w.mend = g.r0 + g.rows;
            w.e = g.e;
            w.kb0 = 0;
            w.kb1 = sc.Kb;
            w.sp = 0;
        } else {
            if (u >= sc.units) return false;
            w = sc.at(u);
        }
        u += sc.step;
        return true;
    }
};

// Writes the segment table `tab` (see SEG_TAB) of the launch's nseg <= SEG_TAB segments:
// the 32 lanes of one warp read 32 segments at a time and sum their units with a scan.
__device__ __forceinline__ void segment_table(const Sched& sc, int* tab, int lane) {
    int carry = 0;
    for (int b = 0; b < sc.nseg; b += 32) {
        const int s = b + lane;
        const Seg g = s < sc.nseg ? sc.seg(s) : Seg{0, 0, 0};
        int units = (g.rows + sc.bm - 1) / sc.bm * sc.num_n;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int t = (int)__shfl_up_sync(0xffffffffu, (u32)units, o);
            if (lane >= o) units += t;
        }
        if (s < sc.nseg) {
            tab[4 * s] = carry + units;
            tab[4 * s + 1] = g.e;
            tab[4 * s + 2] = g.r0;
            tab[4 * s + 3] = g.rows;
        }
        carry += (int)__shfl_sync(0xffffffffu, (u32)units, 31);
    }
}

// ---- scales staged in shared memory ---------------------------------------------------
// The scale rows of the weight scale blocks that a BN-column tile spans: BN / SBN when SBN
// divides BN, one when BN divides SBN (both: ALIGNED, every tile starts on a row or inside
// one), else at most two (BN + SBN - gcd(BN, SBN) <= 2 SBN, which the host checks: the
// 96-, 112- and 144-column tiles over 128-row blocks), where 8-column group j of tile nb
// reads the second row once 8 j >= SBN - (nb BN) % SBN.
template <int BN> struct Cols {
    static constexpr bool ALIGNED = BN % SBN == 0 || SBN % BN == 0;
    static constexpr int NSB = ALIGNED ? (BN >= SBN ? BN / SBN : 1) : 2;
    static constexpr int NACC = BN / 2;  // accumulators per thread (m64nBN)
};

// Each stage holds, beside its A and B tiles, the scales its promotions read: SUBS x BM
// activation scales (rows fastest), then SUBS x NSB weight scales. One producer warp copies
// them with 4-byte cp.async (zero-filled past M and past K) and each lane's copies arrive on
// the stage's full barrier when they land, so the math warpgroups read them from shared
// memory after the barrier instead of waiting on L2 for them once per K tile.
template <int BM, int BN> struct Sc {
    static constexpr u32 FLOATS = SUBS * (BM + Cols<BN>::NSB);
    static constexpr u32 BYTES = (FLOATS * 4 + 15) & ~15u;
};

// The scale warp: for every stage the TMA thread fills, the same stage's scales.
template <int BM, int BN, int STAGES, bool G>
__device__ __forceinline__ void stage_scales(const float* __restrict__ As,
                                             const float* __restrict__ Bs, int ldbs, u32 ssc,
                                             u32 bars, int M, int Kbs, int nbs, const Sched& sc,
                                             int lane) {
    constexpr int NSB = Cols<BN>::NSB;
    u32 it = 0;
    Walk<G> walk(sc);
    for (Unit w; walk.next(w);) {
        const int brow = w.e * nbs + min((w.nb * BN) / SBN + lane, nbs - 1);
        for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
            const u32 s = it % STAGES, ph = (it / STAGES) & 1;
            mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
            const u32 dst = ssc + s * Sc<BM, BN>::BYTES;
#pragma unroll
            for (int sub = 0; sub < SUBS; ++sub) {
                const int kbs = kb * SUBS + sub;
                const bool ok = kbs < Kbs;
#pragma unroll 1
                for (int i = lane; i < BM; i += 32) {
                    const bool v = ok && w.m0 + i < w.mend;
                    cp_async4(dst + 4 * (sub * BM + i), v ? As + (long long)kbs * M + w.m0 + i : As,
                              v ? 4u : 0u);
                }
                if (lane < NSB)
                    cp_async4(dst + 4 * (SUBS * BM + sub * NSB + lane),
                              ok ? Bs + (long long)brow * ldbs + kbs : Bs, ok ? 4u : 0u);
            }
            cp_async_arrive(bars + 8 * s);
        }
    }
}

// The factors As[row] * Bs[q] of one scale block for a thread's two rows (`row` = its first
// row in the tile; the second is 8 below), read from the stage's shared copy `c`.
template <int BM, int BN> struct Fac {
    float f0[Cols<BN>::NSB], f1[Cols<BN>::NSB];
    __device__ __forceinline__ Fac(const float* c, int sub, int row) {
        constexpr int NSB = Cols<BN>::NSB;
        const float a0 = c[sub * BM + row], a1 = c[sub * BM + row + 8];
#pragma unroll
        for (int q = 0; q < NSB; ++q) {
            const float b = c[SUBS * BM + sub * NSB + q];
            f0[q] = a0 * b;
            f1[q] = a1 * b;
        }
    }
};

// Promotion of one scale block: tot += acc * As[row] * Bs[col / SBN]. Accumulator i sits at
// row `row` (i % 4 < 2) or row + 8, tile column 8 (i / 4) + col_in + (i % 2): scale row
// 8 (i / 4) / SBN of the tile's first (ALIGNED), else the second row from column group
// `second` on (SBN - (nb BN) % SBN, over 8).
template <int BM, int BN>
__device__ __forceinline__ void promote(float (&tot)[Cols<BN>::NACC],
                                        const float (&acc)[Cols<BN>::NACC],
                                        const Fac<BM, BN>& f, int second) {
#pragma unroll
    for (int i = 0; i < Cols<BN>::NACC; ++i) {
        float s;
        if constexpr (Cols<BN>::ALIGNED) {
            constexpr int Q = 0;  // (i is not a constant expression: index below)
            const int q = BN >= SBN ? (8 * (i / 4)) / SBN : Q;
            s = (i & 2) ? f.f1[q] : f.f0[q];
        } else {
            // A select, not an index: a run-time index would put the factors in local memory.
            const bool hi = i / 4 >= second;
            s = (i & 2) ? (hi ? f.f1[1] : f.f1[0]) : (hi ? f.f0[1] : f.f0[0]);
        }
        tot[i] += acc[i] * s;
    }
}

// A thread's tile values (accumulator i at row r0 (i % 4 < 2) or r1, column c0 + 8 (i / 4)
// + (i % 2)) stored to the f32 [M, N] matrix `p`, rows and columns past M, N skipped;
// `pairs`: two adjacent values as one 8-byte store (N even).
template <int NACC>
__device__ __forceinline__ void store_tile(float* __restrict__ p, const float (&v)[NACC], int r0,
                                           int r1, int c0, int M, int N, bool pairs) {
#pragma unroll
    for (int j = 0; j < NACC / 4; ++j) {
        const int c = c0 + 8 * j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = h ? r1 : r0;
            if (c >= N || r >= M) continue;
            float* q = p + (long long)r * N + c;
            const float a = v[4 * j + 2 * h], b = v[4 * j + 2 * h + 1];
            if (pairs) {
                __stcg(reinterpret_cast<float2*>(q), make_float2(a, b));
            } else {
                __stcg(q, a);
                if (c + 1 < N) __stcg(q + 1, b);
            }
        }
    }
}

// The tile's totals (wave v's accumulator i at row r0[v] (i % 4 < 2) or r1[v], column c0 +
// 8 (i / 4) + (i % 2)) + bias, times rw[row] when given, stored in output dtype OUT, rows and
// columns past M, N skipped.
template <int OUT, int WAVES, int NACC>
__device__ __forceinline__ void store_totals(void* __restrict__ out, const float (&tot)[WAVES][NACC],
                                             const int (&r0)[WAVES], const int (&r1)[WAVES],
                                             int c0, const float* __restrict__ bias,
                                             const float* __restrict__ rw, int M, int N) {
#pragma unroll
    for (int v = 0; v < WAVES; ++v)
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) {
            const int c = c0 + j * 8;
            if (c >= N) continue;
            const bool both = c + 1 < N;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = h ? r1[v] : r0[v];
                if (r >= M) continue;
                float a = tot[v][4 * j + 2 * h], b = tot[v][4 * j + 2 * h + 1];
                if (bias != 0) {
                    a += bias[c];
                    if (both) b += bias[c + 1];
                }
                if (rw != 0) {
                    a *= rw[r];
                    b *= rw[r];
                }
                store2<OUT>(out, (long long)r * N + c, a, b, both, (N & 1) == 0);
            }
        }
}

// Bytes of one math warp's epilogue buffer (after the stages' barriers; EPI_WARP_BYTES on
// the host): 8 rows x 64 bytes of output.
#define EPI_BYTES 512

// The tile's values (wave v's accumulator i at the warp's row 8 (i % 4 >= 2) + lane / 4 of the
// wave, tile column 8 (i / 4) + 2 (lane % 4) + (i % 2)) + bias in output dtype OUT through
// the warp's shared buffer `buf`: for each wave and half of the warp's 16 rows, chunks of
// 64 bytes of each of the 8 rows are written in the accumulators' layout, read back as
// 16-byte row pieces and stored, so each store instruction writes whole 32-byte sectors of
// 8 rows (the direct stores write 16 bytes of a row each). Pieces are XOR-swizzled by row
// pair: the shared writes of a warp hit 32 distinct banks. `wrow[v]`: the warp's first row
// in wave v; `cb`: the tile's first column. Needs N * sizeof(OUT) % 16 == 0 and a 16-byte
// aligned `out` (each piece is then wholly inside or past N); rows past M are skipped. With
// `rw`, each value (after the bias) is multiplied by its row's rw.
template <int OUT, int WAVES, int NACC>
__device__ __forceinline__ void store_staged(void* __restrict__ out, const float (&tot)[WAVES][NACC],
                                             const int (&wrow)[WAVES], int cb,
                                             const float* __restrict__ bias,
                                             const float* __restrict__ rw, int M, int N, u32 buf,
                                             int lane) {
    constexpr int ES = OUT == 0 ? 4 : 2;
    constexpr int G = NACC / 4;        // 8-column groups across the tile
    constexpr int CG = 64 / (8 * ES);  // groups per 64-byte chunk: 4 (16-bit), 2 (f32)
    const int r = lane / 4, q = lane % 4;
#pragma unroll
    for (int v = 0; v < WAVES; ++v)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int g0 = 0; g0 < G; g0 += CG) {
                const int ng = G - g0 < CG ? G - g0 : CG;  // constant once unrolled
                const int np = ng * 8 * ES / 16;           // 16-byte pieces per row: 4 or 2
                __syncwarp();  // the previous chunk's pieces are read
                float f = 1.f;  // this lane's row's routing weight
                if (rw != 0) {
                    const int row = wrow[v] + 8 * h + r;
                    f = row < M ? rw[row] : 0.f;
                }
#pragma unroll
                for (int jj = 0; jj < CG; ++jj) {
                    if (jj >= ng) continue;
                    const int j = g0 + jj, c = cb + 8 * j + 2 * q;
                    float a = tot[v][4 * j + 2 * h], b = tot[v][4 * j + 2 * h + 1];
                    if (bias != 0) {
                        if (c < N) a += bias[c];
                        if (c + 1 < N) b += bias[c + 1];
                    }
                    if (rw != 0) {
                        a *= f;
                        b *= f;
                    }
                    const int byte = (8 * jj + 2 * q) * ES;
                    const int piece = (byte / 16) ^ (((r >> 1) & 3) & (np - 1));
                    const u32 at = buf + r * 64 + piece * 16 + byte % 16;
                    if constexpr (ES == 4) {
                        st_shared_v2(at, a, b);
                    } else {
                        const u32 lo = OUT == 1 ? f32_to_f16(a) : f32_to_bf16(a);
                        const u32 hi = OUT == 1 ? f32_to_f16(b) : f32_to_bf16(b);
                        st_shared_u32(at, lo | (hi << 16));
                    }
                }
                __syncwarp();
                const int lr = lane / np, p = lane % np;
                const int row = wrow[v] + 8 * h + lr;
                const int col = cb + 8 * g0 + ((p ^ (((lr >> 1) & 3) & (np - 1))) * 16) / ES;
                if (lane < 8 * np && row < M && col < N) {
                    const uint4 x = ld_shared_v4(buf + lr * 64 + p * 16);
                    *reinterpret_cast<uint4*>((u8*)out + ((long long)row * N + col) * ES) = x;
                }
            }
}

// The math warpgroups' side of `hopper_gemm` (warpgroup `threadIdx.x / 128`, 1 to NWG).
template <int NWG, int WAVES, int STAGES, int BN, int CL, bool G>
__device__ __forceinline__ void math(u32 sa, u32 sb, const float* scg, u32 bars, const Sched& sc,
                                     void* __restrict__ out, float* __restrict__ ws,
                                     const float* __restrict__ bias_all,
                                     const float* __restrict__ rw, int M, int N, bool split) {
    constexpr int BM = 64 * NWG * WAVES;
    constexpr int NACC = Cols<BN>::NACC;
    constexpr bool PIPE = WAVES == 1 && NWG <= 2 && BN <= 128;
    constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK;
    constexpr u32 SC_FLOATS = Sc<BM, BN>::BYTES / 4;
    using F = Fac<BM, BN>;
    const int wg = threadIdx.x / 128;

    // Math warpgroups.
    if constexpr (NWG == 2) setmaxnreg_inc<232>();
    if constexpr (NWG == 3) setmaxnreg_inc<160>();
    const int mw = wg - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row_in = mw * 64 + warp * 16 + lane / 4;  // in wave 0; wave w adds 64 NWG w
    const int col_in = (lane % 4) * 2;
    // This warp's epilogue buffer (after the stages' barriers), and whether the output's rows
    // take 16-byte pieces (then the tile leaves through it).
    const u32 ebuf = bars + 16 * STAGES + (mw * 4 + warp) * EPI_BYTES;
    constexpr int OUT_ES = HOPPER_OUT == 0 ? 4 : 2;
    const bool staged = ((unsigned long long)out & 15) == 0 && ((long long)N * OUT_ES) % 16 == 0;
    // The stage's last MMAs are done and its scales read: hand it back to the producer. (A
    // predicated arrive, not a branch: MMAs may be in flight.) With clusters, on the stage's
    // empty barrier of every CTA of the cluster (each one's producer multicasts into this
    // CTA's stage).
    auto release = [&](u32 s) {
        __syncwarp();
        if constexpr (CL == 1) {
            mbar_arrive_if(bars + 8 * (STAGES + s), lane == 0);
        } else {
#pragma unroll
            for (int r = 0; r < CL; ++r)
                mbar_arrive_cluster_if(peer_addr(bars + 8 * (STAGES + s), r), lane == 0);
        }
    };
    float tot[WAVES][NACC];
    u32 it = 0;
    Walk<G> walk(sc);
    for (Unit w; walk.next(w);) {
        // This unit's expert's bias (grouped: the stack's row e).
        const float* bias = G && bias_all != 0 ? bias_all + (long long)w.e * N : bias_all;
        // Column group from which the tile reads its second scale row (unaligned widths).
        const int second = (SBN - (w.nb * BN) % SBN) / 8;
        // Slabs of this warpgroup whose rows exist: uniform over the warpgroup, and the
        // same for every split of the tile.
        int live = 0;
#pragma unroll
        for (int v = 0; v < WAVES; ++v) live += w.m0 + 64 * (NWG * v + mw) < w.mend;
        int r0[WAVES], r1[WAVES];
#pragma unroll
        for (int v = 0; v < WAVES; ++v) {
            r0[v] = w.m0 + 64 * NWG * v + row_in;
            r1[v] = r0[v] + 8;
        }
#pragma unroll
        for (int v = 0; v < WAVES; ++v)
#pragma unroll
            for (int i = 0; i < NACC; ++i) tot[v][i] = 0.f;
        if constexpr (PIPE) {
            if (!live) {
                // No rows here: only keep the stage ring turning.
                for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
                    const u32 s = it % STAGES;
                    mbar_wait(bars + 8 * s, (it / STAGES) & 1);
                    release(s);
                }
                goto epilogue;
            }
            float acc0[NACC], acc1[NACC];
            // Step (i, sub): scale block `sub` of the K tile in stage sequence number i. Its
            // MMAs go to acc0 or acc1 by the step's parity, which is a compile-time constant
            // below: K tiles are walked in pairs (2 SUBS steps), so every branch around the
            // MMAs in flight is uniform and ptxas keeps them asynchronous.
            auto issue = [&](u32 i, int sub, float(&d)[NACC]) {
                const u32 s = i % STAGES;
                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
                const u64 da = wgmma_desc(sa + s * A_BYTES + 64 * mw * BK);
                const u64 db = wgmma_desc(sb + s * B_BYTES);
                wgmma_fence();
#pragma unroll
                for (int jj = 0; jj < SBK / 32; ++jj) {
                    const int kk = sub * (SBK / 32) + jj;
                    Wgmma<BN>::mma(d, da + 2 * kk, db + 2 * kk, jj);
                }
                wgmma_commit();
            };
            // Promotes step (i, sub), whose MMAs are done; the stage goes back to the producer
            // after its last scale block.
            auto retire = [&](u32 i, int sub, const float(&d)[NACC]) {
                const u32 s = i % STAGES;
                const F f(scg + s * SC_FLOATS, sub, row_in);
                promote<BM, BN>(tot[0], d, f, second);
                if (sub == SUBS - 1) release(s);
            };
            // The 2 SUBS steps of K tiles `i` and `i + 1` (step 0 already issued into acc0);
            // `last`: no step follows (the final one waits for every MMA).
            auto pair = [&](u32 i, bool last) {
#pragma unroll
                for (int q = 0; q < 2 * SUBS; ++q) {
                    const u32 iq = i + q / SUBS, in = i + (q + 1) / SUBS;
                    const int sq = q % SUBS, sn = (q + 1) % SUBS;
                    if (q + 1 < 2 * SUBS || !last) {
                        if ((q + 1) % 2) issue(in, sn, acc1);
                        else issue(in, sn, acc0);
                        wgmma_wait1();
                    } else {
                        wgmma_wait0();
                    }
                    if (q % 2) retire(iq, sq, acc1);
                    else retire(iq, sq, acc0);
                }
            };
            issue(it, 0, acc0);
            int kb = w.kb0;
            for (; kb + 2 < w.kb1; kb += 2, it += 2) pair(it, false);
            if (kb + 2 == w.kb1) {
                pair(it, true);
                it += 2;
            } else {
                // One K tile left.
#pragma unroll
                for (int q = 0; q < SUBS; ++q) {
                    if (q + 1 < SUBS) {
                        if ((q + 1) % 2) issue(it, q + 1, acc1);
                        else issue(it, q + 1, acc0);
                        wgmma_wait1();
                    } else {
                        wgmma_wait0();
                    }
                    if (q % 2) retire(it, q, acc1);
                    else retire(it, q, acc0);
                }
                it += 1;
            }
        } else {
            float acc[NACC];
            for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
                const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                mbar_wait(bars + 8 * s, ph);
                const float* c = scg + s * SC_FLOATS;
                const u64 db = wgmma_desc(sb + s * B_BYTES);
#pragma unroll
                for (int v = 0; v < WAVES; ++v) {
                    const u64 da = wgmma_desc(sa + s * A_BYTES + 64 * (NWG * v + mw) * BK);
#pragma unroll
                    for (int sub = 0; sub < SUBS; ++sub) {
                        if (v < live) {
                            wgmma_fence();
#pragma unroll
                            for (int j = 0; j < SBK / 32; ++j) {
                                const int kk = sub * (SBK / 32) + j;
                                Wgmma<BN>::mma(acc, da + 2 * kk, db + 2 * kk, j);
                            }
                            wgmma_commit();
                            wgmma_wait0();
                            promote<BM, BN>(tot[v], acc, F(c, sub, 64 * NWG * v + row_in), second);
                        }
                    }
                }
                // After the promotions (they read the stage's scales). Released before them, as
                // soon as the last MMAs were done, the 256-row tile measured 5 % slower on the
                // H200 (4096x7168, M = 4096), the others within 1 %.
                release(s);
            }
        }
    epilogue:
        if (live == 0) continue;
        int wrow[WAVES];  // the warp's first row in each wave
#pragma unroll
        for (int v = 0; v < WAVES; ++v) wrow[v] = r0[v] - lane / 4;
        // (Tiles of more than 128 rows are never split: the host plans them with one split,
        // and the reduction's registers would spill.)
        if constexpr (BM <= 128 && WAVES == 1) {
            if (split) {
                // This split's partial sums; `hopper_finalize_*` adds the splits in order.
                float* p = ws + (long long)w.sp * M * N;
                if (N % 4 == 0)
                    store_staged<0, WAVES, NACC>(p, tot, wrow, w.nb * BN, nullptr, nullptr, M, N,
                                                 ebuf, lane);
                else
                    store_tile<NACC>(p, tot[0], r0[0], r1[0], w.nb * BN + col_in, M, N,
                                     (N & 1) == 0);
                continue;
            }
        }
        if (staged) {
            store_staged<HOPPER_OUT, WAVES, NACC>(out, tot, wrow, w.nb * BN, bias, rw, w.mend, N,
                                                  ebuf, lane);
        } else {
            store_totals<HOPPER_OUT>(out, tot, r0, r1, w.nb * BN + col_in, bias, rw, w.mend, N);
        }
    }
}

// NWG math warpgroups, each running WAVES 64-row slabs of the BM = 64 * NWG * WAVES row
// tile: warpgroup g, wave w owns rows 64 * (NWG * w + g) .. +64. A wave's fresh accumulators
// are promoted into its own f32 totals (tot[w]), so registers grow with WAVES while the
// shared B tile (and its L2 traffic) is amortised over more rows. Tiles are BN columns wide
// (16 to 144).
//
// PIPE (one wave, at most two math warpgroups and at most 128 columns, whose registers hold
// two accumulator sets): a scale block's MMAs are issued into one set before the previous
// block, in the other set, is waited for and promoted, so the tensor cores run while the
// warpgroup promotes. Otherwise each scale block's MMAs are waited for before its promotion
// (the other warpgroups' MMAs fill part of that wait).
// Grouped (G): `segs` holds `nseg` segments, or `counts` the nseg experts' masked counts over
// slabs of `m_max` rows (see the top); `rw` the routing weights or null; one K split (kbps =
// ceil(K / BK)), no cluster. Dense: all unused.
template <int NWG, int WAVES, int STAGES, int BN, int CL, bool G>
__device__ __forceinline__ void hopper_gemm(const TmaDesc* ta, const TmaDesc* tb,
                                            const float* __restrict__ As,
                                            const float* __restrict__ Bs, void* __restrict__ out,
                                            float* __restrict__ ws,
                                            const float* __restrict__ bias,
                                            const float* __restrict__ rw,
                                            const int* __restrict__ segs,
                                            const int* __restrict__ counts, int nseg, int m_max,
                                            int M, int N, int K, int kbps, int splits, int ldbs) {
    static_assert(!G || CL == 1, "grouped kernels have no clusters");
    constexpr int BM = 64 * NWG * WAVES;
    constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK;
    extern __shared__ u8 smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 sa = base, sb = base + STAGES * A_BYTES;
    const u32 ssc = sb + STAGES * B_BYTES;
    const u32 bars = ssc + STAGES * Sc<BM, BN>::BYTES;  // full[STAGES], then empty[STAGES]
    const float* scg = reinterpret_cast<const float*>(smem_raw + (ssc - raw));
    const int Kb = (K + BK - 1) / BK;
    const int Kbs = (K + SBK - 1) / SBK, nbs = (N + SBN - 1) / SBN;
    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN;
    Sched sc;
    sc.num_mc = (num_m + CL - 1) / CL;
    sc.splits = splits;
    sc.kbps = kbps;
    sc.Kb = Kb;
    sc.bm = BM;
    sc.cl = CL;
    sc.rank = CL > 1 ? (int)cluster_rank() : 0;
    sc.first = blockIdx.x / CL;
    sc.step = gridDim.x / CL;
    sc.units = sc.num_mc * num_n * splits;
    sc.M = M;
    sc.segs = segs;
    sc.counts = counts;
    sc.tab = nullptr;
    sc.nseg = nseg;
    sc.m_max = m_max;
    sc.num_n = num_n;
    const int wg = threadIdx.x / 128;

    // The tensor maps fetched while the barriers and the segment table are set up (0.1-0.4 us
    // off the masked decode calls, H100).
    if (threadIdx.x == 64) {
        prefetch_tensormap(ta);
        prefetch_tensormap(tb);
    }
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            // The TMA thread's expect_tx arrival and the scale warp's 32 lanes.
            mbar_init(bars + 8 * s, 1 + 32);
            // Every consumer warp of the cluster: the producers of all its CTAs write the
            // stage's B tile (multicast).
            mbar_init(bars + 8 * (STAGES + s), NWG * 4 * CL);
        }
        fence_mbarrier_init();
    }
    if constexpr (G) {
        if (nseg <= SEG_TAB) {
            int* tab = reinterpret_cast<int*>(smem_raw + (bars + 16 * STAGES +
                                                          NWG * 4 * EPI_BYTES - raw));
            if (threadIdx.x / 32 == 1) segment_table(sc, tab, threadIdx.x % 32);
            sc.tab = tab;
        }
    }
    __syncthreads();
    // The peers' barriers are initialised before any multicast or remote arrival reaches them.
    if constexpr (CL > 1) cluster_sync();

    if (wg == 0) {
        // Producer warpgroup: one thread issues every TMA load, warp 1 copies the scales.
        if constexpr (NWG == 2) setmaxnreg_dec<40>();
        if constexpr (NWG == 3) setmaxnreg_dec<32>();
        if (threadIdx.x == 0) {
            // Stage `it`'s weight tile (k block kb of unit w), expected on its full barrier
            // with the activation tile.
            auto load_b = [&](u32 it, const Unit& w, int kb) {
                const u32 s = it % STAGES, full = bars + 8 * s;
                mbar_expect_tx(full, A_BYTES + B_BYTES);
                if constexpr (CL == 1) {
                    tma_load_2d(sb + s * B_BYTES, tb, full, kb * BK, w.e * N + w.nb * BN);
                } else {
                    // This CTA's 1 / CL of the weight tile (`tb`'s box is BN / CL rows), to
                    // every CTA of the cluster.
                    const int part = BN / CL;
                    tma_load_2d_mc(sb + s * B_BYTES + sc.rank * part * BK, tb, full, kb * BK,
                                   w.nb * BN + sc.rank * part, (u16)((1u << CL) - 1));
                }
            };
            // The weights do not depend on the kernel before this one on the stream (the
            // activation quantization): the first round of stages gets its weight tiles
            // before the wait for that kernel (all of it when this kernel was launched
            // overlapped with it), then every load as usual. Grouped, only the first unit's:
            // the walk to a second unit may pass every empty expert of a masked launch
            // (56 of 64: ~4 us on an H100 through global memory), which would hold back the
            // activation loads; with the segment table, going on past the first unit
            // measured no faster (H100, Qwen3 decode shapes).
            u32 pre = 0;
            Walk<G> first(sc);
            for (Unit w; pre < STAGES && (!G || pre == 0) && first.next(w);)
                for (int kb = w.kb0; kb < w.kb1 && pre < STAGES; ++kb, ++pre) load_b(pre, w, kb);
            griddep_wait();
            u32 it = 0;
            Walk<G> walk(sc);
            for (Unit w; walk.next(w);) {
                for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
                    const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                    mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
                    if (it >= pre) load_b(it, w, kb);
                    tma_load_2d(sa + s * A_BYTES, ta, bars + 8 * s, kb * BK, w.m0);
                }
            }
        } else if (threadIdx.x / 32 == 1) {
            griddep_wait();  // the activation scales come from the kernel before this one
            stage_scales<BM, BN, STAGES, G>(As, Bs, ldbs, ssc, bars, M, Kbs, nbs, sc,
                                            threadIdx.x % 32);
        }
    } else {
        math<NWG, WAVES, STAGES, BN, CL, G>(sa, sb, scg, bars, sc, out, ws, bias, G ? rw : nullptr,
                                            M, N, !G && splits > 1);
    }
    // No CTA leaves while a peer may still multicast into it or arrive on its barriers.
    if constexpr (CL > 1) cluster_sync();
}

// hopper_gemm_<T> (T = bm<BM>_n<BN>[c2]): one kernel per tile (rows BM = 64 NWG WAVES, columns
// BN, STAGES pipeline stages, CL CTAs per cluster), storing the module's output dtype
// HOPPER_OUT. Grouped modules have hopper_grouped_<T> instead, for the tiles without clusters.
#ifndef HOPPER_GROUPED
#define HOPPER_KERNEL_AT(NAME, NWG, WAVES, STAGES, BN, CL, ATTR)                                \
    extern "C" __global__ void __launch_bounds__(128 * (NWG + 1), 1) ATTR                        \
        NAME(const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb,             \
             const float* As, const float* Bs, void* out, float* ws, const float* bias, int M,   \
             int N, int K, int kbps, int splits, int ldbs) {                                     \
        hopper_gemm<NWG, WAVES, STAGES, BN, CL, false>(&ta, &tb, As, Bs, out, ws, bias, nullptr, \
                                                       nullptr, nullptr, 0, 0, M, N, K, kbps,    \
                                                       splits, ldbs);                            \
    }
#define HOPPER_KERNEL(T, NWG, WAVES, STAGES, BN) \
    HOPPER_KERNEL_AT(hopper_gemm_##T, NWG, WAVES, STAGES, BN, 1, )
// Clusters of two CTAs along M sharing (multicasting) the weight tile: the launch needs a
// grid of an even size and `tb` with boxes of BN / 2 rows.
#define HOPPER_KERNEL_C2(T, NWG, WAVES, STAGES, BN) \
    HOPPER_KERNEL_AT(hopper_gemm_##T##c2, NWG, WAVES, STAGES, BN, 2, __cluster_dims__(2, 1, 1))
#else
// `tb` maps the E * N rows of the stacked weights; `segs` the nseg (expert, first row, rows)
// triples, or (segs null) `counts` the nseg experts' masked counts over slabs of m_max rows;
// `bias` [E * N] and `rw` [M] may be null.
#define HOPPER_KERNEL(T, NWG, WAVES, STAGES, BN)                                                  \
    extern "C" __global__ void __launch_bounds__(128 * (NWG + 1), 1)                             \
        hopper_grouped_##T(const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb, \
                           const float* As, const float* Bs, void* out, const float* bias,       \
                           const float* rw, const int* segs, const int* counts, int nseg,        \
                           int m_max, int M, int N, int K, int ldbs) {                           \
        hopper_gemm<NWG, WAVES, STAGES, BN, 1, true>(&ta, &tb, As, Bs, out, nullptr, bias, rw,   \
                                                     segs, counts, nseg, m_max, M, N, K,         \
                                                     (K + BK - 1) / BK, 1, ldbs);                \
    }
#define HOPPER_KERNEL_C2(T, NWG, WAVES, STAGES, BN)
#endif

// The tiles (must match VARIANTS in gemm/hopper.rs). BM = 64: one math warpgroup, 16 stages
// for the narrow widths down to 8 at 128 and 144 columns; BM = 128: two, 8 stages at 64
// columns, 6 at 128; BM = 192: three (160 registers each), 5 stages; BM = 256: two
// warpgroups of two waves each, 4 stages. The tall ones only where a K tile holds at most
// two scale blocks (SBK >= 64): with more, their scales no longer fit in registers beside the
// totals. The unaligned widths (96, 112, 144) only over 128-row weight blocks. Grouped: all
// but the clustered ones and the 192-row tile.
HOPPER_KERNEL(bm64_n16, 1, 1, 16, 16)
HOPPER_KERNEL(bm64_n32, 1, 1, 16, 32)
HOPPER_KERNEL(bm64_n64, 1, 1, 12, 64)
HOPPER_KERNEL(bm64_n128, 1, 1, 8, 128)
HOPPER_KERNEL(bm128_n64, 2, 1, 8, 64)
HOPPER_KERNEL(bm128_n128, 2, 1, 6, 128)
HOPPER_KERNEL_C2(bm128_n128, 2, 1, 6, 128)
#if SBN == 128
HOPPER_KERNEL(bm64_n96, 1, 1, 10, 96)
HOPPER_KERNEL(bm64_n112, 1, 1, 9, 112)
HOPPER_KERNEL(bm64_n144, 1, 1, 8, 144)
HOPPER_KERNEL(bm128_n96, 2, 1, 7, 96)
HOPPER_KERNEL(bm128_n112, 2, 1, 6, 112)
HOPPER_KERNEL(bm128_n144, 2, 1, 6, 144)
#endif
#if SBK >= 64
#ifndef HOPPER_GROUPED  // (grouped, its 128 registers per thread spill the walk's)
HOPPER_KERNEL(bm192_n128, 3, 1, 5, 128)
#endif
HOPPER_KERNEL(bm256_n128, 2, 2, 4, 128)
HOPPER_KERNEL_C2(bm256_n128, 2, 2, 4, 128)
#endif

#ifndef HOPPER_GROUPED
// Split-K epilogue: out = sum over splits of ws[s] (+ bias), converted to the output dtype.
extern "C" __global__ void hopper_finalize(const float* __restrict__ ws, void* __restrict__ out,
                                           const float* __restrict__ bias, int M, int N,
                                           int splits) {
    const long long total = (long long)M * N;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = 0.f;
        for (int s = 0; s < splits; ++s) v += ws[s * total + i];
        if (bias != 0) v += bias[i % N];
        store2<HOPPER_OUT>(out, i, v, 0.f, false, false);
    }
}
#endif
