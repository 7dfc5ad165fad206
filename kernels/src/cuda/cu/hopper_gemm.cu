// Hopper block-scaled FP8 GEMM (sm_90a): TMA loads into a STAGES-deep shared-memory ring
// guarded by mbarriers, one producer warpgroup (one thread issues the TMA loads, a second
// warp copies each stage's scales; few registers through setmaxnreg), NWG math warpgroups
// issuing wgmma m64n128k32 e4m3 x e4m3 -> f32 from 128B-swizzled K-major shared-memory
// descriptors. Each SBK-long scale block of a 128-long K tile is multiplied into fresh
// accumulators and then promoted into f32 totals with As[m, kb] * Bs[n / SBN, kb] (scale
// blocks SBN x SBK: SBN 32, 64 or 128 along N, SBK 32, 64 or 128 along K). The 64- and
// 128-row tiles keep two accumulator sets, so a scale block's MMAs run while the previous
// block is promoted. Tiles are BM x 128 with BM = 64 x NWG x WAVES (64, 128, 192 or 256
// rows; the host picks per call). Persistent: a grid of at most one CTA per SM walks the
// (tile, K split) work units. Launched overlapped with the activation quantization before it
// (programmatic dependent launch): the TMA thread loads the first round of weight tiles while
// that kernel runs, then waits for it (griddep_wait) before the first activation tile; the
// scale warp waits before it reads the activation scales.
//
//   out[m, n] = sum_kb As[m, kb] * Bs[n / SBN, kb] * sum_{k in kb} A[m, k] * B[n, k]  (+ bias[n])
//
// A: [M, ldk] e4m3 codes through tensor map `ta` (box 128 x BM), columns K..ldk zero.
// B: [N, ldk] e4m3 codes through tensor map `tb` (box 128 x 128). TMA zero-fills rows past
// M / N and columns past ldk, so partial tiles need no masking on the load side.
// As: [Kbs, M] f32 (M fastest), Bs: [ceil(N/SBN), Kbs] f32, Kbs = ceil(K / SBK). Stores
// are masked. With more than one K split (tiles of at most 128 rows), split s stores its
// partial sums to ws[s][M][N] (every valid element of its tile) and `hopper_finalize_*`
// sums the splits in order (deterministic).

#define BN 128
#define BK 128
#define SUBS (BK / SBK)  // scale blocks per K tile
#define NSB (BN / SBN)   // scale rows per N tile

struct __align__(64) TmaDesc {
    u64 opaque[16];
};

// The PTX that other kernels share (smem addresses, cp.async, mbarrier, fences) is in
// ptx.cuh; the Hopper-only instructions of this kernel (TMA, wgmma, cluster) are below.

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

// ---- wgmma ----------------------------------------------------------------------------
// K-major operand, 128-byte swizzle, 8-row core-matrix groups 1024 bytes apart (SBO); the
// leading offset is unused for swizzled K-major layouts. `addr` must sit in a 1024-aligned
// swizzle atom; advancing K by 32 e4m3 elements adds 32 bytes to the start address.
__device__ __forceinline__ u64 wgmma_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) |
           ((u64)1 << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait1() {
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}

// d[64] (+)= A[64 x 32] * B[128 x 32]^T; `acc` false: d = A * B.
__device__ __forceinline__ void wgmma_m64n128k32(float* d, u64 da, u64 db, int acc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
        "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "
        "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
          "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
          "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
          "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(acc));
}

// ---- the kernel -----------------------------------------------------------------------
// Work unit u -> (n block, m block, split): units sharing a weight tile are adjacent, so
// CTAs running at the same time read each weight tile from HBM about once. With clusters of
// CL CTAs along M, a unit is CL vertically adjacent tiles of one n block, one per CTA of the
// cluster (CTA `rank` takes the rank-th), and the clusters walk the units round-robin.
struct Unit {
    int m0, nb, kb0, kb1, sp;
};
struct Sched {
    int num_mc, splits, kbps, Kb, bm, cl, rank, first, step, units;
    __device__ __forceinline__ Unit at(int u) const {
        const int sp = u % splits, t = u / splits;
        Unit r;
        r.nb = t / num_mc;
        r.m0 = ((t % num_mc) * cl + rank) * bm;
        r.kb0 = sp * kbps;
        r.kb1 = min(Kb, r.kb0 + kbps);
        r.sp = sp;
        return r;
    }
};

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

// ---- scales staged in shared memory ---------------------------------------------------
// Each stage holds, beside its A and B tiles, the scales its promotions read: SUBS x BM
// activation scales (rows fastest), then SUBS x NSB weight scales. One producer warp copies
// them with 4-byte cp.async (zero-filled past M and past K) and each lane's copies arrive on
// the stage's full barrier when they land, so the math warpgroups read them from shared
// memory after the barrier instead of waiting on L2 for them once per K tile.
template <int BM> struct Sc {
    static constexpr u32 FLOATS = SUBS * (BM + NSB);
    static constexpr u32 BYTES = (FLOATS * 4 + 15) & ~15u;
};

// The scale warp: for every stage the TMA thread fills, the same stage's scales.
template <int BM, int STAGES>
__device__ __forceinline__ void stage_scales(const float* __restrict__ As,
                                             const float* __restrict__ Bs, u32 ssc, u32 bars,
                                             int M, int Kbs, int nbs, const Sched& sc,
                                             int lane) {
    u32 it = 0;
    for (int u = sc.first; u < sc.units; u += sc.step) {
        const Unit w = sc.at(u);
        const int brow = min(w.nb * NSB + lane, nbs - 1);
        for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
            const u32 s = it % STAGES, ph = (it / STAGES) & 1;
            mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
            const u32 dst = ssc + s * Sc<BM>::BYTES;
#pragma unroll
            for (int sub = 0; sub < SUBS; ++sub) {
                const int kbs = kb * SUBS + sub;
                const bool ok = kbs < Kbs;
#pragma unroll 1
                for (int i = lane; i < BM; i += 32) {
                    const bool v = ok && w.m0 + i < M;
                    cp_async4(dst + 4 * (sub * BM + i), v ? As + (long long)kbs * M + w.m0 + i : As,
                              v ? 4u : 0u);
                }
                if (lane < NSB)
                    cp_async4(dst + 4 * (SUBS * BM + sub * NSB + lane),
                              ok ? Bs + (long long)brow * Kbs + kbs : Bs, ok ? 4u : 0u);
            }
            cp_async_arrive(bars + 8 * s);
        }
    }
}

// Promotion of one scale block: tot += acc * As[row] * Bs[col / SBN], the scales read from
// the stage's shared copy `c` (`row` = the thread's first row in the tile; its second is 8
// below). Accumulator i sits at row `row` (i % 4 < 2) or row + 8, tile column 8 (i / 4) +
// col_in + (i % 2): scale row 8 (i / 4) / SBN.
template <int BM>
__device__ __forceinline__ void promote(float (&tot)[64], const float (&acc)[64],
                                        const float* c, int sub, int row) {
    const float a0 = c[sub * BM + row], a1 = c[sub * BM + row + 8];
    float f0[NSB], f1[NSB];
#pragma unroll
    for (int q = 0; q < NSB; ++q) {
        const float b = c[SUBS * BM + sub * NSB + q];
        f0[q] = a0 * b;
        f1[q] = a1 * b;
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        const int q = (8 * (i / 4)) / SBN;
        tot[i] += acc[i] * ((i & 2) ? f1[q] : f0[q]);
    }
}

// A thread's 64 tile values (accumulator i at row r0 (i % 4 < 2) or r1, column c0 + 8 (i / 4)
// + (i % 2)) stored to the f32 [M, N] matrix `p`, rows and columns past M, N skipped;
// `pairs`: two adjacent values as one 8-byte store (N even).
__device__ __forceinline__ void store_tile(float* __restrict__ p, const float (&v)[64], int r0,
                                           int r1, int c0, int M, int N, bool pairs) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
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
// The math warpgroups' side of `hopper_gemm` (warpgroup `threadIdx.x / 128`, 1 to NWG).
template <int NWG, int WAVES, int STAGES, int OUT, int CL>
__device__ __forceinline__ void math(u32 sa, u32 sb, const float* scg, u32 bars, const Sched& sc,
                                     void* __restrict__ out, float* __restrict__ ws,
                                     const float* __restrict__ bias, int M, int N, bool split) {
    constexpr int BM = 64 * NWG * WAVES;
    constexpr bool PIPE = WAVES == 1 && NWG <= 2;
    constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK;
    const int wg = threadIdx.x / 128;

    // Math warpgroups.
    if constexpr (NWG == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    if constexpr (NWG == 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 160;");
    const int mw = wg - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row_in = mw * 64 + warp * 16 + lane / 4;  // in wave 0; wave w adds 64 NWG w
    const int col_in = (lane % 4) * 2;
    // The stage's last MMAs are done (and its scales read): hand it back to the producer.
    // (A predicated arrive, not a branch: MMAs may be in flight.)
    // With clusters, on the stage's empty barrier of every CTA of the cluster (each one's
    // producer multicasts into this CTA's stage).
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
    float tot[WAVES][64];
    u32 it = 0;
    for (int u = sc.first; u < sc.units; u += sc.step) {
        const Unit w = sc.at(u);
        // Slabs of this warpgroup whose rows exist: uniform over the warpgroup, and the
        // same for every split of the tile.
        int live = 0;
#pragma unroll
        for (int v = 0; v < WAVES; ++v) live += w.m0 + 64 * (NWG * v + mw) < M;
        int r0[WAVES], r1[WAVES];
#pragma unroll
        for (int v = 0; v < WAVES; ++v) {
            r0[v] = w.m0 + 64 * NWG * v + row_in;
            r1[v] = r0[v] + 8;
        }
#pragma unroll
        for (int v = 0; v < WAVES; ++v)
#pragma unroll
            for (int i = 0; i < 64; ++i) tot[v][i] = 0.f;
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
            float acc0[64], acc1[64];
            // Step (i, sub): scale block `sub` of the K tile in stage sequence number i. Its
            // MMAs go to acc0 or acc1 by the step's parity, which is a compile-time constant
            // below: K tiles are walked in pairs (2 SUBS steps), so every branch around the
            // MMAs in flight is uniform and ptxas keeps them asynchronous.
            auto issue = [&](u32 i, int sub, float(&d)[64]) {
                const u32 s = i % STAGES;
                if (sub == 0) mbar_wait(bars + 8 * s, (i / STAGES) & 1);
                const u64 da = wgmma_desc(sa + s * A_BYTES + 64 * mw * BK);
                const u64 db = wgmma_desc(sb + s * B_BYTES);
                wgmma_fence();
#pragma unroll
                for (int jj = 0; jj < SBK / 32; ++jj) {
                    const int kk = sub * (SBK / 32) + jj;
                    wgmma_m64n128k32(d, da + 2 * kk, db + 2 * kk, jj);
                }
                wgmma_commit();
            };
            // Promotes step (i, sub), whose MMAs are done; the stage goes back to the producer
            // after its last scale block.
            auto retire = [&](u32 i, int sub, const float(&d)[64]) {
                const u32 s = i % STAGES;
                promote<BM>(tot[0], d, scg + s * (Sc<BM>::BYTES / 4), sub, row_in);
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
            float acc[64];
            for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
                const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                mbar_wait(bars + 8 * s, ph);
                const float* c = scg + s * (Sc<BM>::BYTES / 4);
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
                                wgmma_m64n128k32(acc, da + 2 * kk, db + 2 * kk, j);
                            }
                            wgmma_commit();
                            wgmma_wait0();
                            promote<BM>(tot[v], acc, c, sub, 64 * NWG * v + row_in);
                        }
                    }
                }
                // After the promotions: they read the stage's scales.
                release(s);
            }
        }
    epilogue:
        if (live == 0) continue;
        // Epilogue: accumulator i of wave v sits at row r0[v] (i % 4 < 2) or r1[v], column
        // 8 * (i / 4) + col_in + (i % 2).
        // (Tiles of more than 128 rows are never split: the host plans them with one split,
        // and the reduction's registers would spill.)
        if (BM <= 128 && split) {
            // This split's partial sums; `hopper_finalize_*` adds the splits in order.
            store_tile(ws + (long long)w.sp * M * N, tot[0], r0[0], r1[0], w.nb * BN + col_in, M,
                       N, (N & 1) == 0);
            continue;
        }
#pragma unroll
        for (int v = 0; v < WAVES; ++v)
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const int c = w.nb * BN + j * 8 + col_in;
                if (c >= N) continue;
                const bool both = c + 1 < N;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = h ? r1[v] : r0[v];
                    if (r >= M) continue;
                    store2_bias<OUT>(out, (long long)r * N + c, bias, c, tot[v][4 * j + 2 * h],
                                     tot[v][4 * j + 2 * h + 1], both, (N & 1) == 0);
                }
            }
    }
}

// NWG math warpgroups, each running WAVES 64-row slabs of the BM = 64 * NWG * WAVES row
// tile: warpgroup g, wave w owns rows 64 * (NWG * w + g) .. +64. A wave's fresh accumulators
// are promoted into its own f32 totals (tot[w]), so registers grow with WAVES while the
// shared B tile (and its L2 traffic) is amortised over more rows.
//
// PIPE (one wave and at most two math warpgroups, whose registers hold two accumulator
// sets): a scale block's MMAs are issued into one set before the previous block, in the
// other set, is waited for and promoted, so the tensor cores run while the warpgroup
// promotes. Otherwise each scale block's MMAs are waited for before its promotion (the
// other warpgroups' MMAs fill part of that wait).
template <int NWG, int WAVES, int STAGES, int OUT, int CL>
__device__ __forceinline__ void hopper_gemm(const TmaDesc* ta, const TmaDesc* tb,
                                            const float* __restrict__ As,
                                            const float* __restrict__ Bs, void* __restrict__ out,
                                            float* __restrict__ ws,
                                            const float* __restrict__ bias, int M, int N, int K,
                                            int kbps, int splits) {
    constexpr int BM = 64 * NWG * WAVES;
    constexpr bool PIPE = WAVES == 1 && NWG <= 2;
    constexpr u32 A_BYTES = BM * BK, B_BYTES = BN * BK;
    extern __shared__ u8 smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 sa = base, sb = base + STAGES * A_BYTES;
    const u32 ssc = sb + STAGES * B_BYTES;
    const u32 bars = ssc + STAGES * Sc<BM>::BYTES;  // full[STAGES], then empty[STAGES]
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
    const int wg = threadIdx.x / 128;

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
    __syncthreads();
    // The peers' barriers are initialised before any multicast or remote arrival reaches them.
    if constexpr (CL > 1) cluster_sync();

    if (wg == 0) {
        // Producer warpgroup: one thread issues every TMA load, warp 1 copies the scales.
        if constexpr (NWG == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if constexpr (NWG == 3) asm volatile("setmaxnreg.dec.sync.aligned.u32 32;");
        if (threadIdx.x == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"((u64)ta) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"((u64)tb) : "memory");
            // Stage `it`'s weight tile (k block kb of unit w), expected on its full barrier
            // with the activation tile.
            auto load_b = [&](u32 it, const Unit& w, int kb) {
                const u32 s = it % STAGES, full = bars + 8 * s;
                mbar_expect_tx(full, A_BYTES + B_BYTES);
                if constexpr (CL == 1) {
                    tma_load_2d(sb + s * B_BYTES, tb, full, kb * BK, w.nb * BN);
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
            // overlapped with it), then every load as usual.
            u32 pre = 0;
            for (int u = sc.first; u < sc.units && pre < STAGES; u += sc.step) {
                const Unit w = sc.at(u);
                for (int kb = w.kb0; kb < w.kb1 && pre < STAGES; ++kb, ++pre) load_b(pre, w, kb);
            }
            griddep_wait();
            u32 it = 0;
            for (int u = sc.first; u < sc.units; u += sc.step) {
                const Unit w = sc.at(u);
                for (int kb = w.kb0; kb < w.kb1; ++kb, ++it) {
                    const u32 s = it % STAGES, ph = (it / STAGES) & 1;
                    mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
                    if (it >= pre) load_b(it, w, kb);
                    tma_load_2d(sa + s * A_BYTES, ta, bars + 8 * s, kb * BK, w.m0);
                }
            }
        } else if (threadIdx.x / 32 == 1) {
            griddep_wait();  // the activation scales come from the kernel before this one
            stage_scales<BM, STAGES>(As, Bs, ssc, bars, M, Kbs, nbs, sc, threadIdx.x % 32);
        }
    } else {
        math<NWG, WAVES, STAGES, OUT, CL>(sa, sb, scg, bars, sc, out, ws, bias, M, N, splits > 1);
    }
    // No CTA leaves while a peer may still multicast into it or arrive on its barriers.
    if constexpr (CL > 1) cluster_sync();
}

#define HOPPER_KERNEL_AT(NAME, NWG, WAVES, STAGES, OUT, CL, ATTR)                               \
    extern "C" __global__ void __launch_bounds__(128 * (NWG + 1), 1) ATTR                        \
        NAME(const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb,             \
             const float* As, const float* Bs, void* out, float* ws, const float* bias, int M,   \
             int N, int K, int kbps, int splits) {                                               \
        hopper_gemm<NWG, WAVES, STAGES, OUT, CL>(&ta, &tb, As, Bs, out, ws, bias, M, N, K, kbps, \
                                                 splits);                                        \
    }
#define HOPPER_KERNEL(NAME, NWG, WAVES, STAGES, OUT) HOPPER_KERNEL_AT(NAME, NWG, WAVES, STAGES, OUT, 1, )
// Clusters of two CTAs along M sharing (multicasting) the weight tile: the launch needs a
// grid of an even size and `tb` with boxes of 64 rows.
#define HOPPER_KERNEL_C2(NAME, NWG, WAVES, STAGES, OUT)                                           \
    HOPPER_KERNEL_AT(NAME, NWG, WAVES, STAGES, OUT, 2, __cluster_dims__(2, 1, 1))

// BM = 64: one math warpgroup, 24 KiB stages; BM = 128: two, 32 KiB stages; BM = 192: three
// (160 registers each), 40 KiB stages; BM = 256: two warpgroups of two waves each, 48 KiB
// stages. The last two only where a K tile holds at most two scale blocks (SBK >= 64): with
// more, their scales no longer fit in registers beside the totals.
HOPPER_KERNEL(hopper_gemm_bm64_f32, 1, 1, 8, 0)
HOPPER_KERNEL(hopper_gemm_bm64_f16, 1, 1, 8, 1)
HOPPER_KERNEL(hopper_gemm_bm64_bf16, 1, 1, 8, 2)
HOPPER_KERNEL(hopper_gemm_bm128_f32, 2, 1, 6, 0)
HOPPER_KERNEL(hopper_gemm_bm128_f16, 2, 1, 6, 1)
HOPPER_KERNEL(hopper_gemm_bm128_bf16, 2, 1, 6, 2)
HOPPER_KERNEL_C2(hopper_gemm_bm128c2_f32, 2, 1, 6, 0)
HOPPER_KERNEL_C2(hopper_gemm_bm128c2_f16, 2, 1, 6, 1)
HOPPER_KERNEL_C2(hopper_gemm_bm128c2_bf16, 2, 1, 6, 2)
#if SBK >= 64
HOPPER_KERNEL(hopper_gemm_bm192_f32, 3, 1, 5, 0)
HOPPER_KERNEL(hopper_gemm_bm192_f16, 3, 1, 5, 1)
HOPPER_KERNEL(hopper_gemm_bm192_bf16, 3, 1, 5, 2)
HOPPER_KERNEL(hopper_gemm_bm256_f32, 2, 2, 4, 0)
HOPPER_KERNEL(hopper_gemm_bm256_f16, 2, 2, 4, 1)
HOPPER_KERNEL(hopper_gemm_bm256_bf16, 2, 2, 4, 2)
HOPPER_KERNEL_C2(hopper_gemm_bm256c2_f32, 2, 2, 4, 0)
HOPPER_KERNEL_C2(hopper_gemm_bm256c2_f16, 2, 2, 4, 1)
HOPPER_KERNEL_C2(hopper_gemm_bm256c2_bf16, 2, 2, 4, 2)
#endif

// Split-K epilogue: out = sum over splits of ws[s] (+ bias), converted to the output dtype.
template <int OUT>
__device__ void hopper_finalize(const float* __restrict__ ws, void* __restrict__ out,
                                const float* __restrict__ bias, int M, int N, int splits) {
    const long long total = (long long)M * N;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = 0.f;
        for (int s = 0; s < splits; ++s) v += ws[s * total + i];
        if (bias != 0) v += bias[i % N];
        store2<OUT>(out, i, v, 0.f, false, false);
    }
}
extern "C" __global__ void hopper_finalize_f32(const float* ws, void* out, const float* bias, int M,
                                              int N, int splits) {
    hopper_finalize<0>(ws, out, bias, M, N, splits);
}
extern "C" __global__ void hopper_finalize_f16(const float* ws, void* out, const float* bias, int M,
                                              int N, int splits) {
    hopper_finalize<1>(ws, out, bias, M, N, splits);
}
extern "C" __global__ void hopper_finalize_bf16(const float* ws, void* out, const float* bias, int M,
                                              int N, int splits) {
    hopper_finalize<2>(ws, out, bias, M, N, splits);
}
