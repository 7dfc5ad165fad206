//! The host model of the decode block-scaled FP8 GEMM (`cu/decode_gemm.cu`, the M <= 16
//! kernel of `DecodeBlockFp8`): the kernel's own source compiled on the CPU
//! (tests/src/host_model.rs) under the address and undefined-behaviour sanitizers, for both
//! column tiles (M <= 8, M <= 16), split K reduced in the kernel, ragged N and K, vector and
//! element activation loads, bf16 and f32 input, bf16 and f16 output, bias, 128- and 8-row
//! weight blocks. Its fused activation quantization is checked by the output: the reference
//! is the f64 block GEMM of the oracle's quantization of the same activations. Calls must be
//! bit-identical over three block orders (the split reduction is ordered), and the tile
//! counters back to zero. Skips with a printed reason without a C++20 compiler.

use fp8_linear::cuda::sources::decode_module;
use fp8_linear::DType;
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::host_model::{
    block_reference, encode_input, float_index, le, model_outputs, padded_rows,
    random_block_scales, section, HostModel,
};
use fp8_linear_tests::layers::{random_activations, random_codes};
use fp8_linear_tests::oracle::quantize_groups;

const DRIVER: &str = include_str!("../host_model/decode_gemm_main.cpp");
const LAUNCHES: usize = 3;
/// Weight rows per CTA of the kernel.
const ROWS: usize = 256;

/// One module (input and output dtypes, weight block rows) and the calls run on it.
struct Module {
    input: DType,
    output: DType,
    block_rows: usize,
    calls: &'static [Call],
}

/// One call: layer N x K, M rows, K splits, bias.
struct Call {
    n: usize,
    k: usize,
    m: usize,
    splits: usize,
    bias: bool,
}

const MODULES: [Module; 2] = [
    Module {
        input: DType::Bf16,
        output: DType::Bf16,
        block_rows: 128,
        calls: &[
            Call {
                n: 300,
                k: 1000,
                m: 1,
                splits: 1,
                bias: true,
            },
            Call {
                n: 256,
                k: 2048,
                m: 5,
                splits: 4,
                bias: false,
            },
            Call {
                n: 300,
                k: 1001,
                m: 16,
                splits: 3,
                bias: true,
            },
        ],
    },
    Module {
        input: DType::F32,
        output: DType::F16,
        block_rows: 8,
        calls: &[Call {
            n: 200,
            k: 1001,
            m: 9,
            splits: 2,
            bias: true,
        }],
    },
];

fn run_call(model: &HostModel, module: &Module, c: &Call, tag: &str) {
    let (m, n, k) = (c.m, c.n, c.k);
    let kb = k.div_ceil(128);
    let ldw = k.div_ceil(16) * 16;
    let nb = n.div_ceil(module.block_rows);
    let (xb, seen) = encode_input(&random_activations(m, k), module.input);
    let (a, a_scales) = quantize_groups(&seen, m, k, 128);
    let w = random_codes(n * k);
    let w_scales = random_block_scales(nb * kb, (m * 31 + n * 7 + k) as u64);
    let bias: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.5 - 1.0).collect();
    let kbps = kb.div_ceil(c.splits);
    let splits = kb.div_ceil(kbps);
    let vec = usize::from(k.is_multiple_of(8));
    let params: Vec<i32> = [
        m,
        n,
        k,
        ldw,
        kb,
        n.div_ceil(ROWS),
        splits,
        kbps,
        vec,
        usize::from(c.bias),
        LAUNCHES,
    ]
    .iter()
    .map(|&v| v as i32)
    .collect();
    let mut input = Vec::new();
    section(&mut input, &le(&params, |v| v.to_le_bytes()));
    section(&mut input, &xb);
    section(&mut input, &padded_rows(&w, n, k, ldw));
    section(&mut input, &le(&w_scales, |v| v.to_le_bytes()));
    section(&mut input, &le(&bias, |v| v.to_le_bytes()));
    let what = format!(
        "{} -> {} block {}x128: M={m} N={n} K={k} splits={splits} vec={vec} bias {}",
        module.input, module.output, module.block_rows, c.bias
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
        (module.block_rows, 128),
        c.bias.then_some(&bias[..]),
    );
    let cmp = compare(&outs[0], &want, n, Tolerance::cpu(module.output));
    eprintln!("host model {what}: {}", cmp.summary());
    cmp.assert_ok(&what);
}

/// Builds each module of `pick` (indices into [`MODULES`]) under `sanitizers` and runs its
/// first `calls` calls.
fn run_modules(sanitizers: &str, tag: &str, pick: &[usize], calls: usize) {
    for &i in pick {
        let module = &MODULES[i];
        let spec = decode_module(
            (module.block_rows, 128),
            (float_index(module.input), float_index(module.output)),
        );
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
fn the_decode_kernel_source_runs_on_the_host_model() {
    run_modules("address,undefined", "decode-asan", &[0, 1], usize::MAX);
}

/// A split call under the thread sanitizer: the activation quantization's shared-memory
/// writes against the MMA's reads, and the split reduction's publication.
#[test]
fn the_decode_kernel_has_no_shared_memory_race() {
    run_modules("thread", "decode-tsan", &[0], 2);
}
