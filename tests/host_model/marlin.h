// Host replacements for the PTX helpers of cu/marlin.cu (the part under
// `#ifndef FP8_HOST_MODEL`). Include after cuda.h.
#pragma once

// The 16-bit product of fma.rn.{bf16,f16}x2 with a -0 addend: each half rounded once (the
// f32 product of two 16-bit floats is exact).
template <int BF16>
inline u32 mul2(u32 a, u32 b) {
    const u32 lo = f2h(h2f(a & 0xffffu, BF16) * h2f(b & 0xffffu, BF16), BF16);
    const u32 hi = f2h(h2f(a >> 16, BF16) * h2f(b >> 16, BF16), BF16);
    return lo | (hi << 16);
}

// mma.sync m16n8k16 row.col with f32 accumulators, by the PTX fragment layout: lane (g, t)
// holds A rows g (a0, a2) and g + 8 (a1, a3) at K 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9
// (a2, a3), B column g at K 2t.. (b0) and 2t + 8.. (b1), and the accumulators of rows g /
// g + 8, columns 2t, 2t + 1.
template <int BF16>
inline void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    const u32 mine[6] = {a0, a1, a2, a3, b0, b1};
    const WarpExchange& x = warp_post(mine, 6);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float r[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = c[i];
        for (int kk = 0; kk < 16; kk++) {
            const u32 aw = x.w[(row % 8) * 4 + (kk % 8) / 2][(row >= 8) + 2 * (kk >= 8)];
            const u32 bw = x.w[col * 4 + (kk % 8) / 2][4 + (kk >= 8)];
            const int sh = 16 * (kk & 1);
            sum += h2f((aw >> sh) & 0xffffu, BF16) * h2f((bw >> sh) & 0xffffu, BF16);
        }
        r[i] = sum;
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) c[i] = r[i];
}

inline void st_cg(float* p, float v) { *p = v; }
inline float ld_cg(const float* p) { return *p; }

template <int BF16>
inline u16 to16(float v) {
    return (u16)f2h(v, BF16);
}

inline u32 smem_addr(const void* p) { return (u32)((const unsigned char*)p - host_smem); }

inline void cp16(u32 dst, const void* src, u32 src_bytes) { host_cp_async(dst, src, src_bytes, 16); }
inline void cp8(u32 dst, const void* src, u32 src_bytes) { host_cp_async(dst, src, src_bytes, 8); }
inline void cp4(u32 dst, const void* src, u32 src_bytes) { host_cp_async(dst, src, src_bytes, 4); }
inline void cp_commit() { host_cp_commit(); }
inline void cp_wait(int n) { host_cp_wait(n); }
