// The host model's driver for cu/quant.cu (dynamic activation quantization): runs
// quant_groups or quant_rows for one input and writes the codes and scales.
//
//   model INPUT OUTPUT
//
// INPUT sections (u64 byte count, bytes): params (i32: kind (0 groups, 1 rows) dtype (0 f32,
// 1 f16, 2 bf16) M K ldq group ue8m0 vec has_ub), the upper bound (f32, may be empty), x
// [M, K] in the dtype. OUTPUT: codes [M, ldq], then the f32 scales ([M, groups] row-major,
// or [M]).
#include "cuda.h"
#include "ptx.h"
#include KERNEL_INC

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    const std::vector<int> p = section_as<int>(read_section(f));
    const std::vector<float> ub = section_as<float>(read_section(f));
    const std::vector<unsigned char> xb = read_section(f);
    fclose(f);
    const int kind = p[0], dt = p[1], M = p[2], K = p[3], ldq = p[4], group = p[5];
    const int ue8m0 = p[6], vec = p[7], has_ub = p[8];
    // x in a 16-byte aligned, exact-size buffer.
    std::vector<uint4> xv((xb.size() + 15) / 16);
    std::memcpy(xv.data(), xb.data(), xb.size());
    const void* x = xv.data();
    const int groups = (K + group - 1) / group;
    std::vector<u8> q((size_t)M * ldq, 0xee);
    std::vector<float> s(kind == 0 ? (size_t)M * groups : (size_t)M, -1.0f);
    if (kind == 0) {
        const long long threads = (long long)M * groups * (group / 8);
        const unsigned blocks = (unsigned)((threads + 255) / 256);
        run_grid(Dim3{blocks, 1, 1}, 256, 0, [&] {
            if (dt == 0) quant_groups_f32((const float*)x, q.data(), s.data(), M, K, ldq, groups, 1, vec, group, ue8m0);
            if (dt == 1) quant_groups_f16((const u16*)x, q.data(), s.data(), M, K, ldq, groups, 1, vec, group, ue8m0);
            if (dt == 2) quant_groups_bf16((const u16*)x, q.data(), s.data(), M, K, ldq, groups, 1, vec, group, ue8m0);
        });
    } else {
        const float* ubp = has_ub ? ub.data() : nullptr;
        run_grid(Dim3{(unsigned)std::min(M, 3), 1, 1}, 256, 0, [&] {
            if (dt == 0) quant_rows_f32((const float*)x, q.data(), s.data(), M, K, ldq, ubp, ue8m0);
            if (dt == 1) quant_rows_f16((const u16*)x, q.data(), s.data(), M, K, ldq, ubp, ue8m0);
            if (dt == 2) quant_rows_bf16((const u16*)x, q.data(), s.data(), M, K, ldq, ubp, ue8m0);
        });
    }
    FILE* o = fopen(argv[2], "wb");
    fwrite(q.data(), 1, q.size(), o);
    fwrite(s.data(), 4, s.size(), o);
    fclose(o);
    return 0;
}
