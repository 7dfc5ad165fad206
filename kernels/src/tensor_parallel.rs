//! Tensor-parallel shard plans: how one linear layer splits over `tp` GPUs the way serving
//! engines split it, and what each shard's layer config is.
//!
//! - Column-parallel (q/k/v, gate/up projections): the weight's N rows are split; each GPU
//!   computes its slice of the output columns, the engine concatenates.
//! - Row-parallel (o, down projections): the weight's K columns are split; each GPU takes
//!   its slice of the input features and computes a partial output, the engine sums them
//!   (all-reduce). Only rank 0 adds the bias. Each shard quantizes its own slice of the
//!   activations, as in every engine that runs row-parallel layers.
//!
//! A shard whose boundary falls inside a scale block is served padded, so that its layer is
//! block-aligned again and every block kernel takes it:
//! - a column split that starts inside a Bn-row block: the shard's N range is extended back
//!   to the block boundary with `lead_rows` zero weight rows, whose output columns the
//!   engine drops (each shard computes at most Bn - 1 extra columns);
//! - a row split that starts inside a Bk-wide scale group: the shard's K range is extended
//!   back to the group boundary with `lead_pad` zero weight columns and zero activations.
//!   The shard's first activation group then holds only its own columns (the others are
//!   zero), so its dynamic scale can differ from the whole layer's: the summed output agrees
//!   with the unsharded layer within the FP8 quantization error, not bit for bit.
//!
//! [`shard`] returns the shards with [`ShardNote`]s naming what happened to each. For
//! host weights, [`Shard::weights`] cuts a shard's codes, scales and bias out of the whole
//! layer's, [`Shard::input`] its activations, and [`Shard::gather`] puts its output into the
//! whole layer's (columns for column splits, a sum for row splits).

use std::fmt;
use std::ops::Range;

use fp8_linear_core::{GroupShape, LayerConfig, LayerWeights, Tensor};

/// How a layer is split.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// Split N (output features): q/k/v, gate/up projections.
    Column,
    /// Split K (input features): o, down projections.
    Row,
}

impl Split {
    /// The split engines use for a Hugging Face layer name: `o_proj`, `down_proj`, `out_proj`,
    /// `dense_4h_to_h`, `wo`/`w2` are row-parallel; every other projection column-parallel.
    pub fn of_layer(name: &str) -> Split {
        let last = name.rsplit('.').next().unwrap_or(name);
        match last {
            "o_proj" | "down_proj" | "out_proj" | "dense_4h_to_h" | "wo" | "w2" | "c_proj"
            | "dense" => Split::Row,
            _ => Split::Column,
        }
    }

    /// `column` or `row`.
    pub const fn name(self) -> &'static str {
        match self {
            Split::Column => "column",
            Split::Row => "row",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Something a shard's boundaries did to its layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardNote {
    /// The shard's split dimension is not a multiple of the scale block (or of 16, the
    /// row alignment of FP8 operands).
    Ragged {
        /// `N` or `K`.
        dim: &'static str,
        /// The shard's size along it.
        size: usize,
        /// The multiple it misses.
        multiple: usize,
    },
    /// A column split starts inside a `rows`-row scale block: the shard runs padded with
    /// `lead_rows` zero weight rows in front, back to the block boundary (their outputs are
    /// dropped).
    PaddedN {
        /// Zero rows in front of the shard's N slice.
        lead_rows: usize,
        /// The block height along N.
        rows: u32,
    },
    /// A row split starts inside a `cols`-wide scale group: the shard runs padded with
    /// `lead_pad` zero columns in front, back to the group boundary.
    PaddedK {
        /// Zero columns in front of the shard's K slice.
        lead_pad: usize,
        /// The group width along K.
        cols: u32,
    },
}

impl fmt::Display for ShardNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardNote::Ragged {
                dim,
                size,
                multiple,
            } => write!(f, "ragged: {dim} = {size} is not a multiple of {multiple}"),
            ShardNote::PaddedN { lead_rows, rows } => write!(
                f,
                "starts inside a {rows}-row scale block: served padded with {lead_rows} zero \
                 rows in front (their output columns dropped), block-aligned again"
            ),
            ShardNote::PaddedK { lead_pad, cols } => write!(
                f,
                "starts inside a {cols}-wide scale group: served padded with {lead_pad} zero \
                 columns in front (weight and activations), block-aligned again"
            ),
        }
    }
}

/// One shard of a layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Its rank (GPU index within the tensor-parallel group).
    pub rank: usize,
    /// Rows of the unsharded weight it holds.
    pub rows: Range<usize>,
    /// Columns of the unsharded weight it holds (before padding).
    pub cols: Range<usize>,
    /// Zero rows in front of `rows` in the shard's layer (column splits that start inside a
    /// scale block); the shard's N is `rows.len() + lead_rows`.
    pub lead_rows: usize,
    /// Zero columns in front of `cols` in the shard's layer (row splits that start inside a
    /// scale group); the shard's K is `cols.len() + lead_pad`.
    pub lead_pad: usize,
    /// The shard's layer config.
    pub config: LayerConfig,
    /// What its boundaries did to it; empty for a clean shard.
    pub notes: Vec<ShardNote>,
}

/// Why a layer cannot be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// `tp` = 0.
    #[error("tensor-parallel size must be at least 1")]
    Zero,
    /// The split dimension does not divide by `tp` (engines require equal shards).
    #[error("{dim} = {size} does not divide into {tp} equal shards")]
    NotDivisible {
        /// `N` or `K`.
        dim: &'static str,
        /// Its size.
        size: usize,
        /// The tensor-parallel size.
        tp: usize,
    },
    /// A host buffer handed to [`Shard::weights`], [`Shard::input`] or [`Shard::gather`]
    /// does not have the size the layer implies.
    #[error("{what}: {got} values, the layer needs {want}")]
    Size {
        /// Which buffer.
        what: &'static str,
        /// The length it has.
        got: usize,
        /// The length the layer needs.
        want: usize,
    },
}

/// The scale-group shape along N and K of a weight key: (rows per group, cols per group),
/// None along a dimension without groups.
fn groups(g: GroupShape) -> (Option<u32>, Option<u32>) {
    match g {
        GroupShape::Block { rows, cols } => (Some(rows), Some(cols)),
        GroupShape::Group { cols } => (None, Some(cols)),
        _ => (None, None),
    }
}

/// Splits a layer into `tp` shards the way engines do (see the module docs).
pub fn shard(config: &LayerConfig, split: Split, tp: usize) -> Result<Vec<Shard>, ShardError> {
    if tp == 0 {
        return Err(ShardError::Zero);
    }
    let (dim, size) = match split {
        Split::Column => ("N", config.n),
        Split::Row => ("K", config.k),
    };
    if !size.is_multiple_of(tp) {
        return Err(ShardError::NotDivisible { dim, size, tp });
    }
    let part = size / tp;
    let (g_rows, g_cols) = groups(config.weight.group);
    let mut out = Vec::with_capacity(tp);
    for rank in 0..tp {
        let lo = rank * part;
        let mut c = *config;
        let mut notes = Vec::new();
        let mut lead_pad = 0;
        let mut lead_rows = 0;
        let (rows, cols) = match split {
            Split::Column => (lo..lo + part, 0..config.k),
            Split::Row => (0..config.n, lo..lo + part),
        };
        let block = match split {
            Split::Column => g_rows,
            Split::Row => g_cols,
        };
        let multiple = block.map_or(16, |b| b as usize).max(16);
        if !part.is_multiple_of(multiple) {
            notes.push(ShardNote::Ragged {
                dim,
                size: part,
                multiple,
            });
        }
        match split {
            Split::Column => {
                // A shard that starts inside a block is padded back to the block boundary
                // (one that only ends inside one has a ragged last block row, like any
                // ragged N).
                if let Some(r) = g_rows {
                    lead_rows = lo % r as usize;
                    if lead_rows != 0 {
                        notes.push(ShardNote::PaddedN { lead_rows, rows: r });
                    }
                }
                c.n = part + lead_rows;
            }
            Split::Row => {
                if let Some(k) = g_cols {
                    lead_pad = lo % k as usize;
                    if lead_pad != 0 {
                        notes.push(ShardNote::PaddedK { lead_pad, cols: k });
                    }
                }
                c.k = part + lead_pad;
                c.bias = config.bias && rank == 0;
            }
        }
        out.push(Shard {
            rank,
            rows,
            cols,
            lead_rows,
            lead_pad,
            config: c,
            notes,
        });
    }
    Ok(out)
}

/// A shard's host weights, cut from the whole layer's by [`Shard::weights`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShardWeights {
    /// The shard's layer config (the [`Shard::config`]).
    pub config: LayerConfig,
    /// FP8 codes `[N, K]` of the shard's layer (zero in the padding).
    pub codes: Vec<u8>,
    /// Weight scales in the shard config's scale shape.
    pub scales: Vec<f32>,
    /// The bias `[N]` (zero in the padding), when the shard's layer has one.
    pub bias: Option<Vec<f32>>,
}

impl ShardWeights {
    /// The weights as `Linear::new` takes them (add a static input scale with
    /// `with_input_scale`: it is the whole layer's, unchanged by the split).
    pub fn layer_weights(&self) -> LayerWeights<'_> {
        let c = &self.config;
        let w = LayerWeights::new(
            Tensor::fp8(&self.codes, [c.n, c.k]),
            Tensor::f32(&self.scales, c.weight_scale_shape()),
        );
        match &self.bias {
            Some(b) => w.with_bias(Tensor::f32(b, [1, c.n])),
            None => w,
        }
    }
}

fn check_len(what: &'static str, got: usize, want: usize) -> Result<(), ShardError> {
    if got == want {
        Ok(())
    } else {
        Err(ShardError::Size { what, got, want })
    }
}

/// The weight rows and columns that share one scale for a weight key of an `[n, k]` layer.
fn scale_unit(g: GroupShape, n: usize, k: usize) -> (usize, usize) {
    match g {
        GroupShape::Block { rows, cols } => (rows as usize, cols as usize),
        GroupShape::Group { cols } => (1, cols as usize),
        GroupShape::PerChannel | GroupShape::PerToken => (1, k),
        GroupShape::PerTensor => (n, k),
    }
}

impl Shard {
    /// The first row and column of the whole layer the shard's layer starts at (its
    /// padding included).
    fn origin(&self) -> (usize, usize) {
        (
            self.rows.start - self.lead_rows,
            self.cols.start - self.lead_pad,
        )
    }

    /// The shard's codes, scales and bias cut out of the whole layer's (`whole` its config,
    /// `codes` `[N, K]`, `scales` in its scale shape, `bias` `[N]` when it has one), with
    /// zero codes and bias in the padding.
    pub fn weights(
        &self,
        whole: &LayerConfig,
        codes: &[u8],
        scales: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<ShardWeights, ShardError> {
        let (n, k) = (whole.n, whole.k);
        let [sr, sc] = whole.weight_scale_shape();
        check_len("weight codes", codes.len(), n * k)?;
        check_len("weight scales", scales.len(), sr * sc)?;
        if let Some(b) = bias {
            check_len("bias", b.len(), n)?;
        }
        let c = self.config;
        let (n0, k0) = self.origin();
        let mut out_codes = vec![0u8; c.n * c.k];
        for (i, row) in out_codes.chunks_mut(c.k).enumerate() {
            let r = n0 + i;
            if r < self.rows.start {
                continue;
            }
            let src = &codes[r * k..(r + 1) * k];
            row[self.lead_pad..].copy_from_slice(&src[self.cols.clone()]);
        }
        let (un, uk) = scale_unit(whole.weight.group, n, k);
        let [tr, tc] = c.weight_scale_shape();
        let (r0, c0) = (n0 / un, k0 / uk);
        let mut out_scales = Vec::with_capacity(tr * tc);
        for i in 0..tr {
            let r = (r0 + i).min(sr - 1);
            out_scales.extend((0..tc).map(|j| scales[r * sc + (c0 + j).min(sc - 1)]));
        }
        let out_bias = match (c.bias, bias) {
            (true, Some(b)) => {
                let mut v = vec![0f32; c.n];
                v[self.lead_rows..].copy_from_slice(&b[self.rows.clone()]);
                Some(v)
            }
            _ => None,
        };
        Ok(ShardWeights {
            config: c,
            codes: out_codes,
            scales: out_scales,
            bias: out_bias,
        })
    }

    /// The shard's activations `[m, K_shard]` from the whole layer's `x` `[m, k]`: the
    /// same rows for a column split; for a row split the shard's columns, after `lead_pad`
    /// zero columns.
    pub fn input<T: Copy + Default>(
        &self,
        x: &[T],
        m: usize,
        k: usize,
    ) -> Result<Vec<T>, ShardError> {
        check_len("activations", x.len(), m * k)?;
        if self.cols == (0..k) && self.lead_pad == 0 {
            return Ok(x.to_vec());
        }
        let ks = self.config.k;
        let mut out = vec![T::default(); m * ks];
        for (dst, src) in out.chunks_mut(ks).zip(x.chunks(k)) {
            dst[self.lead_pad..].copy_from_slice(&src[self.cols.clone()]);
        }
        Ok(out)
    }

    /// Puts the shard's output `part` (`[m, N_shard]`) into the whole layer's `out`
    /// (`[m, n]`): its columns for a column split (the padding's dropped), added for a row
    /// split (the engine's all-reduce).
    pub fn gather<T: Copy + std::ops::AddAssign>(
        &self,
        part: &[T],
        m: usize,
        out: &mut [T],
        n: usize,
    ) -> Result<(), ShardError> {
        let ns = self.config.n;
        check_len("shard output", part.len(), m * ns)?;
        check_len("output", out.len(), m * n)?;
        for (dst, src) in out.chunks_mut(n).zip(part.chunks(ns)) {
            if self.rows == (0..n) && self.lead_rows == 0 {
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s);
            } else {
                dst[self.rows.clone()].copy_from_slice(&src[self.lead_rows..]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear_core::{DType, QuantKey};

    #[test]
    fn aligned_splits_keep_the_layout() {
        let c = LayerConfig::block_128(4096, 14336, DType::Bf16, DType::Bf16);
        let col = shard(&c, Split::Column, 4).unwrap();
        assert_eq!(col.len(), 4);
        assert!(col.iter().all(|s| s.notes.is_empty() && s.config.n == 1024));
        assert_eq!(col[3].rows, 3072..4096);
        let row = shard(&c, Split::Row, 8).unwrap();
        assert!(row.iter().all(|s| s.notes.is_empty() && s.config.k == 1792));
        assert_eq!(row[0].config.weight, QuantKey::WEIGHT_BLOCK_128);
    }

    #[test]
    fn ragged_splits_are_named_with_what_happens() {
        // N = 7748 over 2: 3874 rows each, shard 1 starts at row 3874 inside a 128-row block.
        let c = LayerConfig::block_128(7748, 3884, DType::Bf16, DType::Bf16);
        let col = shard(&c, Split::Column, 2).unwrap();
        assert_eq!(col[1].rows, 3874..7748);
        assert_eq!(
            col[0].config.weight,
            QuantKey::WEIGHT_BLOCK_128,
            "starts on a block"
        );
        assert_eq!(col[0].notes.len(), 1, "only ragged");
        // 3874 = 30 * 128 + 34: padded back to row 3840, 3908 rows, still 128x128 blocks.
        assert_eq!(col[1].config.weight, QuantKey::WEIGHT_BLOCK_128);
        assert_eq!((col[1].lead_rows, col[1].config.n), (34, 3908));
        assert!(col[1].notes.contains(&ShardNote::PaddedN {
            lead_rows: 34,
            rows: 128
        }));
        assert!(col[1].notes[0].to_string().contains("ragged"));
        // K = 3884 over 2: shard 1 starts at column 1942, 22 into a 128-wide group.
        let mut b = c;
        b.bias = true;
        let row = shard(&b, Split::Row, 2).unwrap();
        assert_eq!((row[0].lead_pad, row[0].config.k), (0, 1942));
        assert_eq!((row[1].lead_pad, row[1].config.k), (22, 1964));
        assert_eq!(row[1].cols, 1942..3884);
        assert!(
            row[0].config.bias && !row[1].config.bias,
            "bias on rank 0 only"
        );
        assert_eq!(row[1].config.weight_scale_shape(), [61, 16]);
        assert!(row[1]
            .notes
            .iter()
            .any(|n| matches!(n, ShardNote::PaddedK { .. })));
    }

    #[test]
    fn bad_sizes_are_errors() {
        let c = LayerConfig::block_128(7749, 3884, DType::Bf16, DType::Bf16);
        assert_eq!(
            shard(&c, Split::Column, 2).unwrap_err(),
            ShardError::NotDivisible {
                dim: "N",
                size: 7749,
                tp: 2
            }
        );
        assert_eq!(shard(&c, Split::Row, 0).unwrap_err(), ShardError::Zero);
        // Per-tensor layers have no groups to cut; per-channel rows split cleanly.
        let t = LayerConfig::per_token_per_channel(4096, 4096, DType::Bf16, DType::Bf16);
        assert!(shard(&t, Split::Column, 8)
            .unwrap()
            .iter()
            .all(|s| s.notes.is_empty()));
    }

    #[test]
    fn layer_names_pick_the_engine_split() {
        assert_eq!(
            Split::of_layer("model.layers.0.self_attn.o_proj"),
            Split::Row
        );
        assert_eq!(Split::of_layer("model.layers.0.mlp.down_proj"), Split::Row);
        assert_eq!(
            Split::of_layer("model.layers.0.mlp.gate_proj"),
            Split::Column
        );
        assert_eq!(
            Split::of_layer("model.layers.3.self_attn.q_proj"),
            Split::Column
        );
    }
}
