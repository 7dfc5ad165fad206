//! Activation quantization on the CPU, the code the fast kernels run (on
//! `fp8_linear_core::fp8`'s encoder). The spec it implements is stated in
//! [`super::reference`], which implements it again on its own for the f64 reference; the
//! GPU quantizer must produce bit-identical codes and scales on the same input, and the
//! tests check all of them against a third, test-only statement.

use fp8_linear_core::fp8::{f32_to_e4m3, group_scale, quantize_row_groups, E4M3_MAX, MIN_ABSMAX};

/// Dynamic per-token-group quantization of a row-major `[m, k]` matrix: returns the FP8
/// codes `[m, k]` and the scales `[m, ceil(k / group)]` (row-major).
pub fn per_token_group(x: &[f32], m: usize, k: usize, group: usize) -> (Vec<u8>, Vec<f32>) {
    let groups = k.div_ceil(group);
    let mut q = vec![0u8; m * k];
    let mut s = vec![0f32; m * groups];
    per_token_group_into(x, k, group, &mut q, &mut s);
    (q, s)
}

/// [`per_token_group`] into caller-owned buffers (`q`: `m*k`, `s`: `m*ceil(k/group)`).
pub fn per_token_group_into(x: &[f32], k: usize, group: usize, q: &mut [u8], s: &mut [f32]) {
    let groups = k.div_ceil(group);
    for ((row, qr), sr) in x.chunks(k).zip(q.chunks_mut(k)).zip(s.chunks_mut(groups)) {
        quantize_row_groups(row, group, qr, sr);
    }
}

/// Dynamic per-token quantization: one scale per row, `max(absmax, 1e-10) / 448`; with an
/// upper bound `ub` (vLLM's `scale_ub`) the absmax is clamped to it first, so the scale is
/// `min(max(absmax, 1e-10), max(ub, 1e-10)) / 448` (a NaN absmax gives the bound's scale).
pub fn per_token_into(x: &[f32], k: usize, ub: Option<f32>, q: &mut [u8], s: &mut [f32]) {
    for ((row, qr), sr) in x.chunks(k).zip(q.chunks_mut(k)).zip(s.iter_mut()) {
        let mut scale = group_scale(row);
        if let Some(ub) = ub {
            scale = scale.min(ub.max(MIN_ABSMAX) / E4M3_MAX);
        }
        *sr = scale;
        for (v, o) in row.iter().zip(qr.iter_mut()) {
            *o = f32_to_e4m3(*v / scale);
        }
    }
}

/// Quantization with one given (static) or computed (dynamic) scale for the whole tensor.
/// Returns the scale used.
pub fn per_tensor_into(x: &[f32], scale: Option<f32>, q: &mut [u8]) -> f32 {
    let scale = scale.unwrap_or_else(|| group_scale(x));
    for (v, o) in x.iter().zip(q.iter_mut()) {
        *o = f32_to_e4m3(*v / scale);
    }
    scale
}
