// Host replacements for the PTX helpers of cu/block_gemm.cu (the part under
// `#ifndef FP8_HOST_MODEL`). Include after cuda.h and common.h.
#pragma once

inline u32 smem_u32(const void* p) { return (u32)((const unsigned char*)p - host_smem); }

inline void cp_async16(u32 dst, const void* src, int src_bytes) {
    host_cp_async(dst, src, (u32)src_bytes, 16);
}
// rcp.approx.ftz.f32 (within 1 ulp on the GPU; exact division here).
inline float rcp_approx(float x) { return 1.0f / x; }
inline void cp_async_commit() { host_cp_commit(); }
template <int N>
inline void cp_async_wait() {
    host_cp_wait(N);
}

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
