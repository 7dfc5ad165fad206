//! CPU kernels (the fast `CpuFp8Gemm` and the f64 `CpuReference`) against the f64
//! formulas on activations quantized by the test oracle (`fp8_linear_tests::oracle`, not
//! the kernels' quantizers), on fresh seeded random data (weight codes over every e4m3
//! code), ragged sizes included. Each output is held to the relative Frobenius bound and
//! to the element bound of its output dtype (`fp8_linear_tests::check`: f32 output 1e-5 of
//! the row's largest output, 16-bit output its rounding plus that); failures print the worst
//! element.

use fp8_linear::cpu::{reference, CpuFp8Gemm, CpuReference};
use fp8_linear::{
    DType, KernelEntry, KernelOptions, LayerConfig, LayerWeights, Linear, QuantKey, Registered,
    Target, Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::layers::{
    quantize_groups, random_activations, random_block_weight, random_codes,
};
use fp8_linear_tests::oracle;
use half::{bf16, f16};

const ENTRIES: [&KernelEntry; 2] = [&CpuFp8Gemm::ENTRY, &CpuReference::ENTRY];

/// M, N, K. N = 1 comes with 9 rows, so the element bound's floor (the RMS of the whole
/// output) is not one or two outputs that may cancel to near zero.
const SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (1, 300, 260),
    (7, 129, 127),
    (83, 200, 384),
    (16, 7748 / 8, 3884 / 4),
    (33, 64, 1000),
    (9, 1, 513),
];

/// Runs `entry` on a block layer with the given output dtype; returns (output as f32,
/// reference).
fn run_block(
    entry: &'static KernelEntry,
    m: usize,
    n: usize,
    k: usize,
    out: DType,
) -> (Vec<f32>, Vec<f64>) {
    let cfg = LayerConfig::block_128(n, k, DType::F32, out);
    let (w, ws) = random_block_weight(n, k, 6);
    let weights = LayerWeights::new(
        Tensor::fp8(&w, [n, k]),
        Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
    );
    let x = random_activations(m, k);
    let mut lin = Linear::with_entry(
        entry,
        &Target::cpu(),
        &cfg,
        &weights,
        &KernelOptions::none(),
    )
    .unwrap();
    let got = forward_any(&mut lin, &Tensor::f32(&x, [m, k]), m, n, out);
    let (aq, as_) = quantize_groups(&x, m, k);
    let want = reference::block_gemm_f64(&aq, &as_, &w, &ws, m, n, k, (128, 128));
    (got, want)
}

/// Runs a layer and returns its output as f32, whatever the output dtype; poisons the
/// output first so unwritten elements show.
fn forward_any(lin: &mut Linear, x: &Tensor<'_>, m: usize, n: usize, out: DType) -> Vec<f32> {
    match out {
        DType::F32 => {
            let mut o = vec![f32::NAN; m * n];
            lin.forward(x, &mut TensorMut::f32(&mut o, [m, n])).unwrap();
            o
        }
        DType::Bf16 => {
            let mut o = vec![bf16::NAN; m * n];
            lin.forward(x, &mut TensorMut::bf16(&mut o, [m, n]))
                .unwrap();
            o.iter().map(|v| v.to_f32()).collect()
        }
        DType::F16 => {
            let mut o = vec![f16::NAN; m * n];
            lin.forward(x, &mut TensorMut::f16(&mut o, [m, n])).unwrap();
            o.iter().map(|v| v.to_f32()).collect()
        }
        DType::F8E4m3 => unreachable!(),
    }
}

/// Checks one output against its reference with the CPU tolerance of `out`; prints the
/// comparison.
fn check(what: &str, got: &[f32], want: &[f64], n: usize, out: DType) {
    let c = compare(got, want, n, Tolerance::cpu(out));
    eprintln!("{what}: {}", c.summary());
    c.assert_ok(what);
}

#[test]
fn block_scaled_f32_output_matches_reference_tightly() {
    for entry in ENTRIES {
        for &(m, n, k) in &SIZES {
            let (got, want) = run_block(entry, m, n, k, DType::F32);
            check(
                &format!("{} M={m} N={n} K={k} f32", entry.name),
                &got,
                &want,
                n,
                DType::F32,
            );
        }
    }
}

#[test]
fn block_scaled_16bit_output_matches_reference() {
    for entry in ENTRIES {
        for out in [DType::Bf16, DType::F16] {
            for &(m, n, k) in &SIZES {
                let (got, want) = run_block(entry, m, n, k, out);
                check(
                    &format!("{} M={m} N={n} K={k} {out}", entry.name),
                    &got,
                    &want,
                    n,
                    out,
                );
            }
        }
    }
}

#[test]
fn larger_threaded_shapes_match_reference() {
    // Big enough that the row split and the column split (decode) of the SGEMM both run.
    for (m, n, k) in [(1, 1030, 700), (3, 2050, 515), (130, 520, 300)] {
        let (got, want) = run_block(&CpuFp8Gemm::ENTRY, m, n, k, DType::F32);
        check(
            &format!("CpuFp8Gemm M={m} N={n} K={k}"),
            &got,
            &want,
            n,
            DType::F32,
        );
    }
}

/// Builds `entry` for `cfg` and runs it on `x` (f32 input); the output as f32.
fn run_layer(
    entry: &'static KernelEntry,
    cfg: &LayerConfig,
    weights: &LayerWeights<'_>,
    input: &Tensor<'_>,
    m: usize,
) -> Vec<f32> {
    let mut lin = Linear::with_entry(entry, &Target::cpu(), cfg, weights, &KernelOptions::none())
        .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    forward_any(&mut lin, input, m, cfg.n, cfg.output_dtype)
}

#[test]
fn scaled_and_weight_only_layers_match_reference() {
    let (m, n, k) = (9, 133, 251);
    let x = random_activations(m, k);
    let w = random_codes(n * k);
    let chan: Vec<f32> = (0..n).map(|j| 0.001 + j as f32 * 1e-5).collect();
    let one = [0.0123f32];
    let input_scale = [0.01f32];
    let xt = Tensor::f32(&x, [m, k]);

    for entry in ENTRIES {
        // per-tensor static (outliers of 30 saturate at 448 * 0.01)
        let cfg = LayerConfig::per_tensor_static(n, k, DType::F32, DType::F32);
        let weights = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&one, [1, 1]))
            .with_input_scale(Tensor::f32(&input_scale, [1, 1]));
        let got = run_layer(entry, &cfg, &weights, &xt, m);
        let (q, s) = oracle::quantize_per_tensor(&x, Some(input_scale[0]));
        let want = reference::scaled_gemm_f64(&q, &[s], &w, &one, m, n, k);
        check(
            &format!("{} per-tensor static", entry.name),
            &got,
            &want,
            n,
            DType::F32,
        );

        // per-tensor dynamic
        let cfg = LayerConfig {
            activation: Some(QuantKey::ACT_PER_TENSOR_DYNAMIC),
            ..cfg
        };
        let weights = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&one, [1, 1]));
        let got = run_layer(entry, &cfg, &weights, &xt, m);
        let (q, s) = oracle::quantize_per_tensor(&x, None);
        let want = reference::scaled_gemm_f64(&q, &[s], &w, &one, m, n, k);
        check(
            &format!("{} per-tensor dynamic", entry.name),
            &got,
            &want,
            n,
            DType::F32,
        );

        // per-token x per-channel, dynamic, without and with an upper bound (2.0 clips the
        // rows with an outlier)
        let cfg = LayerConfig::per_token_per_channel(n, k, DType::F32, DType::F32);
        let ub = [2.0f32];
        for bound in [None, Some(&ub)] {
            let mut weights =
                LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&chan, [n, 1]));
            if let Some(b) = bound {
                weights.input_scale_ub = Some(Tensor::f32(b, [1, 1]));
            }
            let got = run_layer(entry, &cfg, &weights, &xt, m);
            let (q, s) = oracle::quantize_per_token(&x, m, k, bound.map(|b| b[0]));
            let want = reference::scaled_gemm_f64(&q, &s, &w, &chan, m, n, k);
            check(
                &format!("{} per-token, ub {bound:?}", entry.name),
                &got,
                &want,
                n,
                DType::F32,
            );
        }

        // weight-only, bf16, f16 and f32 activations, per-channel weights
        let weights = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&chan, [n, 1]));
        for dt in [DType::Bf16, DType::F16, DType::F32] {
            let cfg = LayerConfig::weight_only(QuantKey::WEIGHT_PER_CHANNEL, n, k, dt);
            let xb: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
            let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
            let (input, xs): (Tensor<'_>, Vec<f32>) = match dt {
                DType::Bf16 => (
                    Tensor::bf16(&xb, [m, k]),
                    xb.iter().map(|v| v.to_f32()).collect(),
                ),
                DType::F16 => (
                    Tensor::f16(&xh, [m, k]),
                    xh.iter().map(|v| v.to_f32()).collect(),
                ),
                _ => (Tensor::f32(&x, [m, k]), x.clone()),
            };
            let got = run_layer(entry, &cfg, &weights, &input, m);
            let want = reference::weight_only_f64(&xs, &w, m, n, k, |j, _| chan[j]);
            check(
                &format!("{} weight-only {dt}", entry.name),
                &got,
                &want,
                n,
                dt,
            );
        }
    }
}

#[test]
fn bias_is_added() {
    let (m, n, k) = (3, 40, 130);
    let mut cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
    cfg.bias = true;
    let (w, ws) = random_block_weight(n, k, 2);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 - 20.0).collect();
    let weights = LayerWeights::new(Tensor::fp8(&w, [n, k]), Tensor::f32(&ws, [1, 2]))
        .with_bias(Tensor::f32(&bias, [1, n]));
    let x = random_activations(m, k);
    for entry in ENTRIES {
        let got = run_layer(entry, &cfg, &weights, &Tensor::f32(&x, [m, k]), m);
        let (aq, as_) = quantize_groups(&x, m, k);
        let mut want = reference::block_gemm_f64(&aq, &as_, &w, &ws, m, n, k, (128, 128));
        want.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v += f64::from(bias[i % n]));
        check(&format!("{} bias", entry.name), &got, &want, n, DType::F32);
    }
}

#[test]
fn reference_gemms_agree_with_each_other() {
    // block_gemm_f64 with uniform scales equals scaled_gemm_f64 with per-tensor scales.
    let (m, n, k) = (5, 70, 300);
    let x = random_activations(m, k);
    let w = random_codes(n * k);
    let (aq, _) = quantize_groups(&x, m, k);
    let a_s = vec![0.5f32; m * 3];
    let b_s = vec![0.25f32; 3];
    let blk = reference::block_gemm_f64(&aq, &a_s, &w, &b_s, m, n, k, (128, 128));
    let sc = reference::scaled_gemm_f64(&aq, &[0.5], &w, &[0.25], m, n, k);
    let f32s: Vec<f32> = blk.iter().map(|v| *v as f32).collect();
    compare(&f32s, &sc, n, Tolerance::exact(1e-6, 1e-7)).assert_ok("block vs scaled");
    // And the oracle is not trivially zero.
    assert!(sc.iter().any(|v| *v != 0.0));
    assert!(w.iter().any(|c| oracle::value(*c) != Some(0.0)));
}

#[test]
fn the_check_fails_a_kernel_that_is_slightly_wrong() {
    // The bounds can fail: the right output with one element nudged by three times its
    // bound (in the row of smallest outputs, so the Frobenius error barely moves) fails,
    // and so does an output with a wrong scale (0.1 %) in one row.
    let (m, n, k) = (40, 300, 260);
    let (got, want) = run_block(&CpuFp8Gemm::ENTRY, m, n, k, DType::F32);
    let tol = Tolerance::cpu(DType::F32);
    assert!(compare(&got, &want, n, tol).ok());
    let rms = (want.iter().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
    let row_max = |r: usize| {
        want[r * n..(r + 1) * n]
            .iter()
            .fold(0f64, |a, v| a.max(v.abs()))
    };
    let r = (0..m)
        .min_by(|&a, &b| row_max(a).total_cmp(&row_max(b)))
        .unwrap();
    let c = 11;
    let bound = tol.atol + tol.round * want[r * n + c].abs() + tol.rtol * row_max(r).max(rms);
    let mut nudged = got.clone();
    nudged[r * n + c] += (3.0 * bound) as f32;
    let cmp = compare(&nudged, &want, n, tol);
    assert!(cmp.frob < tol.frob, "{}", cmp.summary());
    assert!(!cmp.ok(), "{}", cmp.summary());
    let w = cmp.worst.unwrap();
    assert_eq!((w.row, w.col), (r, c), "{}", cmp.summary());
    let mut scaled = got;
    scaled[3 * n..4 * n].iter_mut().for_each(|v| *v *= 1.001);
    assert!(!compare(&scaled, &want, n, tol).ok());
}
