// Marlin-class FP8 weight-only (W8A16) GEMM: out[M, N] = x[M, K] @ (W[N, K] * scales)^T.
//
// Header-free CUDA C, compiled at run time by NVRTC (sm_80 and newer: bf16 mma, fma.bf16x2
// and cp.async need sm_80), after ptx.cuh (every PTX instruction it uses: mul2,
// mma_m16n8k16, cp.async, st_cg / ld_cg, cvt) and epilogue.cuh (store2, last_split).
//
// Orientation: the tensor-core mma m16n8k16 computes out^T = W . x^T, so the FP8 weight is
// the A operand (16 output channels x 16 K) and the activations are the B operand (16 K x 8
// rows of M). A decode step (M <= 8) then wastes nothing on padding M to 16; up to 8 such
// 8-row tiles (64 rows) share one dequantized weight fragment.
//
// Weights are repacked on the host (repack.rs) into stripes of 128 output channels; one
// stripe holds, per 32-wide K step (a "unit"), 8 tiles of 16 channels x 32 K = 512 bytes,
// one 16-byte word per lane, which is exactly what that lane's A fragments for the two k16
// mmas of the step need. Inside a step the logical K order is permuted (a dot product does
// not care): lane (g, t) covers K offsets 8t..8t+7 of the step, mma #s takes offsets
// 8t+4s..8t+4s+3, so the activation fragment is one 16-byte word x[m][k0 + 8t .. + 8).
// Stripes are padded along K to whole stages (4 units), so the weight is one contiguous
// sequence of 16 KiB stages, stripe after stripe.
//
// Dequantization without conversion instructions: each code's sign and 7 exponent+mantissa
// bits land in the 16-bit float's fields, the top exponent bits zero (the host interleaves
// the codes' bits so that this takes one AND for two codes and four operations for the two
// others). The result is value * 2^-8 (f16) or value * 2^-120 (bf16), exactly, subnormals
// included. The power of two is folded into the 16-bit group scales at load time; the
// group scales (relative to a per-channel f32 scale) multiply the dequantized fragment
// before each mma, the per-channel f32 scale multiplies the f32 accumulators at the end.
//
// Work split ("striped"): the stripes' stages, laid end to end, are cut into as many equal
// contiguous ranges as the GPU holds blocks (grid y); a range may start or end inside a
// stripe. Each block streams its range through a ring of shared-memory stages filled by
// cp.async (weights, the stage's group scales and the activation tile), so the loads in
// flight hold no registers. Warp w computes tile w (16 channels) of every unit of a stage,
// so a stripe's 128 channels share each activation tile copied. A segment that covers its
// whole stripe writes the output;
// the pieces of a cut stripe go to an f32 workspace and the block that arrives last (a
// per-stripe counter) sums them in range order, so results are deterministic. Grid x
// counts 8 * MT-row chunks of M (each a full pass over the weight).
//
// Grouped (a module compiled with -DMARLIN_GROUPED: `marlin_grouped_*` kernels instead): E
// experts' repacked weights stacked (expert e's stages, group scales and channel scales after
// those of experts 0..e-1, its bias at e * n), the rows cut into "items" of at most 8 * MT
// rows of one expert, each a full pass over its expert's weight: item i's stripes are the
// virtual stripes i * stripes .. (i + 1) * stripes - 1, and the stages of all of them, laid end
// to end, are cut into min(grid y, stages) equal ranges as above (grid x is 1). The items are
// a table the host uploads (expert, first row, rows), or, masked with the counts on the device,
// expert e's count (clamped to 0..m_max) cut into items of its slab of m_max rows, which every
// block derives from the counts into shared memory (after the ring) before it starts. Rows
// past an item's count are zero-filled in shared memory and never stored; rows no item covers
// are not written. Each stored value is (sum * channel scale + bias) * rw[m] when the routing
// weights are given.

struct __align__(16) U4 {
    u32 x, y, z, w;
};

// The host stores each 32-bit weight word with the bits of its four codes interleaved
// (repack.rs, pack_word): per 16-bit half, the "high" code already sits in the 16-bit
// float's sign and exponent/mantissa fields, the "low" code fills the other 8 bits.
// High codes (bytes 1 and 3 of the logical word) as two 16-bit floats: one AND.
template <int BF16>
__device__ __forceinline__ u32 deq_hi(u32 q) {
    return q & (BF16 ? 0x87F087F0u : 0xBF80BF80u);
}

// Low codes (bytes 0 and 2) as two 16-bit floats: two shifts, two logic operations.
template <int BF16>
__device__ __forceinline__ u32 deq_lo(u32 q) {
    if (BF16) return ((q << 4) & 0x80F080F0u) | ((q >> 4) & 0x07000700u);
    return ((q << 1) & 0x80008000u) | ((q << 7) & 0x3F803F80u);
}

// Units (32-wide K steps) per stage, 16-channel tiles per stripe (one per warp), warps and
// threads per block.
#define UNITS 4
#define TILES 8
#define WARPS TILES
#define THREADS (WARPS * 32)

struct Args {
    const U4* w;         // repacked weights [stripes][ksteps][8 tiles][32] x 16 bytes
    const U4* s;         // group scales [stripes][groups][8 tiles][8 g][2] x 16-bit
    const float* chan;   // per-channel f32 scales [stripes * 128]
    const float* bias;   // [N] f32, or null
    const u16* x;        // activations [M, K], row stride ldx elements
    u16* out;            // output [M, N], row stride ldo elements
    float* work;         // partial sums of cut stripes [chunks][ranges][2][128 * 8 * MT]
    u32* counters;       // per (chunk, stripe) arrival counters (zero between launches)
    int m, n, k, ldx, ldo;
    int ksteps;          // K steps per stripe, a multiple of UNITS
    int steps_per_group, groups;
    int spg_shift;       // log2(steps_per_group) when a power of two, else -1
    int stripes;
    int stages;          // depth of the shared-memory ring (2..8)
    int x_vec;           // bytes per activation copy: 16, 8 or 4; 0 copies element by element
};

// Shared memory of one stage: weights [unit][tile][lane], scales [unit][tile][g][2 halves]
// (16 words per unit), activations [unit][row][4 x 16 bytes].
template <int MT>
struct StageLayout {
    static const int W = UNITS * TILES * 32;  // U4 words
    static const int S = UNITS * 16;
    static const int X = UNITS * 8 * MT * 4;
    static const int WORDS = W + S + X;
};

// a * b / c for non-negative a, b and positive c (c < 2^31), in 32-bit arithmetic when the
// product fits (the host keeps the stage count below 2^31; the products of range indices
// and stage counts rarely leave 32 bits, and a 64-bit division costs ~100 instructions).
__device__ __forceinline__ int mul_div(int a, int b, int c) {
    const unsigned long long p = (unsigned long long)(unsigned)a * (unsigned)b;
    return (int)(p >> 32 ? p / (unsigned)c : (unsigned)p / (unsigned)c);
}

// First stage of range b of a grid of `ranges` over `total` stages.
__device__ __forceinline__ int range_start(int b, int total, int ranges) {
    return mul_div(b, total, ranges);
}

// The range that holds stage q: the largest b with range_start(b) <= q.
__device__ __forceinline__ int range_of(int q, int total, int ranges) {
    const unsigned long long p = (unsigned long long)(unsigned)(q + 1) * (unsigned)ranges - 1;
    return (int)(p >> 32 ? p / (unsigned)total : (unsigned)p / (unsigned)total);
}

// One activation word (8 elements of a row, at `p`, K index kk) into shared memory at `dst`,
// for activations that do not allow 16-byte copies (x_vec 8, 4 or 0).
// Elements at K index `kend` and past are zero-filled (a.k, or 0 for a row past a grouped
// item's count).
__device__ __forceinline__ void copy_x_narrow(const Args& a, u32 dst, U4* dst_ptr, const u16* p,
                                              int kk, int kend) {
    if (a.x_vec == 8) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const bool ok = kk + 4 * h < kend;
            cp_async8(dst + 8 * h, ok ? (const void*)(p + 4 * h) : (const void*)a.x, ok ? 8u : 0u);
        }
    } else if (a.x_vec == 4) {
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const bool ok = kk + 2 * h < kend;
            cp_async4(dst + 4 * h, ok ? (const void*)(p + 2 * h) : (const void*)a.x, ok ? 4u : 0u);
        }
    } else {
        u32 e[8];
#pragma unroll
        for (int i = 0; i < 8; i++) e[i] = kk + i < kend ? (u32)p[i] : 0u;
        U4 v;
        v.x = e[0] | (e[1] << 16);
        v.y = e[2] | (e[3] << 16);
        v.z = e[4] | (e[5] << 16);
        v.w = e[6] | (e[7] << 16);
        *dst_ptr = v;
    }
}

// Grouped: the routing of a launch. `items` lists (expert, first row, rows) per item, rows at
// most 8 MT; or, when null, item i is found from `counts` (E = experts counts, each clamped to
// 0..m_max, of slabs of m_max rows) through the table each block builds in shared memory.
struct Groups {
    const int* items;
    const int* counts;
    const float* rw;   // one routing weight per row, or null
    int n_items;       // items in the table (items not null)
    int experts, m_max;
};

// One item: up to 8 MT rows r0.. of expert e.
struct Item {
    int e, r0, rows;
};

// Where a block finds its items: the host's table, or the masked counts' table in shared
// memory (cnt[e] the clamped count, pre[e] the items of experts 0..e-1, pre[E] all of them).
struct Items {
    const Groups& g;
    const int* cnt;
    const int* pre;
    int bm;  // rows per item (8 MT)

    __device__ __forceinline__ Item at(int i) const {
        if (g.items != nullptr) return Item{g.items[3 * i], g.items[3 * i + 1], g.items[3 * i + 2]};
        // The expert e with pre[e] <= i < pre[e + 1] (experts without rows have pre[e] ==
        // pre[e + 1], so the search lands past them).
        int lo = 0, hi = g.experts - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (pre[mid] <= i) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        const int j = i - pre[lo];
        return Item{lo, lo * g.m_max + j * bm, min(bm, cnt[lo] - j * bm)};
    }
};

// Masked: the block's table of the counts (see Items) in `tab` (2E + 1 + WARPS ints of shared
// memory: cnt, pre, then the warps' sums); returns the items of all experts. Every thread
// takes a run of consecutive experts, a warp scan and the warps' sums give each run's first
// item.
__device__ __forceinline__ int masked_items(const Groups& g, int bm, int* tab) {
    const int E = g.experts, per = (E + THREADS - 1) / THREADS, e0 = threadIdx.x * per;
    int* cnt = tab;
    int* pre = tab + E;
    int* wsum = tab + 2 * E + 1;
    int mine = 0;
    for (int i = 0; i < per; i++) {
        const int e = e0 + i;
        if (e < E) {
            const int c = min(max(g.counts[e], 0), g.m_max);
            cnt[e] = c;
            mine += (c + bm - 1) / bm;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = mine;  // inclusive scan over the warp's lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = (int)__shfl_up_sync(0xffffffffu, (u32)inc, o);
        if (lane >= o) inc += v;
    }
    if (lane == 31) wsum[warp] = inc;
    __syncthreads();
    int run = inc - mine;
    for (int w = 0; w < warp; w++) run += wsum[w];
    for (int i = 0; i < per; i++) {
        const int e = e0 + i;
        if (e < E) {
            pre[e] = run;
            run += (cnt[e] + bm - 1) / bm;
        }
    }
    if (threadIdx.x == THREADS - 1) pre[E] = run;
    __syncthreads();
    return pre[E];
}

// One thread's share of every stage's copies, its source pointers and shared-memory offsets
// computed once (grouped: once per item). Per stage a thread copies 4 weight words, one
// group-scale word (threads 0..63) and XC activation words of one row (threads below X; dense,
// rows >= m are never copied: their shared memory is zeroed once, and an mma column of a row
// >= m only reaches outputs not stored; grouped, rows past the item's are zero-filled).
template <int MT, bool G>
struct Producer {
    typedef StageLayout<MT> L;
    // Activation words per thread (threads below L::X copy).
    static const int XC = (L::X + THREADS - 1) / THREADS;
    const U4* w;     // this thread's first weight word of the next stage to issue
    const U4* s;     // group-scale word j of the next stage's stripe (scale threads)
    const u16* x;    // this thread's activation row, or null when the row is >= m (dense)
    bool has_x;      // whether the thread has activation words in the tile
    int s_unit;      // unit of this thread's scale copy, or -1
    int x_k;         // K offset of this thread's first activation word within a stage
    u32 x_dst;       // its word index within a stage
    int stripe, ks;  // the next stage to issue (grouped: stripe is the virtual stripe)
    int row;         // this thread's activation row within the tile
    int x_end;       // grouped: K past this thread's row (0 when the row is past the item's)
    bool fresh;      // grouped: the next stage starts an item (point at it before issuing)

    __device__ __forceinline__ Producer(const Args& a, const Items& it, int q0, int row0,
                                        int sps) {
        const int tid = threadIdx.x;
        stripe = q0 / sps;
        ks = q0 - stripe * sps;
        s_unit = tid < L::S ? tid >> 4 : -1;
        // Copy i of the thread: word tid + i * THREADS of the activation tile, i.e. row
        // (tid / 4) % (8 MT), part tid % 4 of unit (tid / 4) / (8 MT) + i * 8 / MT.
        row = (tid >> 2) % (8 * MT);
        const int part = tid & 3, u0 = (tid >> 2) / (8 * MT);
        has_x = tid < L::X;
        x_k = u0 * 32 + part * 8;
        x_dst = L::W + L::S + tid;
        if constexpr (G) {
            point(a, it, sps);
            fresh = false;
        } else {
            w = a.w + (size_t)q0 * L::W + tid;
            s = a.s + (size_t)stripe * a.groups * 16 + (tid & 15);
            x = has_x && row0 + row < a.m ? a.x + (size_t)(row0 + row) * a.ldx : nullptr;
        }
    }

    // Grouped: the pointers of stage ks of virtual stripe `stripe` (stripe s of item i =
    // stripe / stripes is stripe e * stripes + s of the stack).
    __device__ __forceinline__ void point(const Args& a, const Items& items, int sps) {
        const int i = stripe / a.stripes;
        const Item it = items.at(i);
        const size_t st = (size_t)it.e * a.stripes + (stripe - i * a.stripes);
        w = a.w + (st * sps + ks) * L::W + threadIdx.x;
        s = a.s + st * a.groups * 16 + (threadIdx.x & 15);
        const bool ok = row < it.rows;
        x = has_x ? a.x + (size_t)(it.r0 + (ok ? row : 0)) * a.ldx : nullptr;
        x_end = ok ? a.k : 0;
    }

    // Zeroes, in every ring slot, the activation words this thread never copies (dense).
    __device__ __forceinline__ void zero_unused(U4* ring, int stages) const {
        if (x || !has_x) return;
        const U4 z = {0u, 0u, 0u, 0u};
        for (int b = 0; b < stages; b++)
#pragma unroll
            for (int i = 0; i < XC; i++) ring[(size_t)b * L::WORDS + x_dst + i * THREADS] = z;
    }

    // Issues the next stage's copies into ring slot `buf`, commits them as one group and
    // moves to the following stage.
    template <bool X16>
    __device__ __forceinline__ void issue(const Args& a, const Items& items, U4* buf, int sps) {
        if constexpr (G) {
            if (fresh) {
                point(a, items, sps);
                fresh = false;
            }
        }
        const u32 dst = smem_u32(buf);
#pragma unroll
        for (int i = 0; i < L::W / THREADS; i++)
            cp_async16(dst + 16 * (threadIdx.x + i * THREADS), w + i * THREADS, 16u);
        w += L::W;
        if (s_unit >= 0) {
            const int step = ks * UNITS + s_unit;
            int grp = a.spg_shift >= 0 ? step >> a.spg_shift : step / a.steps_per_group;
            grp = min(grp, a.groups - 1);  // K padding: zero codes, any finite scale
            cp_async16(dst + 16 * (L::W + threadIdx.x), s + (size_t)grp * 16, 16u);
        }
        if (x) {
            const int kend = G ? x_end : a.k;
#pragma unroll
            for (int i = 0; i < XC; i++) {
                const int kk = ks * (UNITS * 32) + x_k + i * (8 / MT) * 32;
                const u32 d = dst + 16 * (x_dst + i * THREADS);
                if (X16) {
                    const bool ok = kk < kend;  // k % 8 == 0: the whole word or none of it
                    cp_async16(d, ok ? (const void*)(x + kk) : (const void*)a.x, ok ? 16u : 0u);
                } else {
                    copy_x_narrow(a, d, buf + x_dst + i * THREADS, x + kk, kk, kend);
                }
            }
        }
        cp_async_commit();
        if (++ks == sps) {
            ks = 0;
            stripe++;
            s += (size_t)a.groups * 16;
            if constexpr (G) fresh = stripe % a.stripes == 0;
        }
    }
};

// The warp's share of one stage: its tile of every unit. w, sc and xs point at the warp's
// weight word, scale word and activation word of unit 0 in the stage's ring slot.
template <int BF16, int MT>
__device__ __forceinline__ void compute_stage(const U4* w, const u32* sc, const U4* xs,
                                              float (&acc)[MT][4]) {
#pragma unroll
    for (int i = 0; i < UNITS; i++) {
        const U4 q = w[i * TILES * 32];
        const u32 sw = sc[i * 16 * 4];
        // scale of this lane's channel g (low half) and g + 8 (high half), broadcast to pairs
        const u32 slo = __byte_perm(sw, 0, 0x1010);
        const u32 shi = __byte_perm(sw, 0, 0x3232);
        u32 fa[2][4];
        fa[0][0] = mul2<BF16>(deq_lo<BF16>(q.x), slo);
        fa[0][2] = mul2<BF16>(deq_hi<BF16>(q.x), slo);
        fa[0][1] = mul2<BF16>(deq_lo<BF16>(q.y), shi);
        fa[0][3] = mul2<BF16>(deq_hi<BF16>(q.y), shi);
        fa[1][0] = mul2<BF16>(deq_lo<BF16>(q.z), slo);
        fa[1][2] = mul2<BF16>(deq_hi<BF16>(q.z), slo);
        fa[1][1] = mul2<BF16>(deq_lo<BF16>(q.w), shi);
        fa[1][3] = mul2<BF16>(deq_hi<BF16>(q.w), shi);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const U4 xv = xs[i * 8 * MT * 4 + mt * 32];
            mma_m16n8k16<BF16>(acc[mt], fa[0][0], fa[0][1], fa[0][2], fa[0][3], xv.x, xv.y);
            mma_m16n8k16<BF16>(acc[mt], fa[1][0], fa[1][1], fa[1][2], fa[1][3], xv.z, xv.w);
        }
    }
}

// The channel scales and biases of the two channels a lane stores (g and g + 8 of the warp's
// tile) in `stripe` (grouped: the stripe of item `it`'s expert). Loaded when the stripe's
// segment starts, so that the epilogue does not wait on them (at the end of a range nothing
// else hides that memory latency).
struct ChanVals {
    float c[2], b[2];
};

template <bool G>
__device__ __forceinline__ ChanVals chan_vals(const Args& a, int stripe, int tile, int lane,
                                              const Item& it) {
    const float* chan = G ? a.chan + (size_t)it.e * a.stripes * (TILES * 16) : a.chan;
    const float* bias = G && a.bias ? a.bias + (size_t)it.e * a.n : a.bias;
    ChanVals v;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int n = stripe * (TILES * 16) + tile * 16 + (lane >> 2) + 8 * h;
        const bool ok = n < a.n;
        v.c[h] = ok ? chan[n] : 0.0f;
        v.b[h] = ok && bias ? bias[n] : 0.0f;
    }
    return v;
}

// Stores the warp's tile of `stripe` with its channels' values `cv` (grouped: the item `it`'s
// stripe, its rows only, times the rows' routing weights `rw` when given).
template <int BF16, int MT, bool G>
__device__ __forceinline__ void epilogue(const Args& a, const float (&acc)[MT][4], int stripe,
                                         int tile, int row0, int lane, const Item& it,
                                         const ChanVals& cv, const float* rw) {
    const int g = lane >> 2, t = lane & 3;
    const int base = G ? it.r0 : row0, end = G ? it.r0 + it.rows : a.m;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int n = stripe * (TILES * 16) + tile * 16 + g + 8 * (r >> 1);
        if (n >= a.n) continue;
        const float c = cv.c[r >> 1];
        const float b = cv.b[r >> 1];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int m = base + mt * 8 + 2 * t + (r & 1);
            if (m < end) {
                float v = acc[mt][r] * c + b;
                if (G && rw) v *= rw[m];
                store2<BF16 ? 2 : 1>(a.out, (long long)m * a.ldo + n, v, 0.0f, false, false);
            }
        }
    }
}

// Range b's piece of `stripe` in the workspace: slot 0 for the stripe the range starts in,
// 1 for the one it ends in (a range holds at most two cut stripes).
template <int MT>
__device__ __forceinline__ float* piece(const Args& a, int chunk, int b, int slot) {
    return a.work + (((size_t)chunk * gridDim.y + b) * 2 + slot) * (TILES * 16 * 8 * MT);
}

template <int BF16, int MT, bool X16, bool G>
__device__ __forceinline__ void marlin_body(const Args& a, const Groups& gr) {
    typedef StageLayout<MT> L;
    extern __shared__ U4 smem[];
    U4* ring = smem;

    const int lane = threadIdx.x & 31, tile = threadIdx.x >> 5;
    const int chunk = blockIdx.x, b = blockIdx.y;
    const int row0 = chunk * 8 * MT;
    const int sps = a.ksteps / UNITS;
    const int S = a.stages;
    // Grouped: the items (masked: their table after the ring), ranges no more than stages.
    int* tab = reinterpret_cast<int*>(ring + (size_t)S * L::WORDS);
    int n_items = 1;
    if constexpr (G) n_items = gr.items != nullptr ? gr.n_items : masked_items(gr, 8 * MT, tab);
    const Items items{gr, tab, tab + gr.experts, 8 * MT};
    const int total = n_items * a.stripes * sps;
    const int ranges = G ? min((int)gridDim.y, total) : (int)gridDim.y;
    if (G && b >= ranges) return;  // the same for every thread of the block
    const int q0 = range_start(b, total, ranges);
    const int count = range_start(b + 1, total, ranges) - q0;
    const int first_stripe = q0 / sps;

    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 4; r++) acc[mt][r] = 0.0f;

    Producer<MT, G> prod(a, items, q0, row0, sps);
    if (!G) prod.zero_unused(ring, S);
    // (stripe, stage within it) of the stage computed.
    int stripe = first_stripe, ks = prod.ks;
    for (int p = 0; p < S - 1; p++) {
        if (p < count) {
            prod.template issue<X16>(a, items, ring + (size_t)p * L::WORDS, sps);
        } else {
            cp_async_commit();
        }
    }
    int seg_ks = ks;  // first stage of the current stripe segment
    // The current stripe's item and stripe within it (grouped), and its channels' values.
    Item it{0, 0, 0};
    int own = stripe;
    ChanVals cv;
    auto seg_start = [&]() {
        if constexpr (G) {
            const int i = stripe / a.stripes;
            it = items.at(i);
            own = stripe - i * a.stripes;
        } else {
            own = stripe;
        }
        cv = chan_vals<G>(a, own, tile, lane, it);
    };
    seg_start();
    // The warp's words of unit 0 in ring slot 0 (weights, scales, activations).
    const int g = lane >> 2, t = lane & 3;
    const U4* cw = ring + tile * 32 + lane;
    const U4* cw0 = ring + L::W;
    const int cs_idx = tile * 8 + g;
    const U4* cx = ring + L::W + L::S + g * 4 + t;
    int slot = 0;     // ring slot of stage p
    for (int p = 0; p < count; p++) {
        cp_async_wait_n(S - 2);
        __syncthreads();  // stage p is in for every thread; slot (p - 1) % S is free
        const int pn = p + S - 1;
        if (pn < count) {
            const int nslot = slot == 0 ? S - 1 : slot - 1;  // (p + S - 1) % S
            prod.template issue<X16>(a, items, ring + (size_t)nslot * L::WORDS, sps);
        } else {
            cp_async_commit();
        }
        {
            const size_t off = (size_t)slot * L::WORDS;
            compute_stage<BF16, MT>(cw + off, reinterpret_cast<const u32*>(cw0 + off) + cs_idx,
                                    cx + off, acc);
        }
        if (++slot == S) slot = 0;

        const bool stripe_end = ks == sps - 1;
        if (!stripe_end && p + 1 < count) {
            ks++;
            continue;
        }

        // End of a stripe segment (grouped: stripe `own` of item `it`).
        const bool whole = seg_ks == 0 && stripe_end;
        if (whole) {
            epilogue<BF16, MT, G>(a, acc, own, tile, row0, lane, it, cv, gr.rw);
        } else {
            // A cut stripe: store this piece; the last of its pieces to arrive sums them all.
            const int wslot = stripe == first_stripe ? 0 : 1;
            {
                float* dst = piece<MT>(a, chunk, b, wslot) + tile * (MT * 4 * 32) + lane;
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 4; r++) st_cg(dst + (mt * 4 + r) * 32, acc[mt][r]);
            }
            const int b_first = range_of(stripe * sps, total, ranges);
            const int b_last = range_of((stripe + 1) * sps - 1, total, ranges);
            const int pieces = b_last - b_first + 1;
            // The split-K protocol of block_gemm and decode_gemm: the pieces of the stripe
            // are the arrivals on its counter; the last one sums them in range order
            // (deterministic, as decode_gemm's splits).
            const bool last = last_split(a.counters, (u32)chunk * a.stripes + stripe, pieces);
            if (last) {
                // Every piece from the workspace (this block's own too: it stored it above),
                // PB pieces' loads in flight before their adds (32 values per thread), added
                // in range order. Loading a piece and adding it before the next load (an add
                // behind each load) cost one L2 round trip per piece: the last block of a
                // stripe cut into five spent five in a row.
                constexpr int PB = MT >= 8 ? 1 : 8 / MT;
                // Piece j's slot: the stripe is the first cut stripe (slot 0) of every range
                // that starts inside it; the first range may have started in an earlier one.
                const int js0 = range_start(b_first, total, ranges) < stripe * sps ? 1 : 0;
                float sum[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 4; r++) sum[mt][r] = 0.0f;
                for (int j0 = b_first; j0 <= b_last; j0 += PB) {
                    float v[PB][MT][4];
#pragma unroll
                    for (int u = 0; u < PB; u++) {
                        const int j = min(j0 + u, b_last);
                        const float* src = piece<MT>(a, chunk, j, j == b_first ? js0 : 0) +
                                           tile * (MT * 4 * 32) + lane;
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
#pragma unroll
                            for (int r = 0; r < 4; r++) v[u][mt][r] = ld_cg(src + (mt * 4 + r) * 32);
                    }
                    // The 8-row tile adds zeros past the last piece: a branch there let the
                    // compiler sink each piece's loads below the previous piece's adds (one
                    // round trip per piece again; without it 4096x4096 at M = 1 took 3.5 %
                    // less on an H100). The taller tiles keep the branch: their branch-free
                    // form was slower on an H100, 1-2 % at M = 32 and 64 with more pieces per
                    // batch (8 of 16 rows, 4 of 32, 2 of 64), 8 % at M = 16 on the small
                    // layers with these batch sizes (the 16-row kernel 86 -> 106 registers).
#pragma unroll
                    for (int u = 0; u < PB; u++) {
                        const bool in = j0 + u <= b_last;
                        if (MT > 1 && !in) break;
#pragma unroll
                        for (int mt = 0; mt < MT; mt++)
#pragma unroll
                            for (int r = 0; r < 4; r++) sum[mt][r] += in ? v[u][mt][r] : 0.0f;
                    }
                }
                epilogue<BF16, MT, G>(a, sum, own, tile, row0, lane, it, cv, gr.rw);
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[mt][r] = 0.0f;
        // The next segment starts the next stripe.
        stripe++;
        ks = 0;
        seg_ks = 0;
        if (p + 1 < count) seg_start();
    }
    cp_async_wait_n(0);
}

// MINB: blocks per SM the registers must allow. Every variant fits two (the 64-row one in
// 128 registers without spills: at one block per SM, 8 warps, it was latency-bound).
#ifndef MARLIN_GROUPED
#define MARLIN_KERNEL(NAME, BF16, MT, MINB)                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB) NAME(Args a) {                 \
        const Groups none{nullptr, nullptr, nullptr, 0, 0, 0};                                 \
        if (a.x_vec == 16) {                                                                   \
            marlin_body<BF16, MT, true, false>(a, none);                                       \
        } else {                                                                               \
            marlin_body<BF16, MT, false, false>(a, none);                                      \
        }                                                                                      \
    }
#define KNAME(V) marlin_w8a16_##V
#else
#define MARLIN_KERNEL(NAME, BF16, MT, MINB)                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB) NAME(Args a, Groups g) {       \
        if (a.x_vec == 16) {                                                                   \
            marlin_body<BF16, MT, true, true>(a, g);                                           \
        } else {                                                                               \
            marlin_body<BF16, MT, false, true>(a, g);                                          \
        }                                                                                      \
    }
#define KNAME(V) marlin_grouped_##V
#endif

MARLIN_KERNEL(KNAME(f16_mt1), 0, 1, 2)
MARLIN_KERNEL(KNAME(f16_mt2), 0, 2, 2)
MARLIN_KERNEL(KNAME(f16_mt4), 0, 4, 2)
MARLIN_KERNEL(KNAME(f16_mt8), 0, 8, 2)
MARLIN_KERNEL(KNAME(bf16_mt1), 1, 1, 2)
MARLIN_KERNEL(KNAME(bf16_mt2), 1, 2, 2)
MARLIN_KERNEL(KNAME(bf16_mt4), 1, 4, 2)
MARLIN_KERNEL(KNAME(bf16_mt8), 1, 8, 2)
