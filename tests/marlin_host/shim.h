// The CUDA environment of cu/marlin.cu on a CPU, for the host model of the kernel
// (tests/tests/marlin_host_model.rs): one OS thread per CUDA thread, blocks run one after
// another, __syncthreads is a barrier of the block's threads, mma.sync a warp collective
// through an exchange buffer, cp.async an immediate copy. The kernel file's device
// primitives section is replaced by the functions below; the rest of it compiles as is.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>

using std::min;

struct Dim3 {
    unsigned x, y, z;
};
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 gridDim, blockDim;

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(threads, blocks)
#define __align__(n) alignas(n)

// The dynamic shared memory of the running block (the kernel's `extern __shared__ U4 smem[]`
// becomes `extern U4 smem[]`), 227 KiB like an H100's opt-in limit.
alignas(16) inline unsigned char host_smem[232448];

inline std::barrier<>* block_barrier = nullptr;
inline std::barrier<>* warp_barrier[32] = {};

inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

// 16-bit float bits <-> f32, round to nearest even.
inline float h2f(unsigned bits, int bf16) {
    if (bf16) {
        const uint32_t u = bits << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    const uint16_t b = (uint16_t)bits;
    std::memcpy(&h, &b, 2);
    return (float)h;
}

inline unsigned f2h(float f, int bf16) {
    if (bf16) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if (std::isnan(f)) return 0x7fc0;
        u += 0x7fff + ((u >> 16) & 1);
        return u >> 16;
    }
    const _Float16 h = (_Float16)f;
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

// A warp's mma operands, exchanged so that each lane computes its own accumulators.
struct MmaExchange {
    unsigned a[32][4];
    unsigned b[32][2];
};
inline MmaExchange mma_exchange[32];
