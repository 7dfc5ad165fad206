// Epilogue helpers of fp8-linear's GEMMs (after ptx.cuh): output stores in the three
// output dtypes, bias + store, and the split-K "last arriver" protocol.

// Stores v0 (and v1 at idx + 1 when `both`) at element idx of an output of dtype OUT
// (0 = f32, 1 = f16, 2 = bf16); one vector store when `pair_ok` (idx even, aligned).
template <int OUT>
__device__ __forceinline__ void store2(void* out, long long idx, float v0, float v1, bool both,
                                       bool pair_ok) {
    if (OUT == 0) {
        float* o = (float*)out + idx;
        if (both && pair_ok) { *reinterpret_cast<float2*>(o) = make_float2(v0, v1); }
        else { o[0] = v0; if (both) o[1] = v1; }
    } else {
        u16 h0 = OUT == 1 ? f32_to_f16(v0) : f32_to_bf16(v0);
        u16 h1 = OUT == 1 ? f32_to_f16(v1) : f32_to_bf16(v1);
        u16* o = (u16*)out + idx;
        if (both && pair_ok) { *reinterpret_cast<u32*>(o) = (u32)h0 | ((u32)h1 << 16); }
        else { o[0] = h0; if (both) o[1] = h1; }
    }
}

// store2 of v0 + bias[c] (and v1 + bias[c + 1] when `both`), the output columns c and c + 1
// at element idx; without a bias (null) the values as they are.
template <int OUT>
__device__ __forceinline__ void store2_bias(void* out, long long idx, const float* bias, int c,
                                            float v0, float v1, bool both, bool pair_ok) {
    if (bias != 0) {
        v0 += bias[c];
        if (both) v1 += bias[c + 1];
    }
    store2<OUT>(out, idx, v0, v1, both, pair_ok);
}

// Split K: whether this block is the last of the `arrivals` blocks that add to output tile
// `tile` to finish, by an atomic counter per tile that is zero between calls: the last
// block resets it right after its arrival (every other block has arrived, so the count is
// complete; the next call on the stream starts after this one ends). Every thread of the
// block calls it once its part of the block's results is in global memory (uniformly: it
// holds two barriers); one lane publishes them (ordered before it by the first barrier; the
// fence is cumulative) and, in the last block, acquires the other blocks' before the second
// barrier. The caller then reads the other blocks' results (in whatever order it sums them).
__device__ __forceinline__ bool last_split(u32* counters, u32 tile, u32 arrivals) {
    __shared__ u32 last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&counters[tile], 1u) == arrivals - 1;
        if (last) {
            __threadfence();
            counters[tile] = 0;  // ready for the next call on the stream
        }
    }
    __syncthreads();
    return last;
}
