//! Marlin W8A16 host-side arithmetic on the CPU (no GPU needed): the bit-trick dequant, the
//! weight repack into the kernel's tile layout, the scale conversion (per-tensor broadcast,
//! per-channel, 1 x 128 groups, 128 x 128 blocks, the folded power of two, f16 overflow),
//! and N / K padding, checked through a CPU model of the kernel (mma by mma, by the PTX
//! fragment layout) against the f64 reference: the relative Frobenius error and every
//! element (`fp8_linear_tests::check`; the model's two 16-bit roundings, 6 u of the row,
//! where exact conversions are held to 1e-6). Fresh seeded random data every run (weight
//! codes over all 254 finite codes; the seed is printed, `FP8_TEST_SEED` replays it).

use fp8_linear::cpu::reference::weight_only_f64;
use fp8_linear::cuda::testing::marlin::emulate;
use fp8_linear::cuda::testing::marlin::repack::{self, bit_trick, half_bits_to_f32, prepare};
use fp8_linear::fp8::e4m3_to_f32;
use fp8_linear::{DType, KernelError, LayerConfig};
use fp8_linear::{GroupShape, QuantKey, ScaleDtype};
use fp8_linear_tests::check::{compare, Tolerance};
use fp8_linear_tests::layers::random_codes as codes_over_every_exponent;
use fp8_linear_tests::seed::rng;
use half::{bf16, f16};
use rand::Rng;

fn round_to(x: &[f32], dt: DType) -> Vec<f32> {
    x.iter()
        .map(|v| match dt {
            DType::Bf16 => bf16::from_f32(*v).to_f32(),
            _ => f16::from_f32(*v).to_f32(),
        })
        .collect()
}

fn random_codes(n: usize, k: usize) -> Vec<u8> {
    codes_over_every_exponent(n * k)
}

fn random_x(m: usize, k: usize) -> Vec<f32> {
    let mut rng = rng();
    (0..m * k).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// Scales spread over `2^-spread .. 2^spread` (times a random mantissa).
fn random_scales(count: usize, spread: i32) -> Vec<f32> {
    let mut rng = rng();
    (0..count)
        .map(|_| {
            2f32.powi(rng.random_range(-spread..=spread)) * rng.random_range(0.5f32..1.0) / 64.0
        })
        .collect()
}

fn key(group: GroupShape) -> QuantKey {
    QuantKey {
        group,
        scale_dtype: ScaleDtype::F32,
        dynamic: false,
    }
}

/// The element scale the reference applies, per the config's scale shape.
fn scale_at(config: &LayerConfig, s: &[f32], j: usize, kk: usize) -> f32 {
    let cols = config.weight_scale_shape()[1];
    match config.weight.group {
        GroupShape::PerTensor => s[0],
        GroupShape::PerToken | GroupShape::PerChannel => s[j],
        GroupShape::Group { cols: g } => s[j * cols + kk / g as usize],
        GroupShape::Block { rows, cols: bk } => s[(j / rows as usize) * cols + kk / bk as usize],
    }
}

/// The bounds of the emulated kernel (its f64 sums rounded to f32) against the reference:
/// Frobenius `frob`, and per element 2^-24 of the element plus `rtol` of its row.
fn tol(frob: f64, rtol: f64) -> Tolerance {
    Tolerance::cpu(DType::F32).with(frob, rtol)
}

/// The model's 16-bit roundings (each weight times its group scale, the group scale
/// relative to the channel's f32 scale: see `Tolerance::for_kernel`), 6 u of the row:
/// bf16 6 * 2^-8, f16 6 * 2^-11.
fn rtol_16bit(dt: DType) -> f64 {
    6.0 * if dt == DType::Bf16 {
        2f64.powi(-8)
    } else {
        2f64.powi(-11)
    }
}

/// Emulated kernel vs f64 reference on fresh data, held to `tol` (panics with the worst
/// element otherwise); returns the relative Frobenius error.
fn check(config: &LayerConfig, m: usize, scales: &[f32], tol: Tolerance) -> f64 {
    let (n, k) = (config.n, config.k);
    let codes = random_codes(n, k);
    let x = round_to(&random_x(m, k), config.input_dtype);
    let mw = prepare(config, &codes, scales).unwrap();
    assert_eq!(mw.weight.len(), mw.n_pad * mw.k_pad);
    assert_eq!(mw.n_pad % repack::STRIPE, 0);
    assert_eq!(mw.k_pad % repack::K_ALIGN, 0);
    let got: Vec<f32> = emulate(&mw, &x, m).iter().map(|v| *v as f32).collect();
    let want = weight_only_f64(&x, &codes, m, n, k, |j, kk| scale_at(config, scales, j, kk));
    let c = compare(&got, &want, n, tol);
    let what = format!(
        "{} {} M={m} N={n} K={k}",
        config.weight.group, config.input_dtype
    );
    eprintln!("{what}: {}", c.summary());
    c.assert_ok(&what);
    c.frob
}

#[test]
fn bit_trick_is_exact_for_every_code_pair() {
    for bf in [false, true] {
        let fold = 2f64.powi(-repack::fold_exponent(bf));
        for a in 0..=255u8 {
            for b in [
                0u8,
                1,
                7,
                8,
                0x38,
                0x7e,
                0x80,
                0x81,
                0xfe,
                a.wrapping_mul(37),
            ] {
                // codes (c0, c1, c2, c3) = (a, b, b ^ 0x55, a ^ 0xaa)
                let c = [a, b, b ^ 0x55, a ^ 0xaa];
                let word = repack::pack_word(c, bf);
                assert_eq!(repack::unpack_word(word, bf), c, "bf16={bf}");
                let (lo, hi) = bit_trick(word, bf);
                let pairs = [(lo, c[0], c[2]), (hi, c[1], c[3])];
                for (w, first, second) in pairs {
                    for (half, code) in [(w as u16, first), ((w >> 16) as u16, second)] {
                        let v = e4m3_to_f32(code);
                        if v.is_nan() {
                            continue;
                        }
                        let got = half_bits_to_f32(half, bf) as f64;
                        assert_eq!(got, v as f64 * fold, "code {code:#04x} bf16={bf}");
                        assert_eq!(got.is_sign_negative(), code & 0x80 != 0);
                    }
                }
            }
        }
    }
}

#[test]
fn per_channel_and_per_tensor_are_exact_after_repack() {
    // Per-channel / per-tensor scales become exactly 2^fold, so the emulated kernel is the
    // reference up to rounding (f32 output): any layout mistake shows as a large error.
    for dt in [DType::Bf16, DType::F16] {
        for &(m, n, k) in &[
            (1, 64, 32),
            (5, 100, 200),
            (13, 130, 77),
            (9, 7, 300),
            (17, 190, 33),
        ] {
            let c = LayerConfig::weight_only(key(GroupShape::PerChannel), n, k, dt);
            check(&c, m, &random_scales(n, 6), tol(1e-6, 1e-6));
            let c = LayerConfig::weight_only(key(GroupShape::PerTensor), n, k, dt);
            check(&c, m, &random_scales(1, 6), tol(1e-6, 1e-6));
        }
    }
}

#[test]
fn block_scales_with_wide_range_match_reference() {
    for dt in [DType::Bf16, DType::F16] {
        for &(m, n, k) in &[(3, 200, 300), (16, 129, 520), (7, 64, 128), (2, 300, 1000)] {
            let c = LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, n, k, dt);
            let s = c.weight_scale_shape();
            // bf16 group scales carry 8 significant bits, f16 11.
            let frob = if dt == DType::Bf16 { 6e-3 } else { 1e-3 };
            check(
                &c,
                m,
                &random_scales(s[0] * s[1], 10),
                tol(frob, rtol_16bit(dt)),
            );
        }
    }
}

#[test]
fn group_scales_along_k_match_reference() {
    for dt in [DType::Bf16, DType::F16] {
        for (g, n, k) in [(128u32, 150, 400), (64, 70, 250), (32, 64, 96)] {
            let c = LayerConfig::weight_only(key(GroupShape::Group { cols: g }), n, k, dt);
            let s = c.weight_scale_shape();
            let frob = if dt == DType::Bf16 { 6e-3 } else { 1e-3 };
            check(
                &c,
                11,
                &random_scales(s[0] * s[1], 8),
                tol(frob, rtol_16bit(dt)),
            );
        }
    }
}

#[test]
fn block_layer_config_runs_weight_only() {
    // The block family's config (dynamic 1x128 activation key): Marlin ignores the
    // activation key and multiplies the 16-bit activations directly.
    let c = LayerConfig::block_128(192, 256, DType::Bf16, DType::Bf16);
    let s = c.weight_scale_shape();
    check(
        &c,
        4,
        &random_scales(s[0] * s[1], 4),
        tol(6e-3, rtol_16bit(DType::Bf16)),
    );
}

#[test]
fn f16_large_scales_do_not_overflow() {
    // scale * 2^8 = 256000 > 65504: a plain f16 scale would be infinite. The per-channel f32
    // scale takes the magnitude, the f16 group scale only the ratio.
    for group in [
        GroupShape::PerChannel,
        GroupShape::Block {
            rows: 128,
            cols: 128,
        },
    ] {
        let c = LayerConfig::weight_only(key(group), 130, 384, DType::F16);
        let s = c.weight_scale_shape();
        let mut rng = rng();
        let scales: Vec<f32> = (0..s[0] * s[1])
            .map(|_| rng.random_range(500.0f32..1000.0))
            .collect();
        let mw = prepare(&c, &random_codes(130, 384), &scales).unwrap();
        assert!(mw
            .group_scales
            .iter()
            .all(|b| f16::from_bits(*b).is_finite()));
        assert!(mw
            .group_scales
            .iter()
            .all(|b| f16::from_bits(*b).to_f32() <= 256.0));
        check(&c, 5, &scales, tol(1e-3, rtol_16bit(DType::F16)));
    }
}

#[test]
fn f16_rejects_group_scales_spanning_more_than_2_pow_22_in_one_channel() {
    let mut c = LayerConfig::weight_only(QuantKey::WEIGHT_BLOCK_128, 64, 256, DType::F16);
    let scales = vec![1.0f32, 2f32.powi(-30)];
    let err = prepare(&c, &random_codes(64, 256), &scales).unwrap_err();
    match &err {
        KernelError::ScaleLayout { what, detail } => {
            assert_eq!(*what, "weight_scale");
            assert!(
                detail.contains("2^22") && detail.contains("bf16"),
                "{detail}"
            );
        }
        other => panic!("expected a scale-layout error, got {other:?}"),
    }
    // bf16 has f32's exponent range: the same scales are fine.
    c.input_dtype = DType::Bf16;
    c.output_dtype = DType::Bf16;
    check(&c, 3, &scales, tol(6e-3, rtol_16bit(DType::Bf16)));
}

#[test]
fn bad_scales_are_typed_errors() {
    let c = LayerConfig::weight_only(key(GroupShape::PerChannel), 10, 64, DType::Bf16);
    let codes = random_codes(10, 64);
    let mut s = random_scales(10, 2);
    s[3] = f32::NAN;
    assert!(matches!(
        prepare(&c, &codes, &s),
        Err(KernelError::NotFinite { index: 3, .. })
    ));
    s[3] = -1.0;
    assert!(matches!(
        prepare(&c, &codes, &s),
        Err(KernelError::NotFinite { index: 3, .. })
    ));
    assert!(matches!(
        prepare(&c, &codes, &s[..5]),
        Err(KernelError::ScaleLayout { .. })
    ));
    assert!(matches!(
        prepare(&c, &codes[..100], &random_scales(10, 2)),
        Err(KernelError::BufferTooSmall { .. })
    ));
    let f32_layer = LayerConfig::weight_only(key(GroupShape::PerChannel), 10, 64, DType::F32);
    assert!(matches!(
        prepare(&f32_layer, &codes, &random_scales(10, 2)),
        Err(KernelError::DType { .. })
    ));
    let odd_group =
        LayerConfig::weight_only(key(GroupShape::Group { cols: 100 }), 10, 64, DType::Bf16);
    assert!(matches!(
        prepare(&odd_group, &codes, &random_scales(10, 2)),
        Err(KernelError::ScaleLayout { .. })
    ));
}

#[test]
fn padding_is_zero_codes() {
    let (n, k) = (70, 40);
    let codes: Vec<u8> = vec![0x38; n * k]; // all 1.0
    for bf in [false, true] {
        let packed = repack::repack_weight(&codes, n, k, bf);
        // N to 128 (one stripe), K to 128 (one stage of 4 steps)
        let padded = 128 * repack::K_ALIGN;
        assert_eq!(packed.len(), padded);
        let unpacked: Vec<u8> = packed
            .chunks_exact(4)
            .flat_map(|w| repack::unpack_word(u32::from_le_bytes(w.try_into().unwrap()), bf))
            .collect();
        let ones = unpacked.iter().filter(|b| **b == 0x38).count();
        assert_eq!(
            ones,
            n * k,
            "every real code appears once, the padding is zero"
        );
        assert_eq!(unpacked.iter().filter(|b| **b == 0).count(), padded - n * k);
    }
}
