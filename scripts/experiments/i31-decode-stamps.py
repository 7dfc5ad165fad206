#!/usr/bin/env python3
"""Development stamps of the decode kernel: where each CTA's time goes, in one launch of 32.

  scripts/experiments/i31-decode-stamps.py make SRC_DIR DST_DIR  # a stamped copy of
                                                                 # kernels/src/cuda/cu
  scripts/experiments/i31-decode-stamps.py summary STAMPS.txt    # one line per launch

For the decode kernel of i31-wgmma-decode.patch (its anchors are that source's text).

`make` copies the kernel sources and patches decode_gemm.cu: the dump kernel the host
launches after each GEMM (FP8_LINEAR_STAMPS) counts the launches and marks every 32nd to
record; in a marked launch thread 0 of every CTA records, and the dump prints one line per
CTA: its SM, the global timer at its start and end (ns), and the SM clock
(clock64, from its start) when its first weight loads were issued (L), when
griddepcontrol.wait returned (W), when the activations were quantized and the CTA's barrier
passed (Q), when thread 0 began its share's last batch (S: every load issued), when it began
its last segment's output (A: the last MMA promoted) and at its end (E).
(The stamped m16 kernel spills a few registers: its loop times are an upper bound.)
The patch matches the source's text exactly and stops with the line it did not find when
the source moved on.

On the GPU host, with a bundle built with the `dev-sources` feature (scripts/gpu-bundle.sh):

  FP8_LINEAR_CU_DIR=DST_DIR FP8_LINEAR_STAMPS=1 gpu-bundle/unpacked/benches/decode > stamps.txt

Then `summary stamps.txt`: per recorded launch (M, N x K, grid, splits) the spread of the
CTAs' starts, the span from the first start to the last end, the median and last CTA time
(ns), and the medians over CTAs of each phase in ns (cycles scaled by each CTA's own
ns-per-cycle: its global-timer time over its clock64 time): prologue to the wait (L, W),
quantization (Q - W), the stream up to the last batch (S - Q), the rate per SM over the
whole stream (the share's weight bytes over A - Q), the last batch (A - S) and the last
segment's output (E - A: partial stores, the arrival, the sum of a tile's last CTA).
"""
import collections
import statistics as stt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stamps_common import cli, copy_stamped  # noqa: E402

# (text of decode_gemm.cu, its replacement)
PATCHES = [
    ("typedef In<DEC_IN>::E InE;\n", """typedef In<DEC_IN>::E InE;

// Development stamps (scripts/experiments/i31-decode-stamps.py): thread 0 of every CTA of one launch in 32.
#define DST_MAX 2048
__device__ unsigned dst_launch_no;  // GEMM launches of this module so far (the dump counts)
__device__ int dst_record;          // whether the next GEMM launch records (the dump sets it)
__device__ int dst_hdr[6];          // launch, M, N, K, grid x, grid y of the recorded launch
__device__ unsigned dst_ready;      // CTAs recorded
__device__ long long dst_rec[DST_MAX][9];  // smid, start and end ns, then L W Q S A E cycles
__device__ __forceinline__ long long dst_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (long long)t;
}
#define DSTAMP(i) if (threadIdx.x == 0) dst_c[i] = clock64() - dst_c[0];
#define DSTAMP_SAVE()                                                                       \\
    if (threadIdx.x == 0 && dst_on) {                                         \\
        const int cta = blockIdx.y * gridDim.x + blockIdx.x;                                  \\
        if (cta < DST_MAX) {                                                                 \\
            unsigned smid;                                                                   \\
            asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));                                 \\
            long long* r = dst_rec[cta];                                                     \\
            r[0] = smid; r[1] = dst_g0; r[2] = dst_gtime();                                  \\
            for (int i = 1; i < 6; ++i) r[2 + i] = dst_c[i];                                 \\
            r[8] = clock64() - dst_c[0];                                                     \\
        }                                                                                    \\
        if (cta == 0) {                                                                      \\
            dst_hdr[0] = dst_launch_no; dst_hdr[1] = M; dst_hdr[2] = N; dst_hdr[3] = K;         \\
            dst_hdr[4] = gridDim.x; dst_hdr[5] = gridDim.y;                                  \\
        }                                                                                    \\
        __threadfence();                                                                     \\
        atomicAdd(&dst_ready, 1u);                                                           \\
    }
"""),
    ("    uint4 wb[DEPTH][4];\n", """    long long dst_c[6] = {0, 0, 0, 0, 0, 0};
    long long dst_g0 = 0;
    int dst_on = 0;
    if (threadIdx.x == 0) {
        dst_c[0] = clock64();
        dst_g0 = dst_gtime();
    }
    uint4 wb[DEPTH][4];
"""),
    ("    griddep_wait();\n", "    DSTAMP(1)\n    griddep_wait();\n    DSTAMP(2)\n"
     "    if (threadIdx.x == 0) dst_on = *(volatile int*)&dst_record;\n"),
    ("    __syncthreads();\n\n    for (int i0 = 0;",
     "    __syncthreads();\n    DSTAMP(3)\n\n    for (int i0 = 0;"),
    ("        if (i0 + DEPTH >= len) griddep_launch_dependents();\n",
     "        if (i0 + DEPTH >= len) {\n            DSTAMP(4)\n            griddep_launch_dependents();\n        }\n"),
    ("                if (at.kb == KB - 1 || i == len - 1)\n",
     "                if (i == len - 1) {\n                    DSTAMP(5)\n                }\n"
     "                if (at.kb == KB - 1 || i == len - 1)\n"),
    ("        cur.next(DEPTH, KB);\n    }\n}\n", "        cur.next(DEPTH, KB);\n    }\n    DSTAMP_SAVE()\n}\n"),
]
DUMP = """
// Prints (and clears) the recorded launch's CTAs; the host launches it, <<<1, 1>>>, after each
// decode GEMM when FP8_LINEAR_STAMPS is set (development knob).
extern "C" __global__ void decode_stamps_dump() {
    const int ctas = dst_hdr[4] * dst_hdr[5];
    if (dst_record && ctas > 0 && dst_ready == (unsigned)ctas) {
        for (int c = 0; c < ctas && c < DST_MAX; ++c) {
            const long long* r = dst_rec[c];
            printf("DSTAMP %d %d %d %d %d %d %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld\\n",
                   dst_hdr[0], dst_hdr[1], dst_hdr[2], dst_hdr[3], dst_hdr[4], dst_hdr[5],
                   c % dst_hdr[4], c / dst_hdr[4], r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                   r[7], r[8]);
        }
    }
    dst_ready = 0;
    dst_hdr[4] = 0;
    dst_launch_no += 1;
    dst_record = dst_launch_no % 32 == 16;
}
"""


def make(src, dst):
    copy_stamped(src, dst, "decode_gemm.cu", [(old, new, 1) for old, new in PATCHES], DUMP)


def summary(path):
    launches = collections.defaultdict(list)
    for line in open(path, errors="replace"):
        if not line.startswith("DSTAMP "):
            continue
        v = line.split()[1:]
        if len(v) != 17:
            continue
        launch, m, n, k, gx, gy, bx, by, sm = map(int, v[:9])
        g0, g1 = int(v[9]), int(v[10])
        c = [int(x) for x in v[11:]]
        launches[(launch, m, n, k, gx, gy)].append((bx, by, sm, g0, g1, c))
    print("launch M NxK CTAs | starts-spread span | CTA med/last | "
          "pre wait quant stream (GB/s/SM) last-batch out  [ns, medians over CTAs]")
    for (launch, m, n, k, gx, gy), ctas in sorted(launches.items()):
        if len(ctas) != gx * gy:
            print(f"{launch} M={m} {n}x{k}: {len(ctas)} of {gx * gy} CTAs printed, skipped")
            continue
        t0 = min(x[3] for x in ctas)
        span = max(x[4] for x in ctas) - t0
        spread = max(x[3] for x in ctas) - t0
        times = [x[4] - x[3] for x in ctas]
        total = -(-n // 256) * -(-k // 128)
        ph = collections.defaultdict(list)
        for bx, by, sm, g0, g1, (l, w, q, s4, a, e) in ctas:
            npc = (g1 - g0) / e if e > 0 else 0.0
            ph["pre"].append(l * npc)
            ph["wait"].append((w - l) * npc)
            ph["quant"].append((q - w) * npc)
            ph["stream"].append((s4 - q) * npc)
            ph["batch"].append((a - s4) * npc)
            ph["out"].append((e - a) * npc)
            blocks = total // gx + (bx < total % gx)
            if a > q:
                ph["rate"].append(blocks * 256 * 128 / ((a - q) * npc))
        med = {key: stt.median(val) for key, val in ph.items()}
        print(f"{launch} M={m} {n}x{k} {gx} | {spread} {span} | {stt.median(times):.0f}/"
              f"{max(times)} | {med['pre']:.0f} {med['wait']:.0f} {med['quant']:.0f} "
              f"{med['stream']:.0f} ({med.get('rate', 0):.1f}) {med['batch']:.0f} {med['out']:.0f}")


if __name__ == "__main__":
    cli(make, summary, __doc__)
