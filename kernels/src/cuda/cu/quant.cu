// Dynamic activation quantization to e4m3, bit-identical to kernels/src/cpu/quantize.rs:
// scale = max(absmax, 1e-10) / 448 in f32 (rounded up to a power of two by ue8m0_ceil when
// `ue8m0`), q = RNE-saturating e4m3 of x / scale (correctly rounded, see div_by_scale).
// Outputs: codes [M, ldq] (columns K..ldq zeroed), f32 scales.

// 1 x G groups (G = `group`, a power of two from 8 to 128): G / 8 threads per (row, group),
// 8 elements each (16-byte loads for 16-bit input). Scale of (row, g) at
// s[row * s_row + g * s_col]. Every thread takes part in the shuffles; threads past the last
// group only skip their loads and stores.
template <int T>
__device__ void quant_groups(const typename In<T>::E* __restrict__ x, u8* __restrict__ q,
                             float* __restrict__ s, int M, int K, int ldq, long long s_row,
                             long long s_col, int vec, int group, int ue8m0) {
    const int lanes = group >> 3;
    const int sub = threadIdx.x & (lanes - 1);
    const int groups = (K + group - 1) / group;
    const long long gid = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / lanes;
    const bool active = gid < (long long)M * groups;
    const int row = active ? (int)(gid / groups) : 0;
    const int g = active ? (int)(gid % groups) : 0;
    const int c0 = g * group + sub * 8;
    const int valid = active ? max(0, min(8, K - c0)) : 0;
    float v[8];
    load8<T>(x + (long long)row * K + c0, vec != 0, valid, v);
    u32 lo, hi;
    const float scale = quant_group8(v, valid, lanes, ue8m0, lo, hi);
    if (!active) return;
    if (sub == 0) s[row * s_row + g * s_col] = scale;
    u8* out = q + (long long)row * ldq + c0;
    if (c0 + 7 < ldq && (ldq & 7) == 0) {
        *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if (c0 + j < ldq) out[j] = (u8)((j < 4 ? lo : hi) >> (8 * (j & 3)));
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
            qr[c] = c < K ? (u8)f32_to_e4m3(div_by_scale(In<T>::cvt(xr[c]), scale, rcp)) : (u8)0;
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
    float sc;
    if (amax_bits != 0) {
        sc = scale_from_amax_bits(*amax_bits);
        if (ue8m0) sc = ue8m0_ceil(sc);
    } else {
        sc = *scale;  // static: `scale` is only given (non-null) then
    }
    const float rcp = __frcp_rn(sc);
    for (int row = blockIdx.y; row < M; row += gridDim.y) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            if (s_rows != 0) s_rows[row] = sc;
            if (s_one != 0 && row == 0) s_one[0] = sc;
        }
        const typename In<T>::E* xr = x + (long long)row * K;
        u8* qr = q + (long long)row * ldq;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < ldq; c += gridDim.x * blockDim.x)
            qr[c] = c < K ? (u8)f32_to_e4m3(div_by_scale(In<T>::cvt(xr[c]), sc, rcp)) : (u8)0;
    }
}

#define INSTANTIATE(T, NAME)                                                                    \
    extern "C" __global__ void quant_groups_##NAME(const In<T>::E* x, u8* q, float* s, int M,    \
                                                   int K, int ldq, long long s_row,              \
                                                   long long s_col, int vec, int group,          \
                                                   int ue8m0) {                                  \
        quant_groups<T>(x, q, s, M, K, ldq, s_row, s_col, vec, group, ue8m0);                   \
    }                                                                                           \
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

// Copies rows of `cols` bytes into rows of `ld` bytes, zero-filling columns cols..ld (weight
// padding so every row starts 16-byte aligned).
extern "C" __global__ void pad_rows_u8(const u8* __restrict__ src, u8* __restrict__ dst, int rows,
                                       int cols, int ld) {
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < ld; c += gridDim.x * blockDim.x)
            dst[(long long)r * ld + c] = c < cols ? src[(long long)r * cols + c] : (u8)0;
}
