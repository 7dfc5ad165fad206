// The host model's driver: runs cu/marlin.cu (KERNEL_INC, the kernel with its device
// primitives swapped for primitives.h) on the CPU for one layer and call, several launches
// in different block orders, and writes every launch's output.
//
//   marlin_host INPUT OUTPUT
//
// INPUT: sections, each a u64 byte count then the bytes: params (i32: m n k ksteps
// steps_per_group groups spg_shift stripes stages x_vec mt bf16 chunks ranges x_offset
// launches has_bias), weight, group scales, channel (f32), bias (f32), x (u16, x_offset
// elements of padding first). OUTPUT: launches x m x n u16. Exit status 3 when a counter is
// not zero after a launch.
#include "shim.h"
#include KERNEL_INC

#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

static std::vector<unsigned char> section(FILE* f) {
    uint64_t n = 0;
    if (fread(&n, 8, 1, f) != 1) __builtin_trap();
    std::vector<unsigned char> v(n);
    if (n && fread(v.data(), 1, n, f) != n) __builtin_trap();
    return v;
}

template <typename T>
static std::vector<T> as(const std::vector<unsigned char>& b) {
    std::vector<T> v(b.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}

typedef void (*Kernel)(Args);

static Kernel kernel_for(int bf16, int mt) {
    const Kernel k[2][4] = {
        {marlin_w8a16_f16_mt1, marlin_w8a16_f16_mt2, marlin_w8a16_f16_mt4, marlin_w8a16_f16_mt8},
        {marlin_w8a16_bf16_mt1, marlin_w8a16_bf16_mt2, marlin_w8a16_bf16_mt4,
         marlin_w8a16_bf16_mt8}};
    const int v = mt == 1 ? 0 : mt == 2 ? 1 : mt == 4 ? 2 : 3;
    return k[bf16 ? 1 : 0][v];
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    const std::vector<int> p = as<int>(section(f));
    // Exact-size heap copies, so that the address sanitizer sees any read past them.
    const std::vector<unsigned char> w = section(f), s = section(f);
    const std::vector<float> chan = as<float>(section(f)), bias = as<float>(section(f));
    const std::vector<unsigned char> xb = section(f);
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
    const U4 *wd = wv.data(), *sd = sv.data();
    const u16* xd = reinterpret_cast<const u16*>(xv.data());
    const bool cuts = ranges != stripes;
    std::vector<float> work(cuts ? (size_t)chunks * ranges * 2 * 512 * mt : 0);
    std::vector<int> counters(cuts ? (size_t)chunks * stripes : 0, 0);
    std::vector<u16> out((size_t)m * n);

    Args a;
    a.w = wd;
    a.s = sd;
    a.chan = chan.data();
    a.bias = has_bias ? bias.data() : nullptr;
    a.x = xd + x_offset;
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
    gridDim = Dim3{(unsigned)chunks, (unsigned)ranges, 1};
    blockDim = Dim3{THREADS, 1, 1};
    std::barrier<> block(THREADS);
    block_barrier = &block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (int i = 0; i < WARPS; i++) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        warp_barrier[i] = warps.back().get();
    }

    // A pool of THREADS workers; the main thread hands them one block at a time.
    std::barrier<> start(THREADS + 1), done(THREADS + 1);
    Dim3 current{0, 0, 0};
    bool quit = false;
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < THREADS; t++) {
        pool.emplace_back([&, t] {
            threadIdx = Dim3{t, 0, 0};
            for (;;) {
                start.arrive_and_wait();
                if (quit) return;
                blockIdx = current;
                kernel(a);
                done.arrive_and_wait();
            }
        });
    }
    FILE* o = fopen(argv[2], "wb");
    int status = 0;
    for (int l = 0; l < launches; l++) {
        std::fill(out.begin(), out.end(), (u16)0xffff);
        // Launch 0 in grid order, 1 reversed, then a fixed shuffle: the last block to reach
        // a cut stripe differs, the output must not.
        std::vector<Dim3> order;
        for (int y = 0; y < ranges; y++)
            for (int x = 0; x < chunks; x++) order.push_back(Dim3{(unsigned)x, (unsigned)y, 0});
        if (l == 1) std::reverse(order.begin(), order.end());
        if (l >= 2)
            for (size_t i = order.size(); i > 1; i--)
                std::swap(order[i - 1], order[(i * 2654435761u + l) % i]);
        for (const Dim3& b : order) {
            current = b;
            start.arrive_and_wait();
            done.arrive_and_wait();
        }
        for (int c : counters)
            if (c != 0) status = 3;
        fwrite(out.data(), 2, out.size(), o);
    }
    fclose(o);
    quit = true;
    start.arrive_and_wait();
    for (auto& t : pool) t.join();
    return status;
}
