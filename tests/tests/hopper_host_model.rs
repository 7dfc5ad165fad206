//! The host model of the Hopper block-scaled FP8 GEMM (`cu/hopper_gemm.cu`, the kernel of
//! `HopperBlockFp8` after the activation quantization): the kernel's own source compiled on the
//! CPU (tests/src/host_model.rs) with its TMA loads, mbarriers, cp.async arrivals and wgmma
//! replaced by C++ (tests/host_model/ptx.h), under the address and undefined-behaviour
//! sanitizers (and, for two plans, the thread sanitizer). It checks, without a GPU, the
//! producer / math warpgroup protocol of the stage ring (a wrong barrier count or phase hangs
//! or traps), the persistent walk over work units (a few CTAs, several units each), every tile
//! height (64, 128, 192, 256 rows; the two-set and one-set math loops), narrow, wide and
//! unaligned tile widths, K splits and their in-order sum, the staged and the direct
//! epilogue, rows past M in partial tiles and warpgroups, bias, f32 / f16 / bf16 output and
//! 64x64 blocks, each output against the f64 reference of the same quantized activations, and
//! reruns (the CTAs in another order) bit-identical. Clusters of CTAs are not modelled. Skips
//! with a printed reason when there is no C++20 compiler.

use fp8_linear::cuda::sources::hopper_module;
use fp8_linear::DType;
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::host_model::{
    block_reference, float_index, gemm_input, model_outputs, padded_rows, random_block_scales,
    run_picked, HostModel,
};
use fp8_linear_tests::layers::{random_activations, random_codes};
use fp8_linear_tests::oracle::quantize_groups;

const DRIVER: &str = include_str!("../host_model/hopper_gemm_main.cpp");
const LAUNCHES: usize = 2;

/// One module (weight blocks, output dtype) and the calls run on it.
struct Module {
    block: (usize, usize),
    output: DType,
    calls: &'static [Call],
}

/// One call: M x N x K on `bm` x `bn` tiles, K in `splits` parts, `ctas` persistent CTAs.
struct Call {
    m: usize,
    n: usize,
    k: usize,
    bm: usize,
    bn: usize,
    splits: usize,
    ctas: usize,
    bias: bool,
}

const fn call(m: usize, n: usize, k: usize, tile: (usize, usize), splits: usize) -> Call {
    Call {
        m,
        n,
        k,
        bm: tile.0,
        bn: tile.1,
        splits,
        ctas: 3,
        bias: false,
    }
}

const MODULES: [Module; 3] = [
    Module {
        block: (128, 128),
        output: DType::Bf16,
        calls: &[
            // 16 columns, two K splits (staged partial sums: N % 4 == 0), ragged K.
            Call {
                bias: true,
                ..call(70, 200, 1100, (64, 16), 2)
            },
            // 144 columns (two scale rows), rows of 600 bytes: the direct stores.
            call(1, 300, 700, (64, 144), 1),
            // The two-set loop on 128 rows, the second tile row partial; staged epilogue.
            call(200, 264, 1100, (128, 128), 1),
            // 96 columns (unaligned), three K splits.
            call(130, 200, 500, (128, 96), 3),
            // Three math warpgroups, the third one's rows all past M.
            Call {
                bias: true,
                ..call(65, 260, 600, (192, 128), 1)
            },
            // Two waves of two warpgroups; the second tile row's second warpgroup past M.
            Call {
                bias: true,
                ..call(300, 264, 500, (256, 128), 1)
            },
        ],
    },
    Module {
        block: (128, 128),
        output: DType::F32,
        calls: &[call(40, 136, 900, (128, 64), 2)],
    },
    Module {
        block: (64, 64),
        output: DType::F16,
        calls: &[
            call(96, 200, 700, (256, 128), 1),
            Call {
                bias: true,
                ..call(33, 136, 300, (64, 64), 2)
            },
        ],
    },
];

fn run_call(model: &HostModel, module: &Module, c: &Call, tag: &str) {
    let (m, n, k) = (c.m, c.n, c.k);
    let (rows, cols) = module.block;
    let ldk = k.div_ceil(16) * 16;
    let kbs = k.div_ceil(cols);
    let nbs = n.div_ceil(rows);
    // A 1 x C activation scale per C-wide group, as the quantization kernel writes them for
    // this module (its groups are the weight blocks' columns).
    let (a, a_scales) = quantize_groups(&random_activations(m, k), m, k, cols);
    let mut a_t = vec![0f32; kbs * m];
    for r in 0..m {
        for g in 0..kbs {
            a_t[g * m + r] = a_scales[r * kbs + g];
        }
    }
    let w = random_codes(n * k);
    let ldbs = kbs + 3; // a padded scale row, as a layer's copy may have
    let w_scales = random_block_scales(nbs * kbs, (m * 31 + n * 7 + k) as u64);
    let mut bs = vec![0f32; nbs * ldbs];
    for r in 0..nbs {
        bs[r * ldbs..r * ldbs + kbs].copy_from_slice(&w_scales[r * kbs..(r + 1) * kbs]);
    }
    let bias: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.5 - 1.0).collect();
    let kb = k.div_ceil(128);
    let kbps = kb.div_ceil(c.splits);
    let splits = kb.div_ceil(kbps);
    let units = m.div_ceil(c.bm) * n.div_ceil(c.bn) * splits;
    let params = [
        m,
        n,
        k,
        ldk,
        ldbs,
        c.bm,
        c.bn,
        splits,
        kbps,
        c.ctas.min(units),
        usize::from(c.bias),
        LAUNCHES,
    ];
    let input = gemm_input(
        &params,
        (&padded_rows(&a, m, k, ldk), &a_t),
        (&padded_rows(&w, n, k, ldk), &bs),
        &bias,
    );
    let what = format!(
        "{}x{} blocks -> {}: M={m} N={n} K={k} tile {}x{} splits={splits} bias {}",
        rows, cols, module.output, c.bm, c.bn, c.bias
    );
    let outs = model_outputs(
        model,
        &input,
        tag,
        &what,
        LAUNCHES,
        (m, n),
        module.output,
        true,
    );
    let want = block_reference(
        (&a, &a_scales),
        (&w, &w_scales),
        (m, n, k),
        (rows, cols),
        c.bias.then_some(&bias[..]),
    );
    let cmp = compare(&outs[0], &want, n, Tolerance::cpu(module.output));
    eprintln!("host model {what}: {}", cmp.summary());
    cmp.assert_ok(&what);
}

/// Runs the calls of `pick` (module, call or all) under `sanitizers`.
fn run_modules(sanitizers: &str, tag: &str, pick: &[(usize, Option<usize>)]) {
    run_picked(
        (DRIVER, sanitizers, tag),
        &MODULES,
        pick,
        |m| hopper_module(m.block, float_index(m.output)),
        |m| m.calls,
        run_call,
    );
}

/// Every module and call under the address and undefined-behaviour sanitizers.
#[test]
fn the_hopper_kernel_source_runs_on_the_host_model() {
    run_modules(
        "address,undefined",
        "hopper-asan",
        &[(0, None), (1, None), (2, None)],
    );
}

/// The two-set and the two-wave loops under the thread sanitizer: the stage ring's mbarrier
/// hand-offs, the scale warp's copies and the staged epilogue's shared buffers.
#[test]
fn the_hopper_kernel_has_no_shared_memory_race() {
    run_modules("thread", "hopper-tsan", &[(0, Some(2)), (0, Some(5))]);
}
