// Quantization helpers of fp8-linear's kernels (after ptx.cuh): the weight scale block
// geometry of the block GEMMs, e4m3 encoding, the correctly rounded division by a scale,
// input loads of the three float dtypes, absmax reductions, scales (ue8m0 included) and
// the 1 x G group quantization of 8 values per lane.
#define E4M3_MAX 448.0f
#define MIN_ABSMAX 1e-10f

// The weight scale block of the block GEMMs, (SBN rows along N) x (SBK columns along K):
// 128 x 128 unless the module is compiled with -DSBN=.. -DSBK=.. (sources.rs).
#ifndef SBN
#define SBN 128
#endif
#ifndef SBK
#define SBK 128
#endif

// e4m3fn encoding: round to nearest even, saturate to +-448 (infinities too), NaN -> 0x7f with
// the sign kept. Bit-identical to fp8_linear_core::fp8::f32_to_e4m3 (the hardware
// cvt.rn.satfinite.e4m3x2.f32 is not used: it disagreed with RNE on rare inputs on sm_90).
// Normal range: RNE to 3 mantissa bits as an integer add on the f32 bits, then rebias the
// exponent (127 -> 7); below 2^-6 the spacing is 2^-9: round a * 512 (exact scaling).
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    // Branch-free (both roundings computed, then selected): lanes encoding different
    // ranges do not diverge, and a lane's eight encodings overlap.
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fminf(fabsf(x), E4M3_MAX);  // 448 for NaN (replaced below)
    const u32 ax = __float_as_uint(a);
    const u32 small = (u32)__float2int_rn(a * 512.0f);
    const u32 normal = ((ax + 0x7ffffu + ((ax >> 20) & 1u)) >> 20) - (120u << 3);
    const u32 code = a < 0.015625f ? small : normal;
    return x != x ? (0x7fu | sign) : (sign | code);
}

// x / s, correctly rounded, with r = __frcp_rn(s) computed once per scale: one Markstein
// correction step (q0 = x r, e = x - q0 s exactly by FMA, q = q0 + e r) instead of the
// division routine. Equal to IEEE x / s for every x whose quotient is not far below
// 2^-100 (there the e4m3 code is 0 either way); zero keeps the sign of x.
__device__ __forceinline__ float div_by_scale(float x, float s, float r) {
    const float q0 = __fmul_rn(x, r);
    const float e = fmaf(-q0, s, x);
    const float q = fmaf(e, r, q0);
    return q == 0.0f ? copysignf(0.0f, x) : q;
}

// Input element loads for the three input dtypes (0 = f32, 1 = f16, 2 = bf16).
template <int T> struct In;
template <> struct In<0> {
    typedef float E;
    static __device__ __forceinline__ float cvt(E v) { return v; }
};
template <> struct In<1> {
    typedef u16 E;
    static __device__ __forceinline__ float cvt(E v) { return f16_to_f32(v); }
};
template <> struct In<2> {
    typedef u16 E;
    static __device__ __forceinline__ float cvt(E v) { return bf16_to_f32(v); }
};

// Loads 8 consecutive elements starting at p; 16-byte vector loads when `vec` (p 16-byte
// aligned) and all 8 are valid, else element loads of the `valid` first ones (rest 0).
template <int T>
__device__ __forceinline__ void load8(const typename In<T>::E* p, bool vec, int valid, float v[8]) {
    if (vec && valid == 8) {
        if (T == 0) {
            const float4 a = reinterpret_cast<const float4*>(p)[0];
            const float4 b = reinterpret_cast<const float4*>(p)[1];
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
            const uint4 u = *reinterpret_cast<const uint4*>(p);
            const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[2 * j] = In<T>::cvt((typename In<T>::E)(w[j] & 0xffffu));
                v[2 * j + 1] = In<T>::cvt((typename In<T>::E)(w[j] >> 16));
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = j < valid ? In<T>::cvt(p[j]) : 0.0f;
    }
}

// |x| as ordered bits: max over these is the absmax, and NaN (bits > 0x7f800000) wins.
__device__ __forceinline__ u32 abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

__device__ __forceinline__ u32 warp_max_u32(u32 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Max over each aligned group of `lanes` lanes (a power of two <= 32; every lane of the
// warp must call it).
__device__ __forceinline__ u32 lane_group_max_u32(u32 v, int lanes) {
    for (int o = lanes >> 1; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// scale = max(absmax, 1e-10) / 448, NaN when the group held a NaN.
__device__ __forceinline__ float scale_from_amax_bits(u32 amax_bits) {
    float amax = __uint_as_float(amax_bits);
    if (amax_bits > 0x7f800000u) return amax;
    return fmaxf(amax, MIN_ABSMAX) / E4M3_MAX;
}

// The ue8m0 form of a positive scale: rounded up to a power of two, on the bits (as
// fp8_linear_core::fp8::round_scale_ue8m0). A normal s with mantissa bits becomes the next
// power of two up (exponent fields 1..=253); a positive subnormal becomes 2^-126; zero,
// NaN, infinities, negatives and exponent field 254 are returned unchanged.
__device__ __forceinline__ float ue8m0_ceil(float s) {
    u32 b = __float_as_uint(s);
    const u32 e = (b >> 23) & 0xffu;
    if (b & 0x80000000u) return s;
    if (e == 0) return b != 0 ? __uint_as_float(0x00800000u) : s;
    if (e <= 253 && (b & 0x7fffffu) != 0) b = (b & 0xff800000u) + 0x00800000u;
    return __uint_as_float(b);
}

// Dynamic 1 x G group quantization of 8 values per lane, the group spread over `lanes`
// aligned lanes (a power of two <= 32; every lane of the warp must call it): returns the
// group's scale, max(absmax, 1e-10) / 448 (NaN when the group holds one; rounded up to a
// power of two when `ue8m0`), and the e4m3 codes of x / scale for the `valid` first values
// packed little-endian, 0-3 in lo and 4-7 in hi (codes past `valid` are 0; pass those values
// as 0 so they do not count towards the absmax).
__device__ __forceinline__ float quant_group8(const float v[8], int valid, int lanes, int ue8m0,
                                              u32& lo, u32& hi) {
    u32 m = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) m = max(m, abs_bits(v[j]));
    m = lane_group_max_u32(m, lanes);
    float scale = scale_from_amax_bits(m);
    if (ue8m0) scale = ue8m0_ceil(scale);
    const float rcp = __frcp_rn(scale);
    lo = 0;
    hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 c0 = f32_to_e4m3(div_by_scale(v[j], scale, rcp));
        const u32 c1 = f32_to_e4m3(div_by_scale(v[j + 4], scale, rcp));
        lo |= (j < valid ? c0 : 0u) << (8 * j);
        hi |= (j + 4 < valid ? c1 : 0u) << (8 * j);
    }
    return scale;
}
