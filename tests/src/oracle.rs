//! An independent, test-only statement of the activation quantization spec, in f64, that
//! the CPU quantizers (`fp8_linear::cpu::quantize`, the reference's
//! `fp8_linear::cpu::reference::quantize_*`) and the GPU quantizer (`ActQuant`) are all
//! checked against, bit for bit. It calls none of them, nor `fp8_linear::fp8`.
//!
//! The spec, as the kernels state it (`fp8_linear::fp8::quantize_row_groups`,
//! `cpu::quantize::per_token_into`, `cuda/cu/quant.cu`):
//!
//! - e4m3fn values: exponent field `e` (4 bits, bias 7), mantissa `m` (3 bits):
//!   `m * 2^-9` for `e = 0`, `(1 + m / 8) * 2^(e - 7)` otherwise; `e = 15, m = 7` is NaN. The
//!   largest finite magnitude is 448 (`0x7e`).
//! - A value is encoded by saturating round-to-nearest-even onto that grid (the tie goes to
//!   the even mantissa, i.e. the even code), magnitudes >= 448 to 448, the sign bit kept.
//! - Dynamic scale of a group of values: `s = fl32(max(absmax, fl32(1e-10)) / 448)` (an f32
//!   division); per token with an upper bound `ub`, the absmax is clamped to `ub` first:
//!   `fl32(max(min(absmax, ub), 1e-10) / 448)`. Static per-tensor: the given scale.
//! - ue8m0 scales (checkpoints with `scale_fmt: "ue8m0"`): each dynamic scale above is
//!   replaced by the smallest power of two at or above it (found here by stepping through
//!   the powers of two, no bit tricks); a static scale is used as given.
//! - Code of `x`: `encode(fl32(x / s))`, the quotient correctly rounded to f32 first.
//!
//! Groups are 1 x G along each row (G = 128 for block checkpoints), the last group of a row
//! ragged when G does not divide K. Inputs must be finite (NaN and infinity handling is
//! left to the kernels' own tests).
//!
//! Here the f32 operations are done in f64 and rounded to f32 (`(a as f64 / b as f64) as
//! f32`): for one division of two f32 values that double rounding is innocuous (f64 has
//! 53 bits, at least twice f32's 24 plus 2), so it is the f32 division. The grid is built
//! from the definition above and a value is rounded by searching it (no bit tricks on the
//! value).
//!
//! Hand-derived cases, worked out below in [`hand_derived_cases`], pin the oracle itself.

/// Largest finite e4m3fn magnitude.
pub const E4M3_MAX: f64 = 448.0;

/// The absmax floor of dynamic scales (an f32 constant, as the kernels hold it).
pub const MIN_ABSMAX: f32 = 1e-10;

/// The 127 non-negative finite e4m3fn magnitudes, indexed by code `0x00..=0x7e`, from the
/// definition (increasing with the code).
pub fn magnitudes() -> Vec<f64> {
    let mut v = Vec::with_capacity(127);
    for e in 0..16i32 {
        for m in 0..8i32 {
            if e == 15 && m == 7 {
                continue; // NaN
            }
            v.push(if e == 0 {
                f64::from(m) / 512.0
            } else {
                (1.0 + f64::from(m) / 8.0) * 2f64.powi(e - 7)
            });
        }
    }
    v
}

fn grid() -> &'static [f64] {
    static GRID: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    GRID.get_or_init(magnitudes)
}

/// The value of a code (None for the NaN codes).
pub fn value(code: u8) -> Option<f64> {
    let mag = *grid().get(usize::from(code & 0x7f))?;
    Some(if code & 0x80 != 0 { -mag } else { mag })
}

/// Saturating round-to-nearest-even of `q` onto the e4m3fn grid, by search.
///
/// # Panics
/// On NaN (outside the spec stated here).
pub fn encode(q: f32) -> u8 {
    assert!(!q.is_nan(), "the oracle takes no NaN");
    let sign = if q.is_sign_negative() { 0x80 } else { 0 };
    let a = f64::from(q).abs();
    let g = grid();
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    // g[lo] <= a < g[lo + 1]: lo + 1 exists since a < 448 = g[126].
    let lo = g.partition_point(|&v| v <= a) - 1;
    let hi = lo + 1;
    // Compare 2a with g[lo] + g[hi] (both exact in f64: a has 24 significant bits, the
    // grid values 4).
    let (twice, mid) = (2.0 * a, g[lo] + g[hi]);
    let code = if twice < mid {
        lo
    } else if twice > mid {
        hi
    } else if lo % 2 == 0 {
        lo // the tie: the even code has the even mantissa
    } else {
        hi
    };
    sign | code as u8
}

/// `fl32(a / b)`, through f64 (see the module docs).
pub fn div_f32(a: f32, b: f32) -> f32 {
    (f64::from(a) / f64::from(b)) as f32
}

/// The absmax of finite values.
///
/// # Panics
/// On a value that is not finite.
pub fn absmax(xs: &[f32]) -> f32 {
    xs.iter().fold(0f32, |m, &x| {
        assert!(x.is_finite(), "the oracle takes finite values, got {x}");
        m.max(x.abs())
    })
}

/// The dynamic scale of a group (or row, or tensor): `fl32(max(absmax, 1e-10) / 448)`,
/// with the absmax clamped to `ub` first when given.
pub fn dynamic_scale(xs: &[f32], ub: Option<f32>) -> f32 {
    let mut a = absmax(xs);
    if let Some(ub) = ub {
        a = a.min(ub);
    }
    div_f32(a.max(MIN_ABSMAX), 448.0)
}

/// The ue8m0 form of a dynamic scale: the smallest power of two (from 2^-126 up) at or
/// above `s`, by search; `s` itself when it is not positive and finite.
pub fn ue8m0(s: f32) -> f32 {
    if !(s > 0.0 && s.is_finite()) {
        return s;
    }
    let mut p = 2f64.powi(-126);
    while p < f64::from(s) {
        p *= 2.0;
    }
    p as f32
}

/// A dynamic scale as the layer keeps it: [`ue8m0`] of it when `pow2`.
fn kept(s: f32, pow2: bool) -> f32 {
    if pow2 {
        ue8m0(s)
    } else {
        s
    }
}

/// Codes of `xs` with one scale.
pub fn codes(xs: &[f32], scale: f32) -> Vec<u8> {
    xs.iter().map(|&x| encode(div_f32(x, scale))).collect()
}

/// Dynamic 1 x `group` quantization of `x` `[m, k]`: codes `[m, k]`, scales
/// `[m, ceil(k / group)]`, row-major.
pub fn quantize_groups(x: &[f32], m: usize, k: usize, group: usize) -> (Vec<u8>, Vec<f32>) {
    quantize_groups_as(x, m, k, group, false)
}

/// [`quantize_groups`] with ue8m0 scales when `pow2`.
pub fn quantize_groups_as(
    x: &[f32],
    m: usize,
    k: usize,
    group: usize,
    pow2: bool,
) -> (Vec<u8>, Vec<f32>) {
    assert_eq!(x.len(), m * k, "x is [m, k]");
    let mut q = Vec::with_capacity(m * k);
    let mut s = Vec::with_capacity(m * k.div_ceil(group));
    for row in x.chunks(k) {
        for g in row.chunks(group) {
            let scale = kept(dynamic_scale(g, None), pow2);
            s.push(scale);
            q.extend(codes(g, scale));
        }
    }
    (q, s)
}

/// Dynamic per-token quantization of `x` `[m, k]` with an optional upper bound: codes
/// `[m, k]`, one scale per row.
pub fn quantize_per_token(x: &[f32], m: usize, k: usize, ub: Option<f32>) -> (Vec<u8>, Vec<f32>) {
    quantize_per_token_as(x, m, k, ub, false)
}

/// [`quantize_per_token`] with ue8m0 scales when `pow2` (the bound applies first).
pub fn quantize_per_token_as(
    x: &[f32],
    m: usize,
    k: usize,
    ub: Option<f32>,
    pow2: bool,
) -> (Vec<u8>, Vec<f32>) {
    assert_eq!(x.len(), m * k, "x is [m, k]");
    let mut q = Vec::with_capacity(m * k);
    let mut s = Vec::with_capacity(m);
    for row in x.chunks(k) {
        let scale = kept(dynamic_scale(row, ub), pow2);
        s.push(scale);
        q.extend(codes(row, scale));
    }
    (q, s)
}

/// Per-tensor quantization: the static `scale`, or the dynamic scale of all of `x`.
pub fn quantize_per_tensor(x: &[f32], scale: Option<f32>) -> (Vec<u8>, f32) {
    quantize_per_tensor_as(x, scale, false)
}

/// [`quantize_per_tensor`] with a ue8m0 dynamic scale when `pow2` (a static scale is used
/// as given).
pub fn quantize_per_tensor_as(x: &[f32], scale: Option<f32>, pow2: bool) -> (Vec<u8>, f32) {
    let s = scale.unwrap_or_else(|| kept(dynamic_scale(x, None), pow2));
    (codes(x, s), s)
}

/// A case worked out by hand: the input, how it is quantized, the expected codes and
/// scales.
#[derive(Clone, Debug)]
pub struct HandCase {
    /// What the case shows.
    pub what: &'static str,
    /// The activations `[m, k]`.
    pub x: Vec<f32>,
    /// Rows and columns.
    pub m: usize,
    /// Columns.
    pub k: usize,
    /// The quantization.
    pub how: How,
    /// Expected codes `[m, k]`.
    pub codes: Vec<u8>,
    /// Expected scales (per group row-major, per row, or one).
    pub scales: Vec<f32>,
}

/// The quantization of a [`HandCase`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum How {
    /// Dynamic 1 x G groups.
    Groups(usize),
    /// Dynamic per token, with an optional upper bound.
    PerToken(Option<f32>),
    /// Per tensor: static scale, or dynamic (None).
    PerTensor(Option<f32>),
}

/// Cases with their codes and scales derived by hand (in the comments), not by any encoder.
/// Inputs are chosen so every scale is exact (a power of two, or the given static scale),
/// and the quotients `x / s` are exact, so each code follows from the grid alone.
pub fn hand_derived_cases() -> Vec<HandCase> {
    let mut cases = Vec::new();

    // 1 x 128 groups, K = 130: a full group and a ragged tail group of 2.
    // Group 0: absmax 448, so s = 448 / 448 = 1 (exact) and each code is x itself:
    //   448      -> e = 15, m = 6 (1.75 * 2^8)                     -> 0 1111 110 = 0x7e
    //   1.0      -> e = 7, m = 0                                   -> 0 0111 000 = 0x38
    //   1.0625   -> halfway between 1.0 (m = 0) and 1.125 (m = 1): even -> 1.0  = 0x38
    //   1.1875   -> halfway between 1.125 (m = 1) and 1.25 (m = 2): even -> 1.25 = 0x3a
    //   -3.0     -> 1.5 * 2^1: e = 8, m = 4, sign                  -> 1 1000 100 = 0xc4
    //   2^-9     -> smallest subnormal, m = 1                      -> 0x01
    //   2^-10    -> halfway between 0 and 2^-9: even -> 0          -> 0x00
    //   3 * 2^-10 -> halfway between 1 and 2 (* 2^-9): even -> 2   -> 0x02
    //   -0.0     -> sign kept                                      -> 0x80
    //   250      -> in [128, 256) the spacing is 16: 240 (m = 7) or 256 (next binade);
    //               256 is nearer (6 < 10)                         -> 0 1111 000 = 0x78
    //   240      -> 1.875 * 2^7: e = 14, m = 7                     -> 0 1110 111 = 0x77
    //   -2^-11   -> rounds to zero, sign kept                      -> 0x80
    //   7.5 * 2^-9 -> halfway between 7 * 2^-9 (0x07, odd) and 2^-6 (0x08, even) -> 0x08
    //   the other 115 values 0.0                                   -> 0x00
    // Group 1 (columns 128, 129): [3.5, -7.0], absmax 7, s = 7 / 448 = 2^-6 (exact):
    //   3.5 / 2^-6 = 224 = 1.75 * 2^7: e = 14, m = 6               -> 0 1110 110 = 0x76
    //   -7 / 2^-6 = -448                                           -> 0xfe
    let head: [(f32, u8); 13] = [
        (448.0, 0x7e),
        (1.0, 0x38),
        (1.0625, 0x38),
        (1.1875, 0x3a),
        (-3.0, 0xc4),
        (2f32.powi(-9), 0x01),
        (2f32.powi(-10), 0x00),
        (3.0 * 2f32.powi(-10), 0x02),
        (-0.0, 0x80),
        (250.0, 0x78),
        (240.0, 0x77),
        (-(2f32.powi(-11)), 0x80),
        (7.5 * 2f32.powi(-9), 0x08),
    ];
    let mut x = vec![0f32; 130];
    let mut c = vec![0u8; 130];
    for (i, (v, code)) in head.iter().enumerate() {
        x[i] = *v;
        c[i] = *code;
    }
    x[128] = 3.5;
    c[128] = 0x76;
    x[129] = -7.0;
    c[129] = 0xfe;
    cases.push(HandCase {
        what: "1x128 groups, ties to even, subnormals, signed zero, ragged tail group",
        x,
        m: 1,
        k: 130,
        how: How::Groups(128),
        codes: c,
        scales: vec![1.0, 0.015625],
    });

    // An all-zero group: absmax 0 is floored to 1e-10, s = fl32(1e-10) / 448 in f32, codes 0.
    cases.push(HandCase {
        what: "all-zero group: the 1e-10 floor",
        x: vec![0.0; 5],
        m: 1,
        k: 5,
        how: How::Groups(128),
        codes: vec![0; 5],
        scales: vec![1e-10f32 / 448.0],
    });

    // Per token, row [14, 3.5, -0.109375]:
    // - no bound: absmax 14, s = 14 / 448 = 2^-5 (exact); x * 32 = [448, 112, -3.5]:
    //   448 -> 0x7e; 112 = 1.75 * 2^6: e = 13, m = 6 -> 0 1101 110 = 0x6e;
    //   -3.5 = -1.75 * 2^1: e = 8, m = 6 -> 1 1000 110 = 0xc6.
    // - ub = 7: absmax clamped to 7, s = 7 / 448 = 2^-6; x * 64 = [896, 224, -7]:
    //   896 saturates -> 0x7e; 224 -> 0x76; -7 = -1.75 * 2^2: e = 9, m = 6 -> 1 1001 110 = 0xce.
    // - ub = 100 (above the absmax): no effect, as without a bound.
    let row = vec![14.0f32, 3.5, -0.109375];
    cases.push(HandCase {
        what: "per token, no bound",
        x: row.clone(),
        m: 1,
        k: 3,
        how: How::PerToken(None),
        codes: vec![0x7e, 0x6e, 0xc6],
        scales: vec![0.03125],
    });
    cases.push(HandCase {
        what: "per token, the bound clamps the absmax (values above it saturate)",
        x: row.clone(),
        m: 1,
        k: 3,
        how: How::PerToken(Some(7.0)),
        codes: vec![0x7e, 0x76, 0xce],
        scales: vec![0.015625],
    });
    cases.push(HandCase {
        what: "per token, a bound above the absmax changes nothing",
        x: row,
        m: 1,
        k: 3,
        how: How::PerToken(Some(100.0)),
        codes: vec![0x7e, 0x6e, 0xc6],
        scales: vec![0.03125],
    });

    // Per tensor, dynamic, [[1, -28], [0.25, 3]]: absmax 28, s = 28 / 448 = 2^-4;
    // x * 16 = [16, -448, 4, 48]: 16 = 2^4: e = 11 -> 0x58; -448 -> 0xfe; 4 = 2^2: e = 9
    // -> 0x48; 48 = 1.5 * 2^5: e = 12, m = 4 -> 0 1100 100 = 0x64.
    cases.push(HandCase {
        what: "per tensor, dynamic: one scale over every row",
        x: vec![1.0, -28.0, 0.25, 3.0],
        m: 2,
        k: 2,
        how: How::PerTensor(None),
        codes: vec![0x58, 0xfe, 0x48, 0x64],
        scales: vec![0.0625],
    });

    // Per tensor, static s = 0.5: x / 0.5 = [2, 600, -2^-9, 0.6000000238]:
    // 2 = 2^1: e = 8 -> 0x40; 600 saturates -> 0x7e; -2^-9 -> 0x81;
    // fl32(0.3) / 0.5 = 0.60000002 in [0.5, 1) (e = 6, spacing 1/16): between 0.5625 (m = 1)
    // and 0.625 (m = 2), nearer 0.625 -> 0 0110 010 = 0x32.
    cases.push(HandCase {
        what: "per tensor, static scale: saturation and a subnormal",
        x: vec![1.0, 300.0, -(2f32.powi(-10)), 0.3],
        m: 1,
        k: 4,
        how: How::PerTensor(Some(0.5)),
        codes: vec![0x40, 0x7e, 0x81, 0x32],
        scales: vec![0.5],
    });
    cases
}

/// Quantizes a hand case's input with the oracle: (codes, scales).
pub fn quantize_case(c: &HandCase) -> (Vec<u8>, Vec<f32>) {
    match c.how {
        How::Groups(g) => quantize_groups(&c.x, c.m, c.k, g),
        How::PerToken(ub) => quantize_per_token(&c.x, c.m, c.k, ub),
        How::PerTensor(s) => {
            let (q, s) = quantize_per_tensor(&c.x, s);
            (q, vec![s])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_the_format() {
        let g = magnitudes();
        assert_eq!(g.len(), 127);
        assert!(
            g.windows(2).all(|w| w[0] < w[1]),
            "increasing with the code"
        );
        assert_eq!(g[0x7e], 448.0);
        assert_eq!(g[0x38], 1.0);
        assert_eq!(g[0x08], 2f64.powi(-6));
        assert_eq!(g[0x01], 2f64.powi(-9));
        assert_eq!(value(0x7f), None);
        assert_eq!(value(0xff), None);
        assert_eq!(value(0xc4), Some(-3.0));
    }

    #[test]
    fn ue8m0_is_the_next_power_of_two_up() {
        assert_eq!(ue8m0(1.0), 1.0);
        assert_eq!(ue8m0(0.3), 0.5);
        assert_eq!(ue8m0(0.25), 0.25);
        // Just above a power of two (one ulp): the next one up.
        assert_eq!(ue8m0(f32::from_bits(0x3f80_0001)), 2.0);
        assert_eq!(ue8m0(1e-10 / 448.0), 2f32.powi(-42));
        assert_eq!(ue8m0(0.0), 0.0);
        assert!(ue8m0(f32::NAN).is_nan());
        // ue8m0 scales are powers of two: the codes are those of an exact division.
        let x = [3.0f32, -0.7, 100.0];
        let (q, s) = quantize_groups_as(&x, 1, 3, 3, true);
        assert_eq!(s, vec![0.25]); // 100 / 448 = 0.223 -> 0.25
        assert_eq!(q, codes(&x, 0.25));
    }

    #[test]
    fn the_oracle_gives_the_hand_derived_codes_and_scales() {
        for c in hand_derived_cases() {
            let (q, s) = quantize_case(&c);
            assert_eq!(q, c.codes, "{}: codes", c.what);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&s), bits(&c.scales), "{}: scales", c.what);
        }
    }
}
