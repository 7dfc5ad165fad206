// The host model's driver for cu/decode_gemm.cu (the decode block-scaled FP8 GEMM, M <= 16):
// runs one call several times, the blocks in a different order each time, and writes every
// call's output. Exit status 3 when a tile counter is not zero after a call.
//
//   model INPUT OUTPUT
//
// INPUT sections (u64 byte count, bytes): params (i32: M N K ldw s_ld tiles splits kbps vec
// has_bias launches), x [M, K] (the module's input dtype), W codes [N, ldw], Bs f32
// [ceil(N / SBN), s_ld], bias [N] f32. OUTPUT: launches x M x N elements of the module's
// output dtype.
#include "cuda.h"
#include "ptx.h"
#include KERNEL_INC

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    const std::vector<int> p = section_as<int>(read_section(f));
    // Exact-size heap copies, so that the address sanitizer sees any read past them.
    const std::vector<unsigned char> xb = read_section(f);
    const std::vector<unsigned char> w = read_section(f);
    const std::vector<float> bs = section_as<float>(read_section(f));
    const std::vector<float> bias = section_as<float>(read_section(f));
    fclose(f);
    const int M = p[0], N = p[1], K = p[2], ldw = p[3], s_ld = p[4], tiles = p[5];
    const int splits = p[6], kbps = p[7], vec = p[8], has_bias = p[9], launches = p[10];
    const size_t elem = DEC_OUT == 0 ? 4 : 2, count = (size_t)M * N;
    std::vector<unsigned char> out(count * elem);
    std::vector<float> part(splits > 1 ? (size_t)splits * count : 0);
    std::vector<u32> counters(tiles, 0);
    std::vector<uint4> xv((xb.size() + 15) / 16);
    std::memcpy(xv.data(), xb.data(), xb.size());
    const InE* x = reinterpret_cast<const InE*>(xv.data());
    const float* bp = has_bias ? bias.data() : nullptr;
    FILE* o = fopen(argv[2], "wb");
    int status = 0;
    for (int l = 0; l < launches; l++) {
        std::fill(out.begin(), out.end(), (unsigned char)0xff);
        run_grid(Dim3{(unsigned)tiles, (unsigned)splits, 1}, DTHREADS, l, [&] {
            (M > 8 ? decode_gemm_m16 : decode_gemm_m8)(x, w.data(), ldw, bs.data(), s_ld, bp,
                                                      out.data(), part.data(), counters.data(),
                                                      M, N, K, kbps, splits, vec, 0);
        });
        for (u32 c : counters)
            if (c != 0) status = 3;
        fwrite(out.data(), 1, out.size(), o);
    }
    fclose(o);
    return status;
}
