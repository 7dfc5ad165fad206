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
//! A shard whose boundary falls inside a scale block cannot keep the block layout:
//! - a column split that cuts 128-row blocks keeps the same numbers as per-row 1 x Bk group
//!   scales (each row gets its block's scale), so the shard's weight key becomes
//!   `GroupShape::Group` (served by kernels that take per-group weight scales, not by the
//!   128x128 block kernels);
//! - a row split that cuts Bk-wide scale groups starts inside a group: the shard is served
//!   padded, its K range extended back to the group boundary with zero weight columns and
//!   zero activations (`lead_pad` of them), so its layer is block-aligned again.
//!
//! [`shard`] returns the shards with [`ShardNote`]s naming what happened to each.

use std::fmt;
use std::ops::Range;

use fp8_linear_core::{GroupShape, LayerConfig};

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
    /// A column split cut `rows`-row scale blocks: the shard's weight scales become per-row
    /// 1 x `cols` groups (the same numbers).
    BlocksAsRowGroups {
        /// Block rows of the unsharded layer.
        rows: u32,
        /// Block columns (the group width along K).
        cols: u32,
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
            ShardNote::BlocksAsRowGroups { rows, cols } => write!(
                f,
                "cuts {rows}x{cols} scale blocks: weight scales become per-row 1x{cols} groups \
                 (same values), which the {rows}x{cols}-block kernels do not take"
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
                c.n = part;
                // A shard that starts inside a block cannot keep the block grid (one that only
                // ends inside one has a ragged last block row, like any ragged N).
                if let (Some(r), Some(k)) = (g_rows, g_cols) {
                    if !lo.is_multiple_of(r as usize) {
                        c.weight.group = GroupShape::Group { cols: k };
                        notes.push(ShardNote::BlocksAsRowGroups { rows: r, cols: k });
                    }
                }
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
            lead_pad,
            config: c,
            notes,
        });
    }
    Ok(out)
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
        assert_eq!(col[1].config.weight.group, GroupShape::Group { cols: 128 });
        assert!(col[1].notes.contains(&ShardNote::BlocksAsRowGroups {
            rows: 128,
            cols: 128
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
