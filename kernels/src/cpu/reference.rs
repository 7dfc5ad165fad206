//! The f64 reference: GEMMs on already-quantized data, and the activation quantization spec
//! stated on its own (not through [`crate::cpu::quantize`] or `fp8_linear_core::fp8`, the
//! code the fast kernels run), so that [`crate::cpu::CpuReference`] built on it is an
//! oracle rather than a second copy of what it judges.
//!
//! The quantization spec (what every backend must produce, bit for bit):
//!
//! - e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent field 0 holds the
//!   subnormals `m * 2^-9`; `0x7f` / `0xff` are NaN; the largest finite value is 448.
//! - Encoding: saturating round to nearest, ties to the even mantissa, of an f32 value;
//!   anything of magnitude >= 448 (infinities too) becomes +-448, NaN the NaN code; the sign
//!   bit is kept (a negative value that rounds to zero is `0x80`).
//! - Dynamic scale of a set of values (a 1 x G group, a row, the whole tensor):
//!   `max(absmax, 1e-10) / 448`, computed in f32 (absmax is exact; one f32 division).
//!   A NaN among the values makes the scale NaN.
//! - Per-token with an upper bound `ub` (vLLM's `scale_ub`): the row's absmax is clamped to
//!   `ub` first, `max(min(absmax, ub), 1e-10) / 448`; a NaN absmax gives the bound's scale.
//! - ue8m0 activation scales (the activation key's `ScaleDtype::Ue8m0`, a checkpoint's
//!   `scale_fmt: "ue8m0"`): each dynamic scale above (after the `ub` clamp) is rounded up to
//!   a power of two, `2^ceil(log2 s)`, the smallest power of two `>= s`; a positive
//!   subnormal becomes the smallest normal f32, 2^-126; a scale whose next power up is not
//!   an f32 (above 2^127) stays as it is; NaN, infinities, zero and negative values stay as
//!   they are (no dynamic scale is zero, negative, subnormal or above 2^127). A static
//!   (given) activation scale is used as it is.
//! - Codes: `encode(x / scale)` with the quotient an f32 division (correctly rounded), by
//!   the scale as stored (rounded, for ue8m0).

use fp8_linear_core::quant::ScaleDtype;

/// Largest finite e4m3fn magnitude.
const MAX: f64 = 448.0;
/// Floor of a dynamic absmax, so that an all-zero group keeps a finite, non-zero scale.
const MIN_ABSMAX: f32 = 1e-10;
/// The smallest normal e4m3fn magnitude, 2^-6; below it the grid spacing is 2^-9.
const MIN_NORMAL: f64 = 0.015625;
const SUBNORMAL_STEP: f64 = 0.001953125;

/// The value of an e4m3fn code, from its bit fields, in f64 (exact); NaN for `0x7f` / `0xff`.
pub fn e4m3_f64(code: u8) -> f64 {
    let exponent = i32::from((code >> 3) & 0xf);
    let mantissa = f64::from(code & 7);
    if exponent == 15 && code & 7 == 7 {
        return f64::NAN;
    }
    let magnitude = if exponent == 0 {
        mantissa * SUBNORMAL_STEP
    } else {
        (1.0 + mantissa / 8.0) * 2f64.powi(exponent - 7)
    };
    if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// The binary exponent `E` of a normal, positive f64 (`2^E <= a < 2^(E+1)`).
fn binade(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// Encodes an f32 value as e4m3fn per the spec above, with f64 arithmetic: the grid spacing
/// at the value's magnitude (2^-9 among the subnormals, 2^(E-3) in the binade
/// `[2^E, 2^(E+1))`), the index of the nearest grid point rounded half to even (dividing by
/// a power of two is exact, and the index's parity is the mantissa's), then the bit fields
/// of that grid point.
pub fn encode_e4m3(value: f32) -> u8 {
    let sign = if value.is_sign_negative() { 0x80 } else { 0 };
    if value.is_nan() {
        return sign | 0x7f;
    }
    let a = f64::from(value).abs();
    if a >= MAX {
        return sign | 0x7e;
    }
    let spacing = if a < MIN_NORMAL {
        SUBNORMAL_STEP
    } else {
        2f64.powi(binade(a) - 3)
    };
    let v = (a / spacing).round_ties_even() * spacing; // on the grid, at most 448
    let code = if v < MIN_NORMAL {
        (v / SUBNORMAL_STEP) as u8 // 0..=7
    } else {
        let e = binade(v);
        let mantissa = (v / 2f64.powi(e) * 8.0) as i32 - 8; // 0..=7
        (((e + 7) << 3) | mantissa) as u8
    };
    sign | code
}

/// The spec's dynamic scale of `xs`: `max(absmax, 1e-10) / 448` in f32, clamped to
/// `max(min(absmax, ub), 1e-10) / 448` when an upper bound is given. NaN in `xs` gives NaN
/// without a bound, the bound's scale with one.
pub fn dynamic_scale(xs: &[f32], ub: Option<f32>) -> f32 {
    let nan = xs.iter().any(|x| x.is_nan());
    let absmax = xs
        .iter()
        .fold(0f32, |m, x| if x.abs() > m { x.abs() } else { m });
    let clamped = match ub {
        Some(ub) if nan || absmax > ub => ub,
        Some(_) => absmax,
        None if nan => return f32::NAN,
        None => absmax,
    };
    let floored = if clamped < MIN_ABSMAX {
        MIN_ABSMAX
    } else {
        clamped
    };
    floored / 448.0
}

/// The spec's ue8m0 scale of `s`: the smallest power of two `>= s`, computed in f64 as
/// `2^ceil(log2 s)` (f64's `log2` of an f32 value is exact at powers of two and, elsewhere,
/// far enough from an integer that `ceil` cannot be fooled), at least 2^-126 for a positive
/// subnormal; `s` itself when that power is not an f32 (`s` above 2^127), and for NaN,
/// infinities, zero and negative values.
pub fn ue8m0_scale(s: f32) -> f32 {
    // NaN, zero (either sign), negatives and infinities are not positive finite values.
    if s.is_nan() || s <= 0.0 || s.is_infinite() {
        return s;
    }
    let up = 2f64.powf(f64::from(s).log2().ceil()).max(2f64.powi(-126));
    if up > f64::from(f32::MAX) {
        s
    } else {
        up as f32 // a power of two in f32's normal range: exact
    }
}

/// A dynamic scale in the activation key's scale format: `s` for f32 scales,
/// [`ue8m0_scale`] for ue8m0 ones.
pub fn scale_in_format(s: f32, fmt: ScaleDtype) -> f32 {
    match fmt {
        ScaleDtype::F32 => s,
        ScaleDtype::Ue8m0 => ue8m0_scale(s),
    }
}

/// [`dynamic_scale`] in the scale format `fmt` (rounded up to a power of two for ue8m0,
/// after the bound's clamp).
pub fn dynamic_scale_fmt(xs: &[f32], ub: Option<f32>, fmt: ScaleDtype) -> f32 {
    scale_in_format(dynamic_scale(xs, ub), fmt)
}

/// The codes of `xs` with one scale: `encode(x / scale)`, the quotient an f32 division.
pub fn quantize_with_scale(xs: &[f32], scale: f32, codes: &mut [u8]) {
    for (x, c) in xs.iter().zip(codes.iter_mut()) {
        *c = encode_e4m3(*x / scale);
    }
}

/// Dynamic per-token-group quantization of `x` `[m, k]` (row-major), groups of `group`
/// columns (the last one of a row ragged when `group` does not divide `k`): codes `[m, k]`
/// and scales `[m, ceil(k / group)]`. f32 scales: see [`quantize_groups_fmt`].
pub fn quantize_groups(x: &[f32], m: usize, k: usize, group: usize) -> (Vec<u8>, Vec<f32>) {
    quantize_groups_fmt(x, m, k, group, ScaleDtype::F32)
}

/// [`quantize_groups`] with the scales in the format `fmt` (powers of two for ue8m0).
pub fn quantize_groups_fmt(
    x: &[f32],
    m: usize,
    k: usize,
    group: usize,
    fmt: ScaleDtype,
) -> (Vec<u8>, Vec<f32>) {
    let groups = k.div_ceil(group);
    let mut codes = vec![0u8; m * k];
    let mut scales = vec![0f32; m * groups];
    for i in 0..m {
        for g in 0..groups {
            let (lo, hi) = (i * k + g * group, i * k + ((g + 1) * group).min(k));
            let s = dynamic_scale_fmt(&x[lo..hi], None, fmt);
            scales[i * groups + g] = s;
            quantize_with_scale(&x[lo..hi], s, &mut codes[lo..hi]);
        }
    }
    (codes, scales)
}

/// Dynamic per-token quantization of `x` `[m, k]`: codes `[m, k]` and one scale per row,
/// clamped by `ub` when given. f32 scales: see [`quantize_per_token_fmt`].
pub fn quantize_per_token(x: &[f32], m: usize, k: usize, ub: Option<f32>) -> (Vec<u8>, Vec<f32>) {
    quantize_per_token_fmt(x, m, k, ub, ScaleDtype::F32)
}

/// [`quantize_per_token`] with the scales in the format `fmt` (each clamped scale rounded
/// up to a power of two for ue8m0).
pub fn quantize_per_token_fmt(
    x: &[f32],
    m: usize,
    k: usize,
    ub: Option<f32>,
    fmt: ScaleDtype,
) -> (Vec<u8>, Vec<f32>) {
    let mut codes = vec![0u8; m * k];
    let mut scales = vec![0f32; m];
    for i in 0..m {
        let row = &x[i * k..(i + 1) * k];
        scales[i] = dynamic_scale_fmt(row, ub, fmt);
        quantize_with_scale(row, scales[i], &mut codes[i * k..(i + 1) * k]);
    }
    (codes, scales)
}

/// Per-tensor quantization: with the given static scale, or the dynamic scale of the whole
/// tensor. Returns the codes and the scale used. f32 scales: see
/// [`quantize_per_tensor_fmt`].
pub fn quantize_per_tensor(x: &[f32], scale: Option<f32>) -> (Vec<u8>, f32) {
    quantize_per_tensor_fmt(x, scale, ScaleDtype::F32)
}

/// [`quantize_per_tensor`] with a dynamic scale in the format `fmt` (rounded up to a power
/// of two for ue8m0); a given static scale is used as it is.
pub fn quantize_per_tensor_fmt(x: &[f32], scale: Option<f32>, fmt: ScaleDtype) -> (Vec<u8>, f32) {
    let s = scale.unwrap_or_else(|| dynamic_scale_fmt(x, None, fmt));
    let mut codes = vec![0u8; x.len()];
    quantize_with_scale(x, s, &mut codes);
    (codes, s)
}

/// Block-scaled W8A8 in f64: `out[m, n] = sum_kb As[m, kb] * Bs[n / bn, kb] *
/// sum_{k in kb} A[m, k] * B[n, k]`, with `As` `[m, ceil(k/bk)]` and `Bs`
/// `[ceil(n/bn), ceil(k/bk)]` row-major. The activation group size equals `bk`.
#[allow(clippy::too_many_arguments)]
pub fn block_gemm_f64(
    a: &[u8],
    a_scales: &[f32],
    b: &[u8],
    b_scales: &[f32],
    m: usize,
    n: usize,
    k: usize,
    block: (usize, usize),
) -> Vec<f64> {
    let (bn, bk) = block;
    let kb_count = k.div_ceil(bk);
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for kb in 0..kb_count {
                let lo = kb * bk;
                let hi = (lo + bk).min(k);
                let mut partial = 0f64;
                for kk in lo..hi {
                    partial += e4m3_f64(a[i * k + kk]) * e4m3_f64(b[j * k + kk]);
                }
                acc += partial
                    * a_scales[i * kb_count + kb] as f64
                    * b_scales[(j / bn) * kb_count + kb] as f64;
            }
            out[i * n + j] = acc;
        }
    }
    out
}

/// Scaled W8A8 in f64 with per-row activation scales (`a_scales` of length `m`, or 1 for
/// per-tensor) and per-channel weight scales (`b_scales` of length `n`, or 1).
#[allow(clippy::too_many_arguments)]
pub fn scaled_gemm_f64(
    a: &[u8],
    a_scales: &[f32],
    b: &[u8],
    b_scales: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let sa = |i: usize| a_scales[if a_scales.len() == 1 { 0 } else { i }] as f64;
    let sb = |j: usize| b_scales[if b_scales.len() == 1 { 0 } else { j }] as f64;
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for kk in 0..k {
                acc += e4m3_f64(a[i * k + kk]) * e4m3_f64(b[j * k + kk]);
            }
            out[i * n + j] = acc * sa(i) * sb(j);
        }
    }
    out
}

/// Weight-only (W8A16) in f64: `out = x @ (B * scale)^T` where the weight scale of element
/// `(j, kk)` is `w_scale(j, kk)`.
pub fn weight_only_f64(
    x: &[f32],
    b: &[u8],
    m: usize,
    n: usize,
    k: usize,
    w_scale: impl Fn(usize, usize) -> f32,
) -> Vec<f64> {
    let w: Vec<f64> = (0..n * k)
        .map(|idx| e4m3_f64(b[idx]) * f64::from(w_scale(idx / k, idx % k)))
        .collect();
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for kk in 0..k {
                acc += x[i * k + kk] as f64 * w[j * k + kk];
            }
            out[i * n + j] = acc;
        }
    }
    out
}

/// Relative Frobenius error `||got - want|| / ||want||`; NaN anywhere gives NaN (which fails
/// every `<` comparison).
pub fn rel_frobenius(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let mut num = 0f64;
    let mut den = 0f64;
    for (g, w) in got.iter().zip(want) {
        let g = *g as f64;
        if g.is_nan() || w.is_nan() {
            return f64::NAN;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

#[cfg(test)]
mod tests {
    //! The reference's own statement of the spec against the one the fast kernels run
    //! (`fp8_linear_core::fp8`): two independent implementations that must agree bit for bit.
    use super::*;
    use fp8_linear_core::fp8::{e4m3_to_f32, f32_to_e4m3, group_scale, round_scale_ue8m0};

    #[test]
    fn decoder_matches_the_core_table_for_every_code() {
        for c in 0..=255u8 {
            let (ours, core) = (e4m3_f64(c), f64::from(e4m3_to_f32(c)));
            if core.is_nan() {
                assert!(ours.is_nan(), "code {c:#04x}");
            } else {
                assert_eq!(ours.to_bits(), core.to_bits(), "code {c:#04x}");
            }
        }
        assert_eq!(e4m3_f64(0x7e), 448.0);
        assert_eq!(e4m3_f64(0x01), 2f64.powi(-9));
        assert_eq!(e4m3_f64(0x08), 2f64.powi(-6));
        assert_eq!(e4m3_f64(0x80).to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn encoder_matches_the_core_encoder_at_every_midpoint_and_its_neighbours() {
        // Every value on the grid, every midpoint between neighbours (the ties) and the f32
        // values next to them, both signs, plus saturation and specials.
        let grid: Vec<f32> = (0..0x7fu8).map(e4m3_to_f32).collect();
        let mut xs = vec![
            0.0f32,
            448.0,
            460.0,
            464.0,
            470.0,
            1e30,
            f32::INFINITY,
            1e-40,
        ];
        for w in grid.windows(2) {
            let mid = (w[0] + w[1]) / 2.0; // exact: both have 4 significant bits
            xs.extend([w[0], mid, mid.next_down(), mid.next_up()]);
        }
        for x in xs {
            for v in [x, -x] {
                assert_eq!(encode_e4m3(v), f32_to_e4m3(v), "x = {v:e}");
            }
        }
        assert_eq!(encode_e4m3(f32::NAN) & 0x7f, 0x7f);
        assert_eq!(encode_e4m3(-1e-12), 0x80);
    }

    #[test]
    fn scales_match_the_core_group_scale() {
        let rows: [&[f32]; 4] = [&[0.0; 5], &[1.0, -7.5, 3.0], &[1e-20, -1e-30], &[448.0]];
        for r in rows {
            assert_eq!(dynamic_scale(r, None).to_bits(), group_scale(r).to_bits());
        }
        assert!(dynamic_scale(&[1.0, f32::NAN], None).is_nan());
        // The bound clamps the absmax: 14 > 7 gives 7 / 448 = 2^-6 exactly.
        assert_eq!(dynamic_scale(&[14.0, -3.0], Some(7.0)), 0.015625);
        assert_eq!(dynamic_scale(&[3.5, -3.0], Some(7.0)), 3.5 / 448.0);
        assert_eq!(dynamic_scale(&[f32::NAN], Some(7.0)), 0.015625);
    }

    #[test]
    fn ue8m0_scales_match_the_core_bit_rule() {
        // Every exponent field, mantissas at the edges and inside, both signs.
        for field in 0..=255u32 {
            for mant in [
                0u32, 1, 2, 3, 0x0f_ffff, 0x40_0000, 0x40_0001, 0x7f_fffe, 0x7f_ffff,
            ] {
                for sign in [0u32, 0x8000_0000] {
                    let s = f32::from_bits(sign | (field << 23) | mant);
                    let (ours, core) = (ue8m0_scale(s), round_scale_ue8m0(s));
                    if core.is_nan() {
                        assert!(ours.is_nan(), "{s:e}");
                    } else {
                        assert_eq!(
                            ours.to_bits(),
                            core.to_bits(),
                            "{s:e} ({:#010x})",
                            s.to_bits()
                        );
                    }
                }
            }
        }
        // The case an f32 log2 gets wrong, and a few by hand.
        assert_eq!(ue8m0_scale(1.0 + f32::EPSILON), 2.0);
        assert_eq!(ue8m0_scale(f32::from_bits(0x3f80_0001)), 2.0);
        assert_eq!(ue8m0_scale(0.3), 0.5);
        assert_eq!(ue8m0_scale(0.25), 0.25);
        assert_eq!(ue8m0_scale(f32::from_bits(1)), f32::MIN_POSITIVE);
        // Dynamic scales: the bound clamps first, then the scale is rounded up.
        let fmt = ScaleDtype::Ue8m0;
        assert_eq!(dynamic_scale_fmt(&[14.0, -3.0], Some(7.0), fmt), 0.015625);
        assert_eq!(dynamic_scale_fmt(&[3.5, -3.0], Some(7.0), fmt), 0.0078125);
        assert!(dynamic_scale_fmt(&[1.0, f32::NAN], None, fmt).is_nan());
        assert_eq!(dynamic_scale_fmt(&[0.0; 3], None, fmt), 2f32.powi(-42));
        // A static scale is used as it is.
        assert_eq!(quantize_per_tensor_fmt(&[1.0], Some(0.3), fmt).1, 0.3);
        assert_eq!(quantize_per_tensor_fmt(&[1.0], None, fmt).1, 2f32.powi(-8));
    }
}
