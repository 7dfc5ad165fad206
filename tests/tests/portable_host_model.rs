//! The host model of the portable block-scaled FP8 GEMM (`cu/block_gemm.cu`, the kernel of
//! `PortableBlockFp8`): the kernel's own source compiled on the CPU (tests/src/host_model.rs)
//! under the address and undefined-behaviour sanitizers, for each tile height (MT 1, 2, 4),
//! 2-4 pipeline stages, 128- and 32-row weight blocks, split and unsplit K (the
//! last split's in-kernel reduction, which must leave its workspace zero), ragged M, N and K, f32 / f16 / bf16 output and bias. Each output is
//! checked against the f64 block-scaled reference of the same FP8 codes and scales; unsplit
//! calls must also be bit-identical over three block orders. Skips with a printed reason
//! without a C++20 compiler.

use fp8_linear::cuda::sources::block_gemm_module;
use fp8_linear::DType;
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::host_model::{
    block_reference, float_index, gemm_input, model_outputs, padded_rows, random_block_scales,
    HostModel,
};
use fp8_linear_tests::layers::{random_activations, random_codes};
use fp8_linear_tests::oracle::quantize_groups;

const DRIVER: &str = include_str!("../host_model/block_gemm_main.cpp");
const LAUNCHES: usize = 3;

/// One module (tile height, stages, weight block rows) and the calls run on it.
struct Module {
    mt: u32,
    stages: u32,
    block_rows: usize,
    calls: &'static [Call],
}

/// One call: layer N x K, M rows, K splits, output dtype, bias, and whether one weight block
/// scale is zero and one activation group all zeros (K >= 256).
struct Call {
    n: usize,
    k: usize,
    m: usize,
    splits: usize,
    out: DType,
    bias: bool,
    zero_blocks: bool,
}

const MODULES: [Module; 4] = [
    Module {
        mt: 1,
        stages: 4,
        block_rows: 128,
        calls: &[
            Call {
                n: 200,
                k: 300,
                m: 20,
                splits: 1,
                out: DType::Bf16,
                bias: true,
                zero_blocks: false,
            },
            Call {
                n: 128,
                k: 1024,
                m: 1,
                splits: 3,
                out: DType::F32,
                bias: false,
                zero_blocks: false,
            },
        ],
    },
    Module {
        mt: 2,
        stages: 3,
        block_rows: 128,
        calls: &[
            Call {
                n: 130,
                k: 520,
                m: 50,
                splits: 2,
                out: DType::F32,
                bias: true,
                zero_blocks: true,
            },
            // Split tiles on a 3 x 2 grid: each tile's own counter and sums.
            Call {
                n: 260,
                k: 640,
                m: 70,
                splits: 2,
                out: DType::F16,
                bias: true,
                zero_blocks: false,
            },
        ],
    },
    Module {
        mt: 4,
        stages: 2,
        block_rows: 128,
        calls: &[Call {
            n: 260,
            k: 256,
            m: 140,
            splits: 1,
            out: DType::F16,
            bias: false,
            zero_blocks: false,
        }],
    },
    Module {
        mt: 1,
        stages: 4,
        block_rows: 32,
        calls: &[Call {
            n: 100,
            k: 384,
            m: 9,
            splits: 3,
            out: DType::Bf16,
            bias: true,
            zero_blocks: false,
        }],
    },
];

fn run_call(model: &HostModel, module: &Module, c: &Call, tag: &str) {
    let (m, n, k) = (c.m, c.n, c.k);
    let kb = k.div_ceil(128);
    let kp = k.div_ceil(16) * 16;
    let nb = n.div_ceil(module.block_rows);
    let mut x = random_activations(m, k);
    let w = random_codes(n * k);
    let mut w_scales = random_block_scales(nb * kb, (m * 31 + n * 7 + k) as u64);
    if c.zero_blocks {
        // K block 1 of row 0 all zeros (the quantizer's smallest scale), weight block (0, 1)
        // scaled by zero (its codes stay random: its products must not count).
        x[128..256].iter_mut().for_each(|v| *v = 0.0);
        w_scales[1] = 0.0;
    }
    let (a, a_scales) = quantize_groups(&x, m, k, 128);
    let bias: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.5 - 1.0).collect();
    let bm = 32 * module.mt as usize;
    let kb_per_split = kb.div_ceil(c.splits);
    let splits = kb.div_ceil(kb_per_split);
    let out_index = float_index(c.out);
    let params = [
        m,
        n,
        k,
        kp,
        n.div_ceil(128),
        m.div_ceil(bm),
        splits,
        kb_per_split,
        out_index,
        usize::from(c.bias),
        LAUNCHES,
    ];
    let input = gemm_input(
        &params,
        (&padded_rows(&a, m, k, kp), &a_scales),
        (&padded_rows(&w, n, k, kp), &w_scales),
        &bias,
    );
    let what = format!(
        "MT={} stages={} block {}x128: M={m} N={n} K={k} splits={splits} {} bias {} zero blocks {}",
        module.mt, module.stages, module.block_rows, c.out, c.bias, c.zero_blocks
    );
    // (Split K adds with atomics: the order, so the bits, may differ between launches.)
    let outs = model_outputs(
        model,
        &input,
        tag,
        &what,
        LAUNCHES,
        (m, n),
        c.out,
        splits == 1,
    );
    let want = block_reference(
        (&a, &a_scales),
        (&w, &w_scales),
        (m, n, k),
        (module.block_rows, 128),
        c.bias.then_some(&bias[..]),
    );
    for (l, got) in outs.iter().enumerate() {
        let cmp = compare(got, &want, n, Tolerance::cpu(c.out));
        if l == 0 {
            eprintln!("host model {what}: {}", cmp.summary());
        }
        cmp.assert_ok(&format!("{what}, launch {l}"));
    }
}

/// Builds each module of `pick` (indices into [`MODULES`]) under `sanitizers` and runs its
/// first `calls` calls.
fn run_modules(sanitizers: &str, tag: &str, pick: &[usize], calls: usize) {
    for &i in pick {
        let module = &MODULES[i];
        let spec = block_gemm_module(module.mt, module.stages, 1, (module.block_rows, 128));
        let Some(model) = HostModel::build(&format!("{tag}{i}"), DRIVER, &spec, sanitizers) else {
            return;
        };
        for (j, c) in module.calls.iter().take(calls).enumerate() {
            run_call(&model, module, c, &format!("call{j}"));
        }
    }
}

/// Every module and call under the address and undefined-behaviour sanitizers.
#[test]
fn the_portable_kernel_source_runs_on_the_host_model() {
    run_modules(
        "address,undefined",
        "portable-asan",
        &[0, 1, 2, 3],
        usize::MAX,
    );
}

/// The 2-, 3- and 4-stage pipelines and the split-K reduction under the thread sanitizer: a
/// shared-memory access that no barrier orders against another thread's is reported.
#[test]
fn the_portable_kernel_has_no_shared_memory_race() {
    run_modules("thread", "portable-tsan", &[0, 1, 2], 1);
}
