//! How a kernel's output is compared with its f64 reference, and how close it must be.
//!
//! Two bounds, both required:
//!
//! - the relative Frobenius error of the whole checked output, `||got - want|| / ||want||`,
//!   below [`Tolerance::frob`] (plus `atol * sqrt(elements) / ||want||`: only f16 output
//!   has an absolute floor, for results in its subnormal range);
//! - every element: `|got - want| <= atol + round * |want| + rtol * scale(row)`, where
//!   `scale(row) = max(max_j |want[row, j]|, rms(want))`. The `round` term is the rounding
//!   of the element itself to the output dtype (relative to that element); the `rtol` term
//!   is the kernel's accumulation error, relative to the row's largest output (an error of
//!   a sum is relative to its terms, which the row's largest output stands for), with the
//!   RMS of the whole output as a floor so that a row whose outputs all cancel to near zero
//!   (possible only for a handful of columns) is not judged against its own noise.
//!
//! The Frobenius bound alone lets a wrong row, a wrong tail tile or a few wrong elements
//! through when the rest of the output is right; the element bound does not. Failures
//! print the worst element (row, column, got, want, the bound).
//!
//! Tolerances, per output dtype and kernel numerics (derived where they are defined:
//! [`output_rounding`], [`Tolerance::cpu`], [`Tolerance::for_kernel`]):
//!
//! | kernel (backend)                          | out  | frob   | round  | rtol (x row scale) |
//! |-------------------------------------------|------|--------|--------|--------------------|
//! | CPU (`cpu`, `cpu_reference`), `portable`  | f32  | 1e-5   | 2^-24  | 1e-5               |
//! | same                                      | f16  | 2e-3   | 2^-11  | 1e-5               |
//! | same                                      | bf16 | 1e-2   | 2^-8   | 1e-5               |
//! | wgmma / cuBLASLt (`hopper`, `cublaslt`)   | f32  | 2e-3   | 2^-24  | 1e-2               |
//! | same                                      | f16  | 2e-3   | 2^-11  | 1e-2               |
//! | same                                      | bf16 | 1e-2   | 2^-8   | 1e-2               |
//! | W8A16 (`marlin`), 16-bit dtype f16        | f16  | 3e-3   | 2^-11  | 6 * 2^-11 = 2.9e-3 |
//! | W8A16 (`marlin`), 16-bit dtype bf16       | bf16 | 1e-2   | 2^-8   | 6 * 2^-8 = 2.3e-2  |
//!
//! (atol: 2^-25 for f16 output, half its subnormal spacing; 0 otherwise.)

use fp8_linear::{DType, KernelEntry, LayerConfig, Numerics};

/// The bounds one output is held to (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative Frobenius error of the whole checked output must be below this.
    pub frob: f64,
    /// Per element, relative to the row scale: the kernel's accumulation error.
    pub rtol: f64,
    /// Per element, relative to the element: its rounding to the output dtype.
    pub round: f64,
    /// Per element, absolute.
    pub atol: f64,
}

/// The rounding of a value to `out` (round to nearest even), as (relative bound, absolute
/// bound): a result `v` in the normal range is stored with `|error| <= u * |v|`, u the unit
/// roundoff (half an ulp relative to the value: 2^-24 for f32's 24 significant bits, 2^-11
/// for f16's 11, 2^-8 for bf16's 8). f16's subnormals (below 2^-14) have a fixed spacing of
/// 2^-24, so an absolute 2^-25 covers them; bf16 has f32's exponent range.
pub fn output_rounding(out: DType) -> (f64, f64) {
    match out {
        DType::F32 => (2f64.powi(-24), 0.0),
        DType::F16 => (2f64.powi(-11), 2f64.powi(-25)),
        DType::Bf16 => (2f64.powi(-8), 0.0),
        DType::F8E4m3 => panic!("no kernel writes FP8 output"),
    }
}

/// The unit roundoff of a 16-bit float dtype (f32 has 2^-24).
fn unit_roundoff(d: DType) -> f64 {
    output_rounding(d).0
}

impl Tolerance {
    /// The CPU kernels (`CpuFp8Gemm`, `CpuReference`) and the portable mma.sync kernel: the
    /// activation codes and scales are the reference's; what differs is f32 arithmetic
    /// (dequantized operands and products rounded to f32, sums of K terms in f32). Each
    /// operation is off by at most 2^-24 of its result; for a K-term sum the rounding errors
    /// add up like a random walk to about `2^-24 * sqrt(K) * rms(term)` (blocked sums: less),
    /// while the row's largest output is about `3 * sqrt(K) * rms(term)`: a few 1e-8 of the
    /// row scale. Measured: ~5e-8 relative Frobenius (docs/perf-log.md, "GPU: Hopper
    /// wgmma block-FP8 kernel", numerics).
    /// rtol = 1e-5 leaves two orders of magnitude, and so does the Frobenius bound for f32
    /// output (1e-5). For 16-bit output the element's rounding (`round`) dominates; the
    /// Frobenius bounds are the project's usual ones, 2e-3 (f16: 2^-11 = 4.9e-4 at most per
    /// element) and 1e-2 (bf16: 2^-8 = 3.9e-3 at most, ~1.6e-3 RMS measured).
    pub fn cpu(out: DType) -> Self {
        Self::f32_exact(out)
    }

    fn f32_exact(out: DType) -> Self {
        let (round, atol) = output_rounding(out);
        let frob = match out {
            DType::F32 => 1e-5,
            DType::F16 => 2e-3,
            _ => 1e-2,
        };
        Tolerance {
            frob,
            rtol: 1e-5,
            round,
            atol,
        }
    }

    /// The tolerance of `entry` on layer `cfg` (checked against the reference of
    /// `entry.reference_config(cfg)`), by its backend and numerics:
    ///
    /// - `cpu`, `cpu_reference`, `portable`: exact products, f32 accumulation: as
    ///   [`Tolerance::cpu`] (the portable kernel measures 5e-8 with f32 output).
    /// - `hopper`, `cublaslt` (and any other W8A8 backend): Hopper's FP8 wgmma accumulates
    ///   with reduced precision inside each 128-long K block (measured 1.4e-4 to 2.2e-4
    ///   relative Frobenius with f32 output, docs/perf-log.md, "GPU: Hopper wgmma block-FP8
    ///   kernel"). The accumulator keeps about 14 significant bits and aligns each product
    ///   to its running value, dropping (not rounding) the bits below: the error of one
    ///   element grows with the block length and
    ///   with the largest partial sum, not with the result. Over one 128-long block that is
    ///   up to about 64 * 2^-14 = 3.9e-3 of the largest partial sum, and with weight codes over
    ///   every exponent a dominant product can make a partial sum about twice the row's
    ///   largest output while the rest of the sum cancels it (seen on an H200: 6e-3 of the
    ///   row at N = 129, K = 130, f16 output, in 1 of ~2e5 elements): rtol = 1e-2 (~2 * 64 *
    ///   2^-14 rounded up). That still catches any element off by more than 1 % of its row
    ///   (a 50 %-wrong column fails by 50x). Frobenius: 2e-3 for f32 and f16 output, 1e-2
    ///   for bf16.
    /// - W8A16 (`marlin`): the reference keeps the activations as the device holds them
    ///   (16-bit: their rounding is not an error), and the kernel rounds twice in the
    ///   activations' 16-bit dtype (unit roundoff u = 2^-8 bf16, 2^-11 f16): each weight
    ///   times its group scale (one rounding per element) and the group scale relative to the
    ///   channel's f32 scale (one per 128-group); then f32 accumulation. Both are relative
    ///   errors of the terms of the sum, not of the sum: with random signs they add to about
    ///   `u * sqrt(2/3) * |typical output|`, ~0.25 u of a row's largest output per element
    ///   RMS, ~1.5 u at six sigma; but weight codes over every exponent and activation
    ///   outliers make a few products dominate some sums, and those are off by up to 2 u of
    ///   the dominant product, which can be about twice the row's largest output when the
    ///   rest of the sum cancels it (f16 products in its subnormal range lose more, but they
    ///   are tiny against the row). The CPU model of the kernel, marlin_numerics.rs, reached
    ///   3.2 u of its row once in ~2.5e6 elements. rtol = 6 u. Frobenius: 1e-2 for bf16
    ///   (measured up to 2.8e-3), 3e-3 for
    ///   f16 (the CPU model of the kernel is within 1e-3 of the f64 reference with f16
    ///   scales, marlin_numerics.rs, plus at most 4.9e-4 of output rounding).
    pub fn for_kernel(entry: &KernelEntry, cfg: &LayerConfig) -> Self {
        let out = cfg.output_dtype;
        if entry.numerics == Numerics::W8A16 {
            let (round, atol) = output_rounding(out);
            let u16 = unit_roundoff(cfg.input_dtype);
            return Tolerance {
                frob: if cfg.input_dtype == DType::F16 {
                    3e-3
                } else {
                    1e-2
                },
                rtol: 6.0 * u16,
                round,
                atol,
            };
        }
        match entry.backend {
            "cpu" | "cpu_reference" | "portable" => Self::f32_exact(out),
            _ => {
                let (round, atol) = output_rounding(out);
                Tolerance {
                    frob: if out == DType::Bf16 { 1e-2 } else { 2e-3 },
                    rtol: 1e-2,
                    round,
                    atol,
                }
            }
        }
    }

    /// This tolerance with another Frobenius bound and element `rtol` (for comparisons that
    /// are not a kernel against the reference, e.g. a kernel against its CPU model).
    pub fn with(self, frob: f64, rtol: f64) -> Self {
        Tolerance { frob, rtol, ..self }
    }

    /// A bound for two f64-exact computations of the same thing (no output rounding).
    pub fn exact(frob: f64, rtol: f64) -> Self {
        Tolerance {
            frob,
            rtol,
            round: 0.0,
            atol: 0.0,
        }
    }
}

/// The element that came closest to (or furthest past) its bound.
#[derive(Copy, Clone, Debug)]
pub struct Worst {
    /// Row (as the caller numbers rows).
    pub row: usize,
    /// Column.
    pub col: usize,
    /// The kernel's value.
    pub got: f32,
    /// The reference.
    pub want: f64,
    /// Its bound on `|got - want|`.
    pub bound: f64,
}

impl Worst {
    /// `|got - want| / bound` (above 1: the element fails).
    pub fn ratio(&self) -> f64 {
        let d = (f64::from(self.got) - self.want).abs();
        if self.bound > 0.0 {
            d / self.bound
        } else if d == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    }
}

/// The outcome of comparing an output with its reference.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// The tolerance applied.
    pub tol: Tolerance,
    /// Relative Frobenius error (NaN when any element is NaN).
    pub frob: f64,
    /// Whether `||got - want|| < frob * ||want|| + atol * sqrt(elements)`: the relative
    /// bound, with the absolute rounding floor of the output dtype (f16's subnormals) so
    /// that an output of a few tiny values is not held to a relative bound its dtype cannot
    /// meet.
    pub frob_ok: bool,
    /// The first NaN element (row, column), unwritten (poisoned) or computed.
    pub nan: Option<(usize, usize)>,
    /// Elements over their bound.
    pub over: usize,
    /// The element with the largest `|got - want| / bound`.
    pub worst: Option<Worst>,
}

impl Comparison {
    /// Whether both bounds hold and there is no NaN.
    pub fn ok(&self) -> bool {
        self.nan.is_none() && self.frob_ok && self.over == 0
    }

    /// One line: the Frobenius error and its bound, the worst element and its bound.
    pub fn summary(&self) -> String {
        let mut s = format!("rel err {:.2e} (tol {:.0e})", self.frob, self.tol.frob);
        if !self.frob_ok && self.nan.is_none() {
            s += " over its bound";
        }
        if let Some((r, c)) = self.nan {
            s += &format!(", NaN at ({r}, {c}) (unwritten or poisoned element)");
        }
        if let Some(w) = self.worst {
            s += &format!(
                ", worst element ({}, {}): got {:e} want {:e} |d| {:.2e} bound {:.2e} ({:.2}x)",
                w.row,
                w.col,
                w.got,
                w.want,
                (f64::from(w.got) - w.want).abs(),
                w.bound,
                w.ratio()
            );
        }
        if self.over > 0 {
            s += &format!(", {} elements over their bound", self.over);
        }
        s
    }

    /// Panics with the summary (and `what`) unless [`Comparison::ok`].
    pub fn assert_ok(&self, what: &str) {
        assert!(self.ok(), "{what}: {}", self.summary());
    }
}

/// Compares `got` with `want`, both `[rows, n]` row-major, rows numbered `0..`.
pub fn compare(got: &[f32], want: &[f64], n: usize, tol: Tolerance) -> Comparison {
    let rows: Vec<usize> = (0..want.len() / n.max(1)).collect();
    compare_rows(got, want, n, &rows, tol)
}

/// Compares `got` with `want`, both `[row_ids.len(), n]` row-major, whose rows are the rows
/// `row_ids` of the full output (as reported).
///
/// # Panics
/// When the lengths do not match the shape.
pub fn compare_rows(
    got: &[f32],
    want: &[f64],
    n: usize,
    row_ids: &[usize],
    tol: Tolerance,
) -> Comparison {
    assert_eq!(got.len(), want.len(), "got and want differ in length");
    assert_eq!(want.len(), row_ids.len() * n, "want is [rows, n]");
    let mut num = 0f64;
    let mut den = 0f64;
    let mut nan = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(*g);
        if (g.is_nan() || w.is_nan()) && nan.is_none() {
            nan = Some((row_ids[i / n], i % n));
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    let frob = if nan.is_some() {
        f64::NAN
    } else if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (num / den).sqrt()
    };
    let floor = tol.atol * (want.len() as f64).sqrt();
    let frob_ok = nan.is_none() && (num == 0.0 || num.sqrt() < tol.frob * den.sqrt() + floor);
    let rms = if want.is_empty() {
        0.0
    } else {
        (den / want.len() as f64).sqrt()
    };
    let mut over = 0;
    let mut worst: Option<(f64, Worst)> = None;
    for (r, (gr, wr)) in got.chunks(n).zip(want.chunks(n)).enumerate() {
        let row_max = wr.iter().fold(0f64, |m, v| m.max(v.abs()));
        let scale = row_max.max(rms);
        for (c, (g, w)) in gr.iter().zip(wr).enumerate() {
            let bound = tol.atol + tol.round * w.abs() + tol.rtol * scale;
            let e = Worst {
                row: row_ids[r],
                col: c,
                got: *g,
                want: *w,
                bound,
            };
            let ratio = if g.is_nan() || w.is_nan() {
                f64::INFINITY
            } else {
                e.ratio()
            };
            if ratio > 1.0 {
                over += 1;
            }
            if worst.is_none_or(|(x, _)| ratio > x) {
                worst = Some((ratio, e));
            }
        }
    }
    Comparison {
        tol,
        frob,
        frob_ok,
        nan,
        over,
        worst: worst.map(|(_, w)| w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear::Registered;

    #[test]
    fn a_wrong_row_fails_the_element_bound_though_the_frobenius_error_is_small() {
        // 64 rows of large outputs and one row of small ones, that row 20 % off.
        let n = 16;
        let mut want: Vec<f64> = (0..64 * n).map(|i| 1000.0 + i as f64).collect();
        want.extend((0..n).map(|j| 1.0 + j as f64 * 0.1));
        let mut got: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        for v in &mut got[64 * n..] {
            *v *= 1.2;
        }
        let tol = Tolerance::for_kernel(
            &fp8_linear::cuda::PortableBlockFp8::ENTRY,
            &LayerConfig::block_128(n, 128, DType::Bf16, DType::Bf16),
        );
        let c = compare(&got, &want, n, tol);
        assert!(c.frob < tol.frob, "{}", c.summary());
        assert!(!c.ok(), "{}", c.summary());
        let w = c.worst.unwrap();
        assert_eq!(w.row, 64, "{}", c.summary());
    }

    #[test]
    fn rounding_to_the_output_dtype_passes_and_nan_fails() {
        let want: Vec<f64> = (0..300).map(|i| (i as f64 * 0.37).sin() * 100.0).collect();
        let bf: Vec<f32> = want
            .iter()
            .map(|&v| half::bf16::from_f64(v).to_f32())
            .collect();
        let tol = Tolerance::cpu(DType::Bf16);
        assert!(compare(&bf, &want, 30, tol).ok());
        let mut bad = bf.clone();
        bad[77] = f32::NAN;
        let c = compare(&bad, &want, 30, tol);
        assert_eq!(c.nan, Some((2, 17)));
        assert!(!c.ok());
        // One element off by 2 % of the row's largest output fails.
        let mut off = bf;
        off[5] += 2.0;
        assert!(!compare(&off, &want, 30, tol).ok());
    }
}
