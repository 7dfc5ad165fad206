// Host replacements for the PTX wrappers of cu/ptx.cuh (the part under
// `#ifndef FP8_HOST_MODEL`), one for each wrapper a host-modelled kernel calls (quant,
// block_gemm, decode_gemm, marlin; the Hopper-only mbarrier wrappers have none: no host model
// runs them). Include after cuda.h.
#pragma once

// ---- conversions and arithmetic -------------------------------------------------------
inline float f16_to_f32(u16 h) { return h2f(h, 0); }
inline u16 f32_to_bf16(float f) { return (u16)f2h(f, 1); }
inline u16 f32_to_f16(float f) { return (u16)f2h(f, 0); }

// rcp.approx.ftz.f32 (within 1 ulp on the GPU; exact division here).
inline float rcp_approx(float x) { return 1.0f / x; }

// max.u16x2: the unsigned maximum of each 16-bit half.
inline u32 max_u16x2(u32 a, u32 b) {
    return std::max(a & 0xffff0000u, b & 0xffff0000u) | std::max(a & 0xffffu, b & 0xffffu);
}

// The 16-bit product of fma.rn.{bf16,f16}x2 with a -0 addend: each half rounded once (the
// f32 product of two 16-bit floats is exact).
template <int BF16>
inline u32 mul2(u32 a, u32 b) {
    const u32 lo = f2h(h2f(a & 0xffffu, BF16) * h2f(b & 0xffffu, BF16), BF16);
    const u32 hi = f2h(h2f(a >> 16, BF16) * h2f(b >> 16, BF16), BF16);
    return lo | (hi << 16);
}

// ---- addresses and cp.async -------------------------------------------------------------
// A shared-memory address is the offset into the host model's shared memory.
inline u32 smem_u32(const void* p) { return (u32)((const unsigned char*)p - host_smem); }

inline void cp_async16(u32 dst, const void* src, u32 src_bytes) {
    host_cp_async(dst, src, src_bytes, 16);
}
inline void cp_async8(u32 dst, const void* src, u32 src_bytes) {
    host_cp_async(dst, src, src_bytes, 8);
}
inline void cp_async4(u32 dst, const void* src, u32 src_bytes) {
    host_cp_async(dst, src, src_bytes, 4);
}
inline void cp_async_commit() { host_cp_commit(); }
template <int N>
inline void cp_async_wait() {
    host_cp_wait(N);
}

// ---- cache-hinted global loads and stores: plain ones here ------------------------------
inline uint4 ldg_stream(const u8* p) {
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
}
inline void st_cg(float* p, float v) { *p = v; }
inline float ld_cg(const float* p) { return *p; }

// ---- warp-wide matrix loads and MMAs ----------------------------------------------------
// ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8i..8i+7 give the row addresses of matrix i; lane
// l receives, of each matrix, the 4 bytes of row l / 4 at byte 4 * (l % 4).
inline void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    const int lane = threadIdx.x & 31;
    const WarpExchange& x = warp_post(&addr, 1);
    u32 r[4];
    for (int i = 0; i < 4; i++) {
        const u32 row = x.w[8 * i + lane / 4][0];
        if (row % 16) __builtin_trap();  // row addresses must be 16-byte aligned
        if (row + 4 * (lane % 4) + 4 > sizeof(host_smem)) __builtin_trap();
        std::memcpy(&r[i], host_smem + row + 4 * (lane % 4), 4);
    }
    __syncwarp();
    r0 = r[0];
    r1 = r[1];
    r2 = r[2];
    r3 = r[3];
}

// An e4m3fn code as f32 (exact).
inline float e4m3_value(u32 code) {
    const u32 e = (code >> 3) & 0xf, m = code & 7;
    if (e == 15 && m == 7) return NAN;
    const float mag = e == 0 ? std::ldexp((float)m, -9) : std::ldexp(1.0f + m / 8.0f, (int)e - 7);
    return (code & 0x80) ? -mag : mag;
}

// The two mma.sync shapes by the PTX fragment layout: lane (g, t) holds A rows g (a0, a2)
// and g + 8 (a1, a3), B column g, and the accumulators of rows g / g + 8, columns 2t, 2t + 1.
// An A or B register holds 4 e4m3 codes (m16n8k32) or 2 16-bit floats (m16n8k16): register
// pair (a0, a2) covers K 0..KK / 2 - 1 and KK / 2.. of the lane's slice (b0, b1 likewise), the
// lane's slice of each half being `per` = 4 (FP8) or 2 (16-bit) consecutive K from per * t.
// `value(word, i)` is element i of a register.
template <int KK, typename V>
inline void host_mma(float* c, const u32 (&mine)[6], V value) {
    const WarpExchange& x = warp_post(mine, 6);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int per = KK / 8;  // elements per register
    float r[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = c[i];
        for (int kk = 0; kk < KK; kk++) {
            const int hi = kk >= KK / 2, q = (kk % (KK / 2)) / per, e = kk % per;
            const u32 aw = x.w[(row % 8) * 4 + q][(row >= 8) + 2 * hi];
            const u32 bw = x.w[col * 4 + q][4 + hi];
            sum += value(aw, e) * value(bw, e);
        }
        r[i] = sum;
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) c[i] = r[i];
}

// mma.sync m16n8k32 e4m3 x e4m3 -> f32: lane (g, t) holds K 4t..4t+3 (a0, a1, b0) and
// 16 + 4t.. (a2, a3, b1).
inline void mma_e4m3(float* c, const u32* a, const u32* b) {
    const u32 mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    host_mma<32>(c, mine, [](u32 w, int e) { return e4m3_value((w >> (8 * e)) & 0xff); });
}

// mma.sync m16n8k16 row.col, bf16 or f16 -> f32: lane (g, t) holds K 2t, 2t + 1 (a0, a1, b0)
// and 2t + 8, 2t + 9 (a2, a3, b1).
template <int BF16>
inline void mma_m16n8k16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    const u32 mine[6] = {a0, a1, a2, a3, b0, b1};
    host_mma<16>(c, mine, [](u32 w, int e) { return h2f((w >> (16 * e)) & 0xffffu, BF16); });
}
