//! The decode path of the CPU kernel (few rows of M): the weight stays in FP8, one byte per
//! element, and is decoded on the fly, so each call streams a quarter of the bytes an f32
//! SGEMM would. Codes are decoded through the 256-entry table (1 KiB, L1-resident), a chunk
//! at a time, and the chunk is dotted with each activation row; the weight scale is applied
//! once per scale group. (Decoding by placing the code's bits in an f32's fields, as GPU
//! kernels do, would make subnormal f32 operands, which are slow and lose precision on CPUs.)

use rayon::prelude::*;

use fp8_linear_core::fp8::E4M3_TABLE;

use super::host::HostWeights;

/// Columns decoded at once (fits the L1 cache together with the activation rows).
const CHUNK: usize = 256;

/// Most rows of M for which the decode path beats dequantize-then-SGEMM.
pub const MAX_ROWS: usize = 8;

/// `out[i, j] = sum_k a[i, k] * w(j, k)` for `m <= MAX_ROWS` rows, with `w` decoded from the
/// FP8 codes and scaled per the weight's scale groups. `a` is `[m, k]`, `out` `[m, n]`;
/// `out_t` is scratch reused across calls.
pub fn fp8_gemv(
    a: &[f32],
    m: usize,
    w: &HostWeights,
    (n, k): (usize, usize),
    out: &mut [f32],
    out_t: &mut Vec<f32>,
) {
    debug_assert!(m <= MAX_ROWS);
    let group = w.k_group();
    // Output transposed ([n, m]) so threads own contiguous slices; then scattered back.
    out_t.clear();
    out_t.resize(n * m, 0.0);
    let rows_per_task = (n / (rayon::current_num_threads() * 8)).clamp(1, 64);
    out_t
        .par_chunks_mut(m * rows_per_task)
        .enumerate()
        .for_each(|(t, dst)| {
            let mut decoded = [0f32; CHUNK];
            for (r, acc) in dst.chunks_mut(m).enumerate() {
                let j = t * rows_per_task + r;
                let row = &w.codes[j * k..(j + 1) * k];
                let mut g0 = 0;
                while g0 < k {
                    let g1 = (g0 + group).min(k);
                    let scale = w.scale(j, g0);
                    let mut partial = [0f32; MAX_ROWS];
                    let mut c0 = g0;
                    while c0 < g1 {
                        let c1 = (c0 + CHUNK).min(g1);
                        let len = c1 - c0;
                        for (d, c) in decoded[..len].iter_mut().zip(&row[c0..c1]) {
                            *d = E4M3_TABLE[*c as usize];
                        }
                        for (i, p) in partial[..m].iter_mut().enumerate() {
                            let ai = &a[i * k + c0..i * k + c1];
                            *p += dot(&decoded[..len], ai);
                        }
                        c0 = c1;
                    }
                    for (o, p) in acc.iter_mut().zip(&partial[..m]) {
                        *o += p * scale;
                    }
                    g0 = g1;
                }
            }
        });
    for j in 0..n {
        for i in 0..m {
            out[i * n + j] = out_t[j * m + i];
        }
    }
}

/// A dot product written so the compiler keeps 8 independent partial sums (vectorizes).
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += x[c * 8 + l] * y[c * 8 + l];
        }
    }
    let mut s = 0f32;
    for i in chunks * 8..x.len() {
        s += x[i] * y[i];
    }
    acc.iter().sum::<f32>() + s
}
