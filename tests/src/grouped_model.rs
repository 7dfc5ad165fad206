//! What the grouped kernels' host models share: a grouped call's random data (activations
//! quantized in 1 x C groups, E experts' stacked weights, scales and bias, per-row routing
//! weights), the segments a masked call's device counts give, and the check of an output
//! against each segment's f64 reference, rows no segment covers untouched.

use fp8_linear::DType;

use crate::check::{compare_rows, Tolerance};
use crate::host_model::{block_reference, random_block_scales};
use crate::layers::{random_activations, random_codes};
use crate::oracle::quantize_groups;

/// The data of a grouped call: M rows of K, E experts of N x K in `block` weight blocks.
pub struct GroupedData {
    /// (M, N, K, E).
    pub dims: (usize, usize, usize, usize),
    /// The weight blocks (rows along N, columns along K).
    pub block: (usize, usize),
    /// Activation codes `[M, K]` and their 1 x C scales `[M, ceil(K / C)]`.
    pub a: Vec<u8>,
    /// See `a`.
    pub a_scales: Vec<f32>,
    /// Weight codes `[E N, K]` and block scales `[E ceil(N / R), ceil(K / C)]`.
    pub w: Vec<u8>,
    /// See `w`.
    pub w_scales: Vec<f32>,
    /// `[E N]`.
    pub bias: Vec<f32>,
    /// One routing weight per row.
    pub rw: Vec<f32>,
}

impl GroupedData {
    /// Random data of M x N x K, E experts, `block` weight blocks.
    pub fn random((m, n, k, e): (usize, usize, usize, usize), block: (usize, usize)) -> Self {
        let (rows, cols) = block;
        let (kbs, nbs) = (k.div_ceil(cols), n.div_ceil(rows));
        let (a, a_scales) = quantize_groups(&random_activations(m, k), m, k, cols);
        GroupedData {
            dims: (m, n, k, e),
            block,
            a,
            a_scales,
            w: random_codes(e * n * k),
            w_scales: random_block_scales(e * nbs * kbs, (m * 13 + n * 5 + k) as u64),
            bias: (0..e * n).map(|j| (j % 7) as f32 * 0.25 - 0.75).collect(),
            rw: (0..m).map(|r| 0.25 + (r % 5) as f32 * 0.375).collect(),
        }
    }

    /// The activation scales with M fastest, `[ceil(K / C), M]`.
    pub fn a_scales_m_fastest(&self) -> Vec<f32> {
        let (m, _, k, _) = self.dims;
        let kbs = k.div_ceil(self.block.1);
        let mut t = vec![0f32; kbs * m];
        for r in 0..m {
            for g in 0..kbs {
                t[g * m + r] = self.a_scales[r * kbs + g];
            }
        }
        t
    }

    /// Checks `out` (`[M, N]` as f32) of a call over `segs` ((expert, first row, rows)):
    /// each segment's rows against its expert's f64 reference (`+ bias` when `bias`, `*
    /// rw` when `rw`) at the tolerance of `output`, and every row no segment covers still
    /// NaN (the drivers fill the output with 0xff bytes first).
    pub fn check(
        &self,
        out: &[f32],
        segs: &[(usize, usize, usize)],
        (bias, rw, output): (bool, bool, DType),
        what: &str,
    ) {
        let (m, n, k, _) = self.dims;
        let (rows, cols) = self.block;
        let (kbs, nbs) = (k.div_ceil(cols), n.div_ceil(rows));
        for &(x, r0, len) in segs.iter().filter(|s| s.2 > 0) {
            let mut want = block_reference(
                (
                    &self.a[r0 * k..(r0 + len) * k],
                    &self.a_scales[r0 * kbs..(r0 + len) * kbs],
                ),
                (
                    &self.w[x * n * k..(x + 1) * n * k],
                    &self.w_scales[x * nbs * kbs..(x + 1) * nbs * kbs],
                ),
                (len, n, k),
                self.block,
                bias.then_some(&self.bias[x * n..(x + 1) * n]),
            );
            if rw {
                for (i, v) in want.iter_mut().enumerate() {
                    *v *= f64::from(self.rw[r0 + i / n]);
                }
            }
            let ids: Vec<usize> = (r0..r0 + len).collect();
            let got = &out[r0 * n..(r0 + len) * n];
            let cmp = compare_rows(got, &want, n, &ids, Tolerance::cpu(output));
            let seg = format!("{what}: segment ({x}, {r0}, {len})");
            eprintln!("host model {seg}: {}", cmp.summary());
            cmp.assert_ok(&seg);
        }
        assert_uncovered_untouched(out, (m, n), segs, what);
    }
}

/// Asserts that every row of `out` (`[M, N]` as f32) that no segment of `segs` ((expert,
/// first row, rows)) covers is still NaN (the drivers fill the output with 0xff bytes
/// first).
pub fn assert_uncovered_untouched(
    out: &[f32],
    (m, n): (usize, usize),
    segs: &[(usize, usize, usize)],
    what: &str,
) {
    let mut covered = vec![false; m];
    for &(_, r0, len) in segs {
        covered[r0..r0 + len].iter_mut().for_each(|c| *c = true);
    }
    for (r, _) in covered.iter().enumerate().filter(|(_, c)| !**c) {
        assert!(
            out[r * n..(r + 1) * n].iter().all(|v| v.is_nan()),
            "{what}: row {r}, which no segment covers, was written"
        );
    }
}

/// The segments of a masked call whose kernel reads `counts` on the device: expert e's
/// slab of `m_max` rows, its count clamped to `0..=m_max`.
pub fn masked_segments(counts: &[i32], m_max: usize) -> Vec<(usize, usize, usize)> {
    counts
        .iter()
        .enumerate()
        .map(|(x, &n)| (x, x * m_max, n.clamp(0, m_max as i32) as usize))
        .collect()
}
