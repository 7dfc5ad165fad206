// Host replacements for the PTX wrappers of cu/ptx.cuh, cu/wgmma.cuh and cu/hopper_gemm.cu
// (their parts under `#ifndef FP8_HOST_MODEL`), one for each wrapper a host-modelled kernel
// calls (quant, block_gemm, decode_gemm, marlin, hopper_gemm; clusters of CTAs are not
// modelled: their wrappers trap). Include after cuda.h.
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

// ---- mbarriers -------------------------------------------------------------------------
// A barrier's state beside the host model's shared memory (the 8 bytes at its address are
// not used), all of them under one lock: expected arrivals, arrivals still pending, the
// transaction bytes still expected, and the phase. A phase completes when no arrival and no
// byte is pending; the next one then expects `count` arrivals again.
struct HostMbar {
    u32 count, pending, phase;
    long long tx;
};
inline HostMbar host_mbars[sizeof(host_smem) / 8];
inline std::mutex host_mbar_lock;

inline HostMbar& host_mbar(u32 bar) {
    if (bar % 8 || bar >= sizeof(host_smem)) __builtin_trap();
    return host_mbars[bar / 8];
}
inline void host_mbar_settle(HostMbar& b) {
    if (b.pending == 0 && b.tx == 0) {
        b.phase ^= 1;
        b.pending = b.count;
    }
}
inline void host_mbar_arrive(u32 bar, long long tx) {
    std::lock_guard<std::mutex> g(host_mbar_lock);
    HostMbar& b = host_mbar(bar);
    if (b.pending == 0) __builtin_trap();  // more arrivals than the phase expects
    b.tx += tx;
    b.pending--;
    host_mbar_settle(b);
}
inline void host_mbar_complete_tx(u32 bar, long long bytes) {
    std::lock_guard<std::mutex> g(host_mbar_lock);
    HostMbar& b = host_mbar(bar);
    b.tx -= bytes;
    host_mbar_settle(b);
}

inline void mbar_init(u32 bar, u32 count) {
    std::lock_guard<std::mutex> g(host_mbar_lock);
    host_mbar(bar) = HostMbar{count, count, 0, 0};
}
inline void fence_mbarrier_init() {}
inline void mbar_expect_tx(u32 bar, u32 bytes) { host_mbar_arrive(bar, bytes); }
inline void mbar_arrive_if(u32 bar, bool p) {
    if (p) host_mbar_arrive(bar, 0);
}
inline void mbar_arrive_cluster_if(u32, bool) { __builtin_trap(); }
// try_wait.parity: the phase of parity `parity` has completed when the current phase's
// parity differs (the phase before the first counts as completed).
inline void mbar_wait(u32 bar, u32 parity) {
    for (;;) {
        {
            std::lock_guard<std::mutex> g(host_mbar_lock);
            if ((host_mbar(bar).phase & 1) != (parity & 1)) return;
        }
        std::this_thread::yield();
    }
}
// cp.async.mbarrier.arrive.noinc: arrives once this thread's copies have landed.
inline void cp_async_arrive(u32 bar) {
    host_cp_land_all();
    host_mbar_arrive(bar, 0);
}

// ---- TMA (cu/hopper_gemm.cu) ------------------------------------------------------------
// The host model's tensor map, in the first words of the kernel's opaque TmaDesc: the global
// address, the row length in bytes (columns past it read as zero), the rows (rows past them
// read as zero), the row stride in bytes and the box's rows; boxes are 128 bytes wide and
// land 128-byte swizzled, as the kernel's maps ask.
struct TmaDesc;
inline void tma_load_2d(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1) {
    const u64* m = reinterpret_cast<const u64*>(map);
    const unsigned char* base = reinterpret_cast<const unsigned char*>(m[0]);
    const long long cols = (long long)m[1], rows = (long long)m[2], stride = (long long)m[3];
    const int box_rows = (int)m[4];
    if (dst % 1024 || dst + 128 * box_rows > sizeof(host_smem)) __builtin_trap();
    for (int r = 0; r < box_rows; r++)
        for (int x = 0; x < 128; x++) {
            const long long row = c1 + r, col = c0 + x;
            const unsigned char v = row < rows && col < cols ? base[row * stride + col] : 0;
            const u32 at = dst + r * 128 + x;
            host_smem[at ^ (((at >> 7) & 7) << 4)] = v;
        }
    host_mbar_complete_tx(bar, 128 * box_rows);
}
inline void tma_load_2d_mc(u32, const TmaDesc*, u32, int, int, u16) { __builtin_trap(); }
inline void prefetch_tensormap(const TmaDesc*) {}

// ---- clusters: not modelled -------------------------------------------------------------
inline u32 cluster_rank() { return 0; }
inline void cluster_sync() { __builtin_trap(); }
inline u32 peer_addr(u32, u32) {
    __builtin_trap();
    return 0;
}

// ---- shared-memory vectors, register reallocation ---------------------------------------
inline void st_shared_v2(u32 at, float a, float b) {
    if (at % 8 || at + 8 > sizeof(host_smem)) __builtin_trap();
    std::memcpy(host_smem + at, &a, 4);
    std::memcpy(host_smem + at + 4, &b, 4);
}
inline void st_shared_u32(u32 at, u32 v) {
    if (at % 4 || at + 4 > sizeof(host_smem)) __builtin_trap();
    std::memcpy(host_smem + at, &v, 4);
}
inline uint4 ld_shared_v4(u32 at) {
    if (at % 16 || at + 16 > sizeof(host_smem)) __builtin_trap();
    uint4 x;
    std::memcpy(&x, host_smem + at, 16);
    return x;
}
template <int R>
inline void setmaxnreg_inc() {}
template <int R>
inline void setmaxnreg_dec() {}

// ---- wgmma (cu/wgmma.cuh) ---------------------------------------------------------------
// An MMA runs whole when issued (the latest a GPU may run it is its wait, and nothing here
// writes its operands between the two), so the fences, commits and waits have nothing to do.
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N>
inline void wgmma_wait() {}
inline void wgmma_wait0() {}
inline void wgmma_wait1() {}

// The e4m3 code at column k of row n of a K-major shared-memory operand of descriptor `desc`
// (128-byte swizzle only: 8-row groups SBO bytes apart, rows 128 bytes apart, the 16-byte
// chunk of each byte address XORed with the address's row within its 1024-byte atom).
inline u32 host_desc_code(u64 desc, int n, int k) {
    if ((desc >> 62) != 1) __builtin_trap();  // 128-byte swizzle
    const u32 start = (u32)(desc & 0x3fff) << 4, sbo = (u32)((desc >> 32) & 0x3fff) << 4;
    const u32 addr = start + (n / 8) * sbo + (n % 8) * 128 + k;
    const u32 at = addr ^ (((addr >> 7) & 7) << 4);
    if (at >= sizeof(host_smem)) __builtin_trap();
    return host_smem[at];
}

// wgmma.mma_async m64nNk32 e4m3 x e4m3 -> f32 with both operands in shared memory: thread
// t = 32 w + 4 g + q of the warpgroup computes its d[4 j + e], row 16 w + g (+ 8 for e >= 2),
// column 8 j + 2 q + (e & 1), of A [64, 32] and B [N, 32] from their descriptors; `acc` 0:
// d = A * B.
// (The thread's two rows of A are read once per call; codes decode through a table.)
inline const float* host_e4m3_table() {
    static const std::vector<float> t = [] {
        std::vector<float> v(256);
        for (u32 c = 0; c < 256; c++) v[c] = e4m3_value(c);
        return v;
    }();
    return t.data();
}
template <int N>
struct Wgmma {
    static void mma(float* d, u64 da, u64 db, int acc) {
        const float* e4 = host_e4m3_table();
        const int t = threadIdx.x & 127, w = t >> 5, g = (t & 31) >> 2, q = t & 3;
        float a[2][32];
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 32; k++) a[h][k] = e4[host_desc_code(da, 16 * w + g + 8 * h, k)];
        for (int j = 0; j < N / 8; j++)
            for (int c = 0; c < 2; c++) {
                const int col = 8 * j + 2 * q + c;
                float bcol[32];
                for (int k = 0; k < 32; k++) bcol[k] = e4[host_desc_code(db, col, k)];
                for (int h = 0; h < 2; h++) {
                    float sum = acc ? d[4 * j + 2 * h + c] : 0.0f;
                    for (int k = 0; k < 32; k++) sum += a[h][k] * bcol[k];
                    d[4 * j + 2 * h + c] = sum;
                }
            }
    }
};
