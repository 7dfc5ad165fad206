//! CPU kernels against the f64 reference on fresh random data, ragged sizes included.

use fp8_linear::cpu::{reference, CpuFp8Gemm, CpuReference};
use fp8_linear::fp8::e4m3_to_f32;
use fp8_linear::{
    DType, KernelEntry, KernelOptions, LayerConfig, LayerWeights, Linear, QuantKey, Registered,
    Target, Tensor, TensorMut,
};
use fp8_linear_tests::layers::{quantize_groups, random_activations, random_block_weight};
use half::{bf16, f16};

const SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (1, 300, 260),
    (7, 129, 127),
    (83, 200, 384),
    (16, 7748 / 8, 3884 / 4),
    (33, 64, 1000),
    (2, 1, 513),
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
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [n.div_ceil(128), k.div_ceil(128)]),
        input_scale: None,
        input_scale_ub: None,
        bias: None,
    };
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

#[test]
fn block_scaled_f32_output_matches_reference_tightly() {
    for entry in [&CpuFp8Gemm::ENTRY, &CpuReference::ENTRY] {
        for &(m, n, k) in &SIZES {
            let (got, want) = run_block(entry, m, n, k, DType::F32);
            let err = reference::rel_frobenius(&got, &want);
            assert!(
                err < 1e-5,
                "{} M={m} N={n} K={k}: rel err {err:e}",
                entry.name
            );
        }
    }
}

#[test]
fn block_scaled_16bit_output_matches_reference() {
    for out in [DType::Bf16, DType::F16] {
        for &(m, n, k) in &SIZES {
            let (got, want) = run_block(&CpuFp8Gemm::ENTRY, m, n, k, out);
            let err = reference::rel_frobenius(&got, &want);
            assert!(err < 1e-2, "{out} M={m} N={n} K={k}: rel err {err:e}");
        }
    }
}

#[test]
fn larger_threaded_shapes_match_reference() {
    // Big enough that the row split and the column split (decode) of the SGEMM both run.
    for (m, n, k) in [(1, 1030, 700), (3, 2050, 515), (130, 520, 300)] {
        let (got, want) = run_block(&CpuFp8Gemm::ENTRY, m, n, k, DType::F32);
        let err = reference::rel_frobenius(&got, &want);
        assert!(err < 1e-5, "M={m} N={n} K={k}: rel err {err:e}");
    }
}

#[test]
fn scaled_and_weight_only_layers_match_reference() {
    let (m, n, k) = (9, 133, 251);
    let x = random_activations(m, k);
    let (w, _) = random_block_weight(n, k, 0);
    let chan: Vec<f32> = (0..n).map(|j| 0.001 + j as f32 * 1e-5).collect();
    let one = [0.0123f32];
    let input_scale = [0.01f32];

    // per-tensor static
    let cfg = LayerConfig::per_tensor_static(n, k, DType::F32, DType::F32);
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&one, [1, 1]),
        input_scale: Some(Tensor::f32(&input_scale, [1, 1])),
        input_scale_ub: None,
        bias: None,
    };
    let mut lin = Linear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &cfg,
        &weights,
        &KernelOptions::none(),
    )
    .unwrap();
    let got = forward_any(&mut lin, &Tensor::f32(&x, [m, k]), m, n, DType::F32);
    let mut q = vec![0u8; m * k];
    fp8_linear::cpu::quantize::per_tensor_into(&x, Some(input_scale[0]), &mut q);
    let want = reference::scaled_gemm_f64(&q, &input_scale, &w, &one, m, n, k);
    assert!(reference::rel_frobenius(&got, &want) < 1e-5);

    // per-token x per-channel, dynamic
    let cfg = LayerConfig::per_token_per_channel(n, k, DType::F32, DType::F32);
    let weights = LayerWeights {
        weight_scale: Tensor::f32(&chan, [n, 1]),
        input_scale: None,
        ..weights
    };
    let mut lin = Linear::with_entry(
        &CpuFp8Gemm::ENTRY,
        &Target::cpu(),
        &cfg,
        &weights,
        &KernelOptions::none(),
    )
    .unwrap();
    let got = forward_any(&mut lin, &Tensor::f32(&x, [m, k]), m, n, DType::F32);
    let mut s = vec![0f32; m];
    fp8_linear::cpu::quantize::per_token_into(&x, k, None, &mut q, &mut s);
    let want = reference::scaled_gemm_f64(&q, &s, &w, &chan, m, n, k);
    assert!(reference::rel_frobenius(&got, &want) < 1e-5);

    // weight-only, bf16 and f16 activations, per-channel weights
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
        let mut lin = Linear::with_entry(
            &CpuFp8Gemm::ENTRY,
            &Target::cpu(),
            &cfg,
            &weights,
            &KernelOptions::none(),
        )
        .unwrap();
        let got = forward_any(&mut lin, &input, m, n, dt);
        let want = reference::weight_only_f64(&xs, &w, m, n, k, |j, _| chan[j]);
        let err = reference::rel_frobenius(&got, &want);
        assert!(err < 1e-2, "{dt}: {err:e}");
    }
}

#[test]
fn bias_is_added() {
    let (m, n, k) = (3, 40, 130);
    let mut cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
    cfg.bias = true;
    let (w, ws) = random_block_weight(n, k, 2);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 - 20.0).collect();
    let weights = LayerWeights {
        weight: Tensor::fp8(&w, [n, k]),
        weight_scale: Tensor::f32(&ws, [1, 2]),
        input_scale: None,
        input_scale_ub: None,
        bias: Some(Tensor::f32(&bias, [1, n])),
    };
    let x = random_activations(m, k);
    for entry in [&CpuFp8Gemm::ENTRY, &CpuReference::ENTRY] {
        let mut lin = Linear::with_entry(
            entry,
            &Target::cpu(),
            &cfg,
            &weights,
            &KernelOptions::none(),
        )
        .unwrap();
        let got = forward_any(&mut lin, &Tensor::f32(&x, [m, k]), m, n, DType::F32);
        let (aq, as_) = quantize_groups(&x, m, k);
        let mut want = reference::block_gemm_f64(&aq, &as_, &w, &ws, m, n, k, (128, 128));
        want.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v += bias[i % n] as f64);
        assert!(
            reference::rel_frobenius(&got, &want) < 1e-5,
            "{}",
            entry.name
        );
    }
}

#[test]
fn reference_gemms_agree_with_each_other() {
    // block_gemm_f64 with uniform scales equals scaled_gemm_f64 with per-tensor scales.
    let (m, n, k) = (5, 70, 300);
    let x = random_activations(m, k);
    let (w, _) = random_block_weight(n, k, 0);
    let (aq, _) = quantize_groups(&x, m, k);
    let a_s = vec![0.5f32; m * 3];
    let b_s = vec![0.25f32; 3];
    let blk = reference::block_gemm_f64(&aq, &a_s, &w, &b_s, m, n, k, (128, 128));
    let sc = reference::scaled_gemm_f64(&aq, &[0.5], &w, &[0.25], m, n, k);
    assert!(
        reference::rel_frobenius(&blk.iter().map(|v| *v as f32).collect::<Vec<_>>(), &sc) < 1e-6
    );
    // And the oracle is not trivially zero.
    assert!(sc.iter().any(|v| *v != 0.0));
    assert!(w.iter().any(|c| e4m3_to_f32(*c) != 0.0));
}
