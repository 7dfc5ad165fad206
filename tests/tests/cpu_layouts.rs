//! Every FP8 checkpoint layout on every CPU kernel: weight blocks of 32x32, 64x64, 128x64,
//! 64x128 and 128x128, with f32 or ue8m0 (power-of-two) scales, on ragged sizes (N and K
//! multiples of no block side), M = 1 and 7 (the decode path of `CpuFp8Gemm`) and 33 (its
//! SGEMM path). Every CPU kernel entry of the built-in tables that accepts the layer runs it
//! through `Linear::with_entry`, and its output is held to its tolerance
//! (`fp8_linear_tests::check`) against two references: the f64 oracle kernel
//! (`CpuReference`, through `fp8_linear_tests::layers::reference_rows`) and the f64 block
//! formula (`reference::block_gemm_f64`) on activations quantized by a third, test-only
//! statement of the spec (the test oracle of `fp8_linear_tests::oracle`, whose ue8m0 rule
//! searches the powers of two). The quantizers themselves are checked bit for bit
//! against that statement, the ue8m0 scales are checked to be powers of two, and the ue8m0
//! output is checked to differ from the f32-scale output beyond the tolerance (so the flag
//! is really used, and the check can fail).

use fp8_linear::cpu::host::{ActScratch, HostWeights};
use fp8_linear::cpu::{quantize, reference, CpuFp8Gemm, CpuReference};
use fp8_linear::tables::BUILTIN;
use fp8_linear::{
    bf16, DType, GroupShape, KernelEntry, KernelOptions, LayerConfig, Linear, Platform, QuantKey,
    Registered, ScaleDtype, Target, Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::layers::{
    block_config, nasty_activations, random_activations, reference_rows, HostLayer, WeightGen,
};
use fp8_linear_tests::oracle;

/// `[rows along N, cols along K]` of every layout under test.
const BLOCKS: [(u32, u32); 5] = [(32, 32), (64, 64), (128, 64), (64, 128), (128, 128)];

/// M, N, K: N = 200 and K = 971 are multiples of no block side (ragged last block row and
/// column for every block), N = 57 and K = 45 are below some block sides (a single ragged
/// block); M = 1 and 7 take `CpuFp8Gemm`'s decode path, 33 its SGEMM path.
const SIZES: [(usize, usize, usize); 4] =
    [(1, 200, 971), (7, 200, 971), (33, 200, 971), (7, 57, 45)];

/// How the scales of a layout are stored: the weight key's and the activation key's scale
/// dtypes. ue8m0 checkpoints with f32-stored power-of-two weight scales have an f32 weight
/// key and ue8m0 activations; e8m0-stored weight scales make the weight key ue8m0 too.
const SCALE_MODES: [(ScaleDtype, ScaleDtype); 3] = [
    (ScaleDtype::F32, ScaleDtype::F32),
    (ScaleDtype::F32, ScaleDtype::Ue8m0),
    (ScaleDtype::Ue8m0, ScaleDtype::Ue8m0),
];

fn pow2(fmt: ScaleDtype) -> bool {
    fmt == ScaleDtype::Ue8m0
}

fn is_pow2(s: f32) -> bool {
    s > 0.0 && s.is_finite() && s.to_bits() & 0x7f_ffff == 0
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A random layer for `cfg`; its weight scales are powers of two when either key is ue8m0
/// (as ue8m0 checkpoints store them).
fn random_layer(cfg: &LayerConfig) -> HostLayer {
    let mut layer = HostLayer::random(cfg, WeightGen::Spread(6));
    let ue8m0 = |k: Option<QuantKey>| k.is_some_and(|k| k.scale_dtype == ScaleDtype::Ue8m0);
    if ue8m0(Some(cfg.weight)) || ue8m0(cfg.activation) {
        layer.scales.iter_mut().for_each(|s| *s = oracle::ue8m0(*s));
    }
    layer
}

/// Every CPU kernel entry of the built-in tables that accepts `cfg`, each once.
fn cpu_entries(cfg: &LayerConfig) -> Vec<&'static KernelEntry> {
    let mut v: Vec<&'static KernelEntry> = Vec::new();
    for t in BUILTIN
        .tables()
        .iter()
        .filter(|t| t.platform == Platform::Cpu)
    {
        for e in t.entries {
            if (e.can_implement)(cfg).is_ok() && !v.iter().any(|x| x.name == e.name) {
                v.push(e);
            }
        }
    }
    // Both built-in CPU kernels must take every layout here: no silent skips.
    for want in [CpuFp8Gemm::NAME, CpuReference::NAME] {
        assert!(
            v.iter().any(|e| e.name == want),
            "{want} refuses {cfg}: {:?}",
            (CpuFp8Gemm::ENTRY.can_implement)(cfg)
        );
    }
    v
}

/// Runs `entry` on the layer (f32 input `[m, k]`); the output as f32, poisoned first so an
/// unwritten element shows as NaN.
fn run(entry: &'static KernelEntry, layer: &HostLayer, x: &[f32], m: usize) -> Vec<f32> {
    let c = &layer.config;
    let mut lin = Linear::with_entry(
        entry,
        &Target::cpu(),
        c,
        &layer.weights(),
        &KernelOptions::none(),
    )
    .unwrap_or_else(|e| panic!("{} on {c}: {e}", entry.name));
    let input = Tensor::f32(x, [m, c.k]);
    match c.output_dtype {
        DType::Bf16 => {
            let mut o = vec![bf16::NAN; m * c.n];
            lin.forward(&input, &mut TensorMut::bf16(&mut o, [m, c.n]))
                .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
            o.iter().map(|v| v.to_f32()).collect()
        }
        _ => {
            let mut o = vec![f32::NAN; m * c.n];
            lin.forward(&input, &mut TensorMut::f32(&mut o, [m, c.n]))
                .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
            o
        }
    }
}

/// The f64 block formula on activations quantized by the test oracle, per the layer's
/// activation key.
fn block_formula(layer: &HostLayer, x: &[f32], m: usize) -> Vec<f64> {
    let c = &layer.config;
    let (GroupShape::Block { rows, cols }, Some(a)) = (c.weight.group, c.activation) else {
        panic!("a block layer");
    };
    let (q, s) = oracle::quantize_groups_as(x, m, c.k, cols as usize, pow2(a.scale_dtype));
    reference::block_gemm_f64(
        &q,
        &s,
        &layer.codes,
        &layer.scales,
        m,
        c.n,
        c.k,
        (rows as usize, cols as usize),
    )
}

/// The two references of a block layer on `x` `[m, k]`: the oracle kernel (`CpuReference`)
/// and the block formula on oracle-quantized activations. Both CPU kernels have the
/// layer's own numerics, so one pair serves every entry.
struct References {
    oracle_kernel: Vec<f64>,
    formula: Vec<f64>,
}

impl References {
    fn of(layer: &HostLayer, x: &[f32], m: usize) -> Self {
        let rows: Vec<usize> = (0..m).collect();
        References {
            oracle_kernel: reference_rows(&layer.config, layer, x, m, &rows)
                .unwrap_or_else(|e| panic!("CpuReference on {}: {e}", layer.config)),
            formula: block_formula(layer, x, m),
        }
    }

    /// Checks `got` against both with `entry`'s tolerance.
    fn check(&self, what: &str, entry: &KernelEntry, layer: &HostLayer, got: &[f32]) {
        let c = &layer.config;
        assert_eq!(entry.reference_config(c), *c, "{what}: W8A8 numerics");
        let tol = Tolerance::for_kernel(entry, c);
        compare(got, &self.oracle_kernel, c.n, tol).assert_ok(&format!("{what} vs CpuReference"));
        compare(got, &self.formula, c.n, tol).assert_ok(&format!(
            "{what} vs block_gemm_f64 on oracle-quantized activations"
        ));
    }
}

#[test]
fn every_cpu_kernel_runs_every_block_layout_on_ragged_sizes() {
    let mut runs = 0;
    for block in BLOCKS {
        for modes in SCALE_MODES {
            for &(m, n, k) in &SIZES {
                let cfg = block_config(block, modes, (n, k), (DType::F32, DType::F32));
                let layer = random_layer(&cfg);
                let x = random_activations(m, k);
                let refs = References::of(&layer, &x, m);
                for entry in cpu_entries(&cfg) {
                    let what = format!(
                        "{} {}x{} weight {:?} act {:?} M={m} N={n} K={k}",
                        entry.name, block.0, block.1, modes.0, modes.1
                    );
                    refs.check(&what, entry, &layer, &run(entry, &layer, &x, m));
                    runs += 1;
                }
            }
        }
    }
    assert_eq!(runs, BLOCKS.len() * SCALE_MODES.len() * SIZES.len() * 2);
}

#[test]
fn block_layouts_with_bf16_output_and_nasty_activations() {
    // bf16 output, activations over 28 binades with zero groups, ties and values below the
    // absmax floor (rows 1-3), for every layout with ue8m0 and f32 activation scales.
    let (m, n, k) = (9, 130, 300);
    for block in BLOCKS {
        for modes in SCALE_MODES {
            let cfg = block_config(block, modes, (n, k), (DType::F32, DType::Bf16));
            let layer = random_layer(&cfg);
            let x = nasty_activations(m, k);
            let refs = References::of(&layer, &x, m);
            for entry in cpu_entries(&cfg) {
                let what = format!(
                    "{} {}x{} {modes:?} bf16 out, nasty activations",
                    entry.name, block.0, block.1
                );
                refs.check(&what, entry, &layer, &run(entry, &layer, &x, m));
            }
        }
    }
}

#[test]
fn the_quantizers_match_the_oracle_bit_for_bit_in_both_scale_formats() {
    let (m, k) = (6, 971);
    for x in [nasty_activations(m, k), random_activations(m, k)] {
        for fmt in [ScaleDtype::F32, ScaleDtype::Ue8m0] {
            for group in [32, 64, 128, 971, 1000] {
                let (want_q, want_s) = oracle::quantize_groups_as(&x, m, k, group, pow2(fmt));
                let (q, s) = quantize::per_token_group_fmt(&x, m, k, group, fmt);
                let (rq, rs) = reference::quantize_groups_fmt(&x, m, k, group, fmt);
                for (name, q, s) in [("cpu::quantize", q, s), ("cpu::reference", rq, rs)] {
                    assert_eq!(bits(&s), bits(&want_s), "{name} groups of {group} {fmt:?}");
                    assert_eq!(q, want_q, "{name} groups of {group} {fmt:?}: codes");
                }
            }
            for ub in [None, Some(2.0f32), Some(1e-12)] {
                let (want_q, want_s) = oracle::quantize_per_token_as(&x, m, k, ub, pow2(fmt));
                let (mut q, mut s) = (vec![0u8; m * k], vec![0f32; m]);
                quantize::per_token_fmt_into(&x, k, ub, fmt, &mut q, &mut s);
                let (rq, rs) = reference::quantize_per_token_fmt(&x, m, k, ub, fmt);
                for (name, q, s) in [("cpu::quantize", q, s), ("cpu::reference", rq, rs)] {
                    assert_eq!(
                        bits(&s),
                        bits(&want_s),
                        "{name} per token ub {ub:?} {fmt:?}"
                    );
                    assert_eq!(q, want_q, "{name} per token ub {ub:?} {fmt:?}: codes");
                }
            }
            // Per tensor: dynamic in the format; a static scale used as it is.
            for fixed in [None, Some(0.3f32)] {
                let (want_q, want_s) = oracle::quantize_per_tensor_as(&x, fixed, pow2(fmt));
                let mut q = vec![0u8; m * k];
                let s = quantize::per_tensor_fmt_into(&x, fixed, fmt, &mut q);
                let (rq, rs) = reference::quantize_per_tensor_fmt(&x, fixed, fmt);
                assert_eq!(
                    s.to_bits(),
                    want_s.to_bits(),
                    "per tensor {fixed:?} {fmt:?}"
                );
                assert_eq!(
                    rs.to_bits(),
                    want_s.to_bits(),
                    "per tensor {fixed:?} {fmt:?}"
                );
                assert_eq!(q, want_q, "per tensor {fixed:?} {fmt:?}: codes");
                assert_eq!(rq, want_q, "per tensor {fixed:?} {fmt:?}: reference codes");
            }
        }
    }
}

#[test]
fn ue8m0_activation_scales_are_powers_of_two_and_change_the_output() {
    let (m, n, k) = (7, 200, 971);
    let f32_cfg = block_config(
        (32, 32),
        (ScaleDtype::F32, ScaleDtype::F32),
        (n, k),
        (DType::F32, DType::F32),
    );
    let ue_cfg = block_config(
        (32, 32),
        (ScaleDtype::F32, ScaleDtype::Ue8m0),
        (n, k),
        (DType::F32, DType::F32),
    );
    let layer = random_layer(&ue_cfg); // power-of-two weight scales for both
    let x = random_activations(m, k);

    // The fast kernels' quantization (ActScratch) takes the flag from the activation key.
    let w = HostWeights::load("test", &ue_cfg, &layer.weights()).unwrap();
    let mut scratch = ActScratch {
        x: x.clone(),
        ..ActScratch::default()
    };
    scratch.quantize(&ue_cfg, &w, m);
    let ue_scales = scratch.scales.clone();
    assert_eq!(ue_scales.len(), m * k.div_ceil(32));
    assert!(
        ue_scales.iter().all(|&s| is_pow2(s)),
        "ue8m0 activation scales must be powers of two: {ue_scales:?}"
    );
    scratch.quantize(&f32_cfg, &w, m);
    let f32_scales = scratch.scales.clone();
    let mut rounded_up = 0;
    for (u, f) in ue_scales.iter().zip(&f32_scales) {
        assert!(
            u >= f && *u < 2.0 * f,
            "{u} is {f} rounded up to a power of two"
        );
        rounded_up += usize::from(u != f);
    }
    assert!(
        rounded_up > ue_scales.len() / 2,
        "most dynamic scales are not powers of two"
    );

    let f32_layer = HostLayer {
        config: f32_cfg,
        ..layer.clone()
    };
    let rows: Vec<usize> = (0..m).collect();
    let want_f32 = reference_rows(&f32_cfg, &f32_layer, &x, m, &rows).unwrap();
    let want_ue = reference_rows(&ue_cfg, &layer, &x, m, &rows).unwrap();
    for entry in cpu_entries(&ue_cfg) {
        let tol = Tolerance::for_kernel(entry, &ue_cfg);
        let got_ue = run(entry, &layer, &x, m);
        let got_f32 = run(entry, &f32_layer, &x, m);
        assert_ne!(
            bits(&got_ue),
            bits(&got_f32),
            "{}: ue8m0 output",
            entry.name
        );
        compare(&got_ue, &want_ue, n, tol).assert_ok(&format!("{} ue8m0", entry.name));
        compare(&got_f32, &want_f32, n, tol).assert_ok(&format!("{} f32", entry.name));
        // Each is off the other's reference by far more than the tolerance: a kernel that
        // ignored the flag would fail.
        let cross = compare(&got_ue, &want_f32, n, tol);
        assert!(
            !cross.ok(),
            "{}: the ue8m0 output passes the f32-scale reference: {}",
            entry.name,
            cross.summary()
        );
        assert!(!compare(&got_f32, &want_ue, n, tol).ok(), "{}", entry.name);
    }
}

#[test]
fn ue8m0_per_token_and_per_tensor_activations_on_every_cpu_kernel() {
    let (m, n, k) = (7, 133, 251);
    let x = random_activations(m, k);
    let chan: Vec<f32> = (0..n)
        .map(|j| oracle::ue8m0(0.001 + j as f32 * 1e-5))
        .collect();
    let one = [0.0078125f32];
    let fmt = ScaleDtype::Ue8m0;
    let act = |group, dynamic| QuantKey {
        group,
        scale_dtype: fmt,
        dynamic,
    };
    let base = LayerConfig::per_token_per_channel(n, k, DType::F32, DType::F32);
    let codes = HostLayer::random(&base, WeightGen::Spread(6)).codes;
    let mk = |config: LayerConfig, scales: &[f32], input_scale: Option<f32>| HostLayer {
        config,
        codes: codes.clone(),
        scales: scales.to_vec(),
        input_scale,
        bias: None,
    };
    // (what, layer, oracle codes and activation scales)
    let per_token = mk(
        LayerConfig {
            activation: Some(act(GroupShape::PerToken, true)),
            ..base
        },
        &chan,
        None,
    );
    let per_tensor_dynamic = mk(
        LayerConfig {
            weight: QuantKey::WEIGHT_PER_TENSOR,
            activation: Some(act(GroupShape::PerTensor, true)),
            ..base
        },
        &one,
        None,
    );
    // A static input scale with a ue8m0 key is used as given (0.013 is no power of two).
    let per_tensor_static = mk(
        LayerConfig {
            weight: QuantKey::WEIGHT_PER_TENSOR,
            activation: Some(act(GroupShape::PerTensor, false)),
            ..base
        },
        &one,
        Some(0.013),
    );
    let (tq, ts) = oracle::quantize_per_token_as(&x, m, k, None, true);
    let (dq, dyn_s) = oracle::quantize_per_tensor_as(&x, None, true);
    let (sq, _) = oracle::quantize_per_tensor_as(&x, Some(0.013), true);
    assert!(is_pow2(dyn_s) && ts.iter().all(|&s| is_pow2(s)));
    let cases = [
        ("per-token ue8m0", &per_token, tq, ts),
        (
            "per-tensor dynamic ue8m0",
            &per_tensor_dynamic,
            dq,
            vec![dyn_s],
        ),
        (
            "per-tensor static, ue8m0 key",
            &per_tensor_static,
            sq,
            vec![0.013],
        ),
    ];
    for (what, layer, q, s) in cases {
        let want = reference::scaled_gemm_f64(&q, &s, &layer.codes, &layer.scales, m, n, k);
        for entry in cpu_entries(&layer.config) {
            let got = run(entry, layer, &x, m);
            let tol = Tolerance::for_kernel(entry, &layer.config);
            compare(&got, &want, n, tol).assert_ok(&format!("{} {what}", entry.name));
        }
    }
}
