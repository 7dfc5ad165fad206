// The host model's driver for cu/marlin.cu (the Marlin W8A16 GEMM): runs one call several
// times, the blocks in a different order each time, and writes every call's output.
//
//   model INPUT OUTPUT
//
// INPUT sections (u64 byte count, bytes): params (i32: m n k ksteps steps_per_group groups
// spg_shift stripes stages x_vec mt bf16 chunks ranges x_offset launches has_bias), weight,
// group scales, channel (f32), bias (f32), x (u16, x_offset elements of padding first).
// Grouped (the module built with -DMARLIN_GROUPED: E experts' weights, scales, channel scales
// and biases stacked): the params go on (experts n_items m_max counters, counters 0 when no
// stripe is cut), and three more sections follow: the item table (i32 triples, empty when
// masked), the counts (i32, masked only) and the routing weights (f32, may be empty).
// OUTPUT: launches x m x n u16. Exit status 3 when a counter is not zero after a call.
#include "cuda.h"
#include "ptx.h"
#include KERNEL_INC

#ifdef MARLIN_GROUPED
typedef void (*Kernel)(Args, Groups);
#else
typedef void (*Kernel)(Args);
#endif

static Kernel kernel_for(int bf16, int mt) {
    const Kernel k[2][4] = {{KNAME(f16_mt1), KNAME(f16_mt2), KNAME(f16_mt4), KNAME(f16_mt8)},
                            {KNAME(bf16_mt1), KNAME(bf16_mt2), KNAME(bf16_mt4), KNAME(bf16_mt8)}};
    const int v = mt == 1 ? 0 : mt == 2 ? 1 : mt == 4 ? 2 : 3;
    return k[bf16 ? 1 : 0][v];
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    const std::vector<int> p = section_as<int>(read_section(f));
    // Exact-size heap copies, so that the address sanitizer sees any read past them.
    const std::vector<unsigned char> w = read_section(f), s = read_section(f);
    const std::vector<float> chan = section_as<float>(read_section(f));
    const std::vector<float> bias = section_as<float>(read_section(f));
    const std::vector<unsigned char> xb = read_section(f);
#ifdef MARLIN_GROUPED
    const std::vector<int> items = section_as<int>(read_section(f));
    const std::vector<int> counts = section_as<int>(read_section(f));
    const std::vector<float> rw = section_as<float>(read_section(f));
#endif
    fclose(f);
    const int m = p[0], n = p[1], k = p[2], stripes = p[7], stages = p[8], mt = p[10];
    const int bf16 = p[11], chunks = p[12], ranges = p[13], x_offset = p[14], launches = p[15];
    const int has_bias = p[16];
    std::vector<U4> wv(w.size() / 16), sv(s.size() / 16);
    std::memcpy(wv.data(), w.data(), w.size());
    std::memcpy(sv.data(), s.data(), s.size());
    // x in a 16-byte aligned buffer, starting x_offset elements in.
    std::vector<U4> xv((xb.size() + 15) / 16);
    std::memcpy(xv.data(), xb.data(), xb.size());
#ifdef MARLIN_GROUPED
    const int n_counters = p[20];
    const bool cuts = n_counters > 0;
    std::vector<u32> counters(n_counters, 0);
    const Groups g{items.empty() ? nullptr : items.data(), counts.empty() ? nullptr : counts.data(),
                   rw.empty() ? nullptr : rw.data(), p[18], p[17], p[19]};
#else
    const bool cuts = ranges != stripes;
    std::vector<u32> counters(cuts ? (size_t)chunks * stripes : 0, 0);
#endif
    std::vector<float> work(cuts ? (size_t)chunks * ranges * 2 * 1024 * mt : 0);
    std::vector<u16> out((size_t)m * n);

    Args a;
    a.w = wv.data();
    a.s = sv.data();
    a.chan = chan.data();
    a.bias = has_bias ? bias.data() : nullptr;
    a.x = reinterpret_cast<const u16*>(xv.data()) + x_offset;
    a.out = out.data();
    a.work = cuts ? work.data() : nullptr;
    a.counters = cuts ? counters.data() : nullptr;
    a.m = m;
    a.n = n;
    a.k = k;
    a.ldx = k;
    a.ldo = n;
    a.ksteps = p[3];
    a.steps_per_group = p[4];
    a.groups = p[5];
    a.spg_shift = p[6];
    a.stripes = stripes;
    a.stages = stages;
    a.x_vec = p[9];

    const Kernel kernel = kernel_for(bf16, mt);
    FILE* o = fopen(argv[2], "wb");
    int status = 0;
    for (int l = 0; l < launches; l++) {
        std::fill(out.begin(), out.end(), (u16)0xffff);
#ifdef MARLIN_GROUPED
        run_grid(Dim3{(unsigned)chunks, (unsigned)ranges, 1}, THREADS, l, [&] { kernel(a, g); });
#else
        run_grid(Dim3{(unsigned)chunks, (unsigned)ranges, 1}, THREADS, l, [&] { kernel(a); });
#endif
        for (u32 c : counters)
            if (c != 0) status = 3;
        fwrite(out.data(), 2, out.size(), o);
    }
    fclose(o);
    return status;
}
