// The CUDA environment of this project's kernels on a CPU, for the host models of the
// kernels (tests/src/host_model.rs): one OS thread per CUDA thread, the blocks of a grid run
// one after another (in an order the driver chooses), __syncthreads a barrier of the block's
// threads, warp collectives (mma.sync, ldmatrix, shuffles) through a per-warp exchange
// buffer, cp.async copies that land at the wait_group that covers them (the latest a GPU
// may land them). A kernel module is compiled with -DFP8_HOST_MODEL, which drops the PTX
// wrappers of its cu/ptx.cuh (replaced by ptx.h of this folder); the rest compiles as is.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

using std::max;
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
#define __restrict__ __restrict
#define __grid_constant__
#define __cluster_dims__(x, y, z)

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}

// Cache-hinted loads and stores are plain ones here.
template <typename T>
inline T __ldg(const T* p) {
    return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
    return *p;
}
template <typename T>
inline void __stcg(T* p, T v) {
    *p = v;
}

// The dynamic shared memory of the running block (the driver substitutes it for the
// kernel's `extern __shared__` array), 227 KiB like an H100's opt-in limit.
alignas(128) inline unsigned char host_smem[232448];

inline std::barrier<>* block_barrier = nullptr;
inline std::barrier<>* warp_barrier[32] = {};

inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline void __syncwarp() { warp_barrier[threadIdx.x >> 5]->arrive_and_wait(); }
// Programmatic dependent launch: the host model runs one kernel at a time.
inline void griddep_launch_dependents() {}
inline void griddep_wait() {}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_SEQ_CST)) {
    }
    return old;
}
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

inline float __uint_as_float(u32 u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline u32 __float_as_uint(float f) {
    u32 u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }
inline float __frcp_rn(float f) { return 1.0f / f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

// 16-bit float bits <-> f32, round to nearest even.
inline float h2f(unsigned bits, int bf16) {
    if (bf16) return __uint_as_float(bits << 16);
    _Float16 h;
    const uint16_t b = (uint16_t)bits;
    std::memcpy(&h, &b, 2);
    return (float)h;
}

inline unsigned f2h(float f, int bf16) {
    if (bf16) {
        uint32_t u = __float_as_uint(f);
        if (std::isnan(f)) return 0x7fc0;
        u += 0x7fff + ((u >> 16) & 1);
        return u >> 16;
    }
    const _Float16 h = (_Float16)f;
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

// A warp's exchange buffer for its collectives: each lane posts its words, the warp meets,
// each lane reads what it needs, the warp meets again.
struct WarpExchange {
    u32 w[32][8];
};
inline WarpExchange warp_exchange[32];

// Posts this lane's `count` words and meets its warp: the warp's words are then in the
// returned buffer until the lane calls __syncwarp() again.
inline WarpExchange& warp_post(const u32* words, int count) {
    WarpExchange& x = warp_exchange[threadIdx.x >> 5];
    for (int i = 0; i < count; i++) x.w[threadIdx.x & 31][i] = words[i];
    __syncwarp();
    return x;
}

inline u32 __shfl_xor_sync(unsigned, u32 v, int o) {
    const u32 r = warp_post(&v, 1).w[(threadIdx.x & 31) ^ o][0];
    __syncwarp();
    return r;
}

// shfl.sync.idx: every lane gets lane `src`'s value.
inline u32 __shfl_sync(unsigned, u32 v, int src) {
    const u32 r = warp_post(&v, 1).w[src & 31][0];
    __syncwarp();
    return r;
}

// shfl.sync.up: lane l gets lane l - d's value, lanes below d their own.
inline u32 __shfl_up_sync(unsigned, u32 v, int d) {
    const int l = threadIdx.x & 31;
    const u32 r = warp_post(&v, 1).w[l >= d ? l - d : l][0];
    __syncwarp();
    return r;
}

// cp.async: a thread's copies wait in its open group until committed, and land when
// cp_wait lets their group go (zero fill included), or all at once before the thread's
// mbarrier arrival on their completion (host_cp_land_all).
struct PendingCopy {
    u32 dst;
    const void* src;
    u32 bytes, size;
};
inline thread_local PendingCopy pending[16][64];
inline thread_local int pending_count[16];
inline thread_local int groups_open = 0, groups_done = 0, open_count = 0;

inline void host_cp_async(u32 dst, const void* src, u32 src_bytes, u32 size) {
    if (src_bytes > size || dst + size > sizeof(host_smem) || open_count == 64) __builtin_trap();
    pending[groups_open % 16][open_count++] = PendingCopy{dst, src, src_bytes, size};
}

inline void host_cp_commit() {
    if (groups_open - groups_done == 15) __builtin_trap();
    pending_count[groups_open % 16] = open_count;
    groups_open++;
    open_count = 0;
}

inline void host_cp_wait(int n) {
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

// Lands every copy of this thread, committed or not (cp.async.mbarrier.arrive).
inline void host_cp_land_all() {
    host_cp_commit();
    host_cp_wait(0);
}

// Runs `kernel` (a callable run by every thread) over a grid of `threads`-thread blocks, the
// blocks in grid order (order 0), reversed (1) or shuffled (2 and up). One block at a time:
// the orders find a result that depends on which block runs first, but no race between
// blocks (a block's global stores are all done before the next starts), so cross-block
// ordering (fences, counters) is left to the GPU and compute-sanitizer.
template <typename F>
void run_grid(Dim3 grid, unsigned threads, int order, F kernel) {
    gridDim = grid;
    blockDim = Dim3{threads, 1, 1};
    std::barrier<> block(threads);
    block_barrier = &block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned i = 0; i < (threads + 31) / 32; i++) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        warp_barrier[i] = warps.back().get();
    }
    std::vector<Dim3> blocks;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) blocks.push_back(Dim3{x, y, z});
    if (order == 1) std::reverse(blocks.begin(), blocks.end());
    if (order >= 2)
        for (size_t i = blocks.size(); i > 1; i--)
            std::swap(blocks[i - 1], blocks[(i * 2654435761u + order) % i]);
    std::barrier<> start(threads + 1), done(threads + 1);
    Dim3 current{0, 0, 0};
    bool quit = false;
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; t++) {
        pool.emplace_back([&, t] {
            threadIdx = Dim3{t, 0, 0};
            for (;;) {
                start.arrive_and_wait();
                if (quit) return;
                blockIdx = current;
                kernel();
                done.arrive_and_wait();
            }
        });
    }
    for (const Dim3& b : blocks) {
        current = b;
        start.arrive_and_wait();
        done.arrive_and_wait();
    }
    quit = true;
    start.arrive_and_wait();
    for (auto& t : pool) t.join();
}

// Input sections: a u64 byte count, then the bytes.
inline std::vector<unsigned char> read_section(FILE* f) {
    uint64_t n = 0;
    if (fread(&n, 8, 1, f) != 1) __builtin_trap();
    std::vector<unsigned char> v(n);
    if (n && fread(v.data(), 1, n, f) != n) __builtin_trap();
    return v;
}

template <typename T>
std::vector<T> section_as(const std::vector<unsigned char>& b) {
    std::vector<T> v(b.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}
