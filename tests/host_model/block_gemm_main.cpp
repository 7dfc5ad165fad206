// The host model's driver for cu/block_gemm.cu (the portable block-scaled FP8 GEMM): runs
// one call several times, the blocks in a different order each time, and writes every
// call's output. A split call starts from a zero workspace (counters and sums) and must
// leave it zero (traps otherwise): the next call relies on it.
//
//   model INPUT OUTPUT
//
// INPUT sections (u64 byte count, bytes): params (i32: M N K kp gn gm splits kb_per_split
// out_dtype has_bias launches), A codes [M, kp], As [M, Kbs] f32, B codes [N, kp], Bs
// [ceil(N / SBN), Kbs] f32, bias [N] f32. OUTPUT: launches x M x N elements of the output
// dtype (0 f32, 1 f16, 2 bf16). Built with -DBLOCK_GROUPED, it runs the grouped kernels: the
// params go on with (experts has_rw tps m_max), B, Bs and bias are E experts' stacks, and the
// sections go on with the row tiles i32 [gm, 3] (expert, first row, end row), the routing
// weights [M] f32 and the masked counts i32 [E] (m_max > 0: the kernel reads them, grid row
// y = e * tps + t, instead of the tiles); rows no tile covers keep the 0xff fill.
#include "cuda.h"
#include "ptx.h"
#include KERNEL_INC

#ifndef BLOCK_GROUPED
typedef void (*Gemm)(const u8*, int, const float*, const u8*, int, const float*, void*, float*,
                     u32*, const float*, int, int, int, int, int);
#else
typedef void (*Gemm)(const u8*, int, const float*, const u8*, int, const float*, void*,
                     const float*, const float*, const int*, const int*, int, int, int, int, int,
                     int);
#endif

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    const std::vector<int> p = section_as<int>(read_section(f));
    // Exact-size heap copies, so that the address sanitizer sees any read past them.
    const std::vector<unsigned char> a = read_section(f);
    const std::vector<float> as = section_as<float>(read_section(f));
    const std::vector<unsigned char> b = read_section(f);
    const std::vector<float> bs = section_as<float>(read_section(f));
    const std::vector<float> bias = section_as<float>(read_section(f));
    const int M = p[0], N = p[1], K = p[2], kp = p[3], gn = p[4], gm = p[5], splits = p[6];
    const int kbs = p[7], dt = p[8], has_bias = p[9], launches = p[10];
#ifdef BLOCK_GROUPED
    const int has_rw = p[12], tps = p[13], m_max = p[14];
    const std::vector<int> tiles = section_as<int>(read_section(f));
    const std::vector<float> rw = section_as<float>(read_section(f));
    const std::vector<int> counts = section_as<int>(read_section(f));
    const Gemm gemm[3] = {block_grouped_f32, block_grouped_f16, block_grouped_bf16};
#else
    const Gemm gemm[3] = {block_gemm_f32, block_gemm_f16, block_gemm_bf16};
#endif
    fclose(f);
    const size_t elem = dt == 0 ? 4 : 2, count = (size_t)M * N;
    std::vector<unsigned char> out(count * elem);
    std::vector<float> ws(splits > 1 ? count : 0);
    std::vector<u32> counters(splits > 1 ? (size_t)gn * gm : 0);
    const float* bp = has_bias ? bias.data() : nullptr;
    FILE* o = fopen(argv[2], "wb");
    for (int l = 0; l < launches; l++) {
        std::fill(out.begin(), out.end(), (unsigned char)0xff);
        run_grid(Dim3{(unsigned)gn, (unsigned)gm, (unsigned)splits}, THREADS, l, [&] {
#ifdef BLOCK_GROUPED
            gemm[dt](a.data(), kp, as.data(), b.data(), kp, bs.data(), out.data(), bp,
                     has_rw ? rw.data() : nullptr, m_max > 0 ? nullptr : tiles.data(),
                     m_max > 0 ? counts.data() : nullptr, tps, m_max, M, N, K, kp);
            (void)kbs;
#else
            gemm[dt](a.data(), kp, as.data(), b.data(), kp, bs.data(), out.data(),
                     splits > 1 ? ws.data() : nullptr, splits > 1 ? counters.data() : nullptr,
                     bp, M, N, K, kp, kbs);
#endif
        });
        for (float v : ws)
            if (v != 0.0f) __builtin_trap();  // sums not put back to zero
        for (u32 c : counters)
            if (c != 0) __builtin_trap();  // a counter not reset
        fwrite(out.data(), 1, out.size(), o);
    }
    fclose(o);
    return 0;
}
