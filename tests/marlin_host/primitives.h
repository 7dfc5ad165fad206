// Host replacements for the device primitives section of cu/marlin.cu (spliced in its
// place by tests/tests/marlin_host_model.rs; shim.h is included first).

// The 16-bit product of fma.rn.{bf16,f16}x2 with a -0 addend: each half rounded once (the
// f32 product of two 16-bit floats is exact).
template <int BF16>
inline u32 mul2(u32 a, u32 b) {
    const u32 lo = f2h(h2f(a & 0xffffu, BF16) * h2f(b & 0xffffu, BF16), BF16);
    const u32 hi = f2h(h2f(a >> 16, BF16) * h2f(b >> 16, BF16), BF16);
    return lo | (hi << 16);
}

// mma.sync m16n8k16 row.col with f32 accumulators, by the PTX fragment layout: every lane
// posts its fragments, then computes its own four accumulators from the warp's.
template <int BF16>
inline void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    MmaExchange& x = mma_exchange[warp];
    x.a[lane][0] = a0;
    x.a[lane][1] = a1;
    x.a[lane][2] = a2;
    x.a[lane][3] = a3;
    x.b[lane][0] = b0;
    x.b[lane][1] = b1;
    warp_barrier[warp]->arrive_and_wait();
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = c[i];
        for (int kk = 0; kk < 16; kk++) {
            const unsigned aw = x.a[(row % 8) * 4 + (kk % 8) / 2][(row >= 8) + 2 * (kk >= 8)];
            const unsigned bw = x.b[col * 4 + (kk % 8) / 2][kk >= 8];
            const int sh = 16 * (kk & 1);
            sum += h2f((aw >> sh) & 0xffffu, BF16) * h2f((bw >> sh) & 0xffffu, BF16);
        }
        c[i] = sum;
    }
    warp_barrier[warp]->arrive_and_wait();
}

inline void st_cg(float* p, float v) { *p = v; }
inline float ld_cg(const float* p) { return *p; }

template <int BF16>
inline u16 to16(float v) {
    return (u16)f2h(v, BF16);
}

inline u32 smem_addr(const void* p) {
    return (u32)((const unsigned char*)p - host_smem);
}

// cp.async: the copies of a thread's committed groups land when cp_wait lets them (the
// latest a GPU may land them), the zero fill included.
struct PendingCopy {
    u32 dst;
    const void* src;
    u32 bytes, size;
};
inline thread_local PendingCopy pending[16][48];
inline thread_local int pending_count[16];
inline thread_local int groups_open = 0, groups_done = 0, open_count = 0;

inline void cp_async(u32 dst, const void* src, u32 src_bytes, u32 size) {
    if (src_bytes > size || dst + size > sizeof(host_smem) || open_count == 48) __builtin_trap();
    pending[groups_open % 16][open_count++] = PendingCopy{dst, src, src_bytes, size};
}
inline void cp16(u32 dst, const void* src, u32 src_bytes) { cp_async(dst, src, src_bytes, 16); }
inline void cp8(u32 dst, const void* src, u32 src_bytes) { cp_async(dst, src, src_bytes, 8); }
inline void cp4(u32 dst, const void* src, u32 src_bytes) { cp_async(dst, src, src_bytes, 4); }

inline void cp_commit() {
    if (groups_open - groups_done == 15) __builtin_trap();
    pending_count[groups_open % 16] = open_count;
    groups_open++;
    open_count = 0;
}

inline void cp_wait(int n) {
    while (groups_open - groups_done > n) {
        const int gi = groups_done % 16;
        for (int i = 0; i < pending_count[gi]; i++) {
            const PendingCopy& c = pending[gi][i];
            if (c.bytes) std::memcpy(host_smem + c.dst, c.src, c.bytes);
            std::memset(host_smem + c.dst + c.bytes, 0, c.size - c.bytes);
        }
        groups_done++;
    }
}
