// Host replacements for the PTX helpers of cu/common.cuh (the parts under
// `#ifndef FP8_HOST_MODEL`). Include after cuda.h.
#pragma once

inline float f16_to_f32(u16 h) { return h2f(h, 0); }
inline u16 f32_to_bf16(float f) { return (u16)f2h(f, 1); }
inline u16 f32_to_f16(float f) { return (u16)f2h(f, 0); }

// An e4m3fn code as f32 (exact).
inline float e4m3_value(u32 code) {
    const u32 e = (code >> 3) & 0xf, m = code & 7;
    if (e == 15 && m == 7) return NAN;
    const float mag = e == 0 ? std::ldexp((float)m, -9) : std::ldexp(1.0f + m / 8.0f, (int)e - 7);
    return (code & 0x80) ? -mag : mag;
}

// mma.sync m16n8k32 e4m3 x e4m3 -> f32 by the PTX fragment layout: lane (g, t) holds A rows
// g (a0, a2) and g + 8 (a1, a3) at K 4t..4t+3 (a0, a1) and 16 + 4t.. (a2, a3), B column g at
// K 4t.. (b0) and 16 + 4t.. (b1), and the accumulators of rows g / g + 8, columns 2t, 2t + 1.
inline void mma_e4m3(float* c, const u32* a, const u32* b) {
    const u32 mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const WarpExchange& x = warp_post(mine, 6);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float r[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = c[i];
        for (int kk = 0; kk < 32; kk++) {
            const int hi = kk >= 16, q = (kk % 16) / 4, byte = kk % 4;
            const u32 aw = x.w[(row % 8) * 4 + q][(row >= 8) + 2 * hi];
            const u32 bw = x.w[col * 4 + q][4 + hi];
            sum += e4m3_value((aw >> (8 * byte)) & 0xff) * e4m3_value((bw >> (8 * byte)) & 0xff);
        }
        r[i] = sum;
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) c[i] = r[i];
}
