// Shared device helpers for fp8-linear's NVRTC-compiled kernels. Header-free: no CUDA
// headers are needed, only built-ins and inline PTX.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define E4M3_MAX 448.0f
#define MIN_ABSMAX 1e-10f

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// e4m3fn encoding: round to nearest even, saturate to +-448 (infinities too), NaN -> 0x7f with
// the sign kept. Bit-identical to fp8_linear_core::fp8::f32_to_e4m3.
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    if (x != x) return 0x7fu | sign;
#if __CUDA_ARCH__ >= 890
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
    return (u32)(r & 0xffu);
#else
    float a = fminf(fabsf(x), E4M3_MAX);
    if (a < 0.015625f) return sign | (u32)__float2int_rn(a * 512.0f);
    u32 bits = __float_as_uint(a);
    int e = (int)(bits >> 23) - 127 + 7;
    float scaled = __uint_as_float((bits & 0x7fffffu) | (130u << 23));
    u32 m = (u32)__float2int_rn(scaled) - 8u;
    if (m == 8u) { m = 0u; e += 1; }
    return sign | ((u32)e << 3) | m;
#endif
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

// Loads 4 consecutive elements starting at p (vectorized when `vec`: p 4-element aligned).
template <int T>
__device__ __forceinline__ void load4(const typename In<T>::E* p, bool vec, int valid, float v[4]) {
    if (vec && valid == 4) {
        if (T == 0) {
            float4 f = *reinterpret_cast<const float4*>(p);
            v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
        } else {
            uint2 u = *reinterpret_cast<const uint2*>(p);
            v[0] = In<T>::cvt((typename In<T>::E)(u.x & 0xffffu));
            v[1] = In<T>::cvt((typename In<T>::E)(u.x >> 16));
            v[2] = In<T>::cvt((typename In<T>::E)(u.y & 0xffffu));
            v[3] = In<T>::cvt((typename In<T>::E)(u.y >> 16));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = j < valid ? In<T>::cvt(p[j]) : 0.0f;
    }
}

// |x| as ordered bits: max over these is the absmax, and NaN (bits > 0x7f800000) wins.
__device__ __forceinline__ u32 abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

__device__ __forceinline__ u32 warp_max_u32(u32 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// scale = max(absmax, 1e-10) / 448, NaN when the group held a NaN.
__device__ __forceinline__ float scale_from_amax_bits(u32 amax_bits) {
    float amax = __uint_as_float(amax_bits);
    if (amax_bits > 0x7f800000u) return amax;
    return fmaxf(amax, MIN_ABSMAX) / E4M3_MAX;
}
