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

// e4m3fn encoding: round to nearest even, saturate to +-448 (infinities too), NaN -> 0x7f
// whatever its sign (as the hardware conversion). Bit-identical to fp8_linear_core::fp8::f32_to_e4m3; the definition of the
// encoding on the GPU, which e4m3x2 below replaces by the hardware conversion where there is
// one. Normal range: RNE to 3 mantissa bits as an integer add on the f32 bits, then rebias
// the exponent (127 -> 7); below 2^-6 the spacing is 2^-9: round a * 512 (exact scaling).
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    // Branch-free (both roundings computed, then selected): lanes encoding different
    // ranges do not diverge, and a lane's eight encodings overlap.
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fminf(fabsf(x), E4M3_MAX);  // 448 for NaN (replaced below)
    const u32 ax = __float_as_uint(a);
    const u32 small = (u32)__float2int_rn(a * 512.0f);
    const u32 normal = ((ax + 0x7ffffu + ((ax >> 20) & 1u)) >> 20) - (120u << 3);
    const u32 code = a < 0.015625f ? small : normal;
    return x != x ? 0x7fu : (sign | code);
}

// The e4m3 codes of hi and lo, packed as hi << 8 | lo. On sm_89 and newer one hardware
// conversion (cvt.rn.satfinite.e4m3x2.f32: round to nearest even, saturating), equal to
// f32_to_e4m3 on every f32 (tests/tests/gpu_quant.rs runs all 2^32, NaNs included: 0x7f); before sm_89 and in the host models, f32_to_e4m3.
__device__ __forceinline__ u32 e4m3x2(float hi, float lo) {
#if defined(FP8_HOST_MODEL) || __CUDA_ARCH__ < 890
    return (f32_to_e4m3(hi) << 8) | f32_to_e4m3(lo);
#else
    return cvt_e4m3x2(hi, lo);
#endif
}

// The e4m3 code of one value.
__device__ __forceinline__ u32 e4m3(float x) { return e4m3x2(0.0f, x) & 0xffu; }

// x / s, correctly rounded, with r = __frcp_rn(s) computed once per scale: one Markstein
// correction step (q0 = x r, e = q0 s - x exactly by FMA, q = q0 - e r) instead of the
// division routine: three FMA-pipe instructions. Equal to IEEE x / s for every x whose
// quotient is not far below 2^-100 (there the e4m3 code is 0 either way). The residual is
// taken as q0 s - x, not x - q0 s, so that q keeps the sign of x when it is zero: a zero
// residual is +0 and q0 + (-0) is q0, either signed zero.
__device__ __forceinline__ float div_by_scale(float x, float s, float r) {
    const float q0 = __fmul_rn(x, r);
    const float e = fmaf(q0, s, -x);
    // A non-finite residual (x infinite, s infinite, or x * r overflowing): the IEEE
    // division, as the CPU quantizer divides (inf / s = inf, x / inf = 0).
    if ((__float_as_uint(e) & 0x7f800000u) == 0x7f800000u) return __fdiv_rn(x, s);
    return fmaf(-e, r, q0);
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

// scale = max(absmax, 1e-10) / 448, NaN when the group held a NaN, infinity when it held
// one. The division by 448 is div_by_scale with the correctly rounded 1 / 448: equal to
// IEEE division on every finite absmax >= 1e-10 (all 1.35e9 of them checked on the CPU).
__device__ __forceinline__ float scale_from_amax_bits(u32 amax_bits) {
    const float amax = __uint_as_float(amax_bits);
    if (amax_bits >= 0x7f800000u) return amax;
    return div_by_scale(fmaxf(amax, MIN_ABSMAX), E4M3_MAX, 0x1.24924ap-9f);
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

// A group's scale from the f32 bits of its absmax: max(absmax, 1e-10) / 448 (NaN when the
// group held one), rounded up to a power of two when `ue8m0`.
__device__ __forceinline__ float group_scale_of(u32 amax_bits, int ue8m0) {
    const float scale = scale_from_amax_bits(amax_bits);
    return ue8m0 ? ue8m0_ceil(scale) : scale;
}

// The e4m3 codes of v[0..8] / scale (`rcp` = __frcp_rn(scale)), packed little-endian: 0-3
// in lo, 4-7 in hi; codes past `valid` are 0.
__device__ __forceinline__ void encode8(const float v[8], float scale, float rcp, int valid,
                                        u32& lo, u32& hi) {
    u32 p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        p[j] = e4m3x2(div_by_scale(v[2 * j + 1], scale, rcp), div_by_scale(v[2 * j], scale, rcp));
    lo = p[0] | (p[1] << 16);
    hi = p[2] | (p[3] << 16);
    if (valid < 8) {
        lo &= valid >= 4 ? 0xffffffffu : (1u << (8 * valid)) - 1u;
        hi &= valid <= 4 ? 0u : (1u << (8 * (valid - 4))) - 1u;
    }
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
    const float scale = group_scale_of(m, ue8m0);
    encode8(v, scale, __frcp_rn(scale), valid, lo, hi);
    return scale;
}

// Eight consecutive input elements as the quantization kernel holds them: the raw words
// (16-bit input: 4 words, two elements each, low half first; f32: 8 words), with the
// reductions and conversions of its dtype.
template <int T> struct Chunk8;
template <> struct Chunk8<0> {
    u32 w[8];
    // Loads p[0..valid) (the rest 0): two 16-byte loads when `vec` and valid == 8 (streamed
    // when STREAM, as for 16-bit input).
    template <bool STREAM = false>
    __device__ __forceinline__ void load(const float* p, bool vec, int valid) {
        if (vec && valid == 8) {
            const u8* pb = reinterpret_cast<const u8*>(p);
            const uint4 a = STREAM ? ldg_stream(pb) : reinterpret_cast<const uint4*>(p)[0];
            const uint4 b = STREAM ? ldg_stream(pb + 16) : reinterpret_cast<const uint4*>(p)[1];
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) w[j] = j < valid ? __float_as_uint(p[j]) : 0u;
        }
    }
    // The largest |x| bits (NaN above infinity), to be combined over lanes by `combine`.
    __device__ __forceinline__ u32 partial_max() const {
        u32 m = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) m = max(m, abs_bits(__uint_as_float(w[j])));
        return m;
    }
    static __device__ __forceinline__ u32 combine(u32 a, u32 b) { return max(a, b); }
    // The f32 bits of the absmax of a combined partial.
    static __device__ __forceinline__ u32 amax_bits(u32 m) { return m; }
    __device__ __forceinline__ void floats(float v[8]) const {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __uint_as_float(w[j]);
    }
};
// bf16 (BF = 1) and f16 (BF = 0): the magnitude bits of both order as unsigned 16-bit
// integers (NaN above infinity), so the absmax is a per-half unsigned maximum of the words.
template <int BF> struct Chunk8x16 {
    u32 w[4];
    // Loads p[0..valid) (the rest 0): one 16-byte load when `vec` and valid == 8, streamed
    // (ldg_stream: no L1 allocation, the 256 bytes around it prefetched into L2) when STREAM.
    template <bool STREAM = false>
    __device__ __forceinline__ void load(const u16* p, bool vec, int valid) {
        if (vec && valid == 8) {
            const uint4 a = STREAM ? ldg_stream(reinterpret_cast<const u8*>(p))
                                   : *reinterpret_cast<const uint4*>(p);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const u32 l = 2 * j < valid ? (u32)p[2 * j] : 0u;
                const u32 h = 2 * j + 1 < valid ? (u32)p[2 * j + 1] : 0u;
                w[j] = l | (h << 16);
            }
        }
    }
    __device__ __forceinline__ u32 partial_max() const {
        const u32 m = 0x7fff7fffu;
        return max_u16x2(max_u16x2(w[0] & m, w[1] & m), max_u16x2(w[2] & m, w[3] & m));
    }
    static __device__ __forceinline__ u32 combine(u32 a, u32 b) { return max_u16x2(a, b); }
    static __device__ __forceinline__ u32 amax_bits(u32 m) {
        const u32 h = max(m & 0xffffu, m >> 16);
        return BF ? h << 16 : __float_as_uint(f16_to_f32((u16)h));
    }
    __device__ __forceinline__ void floats(float v[8]) const {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (BF) {
                v[2 * j] = __uint_as_float(w[j] << 16);
                v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
            } else {
                v[2 * j] = f16_to_f32((u16)(w[j] & 0xffffu));
                v[2 * j + 1] = f16_to_f32((u16)(w[j] >> 16));
            }
        }
    }
};
template <> struct Chunk8<1> : Chunk8x16<0> {};
template <> struct Chunk8<2> : Chunk8x16<1> {};
