// The host model's driver for cu/quant.cu (dynamic activation quantization): runs
// quant_groups or quant_rows for one input and writes the codes and scales.
//
//   model INPUT OUTPUT
//
// INPUT sections (u64 byte count, bytes): params (i32: kind (0 groups, 1 rows) dtype (0 f32,
// 1 f16, 2 bf16) M K ldq group ue8m0 vec has_ub, then for groups the launch quant.rs chose:
// cut (0 c1u1, 1 c2u1, 2 c2u2) lg_lanes units threads grid_x, and for a masked call the slab
// rows), the upper bound (f32, may be empty), x [M, K] in the dtype, then for a masked call
// the counts (i32, one per slab). OUTPUT: codes [M, ldq] (0xee where not written), then the
// f32 scales ([M, groups] row-major, or [M]; -1 where not written).
//
// kind 2 (SiLU-and-multiply, then the quantization of h): x is gate_up [M, 2K] in the dtype;
// silu_mul_NAME makes h [M, K] (f32), then quant_groups_c1u1_f32 (group > 0, with the launch
// params as for kind 0, cut 0) or quant_rows_f32 (group = 0) quantizes it. OUTPUT: codes,
// scales as above, then h [M, K] (f32).
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
    // Masked group quantization (params p[14] = slab): the counts, i32.
    const std::vector<int> counts = p.size() > 14 ? section_as<int>(read_section(f)) : std::vector<int>();
    fclose(f);
    const int kind = p[0], dt = p[1], M = p[2], K = p[3], ldq = p[4], group = p[5];
    const int ue8m0 = p[6], vec = p[7], has_ub = p[8];
    // x in a 16-byte aligned, exact-size buffer.
    std::vector<uint4> xv((xb.size() + 15) / 16);
    std::memcpy(xv.data(), xb.data(), xb.size());
    const void* x = xv.data();
    const int groups = group > 0 ? (K + group - 1) / group : 1;
    std::vector<u8> q((size_t)M * ldq, 0xee);
    const bool grouped = kind == 0 || (kind == 2 && group > 0);
    std::vector<float> s(grouped ? (size_t)M * groups : (size_t)M, -1.0f);
    std::vector<float> h;
    if (kind == 2) {
        h.assign((size_t)M * K, -1.0f);
        run_grid(Dim3{3, 1, 1}, 64, 0, [&] {
            if (dt == 0) silu_mul_f32((const float*)x, h.data(), M, K);
            if (dt == 1) silu_mul_f16((const u16*)x, h.data(), M, K);
            if (dt == 2) silu_mul_bf16((const u16*)x, h.data(), M, K);
        });
        if (group > 0) {
            const int lg = p[10], units = p[11], threads = p[12], gx = p[13];
            const int v = (K % 4 == 0 ? 1 : 0) | ((ldq % 8 == 0) ? 2 : 0);  // as vector_loads
            const unsigned gy = (unsigned)std::min(M, 65535);
            run_grid(Dim3{(unsigned)gx, gy, 1}, threads, 0, [&] {
                quant_groups_c1u1_f32(h.data(), q.data(), s.data(), M, K, ldq, groups, 1, group,
                                      groups, units, lg, v, ue8m0, nullptr, 0);
            });
        } else {
            run_grid(Dim3{(unsigned)std::min(M, 3), 1, 1}, 256, 0, [&] {
                quant_rows_f32(h.data(), q.data(), s.data(), M, K, ldq, nullptr, ue8m0);
            });
        }
    } else if (kind == 0) {
        const int cut = p[9], lg = p[10], units = p[11], threads = p[12], gx = p[13];
        // vec bit 1: 8-byte code stores (the buffer is 8-byte aligned).
        const int v = vec | ((ldq % 8 == 0) ? 2 : 0);
        const unsigned gy = (unsigned)std::min(M, 65535);
        // Masked (p[14] = slab): only the rows under the counts.
        const int slab = p.size() > 14 ? p[14] : 0;
        const int* cnt = slab > 0 ? counts.data() : nullptr;
#define GROUPS(NAME, E) NAME((const E*)x, q.data(), s.data(), M, K, ldq, groups, 1, group, groups, units, lg, v, ue8m0, cnt, slab)
        run_grid(Dim3{(unsigned)gx, gy, 1}, threads, 0, [&] {
            if (cut == 0 && dt == 0) GROUPS(quant_groups_c1u1_f32, float);
            if (cut == 0 && dt == 1) GROUPS(quant_groups_c1u1_f16, u16);
            if (cut == 0 && dt == 2) GROUPS(quant_groups_c1u1_bf16, u16);
            if (cut == 1 && dt == 0) GROUPS(quant_groups_c2u1_f32, float);
            if (cut == 1 && dt == 1) GROUPS(quant_groups_c2u1_f16, u16);
            if (cut == 1 && dt == 2) GROUPS(quant_groups_c2u1_bf16, u16);
            if (cut == 2 && dt == 1) GROUPS(quant_groups_c2u2_f16, u16);
            if (cut == 2 && dt == 2) GROUPS(quant_groups_c2u2_bf16, u16);
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
    if (!h.empty()) fwrite(h.data(), 4, h.size(), o);
    fclose(o);
    return 0;
}
