// The basic types and every PTX wrapper shared by fp8-linear's NVRTC-compiled kernels (put
// first in every module by sources.rs). Header-free: no CUDA headers are needed, only
// built-ins and inline PTX. One definition per instruction; every asm that reads or writes
// memory is `volatile` with the "memory" clobber (the compiler moves no load or store
// across it), register-only ones are plain (pure) unless noted.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// The PTX wrappers are under `#ifndef FP8_HOST_MODEL`: the host models of the kernels
// (tests/host_model) compile the rest of a module on a CPU with the C++ versions of
// tests/host_model/ptx.h.
#ifndef FP8_HOST_MODEL

// ---- conversions and arithmetic (registers only) --------------------------------------
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

// 1 / x to within 1 ulp (MUFU.RCP; x normal). The correctly rounded __frcp_rn costs a
// subroutine call with a slow path, whose register saves spilled in block_gemm's main loop.
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// a * b on two 16-bit floats, bf16 (BF16) or f16 (no flush of subnormals). fma with -0 is
// exactly a * b. sm_80 and newer.
template <int BF16>
__device__ __forceinline__ u32 mul2(u32 a, u32 b) {
    u32 d;
    if (BF16) {
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    } else {
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    }
    return d;
}

// e4m3fn codes of two f32, round to nearest even, saturated to +-448: hi's code in bits
// 8..15, lo's in bits 0..7 (sm_89 and newer: F2FP.SATFINITE.E4M3.F32.PACK_AB).
__device__ __forceinline__ u32 cvt_e4m3x2(float hi, float lo) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// The unsigned maximum of each 16-bit half of a and b (one VIMNMX on sm_90, two halves
// apart before).
__device__ __forceinline__ u32 max_u16x2(u32 a, u32 b) {
#if __CUDA_ARCH__ >= 900
    u32 d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else
    return max(a & 0xffff0000u, b & 0xffff0000u) | max(a & 0xffffu, b & 0xffffu);
#endif
}

// ---- programmatic dependent launch --------------------------------------------------------
// A kernel launched after this one with programmatic stream serialization may start once
// every block of this one has executed this (or exited): its launch and prologue overlap
// this kernel's tail. No-op without such a dependent, and before sm_90.
__device__ __forceinline__ void griddep_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the kernel before this one on the stream has completed and its writes are
// visible (returns at once when this kernel was launched normally, and before sm_90).
__device__ __forceinline__ void griddep_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---- addresses --------------------------------------------------------------------------
// The shared-state-space address of a pointer into shared memory.
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// ---- cp.async (sm_80 and newer) -------------------------------------------------------
// `size` bytes global -> shared at `dst` (a smem_u32 address); only the first `src_bytes`
// are read, the rest written as zeros (src_bytes 0 reads nothing). The 16-byte copy
// bypasses L1 (.cg), the 8- and 4-byte ones cache in L1 (.ca: .cg takes 16 bytes only).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async8(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async4(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

// Closes this thread's open group of copies.
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N committed groups of this thread are pending (their copies landed).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Arrives on the mbarrier `bar` once every earlier cp.async of this thread has landed
// (counted in the barrier's expected arrivals: no pending-count increment).
__device__ __forceinline__ void cp_async_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// ---- cache-hinted global loads and stores ---------------------------------------------
// A streamed 16-byte load of read-only data (no L1 allocation, 256-byte L2 prefetch).
__device__ __forceinline__ uint4 ldg_stream(const u8* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// An f32 store / load cached in L2 only (.cg), for partial sums another block reads.
__device__ __forceinline__ void st_cg(float* p, float v) {
    asm volatile("st.global.cg.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

// ---- mbarrier (sm_90) -------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the mbarrier initializations of this thread visible to the cluster (and to the
// asynchronous proxy) before any arrival or TMA completion reaches them.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

// Arrives on `bar` when `p` (a predicated arrive, not a branch: no divergence around it).
__device__ __forceinline__ void mbar_arrive_if(u32 bar, bool p) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %1, 0;\n"
        "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
        "}\n" ::"r"(bar),
        "r"((int)p)
        : "memory");
}

// Arrives (when `p`) on the mbarrier at shared::cluster address `bar`, possibly another CTA's.
// CTA-scope release (the default), as a stage release needs: what it orders are this
// thread's reads of the stage, which its wgmma wait already completed; a cluster-scope
// release would cost a GPU-wide memory barrier per arrival.
__device__ __forceinline__ void mbar_arrive_cluster_if(u32 bar, bool p) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %1, 0;\n"
        "@p mbarrier.arrive.shared::cluster.b64 _, [%0];\n"
        "}\n" ::"r"(bar),
        "r"((int)p)
        : "memory");
}

// Waits for the completion of the phase of parity `parity`.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

// ---- warp-wide matrix loads and MMAs ----------------------------------------------------
// ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

// D += A x B with FP8 mma.sync m16n8k32 (e4m3 x e4m3 -> f32; sm_89 and newer): a[4] the A
// fragment (16 x 32, row), b[2] the B fragment (32 x 8, col), c[4] the f32 accumulators.
// (volatile: kept in program order with the other warp-synchronous instructions.)
__device__ __forceinline__ void mma_e4m3(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D += A x B with 16-bit mma.sync m16n8k16 (bf16 when BF16, else f16; f32 accumulators;
// sm_80 and newer): a0..a3 the A fragment (16 x 16, row), b0, b1 the B fragment (16 x 8, col).
template <int BF16>
__device__ __forceinline__ void mma_m16n8k16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                             u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}
#endif  // FP8_HOST_MODEL

// cp_async_wait with a run-time count: waits until at most n committed groups of this
// thread are pending (n < 8; the count must be an immediate, hence the switch).
__device__ __forceinline__ void cp_async_wait_n(int n) {
    switch (n) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        case 5: cp_async_wait<5>(); break;
        default: cp_async_wait<6>(); break;
    }
}
