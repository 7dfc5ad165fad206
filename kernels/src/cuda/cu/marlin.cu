// Marlin-class FP8 weight-only (W8A16) GEMM: out[M, N] = x[M, K] @ (W[N, K] * scales)^T.
//
// Header-free CUDA C, compiled at run time by NVRTC (sm_80 and newer: bf16 mma and
// fma.bf16x2 need sm_80).
//
// Orientation: the tensor-core mma m16n8k16 computes out^T = W . x^T, so the FP8 weight is
// the A operand (16 output channels x 16 K) and the activations are the B operand (16 K x 8
// rows of M). A decode step (M <= 8) then wastes nothing on padding M to 16.
//
// Weights are repacked on the host (repack.rs) into stripes of 64 output channels; one
// stripe holds, per 32-wide K step, 4 tiles of 16 channels x 32 K = 512 bytes, one 16-byte
// word per lane, which is exactly what that lane's A fragments for the two k16 mmas of the
// step need. Inside a step the logical K order is permuted (a dot product does not care):
// lane (g, t) covers K offsets 8t..8t+7 of the step, mma #s takes offsets 8t+4s..8t+4s+3,
// so the activation fragments are one 16-byte load of x[m][k0 + 8t .. k0 + 8t + 8).
//
// Dequantization without conversion instructions: for each byte keep the sign, shift the
// 7 exponent+mantissa bits into the 16-bit float's fields (right shift 1 for f16, 4 for
// bf16). The result is value * 2^-8 (f16) or value * 2^-120 (bf16), exactly, subnormals
// included. The power of two is folded into the 16-bit group scales at load time; the
// group scales (relative to a per-channel f32 scale) multiply the dequantized fragment
// before each mma, the per-channel f32 scale multiplies the f32 accumulators at the end.
//
// Work split: grid (M chunks, N stripes, K splits), 4 warps per block. The warps of a block
// split the block's K range (interleaved steps) and are reduced through shared memory; the
// K splits of one tile are reduced through an f32 workspace by the block that arrives last
// (a per-tile counter), in a fixed order, so results are deterministic.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

struct __align__(16) U4 {
    u32 x, y, z, w;
};

__device__ __forceinline__ U4 ldg_stream(const U4* p) {
    U4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ U4 ldg_cached(const U4* p) {
    U4 r;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

// Bytes 1 and 3 of q as two 16-bit floats (low half <- byte 1, high half <- byte 3).
template <int BF16>
__device__ __forceinline__ u32 deq_hi(u32 q) {
    const int shift = BF16 ? 4 : 1;
    return (q & 0x80008000u) | ((q & 0x7F007F00u) >> shift);
}

// Bytes 0 and 2 of q as two 16-bit floats (low half <- byte 0, high half <- byte 2).
template <int BF16>
__device__ __forceinline__ u32 deq_lo(u32 q) {
    return deq_hi<BF16>(q << 8);
}

// a * b on two 16-bit floats (no flush of subnormals). fma with -0 is exactly a * b.
template <int BF16>
__device__ __forceinline__ u32 mul2(u32 a, u32 b) {
    u32 d;
    if (BF16) {
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    } else {
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    }
    return d;
}

template <int BF16>
__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

__device__ __forceinline__ void st_cg(float* p, float v) {
    asm volatile("st.global.cg.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

template <int BF16>
__device__ __forceinline__ u16 to16(float v) {
    u16 r;
    if (BF16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
    }
    return r;
}

// Registers of one K step in flight: 4 weight words (one per 16-channel tile), the scale
// word of the step's group, and one activation word per 8-row M tile.
template <int MT>
struct Stage {
    U4 w[4];
    U4 s;
    U4 x[MT];
};

struct Args {
    const U4* w;         // repacked weights [stripes][ksteps][4][32] x 16 bytes
    const U4* s;         // group scales [stripes][groups][8] x 16 bytes (8 x 16-bit)
    const float* chan;   // per-channel f32 scales [stripes * 64]
    const float* bias;   // [N] f32, or null
    const u16* x;        // activations [M, K], row stride ldx elements
    u16* out;            // output [M, N], row stride ldo elements
    float* work;         // split-K partials
    int* counters;       // per-tile arrival counters (zero between launches)
    int m, n, k, ldx, ldo;
    int ksteps, steps_per_group, groups, splits, steps_per_split, x_vec, m_base;
    int spg_shift;       // log2(steps_per_group) when a power of two, else -1
};

template <int MT>
__device__ __forceinline__ void load_stage(Stage<MT>& st, const Args& a, int step, int stripe,
                                           int lane, int row0) {
    const U4* wp = a.w + ((size_t)stripe * a.ksteps + step) * 128 + lane;
#pragma unroll
    for (int j = 0; j < 4; j++) st.w[j] = ldg_stream(wp + j * 32);
    const int g = lane >> 2, t = lane & 3;
    const int grp = a.spg_shift >= 0 ? step >> a.spg_shift : step / a.steps_per_group;
    st.s = ldg_cached(a.s + ((size_t)stripe * a.groups + grp) * 8 + g);
    const int kk = step * 32 + 8 * t;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int row = row0 + mt * 8 + g;
        U4 v = {0u, 0u, 0u, 0u};
        if (row < a.m) {
            const u16* p = a.x + (size_t)row * a.ldx + kk;
            if (a.x_vec && kk + 8 <= a.k) {
                v = ldg_cached(reinterpret_cast<const U4*>(p));
            } else {
                u32 e[8];
#pragma unroll
                for (int i = 0; i < 8; i++) e[i] = (kk + i < a.k) ? (u32)p[i] : 0u;
                v.x = e[0] | (e[1] << 16);
                v.y = e[2] | (e[3] << 16);
                v.z = e[4] | (e[5] << 16);
                v.w = e[6] | (e[7] << 16);
            }
        }
        st.x[mt] = v;
    }
}

template <int BF16, int MT>
__device__ __forceinline__ void compute_stage(const Stage<MT>& st, float (&acc)[4][MT][4]) {
    const u32 sw[4] = {st.s.x, st.s.y, st.s.z, st.s.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        // scale of this lane's channel g (low half) and g + 8 (high half), broadcast to pairs
        const u32 slo = __byte_perm(sw[j], 0, 0x1010);
        const u32 shi = __byte_perm(sw[j], 0, 0x3232);
        const u32 q[4] = {st.w[j].x, st.w[j].y, st.w[j].z, st.w[j].w};
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const u32 qa = q[2 * s], qb = q[2 * s + 1];
            const u32 a0 = mul2<BF16>(deq_lo<BF16>(qa), slo);
            const u32 a2 = mul2<BF16>(deq_hi<BF16>(qa), slo);
            const u32 a1 = mul2<BF16>(deq_lo<BF16>(qb), shi);
            const u32 a3 = mul2<BF16>(deq_hi<BF16>(qb), shi);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const u32 b0 = s ? st.x[mt].z : st.x[mt].x;
                const u32 b1 = s ? st.x[mt].w : st.x[mt].y;
                mma<BF16>(acc[j][mt], a0, a1, a2, a3, b0, b1);
            }
        }
    }
}

template <int BF16, int MT>
__device__ __forceinline__ void epilogue(const Args& a, float (&acc)[4][MT][4], int stripe,
                                         int row0, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int n = stripe * 64 + j * 16 + g + 8 * (r >> 1);
            if (n >= a.n) continue;
            const float c = a.chan[n];
            const float b = a.bias ? a.bias[n] : 0.0f;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int m = row0 + mt * 8 + 2 * t + (r & 1);
                if (m < a.m) a.out[(size_t)m * a.ldo + n] = to16<BF16>(acc[j][mt][r] * c + b);
            }
        }
    }
}

template <int BF16, int MT, int DEPTH>
__device__ __forceinline__ void marlin_body(const Args& a) {
    __shared__ float red[3][16 * MT][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunk = blockIdx.x, stripe = blockIdx.y, split = blockIdx.z;
    const int row0 = a.m_base + chunk * 8 * MT;
    const int s_begin = split * a.steps_per_split;
    const int s_end = min(s_begin + a.steps_per_split, a.ksteps);

    float acc[4][MT][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[j][mt][r] = 0.0f;

    // Software pipeline: DEPTH steps of this warp in flight.
    Stage<MT> st[DEPTH];
    int s = s_begin + warp;
#pragma unroll
    for (int i = 0; i < DEPTH; i++)
        if (s + 4 * i < s_end) load_stage<MT>(st[i], a, s + 4 * i, stripe, lane, row0);
    for (; s < s_end; s += 4 * DEPTH) {
#pragma unroll
        for (int i = 0; i < DEPTH; i++) {
            const int si = s + 4 * i;
            if (si < s_end) {
                compute_stage<BF16, MT>(st[i], acc);
                if (si + 4 * DEPTH < s_end)
                    load_stage<MT>(st[i], a, si + 4 * DEPTH, stripe, lane, row0);
            }
        }
    }

    // Reduce the 4 warps through shared memory, in a fixed order.
    if (warp > 0) {
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 4; r++) red[warp - 1][(j * MT + mt) * 4 + r][lane] = acc[j][mt][r];
    }
    __syncthreads();
    if (warp > 0) return;
#pragma unroll
    for (int w = 0; w < 3; w++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 4; r++) acc[j][mt][r] += red[w][(j * MT + mt) * 4 + r][lane];

    if (a.splits == 1) {
        epilogue<BF16, MT>(a, acc, stripe, row0, lane);
        return;
    }

    // K split: store this split's partial, the last block of the tile sums them all.
    const int t = lane & 3;
    const int tile = stripe * gridDim.x + chunk;
    const size_t tile_elems = (size_t)16 * MT * 32;
    float* mine = a.work + ((size_t)tile * a.splits + split) * tile_elems;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = row0 + mt * 8 + 2 * t + (r & 1);
                if (m < a.m) st_cg(mine + ((j * MT + mt) * 4 + r) * 32 + lane, acc[j][mt][r]);
            }
    __threadfence();
    __syncwarp();
    int prev = 0;
    if (lane == 0) prev = atomicAdd(a.counters + tile, 1);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev != a.splits - 1) return;
    __threadfence();
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[j][mt][r] = 0.0f;
    for (int z = 0; z < a.splits; z++) {
        const float* part = a.work + ((size_t)tile * a.splits + z) * tile_elems;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int m = row0 + mt * 8 + 2 * t + (r & 1);
                    if (m < a.m) acc[j][mt][r] += ld_cg(part + ((j * MT + mt) * 4 + r) * 32 + lane);
                }
    }
    if (lane == 0) a.counters[tile] = 0;
    epilogue<BF16, MT>(a, acc, stripe, row0, lane);
}

#define MARLIN_KERNEL(NAME, BF16, MT, DEPTH, MINB)                                             \
    extern "C" __global__ void __launch_bounds__(128, MINB) NAME(Args a) {                     \
        marlin_body<BF16, MT, DEPTH>(a);                                                       \
    }

// Pipeline depth (MARLIN_Dx) and blocks per SM (MARLIN_Bx) per variant; the host passes
// them (plan.rs, Tuning). These defaults match Tuning::default().
#ifndef MARLIN_D1
#define MARLIN_D1 2
#define MARLIN_B1 6
#define MARLIN_D2 3
#define MARLIN_B2 3
#define MARLIN_D4 1
#define MARLIN_B4 3
#endif

MARLIN_KERNEL(marlin_w8a16_f16_mt1, 0, 1, MARLIN_D1, MARLIN_B1)
MARLIN_KERNEL(marlin_w8a16_f16_mt2, 0, 2, MARLIN_D2, MARLIN_B2)
MARLIN_KERNEL(marlin_w8a16_f16_mt4, 0, 4, MARLIN_D4, MARLIN_B4)
MARLIN_KERNEL(marlin_w8a16_bf16_mt1, 1, 1, MARLIN_D1, MARLIN_B1)
MARLIN_KERNEL(marlin_w8a16_bf16_mt2, 1, 2, MARLIN_D2, MARLIN_B2)
MARLIN_KERNEL(marlin_w8a16_bf16_mt4, 1, 4, MARLIN_D4, MARLIN_B4)
