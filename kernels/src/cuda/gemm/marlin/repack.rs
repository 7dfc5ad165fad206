//! Host-side weight processing for the Marlin kernel: the FP8 weight repacked into the
//! kernel's tile layout, scales converted to the kernel's two-level form (a per-channel f32
//! scale times a 16-bit scale per K group, with the bit-trick power of two folded in), and
//! the N / K padding.
//!
//! Layout (see `cu/marlin.cu`): stripes of [`STRIPE`] output channels; per stripe and per
//! [`STEP`]-wide K step, [`TILES`] tiles of 16 channels x 32 K, one 16-byte word per lane. Lane
//! `(g, t)` (g = lane / 4, t = lane % 4) holds, for K offsets `8t .. 8t + 8` of the step,
//! channel `g` then `g + 8`, first offsets `0..4` then `4..8`: four codes per 32-bit word,
//! their bits interleaved by [`pack_word`] (codes `(x0, x2, x1, x3)`) so that the kernel's
//! dequantization ([`bit_trick`]) yields the pairs `(x0, x1)` and `(x2, x3)` in five
//! integer instructions.

use fp8_linear_core::quant::GroupShape;
use fp8_linear_core::{DType, KernelError, LayerConfig};
use half::{bf16, f16};

/// Output channels per stripe (one thread block's N tile).
pub const STRIPE: usize = 128;
/// 16-channel tiles per stripe (one warp each).
pub const TILES: usize = STRIPE / 16;
/// K per pipeline step (two k16 mmas).
pub const STEP: usize = 32;
/// Bytes of weight per stripe per step.
pub const STEP_BYTES: usize = STRIPE * STEP;
/// K is padded to whole pipeline stages of the kernel (4 steps of 32).
pub const K_ALIGN: usize = super::plan::STAGE_STEPS * STEP;

/// The exponent the bit trick divides by: dequantized = value * 2^-FOLD.
pub const fn fold_exponent(bf16_out: bool) -> i32 {
    if bf16_out {
        120
    } else {
        8
    }
}

/// Smallest ratio between a group scale and its channel's largest group scale that f16
/// represents at full precision (`2^-22`: the ratio times `2^8` must stay a normal f16).
pub const F16_MIN_RATIO: f64 = 1.0 / (1u64 << 22) as f64;

/// One stored 32-bit weight word from four e4m3 codes `c = [c0, c1, c2, c3]`: the codes'
/// bits interleaved so that [`bit_trick`] turns the word into the 16-bit floats of `c0, c2`
/// (its low word) and `c1, c3` (its high word) with one AND for the high word and two shifts
/// and two logic operations for the low one.
///
/// Each 16-bit half holds two codes, `hi` = `c[2h + 1]` and `lo` = `c[2h]` (sign `s`, 7
/// exponent and mantissa bits `em`): `hi` sits where its 16-bit float needs it (bf16: sign
/// at bit 15, `em` at bits 10..4; f16: sign at 15, `em` at 13..7), `lo` fills the 8 bits
/// left (bf16: sign at 11, `em` bits 6..4 at 14..12 and 3..0 at 3..0; f16: sign at 14, `em`
/// at 6..0).
pub const fn pack_word(c: [u8; 4], bf16_out: bool) -> u32 {
    let mut word = 0u32;
    let mut h = 0;
    while h < 2 {
        let (lo, hi) = (c[2 * h] as u32, c[2 * h + 1] as u32);
        let (s_lo, em_lo, s_hi, em_hi) = (lo >> 7, lo & 0x7F, hi >> 7, hi & 0x7F);
        let half = if bf16_out {
            s_hi << 15 | em_hi << 4 | s_lo << 11 | (em_lo >> 4) << 12 | (em_lo & 0xF)
        } else {
            s_hi << 15 | em_hi << 7 | s_lo << 14 | em_lo
        };
        word |= half << (16 * h);
        h += 1;
    }
    word
}

/// The codes of a stored weight word: the inverse of [`pack_word`].
pub const fn unpack_word(q: u32, bf16_out: bool) -> [u8; 4] {
    let mut c = [0u8; 4];
    let mut h = 0;
    while h < 2 {
        let half = (q >> (16 * h)) & 0xFFFF;
        let (lo, hi) = if bf16_out {
            (
                (half >> 11 & 1) << 7 | (half >> 12 & 7) << 4 | (half & 0xF),
                (half >> 15) << 7 | (half >> 4 & 0x7F),
            )
        } else {
            (
                (half >> 14 & 1) << 7 | (half & 0x7F),
                (half >> 15) << 7 | (half >> 7 & 0x7F),
            )
        };
        c[2 * h] = lo as u8;
        c[2 * h + 1] = hi as u8;
        h += 1;
    }
    c
}

/// The kernel's dequantization of one stored word `q = pack_word([c0, c1, c2, c3])`:
/// returns the 16-bit float bit patterns of `c0, c2` (the low word) and `c1, c3` (the high
/// word), each equal to the e4m3 value times `2^-8` (f16) or `2^-120` (bf16), subnormals
/// included (the sign and the exponent and mantissa bits are moved into the 16-bit float's
/// fields, the top exponent bits left zero). NaN codes (0x7f / 0xff) become finite values;
/// FP8 checkpoints hold none.
pub const fn bit_trick(q: u32, bf16_out: bool) -> (u32, u32) {
    if bf16_out {
        let hi = q & 0x87F0_87F0;
        let lo = ((q << 4) & 0x80F0_80F0) | ((q >> 4) & 0x0700_0700);
        (lo, hi)
    } else {
        let hi = q & 0xBF80_BF80;
        let lo = ((q << 1) & 0x8000_8000) | ((q << 7) & 0x3F80_3F80);
        (lo, hi)
    }
}

/// A 16-bit float bit pattern as f32.
pub fn half_bits_to_f32(bits: u16, bf16_out: bool) -> f32 {
    if bf16_out {
        bf16::from_bits(bits).to_f32()
    } else {
        f16::from_bits(bits).to_f32()
    }
}

/// A layer's weights in the Marlin kernel's form, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct MarlinWeights {
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// N rounded up to [`STRIPE`].
    pub n_pad: usize,
    /// K rounded up to [`K_ALIGN`].
    pub k_pad: usize,
    /// Whether the activations (and the 16-bit scales) are bf16 (else f16).
    pub bf16: bool,
    /// Repacked FP8 codes, `n_pad * k_pad` bytes of [`pack_word`] words (zero codes in the
    /// padding).
    pub weight: Vec<u8>,
    /// 16-bit group scales (bit patterns), `[stripes][groups][TILES][8 lanes g][2 halves]`:
    /// `s(n, group) / channel(n) * 2^fold`.
    pub group_scales: Vec<u16>,
    /// Per-channel f32 scale `[n_pad]` applied to the f32 accumulators.
    pub channel: Vec<f32>,
    /// Number of K groups.
    pub groups: usize,
    /// K steps per group.
    pub steps_per_group: usize,
}

impl MarlinWeights {
    /// Number of [`STRIPE`]-channel stripes.
    pub fn stripes(&self) -> usize {
        self.n_pad / STRIPE
    }

    /// Number of 32-wide K steps.
    pub fn ksteps(&self) -> usize {
        self.k_pad / STEP
    }

    /// The group scales as little-endian bytes (for upload).
    pub fn group_scale_bytes(&self) -> Vec<u8> {
        self.group_scales
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }
}

/// The weight's K group size for the kernel: the scale's column group for 1 x G groups and
/// Bn x Bk blocks, all of K for per-tensor / per-channel scales. `None` when the group is not
/// a multiple of [`STEP`].
pub const fn k_group(group: GroupShape) -> Option<Option<usize>> {
    match group {
        GroupShape::PerTensor | GroupShape::PerToken | GroupShape::PerChannel => Some(None),
        GroupShape::Group { cols } | GroupShape::Block { cols, .. } => {
            if (cols as usize).is_multiple_of(STEP) && cols > 0 {
                Some(Some(cols as usize))
            } else {
                None
            }
        }
    }
}

/// Repacks an FP8 weight `[n, k]` (row-major codes) into the kernel's tile layout for
/// bf16 (`bf16_out`) or f16 activations, with N padded to [`STRIPE`] and K to [`K_ALIGN`] by
/// zero codes. Stripes are repacked in parallel.
pub fn repack_weight(codes: &[u8], n: usize, k: usize, bf16_out: bool) -> Vec<u8> {
    use rayon::prelude::*;
    let n_pad = n.div_ceil(STRIPE) * STRIPE;
    let k_pad = k.div_ceil(K_ALIGN) * K_ALIGN;
    let ksteps = k_pad / STEP;
    let mut out = vec![0u8; n_pad * k_pad];
    let at = |r: usize, c: usize| -> u8 {
        if r < n && c < k {
            codes[r * k + c]
        } else {
            0
        }
    };
    out.par_chunks_mut(ksteps * STEP_BYTES)
        .enumerate()
        .for_each(|(stripe, chunk)| {
            for step in 0..ksteps {
                for tile in 0..TILES {
                    for lane in 0..32 {
                        let (g, t) = (lane / 4, lane % 4);
                        let base = ((step * TILES + tile) * 32 + lane) * 16;
                        for word in 0..4 {
                            let row = stripe * STRIPE + tile * 16 + g + 8 * (word & 1);
                            let k0 = step * STEP + 8 * t + 4 * (word >> 1);
                            let o = base + word * 4;
                            let c = [
                                at(row, k0),
                                at(row, k0 + 2),
                                at(row, k0 + 1),
                                at(row, k0 + 3),
                            ];
                            chunk[o..o + 4].copy_from_slice(&pack_word(c, bf16_out).to_le_bytes());
                        }
                    }
                }
            }
        });
    out
}

fn scale_err(detail: String) -> KernelError {
    KernelError::ScaleLayout {
        what: "weight_scale",
        detail,
    }
}

/// Converts a layer's f32 weight scales (row-major, in the config's scale shape) into the
/// kernel's form for 16-bit activations of dtype `act`:
/// per-tensor scales are broadcast to every channel, per-channel scales kept, 1 x G group
/// scales kept per (channel, group), Bn x Bk block scales repeated across their Bn channels.
/// Each channel gets the f32 scale `c(n) = max over groups of s(n, group)` and each group the
/// 16-bit scale `s / c(n) * 2^fold` (<= 2^fold, so an f16 scale never overflows however
/// large the checkpoint's scales are). Per-tensor and per-channel scales become exactly
/// `2^fold`. Returns `(group_scales, channel, groups, steps_per_group)`.
///
/// Errors: a scale that is negative or not finite; for f16, a channel whose group scales
/// span more than `2^22` (the smaller ones would lose precision as f16 subnormals).
#[allow(clippy::type_complexity)]
pub fn convert_scales(
    config: &LayerConfig,
    scales: &[f32],
    act: DType,
) -> Result<(Vec<u16>, Vec<f32>, usize, usize), KernelError> {
    let bf16_out = match act {
        DType::Bf16 => true,
        DType::F16 => false,
        other => {
            return Err(KernelError::DType {
                what: "input",
                expected: "f16 or bf16".into(),
                got: other,
            })
        }
    };
    let (n, k) = (config.n, config.k);
    let shape = config.weight_scale_shape();
    if scales.len() < shape[0] * shape[1] {
        return Err(scale_err(format!(
            "expected {} scales for shape {shape:?}, got {}",
            shape[0] * shape[1],
            scales.len()
        )));
    }
    let Some(gk) = k_group(config.weight.group) else {
        return Err(scale_err(format!(
            "{} scales: the K group must be a multiple of {STEP}",
            config.weight.group
        )));
    };
    let n_pad = n.div_ceil(STRIPE) * STRIPE;
    let k_pad = k.div_ceil(K_ALIGN) * K_ALIGN;
    let ksteps = k_pad / STEP;
    let (groups, spg) = match gk {
        None => (1, ksteps),
        Some(g) => (k.div_ceil(g), g / STEP),
    };
    let cols = shape[1];
    let scale = |r: usize, grp: usize| -> f32 {
        match config.weight.group {
            GroupShape::PerTensor => scales[0],
            GroupShape::PerToken | GroupShape::PerChannel => scales[r],
            GroupShape::Group { .. } => scales[r * cols + grp],
            GroupShape::Block { rows, .. } => scales[(r / rows as usize) * cols + grp],
        }
    };
    if let Some((i, v)) = scales[..shape[0] * shape[1]]
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(KernelError::NotFinite {
            what: "weight_scale",
            index: i,
            value: *v,
        });
    }
    let fold = 2f64.powi(fold_exponent(bf16_out));
    let to16 = |v: f64| -> u16 {
        if bf16_out {
            bf16::from_f64(v).to_bits()
        } else {
            f16::from_f64(v).to_bits()
        }
    };
    let stripes = n_pad / STRIPE;
    let mut group_scales = vec![0u16; stripes * groups * STRIPE];
    let mut channel = vec![0f32; n_pad];
    let mut rel = vec![0f64; groups];
    #[allow(clippy::needless_range_loop)]
    for r in 0..n {
        let c = (0..groups).map(|g| scale(r, g)).fold(0f32, f32::max);
        channel[r] = c;
        for (g, slot) in rel.iter_mut().enumerate() {
            let s = scale(r, g) as f64;
            *slot = if c > 0.0 { s / c as f64 } else { 0.0 };
            if !bf16_out && *slot > 0.0 && *slot < F16_MIN_RATIO {
                return Err(scale_err(format!(
                    "f16 activations: the group scales of output channel {r} span more than 2^22 \
                     ({} vs {c}); f16 cannot hold them at full precision. Use bf16 activations \
                     for this layer",
                    scale(r, g)
                )));
            }
        }
        let (stripe, within) = (r / STRIPE, r % STRIPE);
        let (tile, g_lane, hi) = (within / 16, within % 8, (within % 16) / 8);
        for (g, s) in rel.iter().enumerate() {
            let idx = ((stripe * groups + g) * TILES + tile) * 16 + g_lane * 2 + hi;
            group_scales[idx] = to16(s * fold);
        }
    }
    Ok((group_scales, channel, groups, spg))
}

/// The whole host-side conversion: checks sizes, repacks the weight, converts the scales.
pub fn prepare(
    config: &LayerConfig,
    codes: &[u8],
    scales: &[f32],
) -> Result<MarlinWeights, KernelError> {
    let (n, k) = (config.n, config.k);
    if codes.len() < n * k {
        return Err(KernelError::BufferTooSmall {
            what: "weight",
            needed: n * k,
            len: codes.len(),
        });
    }
    let (group_scales, channel, groups, steps_per_group) =
        convert_scales(config, scales, config.input_dtype)?;
    Ok(MarlinWeights {
        n,
        k,
        n_pad: n.div_ceil(STRIPE) * STRIPE,
        k_pad: k.div_ceil(K_ALIGN) * K_ALIGN,
        bf16: config.input_dtype == DType::Bf16,
        weight: repack_weight(codes, n, k, config.input_dtype == DType::Bf16),
        group_scales,
        channel,
        groups,
        steps_per_group,
    })
}
