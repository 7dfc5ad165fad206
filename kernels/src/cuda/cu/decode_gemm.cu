// Decode block-scaled FP8 GEMM (M <= 16 rows, sm_89+ FP8 mma.sync): one launch that
// quantizes the activations, streams the weight once and reduces split K inside the kernel.
//
//   out[m, n] = sum_kb As[m, kb] * Bs[n / SBN, kb] * sum_{k in kb} A[m, k] * W[n, k]  (+ bias[n])
//
// with A the e4m3 codes and As the 1 x 128 scales of the dynamic group quantization of the
// input x (bit-identical to quant_groups), W [N, ldw] e4m3 weight codes (ldw % 16 == 0,
// columns K..ldw zero), Bs [ceil(N / SBN), s_ld] f32 weight block scales (SBN a multiple of
// 8 along N, 128 along K).
//
// Swap AB: the weight is the 16-row A operand of m16n8k32 and the activations the 8-column B
// operand (NT = 1 or 2 column tiles: M <= 8 or M <= 16), so no MMA row is padding. A CTA of
// 16 warps owns 256 weight rows (16 per warp) over one K split of `kbps` 128-long K blocks.
// Each lane loads its A fragments straight from global memory with 16-byte loads: lane
// (g, t) reads bytes [16t, 16t + 16) and [64 + 16t, 64 + 16t + 16) of the K block in rows g
// and g + 8; an MMA takes 8 bytes of each, which permutes K inside the block identically
// for A and B (a dot product does not care). DEPTH K blocks of weight (and their scales)
// are in flight per lane, in registers.
//
// The CTA first issues its first DEPTH weight loads, then quantizes the activations of its
// whole K split (the M real rows only; 16 lanes per row and group, 8 elements each) into
// shared memory while those loads are in flight; after one barrier every warp streams its
// rows with no further synchronization. With `splits` > 1 each split stores its f32
// partial tile to part[split][M][N]; the last split of a tile to arrive (last_split: an
// atomic counter per tile, reset by that CTA for the next call) sums the partials in split
// order (deterministic), adds the bias and stores the output. No memset, no second launch.

#ifndef DEC_IN
#define DEC_IN 2
#endif
#ifndef DEC_OUT
#define DEC_OUT 2
#endif
#ifndef DEPTH
#define DEPTH 3
#endif
#define DWARPS 16
#define DTHREADS (32 * DWARPS)
#define DROWS (16 * DWARPS)
#define KBLK 128

typedef In<DEC_IN>::E InE;

// Dynamic shared memory: the activation codes of the K split, 8 NT rows of kbps * 128 + 64
// bytes (64 mod 128: the two rows a quarter warp reads with 16-byte loads fall in different
// banks), then their scales [8 NT][kbps].
__device__ __forceinline__ int act_stride(int kbps) { return kbps * KBLK + 64; }

__device__ __forceinline__ u32 word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The lane's weight of K block kb (rows r0 = g and r1 = g + 8 of its warp, pieces at 16t
// and 64 + 16t), and the two rows' block scales. Pieces past the padded row are zero.
__device__ __forceinline__ void load_block(uint4 (&w)[4], float (&s)[2], const u8* r0,
                                           const u8* r1, const float* s0, const float* s1,
                                           int kb, int ldw, int t, bool valid) {
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    const int p0 = kb * KBLK + 16 * t, p1 = p0 + 64;
    const bool ok0 = valid && p0 < ldw, ok1 = valid && p1 < ldw;
    w[0] = ok0 ? ldg_stream(r0 + p0) : z;
    w[1] = ok1 ? ldg_stream(r0 + p1) : z;
    w[2] = ok0 ? ldg_stream(r1 + p0) : z;
    w[3] = ok1 ? ldg_stream(r1 + p1) : z;
    s[0] = valid ? __ldg(s0 + kb) : 0.0f;
    s[1] = valid ? __ldg(s1 + kb) : 0.0f;
}

// Quantizes the K split [kb0, kb0 + nkb) of the M activation rows into shared memory
// (codes at row * ast, scales at row * nkb), 16 lanes per (row, group); rows M..rows get
// zero codes. Every lane of the CTA calls it.
__device__ __forceinline__ void quant_split(u8* __restrict__ a, float* __restrict__ as,
                                            const InE* __restrict__ x, int M, int rows, int K,
                                            int kb0, int nkb, int ast, int vec, int ue8m0) {
    const int items = M * nkb * 16;  // a multiple of 16: no 16-lane group is split
    const int padded = (items + 31) & ~31;
    // Two items per lane per step, both loads issued before either is used.
    for (int base = threadIdx.x; base < padded; base += 2 * DTHREADS) {
        float v[2][8];
        int c0[2], valid[2], row[2], kb[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int item = base + u * DTHREADS;
            const bool active = item < items;
            const int grp = item >> 4, sub = item & 15;
            row[u] = active ? grp / nkb : 0;
            kb[u] = active ? grp % nkb : 0;
            c0[u] = (kb0 + kb[u]) * KBLK + sub * 8;
            valid[u] = active ? max(0, min(8, K - c0[u])) : 0;
            load8<DEC_IN>(x + (long long)row[u] * K + c0[u], vec != 0, valid[u], v[u]);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int item = base + u * DTHREADS;
            if (item >= padded) break;  // uniform over the warp (padded % 32 == 0)
            u32 lo, hi;
            const float scale = quant_group8(v[u], valid[u], 16, ue8m0, lo, hi);
            if (item < items) {
                const int sub = item & 15;
                *reinterpret_cast<uint2*>(a + row[u] * ast + kb[u] * KBLK + sub * 8) =
                    make_uint2(lo, hi);
                if (sub == 0) as[row[u] * nkb + kb[u]] = scale;
            }
        }
    }
    // Rows past M (read by the MMA's unused columns): zero codes.
    const int zero16 = (rows - M) * (ast / 16);
    for (int i = threadIdx.x; i < zero16; i += DTHREADS)
        reinterpret_cast<uint4*>(a + M * ast)[i] = make_uint4(0u, 0u, 0u, 0u);
}

template <int NT>
__device__ void decode_gemm(const InE* __restrict__ x, const u8* __restrict__ W, int ldw,
                            const float* __restrict__ Bs, int s_ld, const float* __restrict__ bias,
                            void* __restrict__ out, float* __restrict__ part,
                            u32* __restrict__ counters, int M, int N, int K, int kbps, int splits,
                            int vec, int ue8m0) {
    extern __shared__ __align__(16) u8 dsm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, split = blockIdx.y;
    const int KB = (K + KBLK - 1) / KBLK;
    const int kb0 = split * kbps;
    const int nkb = max(0, min(KB, kb0 + kbps) - kb0);
    const int ast = act_stride(kbps);
    u8* a_sm = dsm;
    float* as_sm = reinterpret_cast<float*>(dsm + 8 * NT * ast);
    // The lane's two weight rows, clamped into the matrix (rows past N are never stored); a
    // warp whose 16 rows are all past N streams nothing.
    const int row0 = tile * DROWS + warp * 16;
    const int n_g = row0 + g, n_g8 = n_g + 8;
    const int streams = row0 < N ? nkb : 0;
    const u8* r0 = W + (long long)min(n_g, N - 1) * ldw;
    const u8* r1 = W + (long long)min(n_g8, N - 1) * ldw;
    const float* s0 = Bs + (long long)(min(n_g, N - 1) / SBN) * s_ld;
    const float* s1 = Bs + (long long)(min(n_g8, N - 1) / SBN) * s_ld;

    uint4 wb[DEPTH][4];
    float sb[DEPTH][2];
#pragma unroll
    for (int j = 0; j < DEPTH; ++j)
        load_block(wb[j], sb[j], r0, r1, s0, s1, kb0 + j, ldw, t, j < streams);
    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    quant_split(a_sm, as_sm, x, M, 8 * NT, K, kb0, nkb, ast, vec, ue8m0);
    __syncthreads();

    for (int i0 = 0; i0 < streams; i0 += DEPTH) {
#pragma unroll
        for (int j = 0; j < DEPTH; ++j) {
            const int i = i0 + j;
            if (i < streams) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const u8* arow = a_sm + (8 * nt + g) * ast + i * KBLK + 16 * t;
                    const uint4 b0 = *reinterpret_cast<const uint4*>(arow);
                    const uint4 b1 = *reinterpret_cast<const uint4*>(arow + 64);
                    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int p = 0; p < 2; ++p) {
                        const uint4& bp = p == 0 ? b0 : b1;
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const u32 a[4] = {word(wb[j][p], 2 * h), word(wb[j][2 + p], 2 * h),
                                              word(wb[j][p], 2 * h + 1),
                                              word(wb[j][2 + p], 2 * h + 1)};
                            const u32 b[2] = {word(bp, 2 * h), word(bp, 2 * h + 1)};
                            mma_e4m3(c, a, b);
                        }
                    }
                    const float a0 = as_sm[(8 * nt + 2 * t) * nkb + i];
                    const float a1 = as_sm[(8 * nt + 2 * t + 1) * nkb + i];
                    acc[nt][0] = fmaf(c[0], sb[j][0] * a0, acc[nt][0]);
                    acc[nt][1] = fmaf(c[1], sb[j][0] * a1, acc[nt][1]);
                    acc[nt][2] = fmaf(c[2], sb[j][1] * a0, acc[nt][2]);
                    acc[nt][3] = fmaf(c[3], sb[j][1] * a1, acc[nt][3]);
                }
                load_block(wb[j], sb[j], r0, r1, s0, s1, kb0 + i + DEPTH, ldw, t,
                           i + DEPTH < streams);
            }
        }
    }

    // Element e of column tile nt: row n_g (e < 2) or n_g8, column 8 nt + 2t + (e & 1).
    if (splits > 1) {
        float* mine = part + (long long)split * M * N;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int n = e < 2 ? n_g : n_g8, m = 8 * nt + 2 * t + (e & 1);
                if (n < N && m < M) __stcg(mine + (long long)m * N + n, acc[nt][e]);
            }
        if (!last_split(counters, tile, splits)) return;
        // The partials in split order (deterministic).
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int n = e < 2 ? n_g : n_g8, m = 8 * nt + 2 * t + (e & 1);
                if (n >= N || m >= M) continue;
                float v = 0.0f;
                for (int s = 0; s < splits; ++s)
                    v += s == split ? acc[nt][e] : __ldcg(part + ((long long)s * M + m) * N + n);
                acc[nt][e] = v;
            }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = e < 2 ? n_g : n_g8, m = 8 * nt + 2 * t + (e & 1);
            if (n < N && m < M)
                store2_bias<DEC_OUT>(out, (long long)m * N + n, bias, n, acc[nt][e], 0.0f, false,
                                     false);
        }
}

#define DECODE_KERNEL(NT, NAME)                                                                \
    extern "C" __global__ void __launch_bounds__(DTHREADS, 1)                                 \
    NAME(const InE* x, const u8* W, int ldw, const float* Bs, int s_ld, const float* bias,     \
         void* out, float* part, u32* counters, int M, int N, int K, int kbps, int splits,     \
         int vec, int ue8m0) {                                                                 \
        decode_gemm<NT>(x, W, ldw, Bs, s_ld, bias, out, part, counters, M, N, K, kbps,         \
                        splits, vec, ue8m0);                                                   \
    }

DECODE_KERNEL(1, decode_gemm_m8)
DECODE_KERNEL(2, decode_gemm_m16)
