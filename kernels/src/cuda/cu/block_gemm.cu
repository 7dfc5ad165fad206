// Portable block-scaled FP8 GEMM (sm_89+): FP8 mma.sync m16n8k32 e4m3, cp.async multi-stage
// pipeline, XOR-swizzled shared memory, f32 accumulation with the 1xSBK activation and
// SBN x SBK weight scales applied once per SBK-long K block. One set of f32 accumulators:
// the MMAs add each block's products to the running sum kept in units of that block's scale
// product u = a(row) * b(col); between blocks the sum is multiplied by u(kb) / u(kb + 1),
// after the split's last block by u (no second set of partial sums, so half the
// accumulator registers). Any M, N, K: rows past M / N and K chunks past the padded K are
// zero-filled by cp.async, stores are masked.
//
//   out[m, n] = sum_kb As[m, kb] * Bs[n / SBN, kb] * sum_{k in kb} A[m, k] * B[n, k]  (+ bias[n])
//
// A: [M, lda] e4m3 codes (lda % 16 == 0, columns K..kp zero), As: [M, Kbs] row-major f32.
// B: [N, ldb] e4m3 codes (ldb % 16 == 0, columns K..kp zero), Bs: [ceil(N/SBN), Kbs] f32,
// Kbs = ceil(K / SBK). The scale block: SBN (along N) a multiple of 8 (each 8-column MMA
// tile inside one block), SBK (along K) 32, 64 or 128. Tile BM x 128 x 128 (BM = 32 * MT), 8 warps as 2 (M) x 4 (N); a 128-long K tile
// holds 128 / SBK scale blocks, each promoted after its SBK / 32 MMA K steps. Split-K over
// blockIdx.z (in 128-long K tiles) adds into an f32 workspace
// with atomics; the last split of a tile to arrive (an atomic counter per tile) reads the
// tile's sums, stores the output (+ bias) and puts zeros back into the workspace and the
// counter: both are zero between calls, so a call needs no memset and no second launch.
//
// Grouped (a module compiled with -DBLOCK_GROUPED: `block_grouped_*` kernels instead): E
// experts' weights stacked, B [E * N, ldb], Bs [E * ceil(N/SBN), Kbs], bias [E * N]; grid y
// walks row tiles of the experts' rows: `tiles` lists one (expert, first row, end row) triple
// per y, or, masked with the counts on the device (`counts` not null), y = e * tps + t is
// tile t of expert e's slab of m_max rows, whose rows are e * m_max + [t * BM, count) with
// the count clamped to 0..m_max (a tile past it exits at once). Rows past a tile's end row
// are zero-filled and never stored; rows no tile covers are not written. Never split along K.
// Each stored value is (sum + bias[e, n]) * rw[m] when the routing weights `rw` are given.

#ifndef MT
#define MT 4
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef MINB  // blocks per SM the registers must allow
#define MINB 1
#endif
#define BM (32 * MT)
#define BN 128
#define BK 128
#define THREADS 256
#define WM (BM / 2)
#define A_STAGE (BM * BK)
#define B_STAGE (BN * BK)
// Scales below this floor count as it in the units of the running sums (a zero scale would
// make the next unit infinite). Activation scales never reach it (the quantizer's smallest
// is 1e-10 / 448 ~ 2^-42); a weight block scale below it (in practice: zero) contributes
// its products times 2^-50 instead of times zero.
#define SCALE_FLOOR 8.8817841970012523e-16f  // 2^-50

// Byte offset of 16-byte chunk `ch` (0..7) of row `r` in a 128-byte-row swizzled tile.
__device__ __forceinline__ u32 swz(int r, int ch) { return (u32)(r * 128 + ((ch ^ (r & 7)) << 4)); }

__device__ __forceinline__ void load_tile(u32 dst, const u8* __restrict__ src, int ld, int row0,
                                          int rows_total, int rows_tile, int k0, int kp) {
    for (int c = threadIdx.x; c < rows_tile * 8; c += THREADS) {
        const int r = c >> 3, ch = c & 7;
        const int gr = row0 + r, gk = k0 + ch * 16;
        const bool ok = gr < rows_total && gk < kp;
        const u8* p = ok ? src + (long long)gr * ld + gk : src;
        cp_async16(dst + swz(r, ch), p, ok ? 16 : 0);
    }
}

// The factor that moves a sum from units of scale s (this block's) to units of scale sn (the
// next block's), or to values after the split's last block; both floored (so rcp_approx,
// not the correctly rounded __frcp_rn whose slow path spilled in the main loop, gets a
// normal number).
__device__ __forceinline__ float rescale(float s, float sn, bool last) {
    s = fmaxf(s, SCALE_FLOOR);
    return last ? s : s * rcp_approx(fmaxf(sn, SCALE_FLOOR));
}

// The grouped form's routing (see the top); unused (null) when dense.
struct Groups {
    const float* rw;
    const int* tiles;
    const int* counts;
    int tps, m_max;
};

template <int OUT, bool G>
__device__ void block_gemm(const u8* __restrict__ A, int lda, const float* __restrict__ As,
                           const u8* __restrict__ B, int ldb, const float* __restrict__ Bs,
                           void* __restrict__ out, float* __restrict__ ws,
                           u32* __restrict__ counters, const float* __restrict__ bias, int M,
                           int N, int K, int kp, int kb_per_split, Groups gr) {
    extern __shared__ __align__(128) u8 smem[];
    const int Kb = (K + BK - 1) / BK;
    const int Kbs = (K + SBK - 1) / SBK, nbs = (N + SBN - 1) / SBN;
    const int n0 = blockIdx.x * BN;
    int m0 = blockIdx.y * BM;
    if constexpr (G) {
        // This block's tile: its expert's weights, scales and bias, and rows m0 .. M (the
        // tile's end row: every bound on M below is on it).
        int e;
        if (gr.counts != nullptr) {
            e = blockIdx.y / gr.tps;
            const int t = blockIdx.y % gr.tps, c = gr.counts[e];
            const int rows = c < 0 ? 0 : (c > gr.m_max ? gr.m_max : c);
            if (t * BM >= rows) return;  // (uniform over the block, before any barrier)
            m0 = e * gr.m_max + t * BM;
            M = e * gr.m_max + rows;
        } else {
            e = gr.tiles[3 * blockIdx.y];
            m0 = gr.tiles[3 * blockIdx.y + 1];
            M = gr.tiles[3 * blockIdx.y + 2];
        }
        B += (long long)e * N * ldb;
        Bs += (long long)e * nbs * Kbs;
        if (bias != nullptr) bias += (long long)e * N;
    }
    const int kb0 = blockIdx.z * kb_per_split;
    const int kb1 = min(Kb, kb0 + kb_per_split);
    const int nk = kb1 - kb0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 2, wn = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    const u32 s0 = smem_u32(smem);

    // This split's last scale block that lies inside K.
    const int kbs_last = min(Kbs, kb1 * (BK / SBK)) - 1;
    float acc[MT][4][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    auto stage_a = [&](int s) { return s0 + (u32)(s * (A_STAGE + B_STAGE)); };
    auto stage_b = [&](int s) { return s0 + (u32)(s * (A_STAGE + B_STAGE) + A_STAGE); };
    auto load = [&](int s, int kb) {
        load_tile(stage_a(s), A, lda, m0, M, BM, kb * BK, kp);
        load_tile(stage_b(s), B, ldb, n0, N, BN, kb * BK, kp);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load(s, kb0 + s);
        cp_async_commit();
    }
    for (int i = 0; i < nk; ++i) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nx = i + STAGES - 1;
        if (nx < nk) load(nx % STAGES, kb0 + nx);
        cp_async_commit();
        const u32 sa = stage_a(i % STAGES), sb = stage_b(i % STAGES);
        // The scales of the block being summed (u(kbs)) and of the next (u(kbs + 1)), loaded
        // when the block starts and first used (floor, reciprocal) after its MMAs: the loads
        // are in flight during the MMAs instead of stalling the rescale. Rows past M: 1 (any
        // finite unit; their sums are never stored).
        int kbs = 0;
        bool last = false;
        float xa[MT][2], xan[MT][2], xb[4], xbn[4];
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
            if (ks % (SBK / 32) == 0) {
                kbs = (kb0 + i) * (BK / SBK) + ks / (SBK / 32);
                last = kbs == kbs_last;
                const int kn = min(kbs + 1, kbs_last);  // in bounds; unused when last
                if (kbs <= kbs_last) {
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        const int col = n0 + wn * 32 + (SBN % 32 == 0 ? 0 : nt * 8);
                        const long long br = min(col / SBN, nbs - 1) * (long long)Kbs;
                        xb[nt] = Bs[br + kbs];
                        xbn[nt] = Bs[br + kn];
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = m0 + wm * WM + mt * 16 + g + 8 * h;
                            const long long ar = (long long)min(r, M - 1) * Kbs;
                            xa[mt][h] = r < M ? As[ar + kbs] : 1.f;
                            xan[mt][h] = r < M ? As[ar + kn] : 1.f;
                        }
                }
            }
            u32 af[MT][4];
            u32 bf[4][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = wm * WM + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(sa + swz(r, ks * 2 + (lane >> 4)), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
            }
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                const int r = wn * 32 + np * 16 + (lane & 7) + (lane >> 4) * 8;
                ldmatrix_x4(sb + swz(r, ks * 2 + ((lane >> 3) & 1)), bf[np * 2][0], bf[np * 2][1],
                            bf[np * 2 + 1][0], bf[np * 2 + 1][1]);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) mma_e4m3(acc[mt][nt], af[mt], bf[nt]);
            if ((ks + 1) % (SBK / 32) != 0) continue;
            // End of a scale block: move the sums from units of u(kbs) to units of
            // u(kbs + 1), or to values after the split's last block (factors from the
            // scales loaded before this block's MMAs).
            if (kbs <= kbs_last) {
                float rb[4];
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
                    rb[nt] = rescale(xb[nt], xbn[nt], last);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float ra[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        ra[h] = rescale(xa[mt][h], xan[mt][h], last);
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        const float f0 = ra[0] * rb[nt], f1 = ra[1] * rb[nt];
                        acc[mt][nt][0] *= f0;
                        acc[mt][nt][1] *= f0;
                        acc[mt][nt][2] *= f1;
                        acc[mt][nt][3] *= f1;
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    // The epilogue, one walk over the thread's output pairs: element e of (mt, nt) sits at
    // row m0 + wm * WM + mt * 16 + g + 8 * (e >> 1), column n0 + wn * 32 + nt * 8 + 2 * t +
    // (e & 1). Calls f(v, r, c) for each pair of columns (c, c + 1) the thread holds in a row
    // r < M with c < N, v = the pair's two accumulators (the second past N when c + 1 == N).
    auto each_pair = [&](auto&& f) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + wm * WM + mt * 16 + g + h * 8;
                if (r >= M) continue;
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const int c = n0 + wn * 32 + nt * 8 + t * 2;
                    if (c < N) f(&acc[mt][nt][h * 2], r, c);
                }
            }
    };
    if (!G && gridDim.z > 1) {
        // Split K: add the tile into the workspace; the last split to arrive reads the sums
        // back from L2 and puts zeros back for the next call.
        each_pair([&](float* v, int r, int c) {
            const long long idx = (long long)r * N + c;
            atomicAdd(ws + idx, v[0]);
            if (c + 1 < N) atomicAdd(ws + idx + 1, v[1]);
        });
        if (!last_split(counters, blockIdx.y * gridDim.x + blockIdx.x, gridDim.z)) return;
        each_pair([&](float* v, int r, int c) {
            const long long idx = (long long)r * N + c;
#pragma unroll
            for (int j = 0; j < 2; ++j)
                if (c + j < N) {
                    v[j] = __ldcg(ws + idx + j);
                    __stcg(ws + idx + j, 0.0f);
                }
        });
    }
    if (G && gr.rw != nullptr) {
        // (sum + bias) * rw[row]: the bias first, then the routing weight.
        each_pair([&](float* v, int r, int c) {
            const bool both = c + 1 < N;
            float a = v[0], b = v[1];
            if (bias != nullptr) {
                a += bias[c];
                if (both) b += bias[c + 1];
            }
            store2<OUT>(out, (long long)r * N + c, a * gr.rw[r], b * gr.rw[r], both, (N & 1) == 0);
        });
        return;
    }
    each_pair([&](float* v, int r, int c) {
        store2_bias<OUT>(out, (long long)r * N + c, bias, c, v[0], v[1], c + 1 < N, (N & 1) == 0);
    });
}

#ifndef BLOCK_GROUPED
#define BLOCK_KERNEL(NAME, OUT)                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                  \
        NAME(const u8* A, int lda, const float* As, const u8* B, int ldb, const float* Bs,       \
             void* out, float* ws, u32* counters, const float* bias, int M, int N, int K, int kp, \
             int kbs) {                                                                          \
        block_gemm<OUT, false>(A, lda, As, B, ldb, Bs, out, ws, counters, bias, M, N, K, kp, kbs, \
                               Groups{nullptr, nullptr, nullptr, 0, 0});                         \
    }
BLOCK_KERNEL(block_gemm_f32, 0)
BLOCK_KERNEL(block_gemm_f16, 1)
BLOCK_KERNEL(block_gemm_bf16, 2)
#else
// `tiles`: one (expert, first row, end row) triple per grid row, or (tiles null) `counts`
// the experts' masked counts over slabs of m_max rows, `tps` tiles per slab; `rw` [M] may be
// null. Never split: kbs covers K.
#define BLOCK_KERNEL(NAME, OUT)                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                  \
        NAME(const u8* A, int lda, const float* As, const u8* B, int ldb, const float* Bs,       \
             void* out, const float* bias, const float* rw, const int* tiles, const int* counts,  \
             int tps, int m_max, int M, int N, int K, int kp) {                                  \
        block_gemm<OUT, true>(A, lda, As, B, ldb, Bs, out, nullptr, nullptr, bias, M, N, K, kp,   \
                              (K + BK - 1) / BK, Groups{rw, tiles, counts, tps, m_max});         \
    }
BLOCK_KERNEL(block_grouped_f32, 0)
BLOCK_KERNEL(block_grouped_f16, 1)
BLOCK_KERNEL(block_grouped_bf16, 2)
#endif
