//! Activation quantization on the CPU, the code the fast kernels run (on
//! `fp8_linear_core::fp8`'s encoder). The spec it implements is stated in
//! [`super::reference`], which implements it again on its own for the f64 reference; the
//! GPU quantizer must produce bit-identical codes and scales on the same input, and the
//! tests check all of them against a third, test-only statement.
//!
//! Every function comes in two forms: the plain one with f32 scales, and a `_fmt` one that
//! takes the activation key's [`ScaleDtype`]: with [`ScaleDtype::Ue8m0`] each dynamic scale
//! is rounded up to a power of two (`fp8_linear_core::fp8::round_scale_ue8m0`, after the `ub` clamp of per-token
//! scales) and the codes are computed with the rounded scale; a static (given) scale is used
//! as it is.

use fp8_linear_core::fp8::{
    f32_to_e4m3, group_scale, quantize_row_groups_as, scale_as, E4M3_MAX, MIN_ABSMAX,
};
use fp8_linear_core::quant::{GroupShape, QuantKey, ScaleDtype};

/// Dynamic per-token-group quantization of a row-major `[m, k]` matrix: returns the FP8
/// codes `[m, k]` and the scales `[m, ceil(k / group)]` (row-major). f32 scales: see
/// [`per_token_group_fmt`].
pub fn per_token_group(x: &[f32], m: usize, k: usize, group: usize) -> (Vec<u8>, Vec<f32>) {
    per_token_group_fmt(x, m, k, group, ScaleDtype::F32)
}

/// [`per_token_group`] with the scales in the format `fmt` (powers of two for
/// [`ScaleDtype::Ue8m0`]).
pub fn per_token_group_fmt(
    x: &[f32],
    m: usize,
    k: usize,
    group: usize,
    fmt: ScaleDtype,
) -> (Vec<u8>, Vec<f32>) {
    let groups = k.div_ceil(group);
    let mut q = vec![0u8; m * k];
    let mut s = vec![0f32; m * groups];
    per_token_group_fmt_into(x, k, group, fmt, &mut q, &mut s);
    (q, s)
}

/// [`per_token_group`] into caller-owned buffers (`q`: `m*k`, `s`: `m*ceil(k/group)`).
pub fn per_token_group_into(x: &[f32], k: usize, group: usize, q: &mut [u8], s: &mut [f32]) {
    per_token_group_fmt_into(x, k, group, ScaleDtype::F32, q, s)
}

/// [`per_token_group_fmt`] into caller-owned buffers (`q`: `m*k`, `s`: `m*ceil(k/group)`).
pub fn per_token_group_fmt_into(
    x: &[f32],
    k: usize,
    group: usize,
    fmt: ScaleDtype,
    q: &mut [u8],
    s: &mut [f32],
) {
    let groups = k.div_ceil(group);
    for ((row, qr), sr) in x.chunks(k).zip(q.chunks_mut(k)).zip(s.chunks_mut(groups)) {
        quantize_row_groups_as(row, group, fmt, qr, sr);
    }
}

/// Dynamic per-token quantization: one scale per row, `max(absmax, 1e-10) / 448`; with an
/// upper bound `ub` (vLLM's `scale_ub`) the absmax is clamped to it first, so the scale is
/// `min(max(absmax, 1e-10), max(ub, 1e-10)) / 448` (a NaN absmax gives the bound's scale).
/// f32 scales: see [`per_token_fmt_into`].
pub fn per_token_into(x: &[f32], k: usize, ub: Option<f32>, q: &mut [u8], s: &mut [f32]) {
    per_token_fmt_into(x, k, ub, ScaleDtype::F32, q, s)
}

/// [`per_token_into`] with the scales in the format `fmt`: for [`ScaleDtype::Ue8m0`] the
/// (clamped) scale of each row is rounded up to a power of two.
pub fn per_token_fmt_into(
    x: &[f32],
    k: usize,
    ub: Option<f32>,
    fmt: ScaleDtype,
    q: &mut [u8],
    s: &mut [f32],
) {
    for ((row, qr), sr) in x.chunks(k).zip(q.chunks_mut(k)).zip(s.iter_mut()) {
        let mut scale = group_scale(row);
        if let Some(ub) = ub {
            scale = scale.min(ub.max(MIN_ABSMAX) / E4M3_MAX);
        }
        let scale = scale_as(scale, fmt);
        *sr = scale;
        for (v, o) in row.iter().zip(qr.iter_mut()) {
            *o = f32_to_e4m3(*v / scale);
        }
    }
}

/// Quantization with one given (static) or computed (dynamic) scale for the whole tensor.
/// Returns the scale used. f32 scales: see [`per_tensor_fmt_into`].
pub fn per_tensor_into(x: &[f32], scale: Option<f32>, q: &mut [u8]) -> f32 {
    per_tensor_fmt_into(x, scale, ScaleDtype::F32, q)
}

/// [`per_tensor_into`] with a dynamic scale in the format `fmt` (rounded up to a power of
/// two for [`ScaleDtype::Ue8m0`]); a given static scale is used as it is, whatever `fmt`.
pub fn per_tensor_fmt_into(x: &[f32], scale: Option<f32>, fmt: ScaleDtype, q: &mut [u8]) -> f32 {
    let scale = scale.unwrap_or_else(|| scale_as(group_scale(x), fmt));
    for (v, o) in x.iter().zip(q.iter_mut()) {
        *o = f32_to_e4m3(*v / scale);
    }
    scale
}

/// The layer tensors a quantization reads besides the activations: the static per-tensor
/// `input_scale` and the per-token upper bound `input_scale_ub`, as host f32 values.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct ActStatics {
    /// The static per-tensor scale (static activation keys).
    pub input_scale: Option<f32>,
    /// The upper bound of dynamic per-token scales.
    pub input_scale_ub: Option<f32>,
}

/// Quantizes `x` (`[m, k]` row-major, `m = x.len() / k`) per the activation key `key`, the
/// one dispatch every CPU path goes through (the fast kernels' [`super::host::ActScratch`]
/// and the public activation quantizer): codes into `q` (`m * k`), scales into `s`
/// (`m * ceil(k / G)` for 1 x G groups, `m` per token, 1 per tensor). Per-channel and block
/// keys (which no activation is quantized with; `cpu_can_implement` refuses them) are
/// quantized per token.
///
/// # Panics
/// When `q` or `s` is shorter than said above.
pub fn per_key_into(
    key: QuantKey,
    k: usize,
    statics: ActStatics,
    x: &[f32],
    q: &mut [u8],
    s: &mut [f32],
) {
    let fmt = key.scale_dtype;
    match key.group {
        GroupShape::Group { cols } => per_token_group_fmt_into(x, k, cols as usize, fmt, q, s),
        GroupShape::PerToken | GroupShape::PerChannel | GroupShape::Block { .. } => {
            per_token_fmt_into(x, k, statics.input_scale_ub, fmt, q, s)
        }
        GroupShape::PerTensor => s[0] = per_tensor_fmt_into(x, statics.input_scale, fmt, q),
    }
}

/// The number of activation scales of `m` rows of `k` columns under `key` (the length
/// [`per_key_into`] writes).
pub fn scale_count(key: QuantKey, m: usize, k: usize) -> usize {
    match key.group {
        GroupShape::Group { cols } => m * k.div_ceil(cols as usize),
        GroupShape::PerTensor => 1,
        _ => m,
    }
}
