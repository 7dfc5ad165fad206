//! FP8 e4m3fn numerics: saturating round-to-nearest-even encoding and exact decoding.
//!
//! e4m3fn has 4 exponent bits (bias 7), 3 mantissa bits, no infinities, and one NaN pattern
//! per sign (0x7f / 0xff). The largest finite value is 448.

use crate::quant::ScaleDtype;

/// Largest finite e4m3fn value. (`float8::F8E4M3::MAX` reads 416; this is the real one.)
pub const E4M3_MAX: f32 = 448.0;

/// The NaN bit pattern with the sign bit clear.
pub const E4M3_NAN: u8 = 0x7f;

/// Smallest scale used by dynamic quantization, so that all-zero groups stay finite.
pub const MIN_ABSMAX: f32 = 1e-10;

/// Encodes an f32 as e4m3fn: round to nearest even, saturate to +-448 (infinities too),
/// every NaN (either sign) to [`E4M3_NAN`], as the hardware conversion of sm_89 and newer
/// GPUs (`cvt.rn.satfinite.e4m3x2.f32`) does: the GPU quantizers equal this function on
/// all 2^32 f32 inputs.
#[inline]
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return E4M3_NAN;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs().min(E4M3_MAX);
    // Below the smallest normal (2^-6) the spacing is 2^-9: scale by 2^9 (exact), round.
    if a < 0.015625 {
        let m = (a * 512.0).round_ties_even() as u8; // 0..=8; 8 is the smallest normal
        return sign | m;
    }
    let bits = a.to_bits();
    let e = ((bits >> 23) as i32) - 127; // -6..=8
                                         // mantissa scaled to 3 bits, as an exact f32 in [8, 16)
    let scaled = f32::from_bits((bits & 0x007f_ffff) | (130 << 23)); // value in [8, 16)
    let mut m = scaled.round_ties_even() as u32 - 8; // 0..=8
    let mut e = e + 7;
    if m == 8 {
        m = 0;
        e += 1;
    }
    sign | ((e as u8) << 3) | m as u8
}

/// Decodes an e4m3fn byte to f32 (exact).
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3_TABLE[b as usize]
}

/// All 256 e4m3fn values as f32, indexed by bit pattern.
pub static E4M3_TABLE: [f32; 256] = build_table();

const fn build_table() -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let exp = ((b >> 3) & 0xf) as i32;
        let mant = (b & 7) as u32;
        let mag = if exp == 0xf && mant == 7 {
            f32::NAN
        } else if exp == 0 {
            // mant * 2^-9
            mant as f32 / 512.0
        } else {
            // (8 + mant) * 2^(exp - 7 - 3)
            let e = (exp - 10 + 127) as u32;
            (8 + mant) as f32 * f32::from_bits(e << 23)
        };
        t[i] = if b & 0x80 != 0 { -mag } else { mag };
        i += 1;
    }
    t
}

/// Dynamic per-token-group quantization of one row: for each group of `group` columns,
/// `scale = max(absmax, 1e-10) / 448` and `q = sat(x / scale)`. Writes `ceil(k / group)`
/// scales. The same arithmetic (an f32 division, then RNE) is used by every backend, so the
/// results are bit-identical. [`quantize_row_groups_as`] with [`ScaleDtype::F32`].
pub fn quantize_row_groups(row: &[f32], group: usize, q: &mut [u8], scales: &mut [f32]) {
    quantize_row_groups_as(row, group, ScaleDtype::F32, q, scales)
}

/// [`quantize_row_groups`] with the scales in the format `fmt`: for [`ScaleDtype::Ue8m0`]
/// each group's dynamic scale is rounded up to a power of two ([`round_scale_ue8m0`])
/// before the codes `sat(x / scale)` are computed with it.
pub fn quantize_row_groups_as(
    row: &[f32],
    group: usize,
    fmt: ScaleDtype,
    q: &mut [u8],
    scales: &mut [f32],
) {
    debug_assert_eq!(row.len(), q.len());
    debug_assert_eq!(scales.len(), row.len().div_ceil(group));
    for ((xs, qs), s) in row
        .chunks(group)
        .zip(q.chunks_mut(group))
        .zip(scales.iter_mut())
    {
        let scale = scale_as(group_scale(xs), fmt);
        *s = scale;
        for (x, o) in xs.iter().zip(qs.iter_mut()) {
            *o = f32_to_e4m3(*x / scale);
        }
    }
}

/// The dynamic scale for one group of values: `max(max|x|, 1e-10) / 448`. NaN inputs make the
/// scale NaN (never silently dropped).
#[inline]
pub fn group_scale(xs: &[f32]) -> f32 {
    let mut amax = 0f32;
    let mut nan = false;
    for &x in xs {
        nan |= x.is_nan();
        amax = amax.max(x.abs());
    }
    if nan {
        return f32::NAN;
    }
    amax.max(MIN_ABSMAX) / E4M3_MAX
}

/// A dynamic scale as stored in the format `fmt`: unchanged for [`ScaleDtype::F32`],
/// [`round_scale_ue8m0`] for [`ScaleDtype::Ue8m0`].
#[inline]
pub fn scale_as(s: f32, fmt: ScaleDtype) -> f32 {
    match fmt {
        ScaleDtype::F32 => s,
        ScaleDtype::Ue8m0 => round_scale_ue8m0(s),
    }
}

/// Rounds a scale up to a power of two, the "ue8m0" scale format, on the f32 bits (exact:
/// no `log2`, which rounds `2^e * (1 + 2^-23)` down to `e`). With `bits = s.to_bits()` and
/// `field = (bits >> 23) & 0xff` (the biased exponent):
///
/// - sign bit set (negative values, `-0.0`, negative NaN): unchanged;
/// - `field` in `1..=253` (a positive normal below 2^127) with mantissa bits
///   (`bits & 0x7f_ffff`) set: the next power of two up,
///   `bits = (bits & 0xff80_0000) + 0x0080_0000` (exponent + 1, mantissa 0);
/// - `field` in `1..=253` with a zero mantissa: already a power of two, unchanged;
/// - `field == 0` (`+0.0` or a positive subnormal): `+0.0` unchanged, any positive
///   subnormal becomes `2^-126` (`0x0080_0000`, the smallest normal f32: every subnormal
///   is below it, and the GPU quantizer does the same);
/// - `field == 254` (`[2^127, f32::MAX]`): unchanged (the next power up would be infinite);
/// - `field == 255` (infinity, NaN): unchanged.
///
/// The GPU quantizer implements the same rule on the same bits
/// (`if ((bits & 0x7fffff) && field in 1..=253) bits = (bits & 0xff800000) + 0x00800000;`,
/// subnormal `bits != 0` to `0x00800000`), so CPU and GPU scales are bit-identical.
/// Dynamic scales are at least `1e-10 / 448` (a normal) or NaN, never negative, zero,
/// subnormal or above 2^127.
#[inline]
pub fn round_scale_ue8m0(s: f32) -> f32 {
    let bits = s.to_bits();
    if bits & 0x8000_0000 != 0 {
        return s;
    }
    let field = (bits >> 23) & 0xff;
    match field {
        0 if bits != 0 => f32::from_bits(0x0080_0000),
        1..=253 if bits & 0x007f_ffff != 0 => f32::from_bits((bits & 0xff80_0000) + 0x0080_0000),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_known_values() {
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0xfe), -448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert!(e4m3_to_f32(0x7f).is_nan());
        assert!(e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn roundtrip_every_finite_code() {
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            if v.is_nan() {
                continue;
            }
            let back = f32_to_e4m3(v);
            // -0 and +0 both decode to 0 with their sign kept
            assert_eq!(back, b, "code {b:#x} value {v}");
        }
    }

    #[test]
    fn nan_of_either_sign_is_the_positive_nan_code() {
        assert_eq!(f32_to_e4m3(f32::NAN), E4M3_NAN);
        assert_eq!(f32_to_e4m3(-f32::NAN), E4M3_NAN);
        assert_eq!(f32_to_e4m3(f32::from_bits(0xffc0_0001)), E4M3_NAN);
    }

    #[test]
    fn saturates_and_rounds_to_even() {
        assert_eq!(f32_to_e4m3(1e9), 0x7e);
        assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7e);
        assert_eq!(f32_to_e4m3(f32::NEG_INFINITY), 0xfe);
        assert_eq!(f32_to_e4m3(470.0), 0x7e);
        assert_eq!(f32_to_e4m3(f32::NAN) & 0x7f, 0x7f);
        // 1.0625 is halfway between 1.0 (even mantissa 0) and 1.125: goes to 1.0
        assert_eq!(f32_to_e4m3(1.0625), 0x38);
        // 1.1875 is halfway between 1.125 (odd) and 1.25 (even): goes to 1.25
        assert_eq!(e4m3_to_f32(f32_to_e4m3(1.1875)), 1.25);
        // subnormal halfway: 1.5 * 2^-9 -> 2 * 2^-9 (even)
        assert_eq!(f32_to_e4m3(1.5 / 512.0), 0x02);
        assert_eq!(f32_to_e4m3(0.5 / 512.0), 0x00);
    }

    #[test]
    fn agrees_with_float8_crate_on_random_values() {
        use rand::Rng;
        let mut rng = rand::rng();
        for _ in 0..200_000 {
            let x: f32 = rng.random_range(-500.0..500.0) * 2f32.powi(rng.random_range(-12..2));
            let ours = f32_to_e4m3(x);
            let theirs = float8::F8E4M3::from_f32(x).to_bits();
            assert_eq!(ours, theirs, "x = {x:e}");
        }
    }

    #[test]
    fn group_quantization_semantics() {
        let row: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 0.37).collect();
        let mut q = vec![0u8; 300];
        let mut s = vec![0f32; 3];
        quantize_row_groups(&row, 128, &mut q, &mut s);
        let amax0 = row[..128].iter().fold(0f32, |a, x| a.max(x.abs()));
        assert_eq!(s[0], amax0 / 448.0);
        assert_eq!(q[0], f32_to_e4m3(row[0] / s[0]));
        let zeros = [0f32; 4];
        assert_eq!(group_scale(&zeros), 1e-10 / 448.0);
        assert!(group_scale(&[1.0, f32::NAN]).is_nan());
        assert_eq!(round_scale_ue8m0(0.3), 0.5);
    }

    #[test]
    fn ue8m0_rounding_is_exact_on_the_bits() {
        // The case log2 gets wrong: 2^e * (1 + 2^-23) rounds up to 2^(e+1), for every e of a
        // normal below 2^127.
        for e in -126..=126 {
            let p = 2f32.powi(e);
            let just_above = f32::from_bits(p.to_bits() + 1);
            assert_eq!(
                round_scale_ue8m0(just_above),
                2f32.powi(e + 1),
                "2^{e} * (1 + 2^-23)"
            );
            assert_eq!(round_scale_ue8m0(p), p, "2^{e} stays");
            let just_below = f32::from_bits(p.to_bits() - 1);
            if e > -126 {
                assert_eq!(round_scale_ue8m0(just_below), p, "just below 2^{e}");
            }
            assert_eq!(round_scale_ue8m0(p * 1.5), 2f32.powi(e + 1), "1.5 * 2^{e}");
        }
        assert_eq!(round_scale_ue8m0(1.0 + f32::EPSILON), 2.0);
        assert_eq!(round_scale_ue8m0(0.75), 1.0);
        assert_eq!(round_scale_ue8m0(1e-10 / 448.0), 2f32.powi(-42));
        assert_eq!(round_scale_ue8m0(1.0 / 448.0), 2f32.powi(-8));
        // At and above 2^127: powers stay, the rest stays too (2^128 is not an f32).
        let top = 2f32.powi(127);
        assert_eq!(round_scale_ue8m0(top), top);
        assert_eq!(round_scale_ue8m0(f32::MAX), f32::MAX);
        assert_eq!(
            round_scale_ue8m0(f32::from_bits(top.to_bits() + 1)).to_bits(),
            top.to_bits() + 1
        );
        // Specials and what no dynamic scale is.
        assert!(round_scale_ue8m0(f32::NAN).is_nan());
        assert_eq!(round_scale_ue8m0(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_scale_ue8m0(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(round_scale_ue8m0(0.0).to_bits(), 0);
        assert_eq!(round_scale_ue8m0(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(round_scale_ue8m0(-0.3), -0.3);
        assert_eq!(round_scale_ue8m0(-1e-40), -1e-40);
        // Positive subnormals: the smallest normal.
        for b in [1u32, 2, 0x40_0000, 0x7f_ffff] {
            assert_eq!(round_scale_ue8m0(f32::from_bits(b)), f32::MIN_POSITIVE);
        }
    }

    #[test]
    fn ue8m0_rounding_is_the_gpu_formula_on_every_exponent() {
        // The GPU's statement, transcribed, on a sweep of bit patterns of positive values.
        let gpu = |bits: u32| -> u32 {
            let field = (bits >> 23) & 0xff;
            if field == 0 {
                if bits != 0 {
                    0x0080_0000
                } else {
                    bits
                }
            } else if bits & 0x7f_ffff != 0 && (1..=253).contains(&field) {
                (bits & 0xff80_0000) + 0x0080_0000
            } else {
                bits
            }
        };
        for field in 0..=255u32 {
            for mant in [0u32, 1, 2, 0x12_3456, 0x40_0000, 0x7f_fffe, 0x7f_ffff] {
                let bits = (field << 23) | mant;
                let got = round_scale_ue8m0(f32::from_bits(bits)).to_bits();
                assert_eq!(got, gpu(bits), "bits {bits:#010x}");
            }
        }
    }

    #[test]
    fn ue8m0_group_quantization_uses_power_of_two_scales() {
        let row: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 0.37).collect();
        let (mut q, mut s) = (vec![0u8; 300], vec![0f32; 3]);
        quantize_row_groups_as(&row, 128, ScaleDtype::Ue8m0, &mut q, &mut s);
        let (mut qf, mut sf) = (vec![0u8; 300], vec![0f32; 3]);
        quantize_row_groups(&row, 128, &mut qf, &mut sf);
        for (u, f) in s.iter().zip(&sf) {
            assert_eq!(u.to_bits() & 0x7f_ffff, 0, "{u} is a power of two");
            assert!(u >= f && *u < 2.0 * f, "{u} is {f} rounded up");
        }
        for (i, x) in row.iter().enumerate() {
            assert_eq!(q[i], f32_to_e4m3(*x / s[i / 128]));
        }
        assert_ne!(q, qf);
        assert_eq!(scale_as(0.3, ScaleDtype::F32), 0.3);
        assert_eq!(scale_as(0.3, ScaleDtype::Ue8m0), 0.5);
    }
}
