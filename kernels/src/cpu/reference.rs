//! f64 reference GEMMs on already-quantized data: the oracle every kernel is tested against.

use fp8_linear_core::fp8::e4m3_to_f32;

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
                    partial +=
                        e4m3_to_f32(a[i * k + kk]) as f64 * e4m3_to_f32(b[j * k + kk]) as f64;
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
                acc += e4m3_to_f32(a[i * k + kk]) as f64 * e4m3_to_f32(b[j * k + kk]) as f64;
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
        .map(|idx| e4m3_to_f32(b[idx]) as f64 * w_scale(idx / k, idx % k) as f64)
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
