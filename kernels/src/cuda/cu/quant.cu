// Dynamic activation quantization to e4m3, bit-identical to kernels/src/cpu/quantize.rs:
// scale = max(absmax, 1e-10) / 448 in f32 (rounded up to a power of two by ue8m0_ceil when
// `ue8m0`), q = RNE-saturating e4m3 of x / scale (correctly rounded, see div_by_scale).
// Outputs: codes [M, ldq] (columns K..ldq zeroed), f32 scales.

// Stores the 8 codes lo | hi << 32 at row[c0..c0 + 8), those before ldq: one 8-byte store when
// `vec` (row 8-byte aligned, ldq a multiple of 8) and all 8 fit.
__device__ __forceinline__ void store_codes8(u8* row, int c0, int ldq, bool vec, u32 lo, u32 hi) {
    if (vec && c0 + 8 <= ldq) {
        *reinterpret_cast<uint2*>(row + c0) = make_uint2(lo, hi);
    } else {
#pragma unroll
        for (int b = 0; b < 8; ++b)
            if (c0 + b < ldq) row[c0 + b] = (u8)((b < 4 ? lo : hi) >> (8 * (b & 3)));
    }
}

// 1 x G groups (G a power of two from 8 to 128). A row's columns go in spans of G
// columns (C = 1) or max(G, 16) (C = 2), each quantized by 1 << lg_lanes threads: G / 8
// (C = 1) or max(G, 16) / 16 (C = 2). A thread holds C chunks of 8 values, chunk a at the
// span's column 8 * lane and (C = 2) chunk b half a span further, so that every load and
// store of a warp covers whole 32-byte sectors. The span's one group (C = 1, or C = 2 and
// G >= 16) has its absmax reduced over the span's threads and one scale; for C = 2 and G = 8
// a span is two groups, a's and b's. `units` threads per row cover the spans of ceil(ldq /
// span) (codes K..ldq are zeroed). Block (x, y) takes U * blockDim.x consecutive units, in U
// steps of blockDim.x, of the rows y, y + gridDim.y, ...: its C * U loads are issued before
// the first is used, streamed (ldg_stream) when S. Scale of (row, g) at
// s[row * s_row + g * s_col]. `vec`: bit 0 16-byte input loads (x 16-byte aligned, K a
// multiple of 8), bit 1 8-byte code stores (q 8-byte aligned, ldq a multiple of 8). Every
// thread takes part in the shuffles; units past the row's last only skip their loads and
// stores. Masked (`counts` not null): row r holds a token only when r % slab <
// counts[r / slab] (each count clamped to 0..slab); the other rows are skipped (their
// codes and scales left as they are), so a decode call over mostly empty slabs quantizes
// only its routed rows.
template <int T, int C, int U, bool S>
__device__ void quant_groups(const typename In<T>::E* __restrict__ x, u8* __restrict__ q,
                             float* __restrict__ s, int M, int K, int ldq, long long s_row,
                             long long s_col, int group, int groups, int units, int lg_lanes,
                             int vec, int ue8m0, const int* __restrict__ counts, int slab) {
    const int lanes = 1 << lg_lanes, half = 8 << lg_lanes;  // chunk b's offset (C = 2)
    const bool pair = C == 1 || group >= 16;                 // a thread's chunks: one group
    const int sub = threadIdx.x & (lanes - 1);
    for (int row = blockIdx.y; row < M; row += gridDim.y) {
        // (Uniform over the block: it works on one row at a time.)
        if (counts != nullptr && row % slab >= min(max(counts[row / slab], 0), slab)) continue;
        const typename In<T>::E* xr = x + (long long)row * K;
        u8* qr = q + (long long)row * ldq;
        Chunk8<T> a[U], b[U];
        int u[U], ca[U], va[U], vb[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            u[j] = (blockIdx.x * U + j) * blockDim.x + threadIdx.x;
            ca[j] = (u[j] >> lg_lanes) * C * half + 8 * sub;
            const bool in = u[j] < units;
            va[j] = in ? max(0, min(8, K - ca[j])) : 0;
            a[j].template load<S>(xr + ca[j], (vec & 1) != 0, va[j]);
            if (C == 2) {
                vb[j] = in ? max(0, min(8, K - ca[j] - half)) : 0;
                b[j].template load<S>(xr + ca[j] + half, (vec & 1) != 0, vb[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            u32 ma = a[j].partial_max(), mb = 0;
            if (C == 2) mb = b[j].partial_max();
            if (pair) {
                if (C == 2) ma = Chunk8<T>::combine(ma, mb);
#pragma unroll
                for (int o = 8 / C; o > 0; o >>= 1) {  // lanes <= 16 / C
                    const u32 t = __shfl_xor_sync(0xffffffffu, ma, o);
                    if (o < lanes) ma = Chunk8<T>::combine(ma, t);
                }
            }
            const float sa = group_scale_of(Chunk8<T>::amax_bits(ma), ue8m0);
            const float ra = __frcp_rn(sa);
            float v[8];
            u32 alo, ahi, blo = 0, bhi = 0;
            a[j].floats(v);
            encode8(v, sa, ra, va[j], alo, ahi);
            float sb = sa;
            if (C == 2) {
                float rb = ra;
                if (!pair) {
                    sb = group_scale_of(Chunk8<T>::amax_bits(mb), ue8m0);
                    rb = __frcp_rn(sb);
                }
                b[j].floats(v);
                encode8(v, sb, rb, vb[j], blo, bhi);
            }
            if (u[j] >= units) continue;
            const int ga = pair ? u[j] >> lg_lanes : 2 * u[j];
            if (sub == 0 && ga < groups) s[row * s_row + ga * s_col] = sa;
            if (!pair && ga + 1 < groups) s[row * s_row + (ga + 1) * s_col] = sb;
            store_codes8(qr, ca[j], ldq, (vec & 2) != 0, alo, ahi);
            if (C == 2) store_codes8(qr, ca[j] + half, ldq, (vec & 2) != 0, blo, bhi);
        }
    }
}

// Per-token: one block of 256 threads per row; scale clamped to ub/448 when ub != null.
template <int T>
__device__ void quant_rows(const typename In<T>::E* __restrict__ x, u8* __restrict__ q,
                           float* __restrict__ s, int M, int K, int ldq,
                           const float* __restrict__ ub, int ue8m0) {
    __shared__ u32 red[8];
    for (int row = blockIdx.x; row < M; row += gridDim.x) {
        const typename In<T>::E* xr = x + (long long)row * K;
        u32 m = 0;
        for (int c = threadIdx.x; c < K; c += blockDim.x) m = max(m, abs_bits(In<T>::cvt(xr[c])));
        m = warp_max_u32(m);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        m = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = max(m, red[w]);
        __syncthreads();
        float scale = scale_from_amax_bits(m);
        if (ub != 0) {
            const float ubs = fmaxf(*ub, MIN_ABSMAX) / E4M3_MAX;
            scale = scale != scale ? ubs : fminf(scale, ubs);
        }
        if (ue8m0) scale = ue8m0_ceil(scale);
        if (threadIdx.x == 0) s[row] = scale;
        const float rcp = __frcp_rn(scale);
        u8* qr = q + (long long)row * ldq;
        for (int c = threadIdx.x; c < ldq; c += blockDim.x)
            qr[c] = c < K ? (u8)e4m3(div_by_scale(In<T>::cvt(xr[c]), scale, rcp)) : (u8)0;
    }
}

// Absmax over a whole tensor into *amax_bits (zeroed by the caller), as ordered bits.
template <int T>
__device__ void absmax_all(const typename In<T>::E* __restrict__ x, long long n, u32* amax_bits) {
    u32 m = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        m = max(m, abs_bits(In<T>::cvt(x[i])));
    m = warp_max_u32(m);
    if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(amax_bits, m);
}

// One scale for the tensor: static (*scale) when amax_bits == null, else computed from the
// absmax (rounded up to a power of two when `ue8m0`). Writes the scale to s_rows[row] for
// every row when s_rows != null (for kernels that take per-row scales). Grid: x over
// columns (1024 per block), y over rows.
template <int T>
__device__ void quant_tensor(const typename In<T>::E* __restrict__ x, u8* __restrict__ q,
                             int M, int K, int ldq, const float* __restrict__ scale,
                             const u32* __restrict__ amax_bits, float* __restrict__ s_rows,
                             float* __restrict__ s_one, int ue8m0) {
    // static: `scale` is only given (non-null) when amax_bits is null
    const float sc = amax_bits != 0 ? group_scale_of(*amax_bits, ue8m0) : *scale;
    const float rcp = __frcp_rn(sc);
    for (int row = blockIdx.y; row < M; row += gridDim.y) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            if (s_rows != 0) s_rows[row] = sc;
            if (s_one != 0 && row == 0) s_one[0] = sc;
        }
        const typename In<T>::E* xr = x + (long long)row * K;
        u8* qr = q + (long long)row * ldq;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < ldq; c += gridDim.x * blockDim.x)
            qr[c] = c < K ? (u8)e4m3(div_by_scale(In<T>::cvt(xr[c]), sc, rcp)) : (u8)0;
    }
}

// quant_groups_cCuU_NAME: the group quantization of input NAME, C chunks per unit, U units
// per thread, streamed loads when S. The GEMM after it may launch at once (it waits for
// this kernel's codes before it reads them: griddep_wait). Measured on the H200 (bf16, K = 2048..16384): c1u1 is
// the fastest below about 2M elements, c2u1 streamed to about 40M, c2u2 above (quant.rs
// chooses).
#define QUANT_GROUPS(T, NAME, C, U, S)                                                          \
    extern "C" __global__ void __launch_bounds__(256, 6) quant_groups_c##C##u##U##_##NAME(      \
        const In<T>::E* x, u8* q, float* s, int M, int K, int ldq, long long s_row,             \
        long long s_col, int group, int groups, int units, int lg_lanes, int vec, int ue8m0,    \
        const int* counts, int slab) {                                                          \
        griddep_launch_dependents();                                                            \
        quant_groups<T, C, U, S>(x, q, s, M, K, ldq, s_row, s_col, group, groups, units,        \
                                 lg_lanes, vec, ue8m0, counts, slab);                           \
    }

#define INSTANTIATE(T, NAME)                                                                    \
    QUANT_GROUPS(T, NAME, 1, 1, false)                                                          \
    QUANT_GROUPS(T, NAME, 2, 1, true)                                                           \
    extern "C" __global__ void quant_rows_##NAME(const In<T>::E* x, u8* q, float* s, int M,      \
                                                 int K, int ldq, const float* ub, int ue8m0) {   \
        quant_rows<T>(x, q, s, M, K, ldq, ub, ue8m0);                                           \
    }                                                                                           \
    extern "C" __global__ void absmax_##NAME(const In<T>::E* x, long long n, u32* amax_bits) {   \
        absmax_all<T>(x, n, amax_bits);                                                         \
    }                                                                                           \
    extern "C" __global__ void quant_tensor_##NAME(const In<T>::E* x, u8* q, int M, int K,       \
                                                   int ldq, const float* scale,                  \
                                                   const u32* amax_bits, float* s_rows,          \
                                                   float* s_one, int ue8m0) {                    \
        quant_tensor<T>(x, q, M, K, ldq, scale, amax_bits, s_rows, s_one, ue8m0);               \
    }

INSTANTIATE(0, f32)
INSTANTIATE(1, f16)
INSTANTIATE(2, bf16)
// Two units per thread for the 16-bit inputs only (f32's would spill under the bound).
QUANT_GROUPS(1, f16, 2, 2, false)
QUANT_GROUPS(2, bf16, 2, 2, false)

// Copies rows of `cols` bytes into rows of `ld` bytes, zero-filling columns cols..ld (weight
// padding so every row starts 16-byte aligned).
extern "C" __global__ void pad_rows_u8(const u8* __restrict__ src, u8* __restrict__ dst, int rows,
                                       int cols, int ld) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < ld; c += gridDim.x * blockDim.x)
            dst[(long long)r * ld + c] = c < cols ? src[(long long)r * cols + c] : (u8)0;
}

// The MLP activation before the down projection's quantization: h = SiLU(gate) * up with
// SiLU(g) = g / (1 + exp(-g)), in f32, bit-identical to kernels/src/cpu/silu.rs: the same
// correctly rounded operations in the same order, each written as an intrinsic (fmaf,
// rintf, __fmul_rn, __fadd_rn, __fdiv_rn) so that no contraction (NVRTC's --fmad default)
// can merge them differently than the CPU runs them.

// 2^e for e in the normal exponent range -126..127, from its bits.
__device__ __forceinline__ float pow2_f32(int e) { return __uint_as_float((u32)(e + 127) << 23); }

// exp(x): n = rint(x log2 e), r = x - n ln 2 in two fused steps (ln 2 = 0x1.62e4p-1 +
// 0x1.7f7d1cp-20), e^r by Horner's rule on 1/j! rounded to f32 (j = 7 down to 0) in fused
// multiply-adds, then r * 2^n in one or two products (two when 2^n is not a normal f32).
// Inputs clamped to [-104, 89], where exp is 0 below and infinite above; NaN stays NaN.
__device__ __forceinline__ float exp_f32(float x) {
    if (x != x) return x;
    x = fminf(fmaxf(x, -104.0f), 89.0f);
    const float n = rintf(__fmul_rn(x, 0x1.715476p+0f));
    float r = fmaf(-n, 0x1.62e4p-1f, x);
    r = fmaf(-n, 0x1.7f7d1cp-20f, r);
    float p = 0x1.a01a02p-13f;
    p = fmaf(p, r, 0x1.6c16c2p-10f);
    p = fmaf(p, r, 0x1.111112p-7f);
    p = fmaf(p, r, 0x1.555556p-5f);
    p = fmaf(p, r, 0x1.555556p-3f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int e = (int)n;
    if (e > 127) return __fmul_rn(__fmul_rn(p, pow2_f32(127)), pow2_f32(e - 127));
    if (e < -126) return __fmul_rn(__fmul_rn(p, pow2_f32(e + 64)), pow2_f32(-64));
    return __fmul_rn(p, pow2_f32(e));
}

// SiLU(g) * u = (g / (1 + exp(-g))) * u, each operation rounded once (IEEE division).
__device__ __forceinline__ float silu_mul_f32(float g, float u) {
    const float d = __fadd_rn(1.0f, exp_f32(-g));
    return __fmul_rn(__fdiv_rn(g, d), u);
}

// h [M, K] (f32) from gate_up [M, 2K] (gate = columns 0..K, up = K..2K), grid-stride.
template <int T>
__device__ void silu_mul_rows(const typename In<T>::E* __restrict__ x, float* __restrict__ h,
                              int M, int K) {
    const long long n = (long long)M * K;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / K, col = i - row * K;
        const typename In<T>::E* xr = x + row * 2 * K;
        h[i] = silu_mul_f32(In<T>::cvt(xr[col]), In<T>::cvt(xr[K + col]));
    }
}

#define INSTANTIATE_SILU(T, NAME)                                                               \
    extern "C" __global__ void silu_mul_##NAME(const In<T>::E* x, float* h, int M, int K) {      \
        silu_mul_rows<T>(x, h, M, K);                                                           \
    }

INSTANTIATE_SILU(0, f32)
INSTANTIATE_SILU(1, f16)
INSTANTIATE_SILU(2, bf16)

// Scales of pre-quantized activations (row-major [M, G], or one row read M times when
// s_row = 0) into the order a GEMM reads: dst[row * d_row + g * d_col] = src[row * s_row + g].
extern "C" __global__ void place_scales(const float* __restrict__ src, float* __restrict__ dst,
                                        int M, int G, long long s_row, long long d_row,
                                        long long d_col) {
    const long long n = (long long)M * G;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / G, g = i - row * G;
        dst[row * d_row + g * d_col] = src[row * s_row + g];
    }
}
