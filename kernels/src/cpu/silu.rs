//! SiLU-and-multiply, the MLP activation, `h = SiLU(gate) * up` with
//! `SiLU(g) = g / (1 + exp(-g))`, in f32, with this crate's own `exp` ([`exp_f32`]). The GPU
//! runs the same sequence of correctly rounded f32 operations (`silu_mul_f32` in
//! `cuda/cu/quant.cu`: `fmaf`, `rintf`, `__fmul_rn`, `__fadd_rn` and the quantization's
//! exact division), so the two give the same bits on every input; the host-model test runs
//! that CUDA source on the CPU and compares.
//!
//! Accuracy (measured by the tests on a dense sweep of f32 inputs against f64): [`exp_f32`]
//! within 1 ulp of `exp` wherever the result is a normal f32, `silu_mul` within 4 ulp of
//! `SiLU(g) * u` computed in f64 (see the numerics page).

/// `ln 2` split in two: `LN2_HI` (0x1.62e4p-1) has 15 significant bits, so `n * LN2_HI` is
/// exact for the `|n| <= 150` of the reduction, and `LN2_LO` (0x1.7f7d1cp-20) is
/// `ln 2 - LN2_HI` rounded to f32. Every constant is given by its bits, as the CUDA source
/// gives it by its hex value, so both sides multiply by the same numbers.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
/// `log2 e` rounded to f32 (0x1.715476p+0).
const LOG2_E: f32 = f32::from_bits(0x3fb8_aa3b);

/// Inputs are clamped to this range first: below it `exp` rounds to 0 and above it to
/// infinity, and the exponent `n` stays within `-150..=129`.
const X_MIN: f32 = -104.0;
const X_MAX: f32 = 89.0;

/// The Taylor coefficients `1/j!` of `e^r` rounded to f32, `j = 7` down to 2 (then 1 and
/// 1): on the reduced range `|r| <= ln 2 / 2` the first term left out, `r^8 / 8!`, is below
/// 2^-27 relative. In the CUDA source: 0x1.a01a02p-13, 0x1.6c16c2p-10, 0x1.111112p-7,
/// 0x1.555556p-5, 0x1.555556p-3, 0.5.
const POLY: [f32; 6] = [
    f32::from_bits(0x3950_0d01),
    f32::from_bits(0x3ab6_0b61),
    f32::from_bits(0x3c08_8889),
    f32::from_bits(0x3d2a_aaab),
    f32::from_bits(0x3e2a_aaab),
    0.5,
];

/// `2^e` for `e` in the normal exponent range `-126..=127`, from its bits.
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `exp(x)` in f32, the same operations as the CUDA `exp_f32` (and so the same bits):
/// `n = rint(x * log2 e)`, `r = x - n ln 2` in two fused steps, `p = e^r` by Horner's rule in
/// fused multiply-adds, then `p * 2^n` in one or two exact-or-once-rounded products (two
/// when `2^n` is not a normal f32). NaN in, NaN out; `exp(-inf) = 0`, `exp(inf) = inf`.
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let x = x.clamp(X_MIN, X_MAX);
    let n = (x * LOG2_E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = POLY[0];
    for c in &POLY[1..] {
        p = p.mul_add(r, *c);
    }
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    let n = n as i32;
    if n > 127 {
        (p * pow2(127)) * pow2(n - 127)
    } else if n < -126 {
        (p * pow2(n + 64)) * pow2(-64)
    } else {
        p * pow2(n)
    }
}

/// `SiLU(g) * u = (g / (1 + exp(-g))) * u`, each operation rounded once in f32.
pub fn silu_mul(g: f32, u: f32) -> f32 {
    let d = 1.0 + exp_f32(-g);
    (g / d) * u
}

/// SiLU-and-multiply over rows of `[gate | up]` (each row `2k` values, gate first), in
/// place: the `[m, k]` result `h` ends up in the first `m * k` values of `x`
/// (`m = x.len() / (2k)`; later values are left as they are).
pub fn silu_mul_rows_in_place(x: &mut [f32], k: usize) {
    let m = x.len() / (2 * k).max(1);
    for i in 0..m {
        for j in 0..k {
            // Row i's gate and up sit at or after the write position i*k + j, and every
            // value before them was read already.
            x[i * k + j] = silu_mul(x[2 * i * k + j], x[2 * i * k + k + j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_are_the_rounded_values() {
        assert_eq!(LOG2_E, std::f32::consts::LOG2_E);
        assert_eq!(LN2_LO, (std::f64::consts::LN_2 - f64::from(LN2_HI)) as f32);
        assert_eq!(
            LN2_HI.to_bits() & 0x1ff,
            0,
            "LN2_HI has 15 significant bits"
        );
        for (j, c) in (2..=7).rev().zip(POLY) {
            let fact: f64 = (1..=j).map(f64::from).product();
            assert_eq!(c, (1.0 / fact) as f32, "1/{j}!");
        }
    }

    #[test]
    fn exp_is_exact_where_it_must_be() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-0.0), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert_eq!(silu_mul(0.0, 5.0), 0.0);
        assert_eq!(silu_mul(200.0, 1.0), 200.0);
        assert_eq!(silu_mul(-200.0, 1.0), 0.0);
    }

    #[test]
    fn in_place_rows_match_elementwise() {
        let (m, k) = (3, 5);
        let x: Vec<f32> = (0..m * 2 * k).map(|i| i as f32 * 0.37 - 6.0).collect();
        let mut y = x.clone();
        silu_mul_rows_in_place(&mut y, k);
        for i in 0..m {
            for j in 0..k {
                let want = silu_mul(x[2 * i * k + j], x[2 * i * k + k + j]);
                assert_eq!(y[i * k + j].to_bits(), want.to_bits(), "{i} {j}");
            }
        }
    }
}
