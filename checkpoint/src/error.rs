//! Errors for bad checkpoints: each names the file, the tensor or the config field at fault.

use std::fmt;
use std::path::PathBuf;

/// A tensor as one shard holds it (for [`CheckpointError::ShardConflict`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSite {
    /// The shard.
    pub file: PathBuf,
    /// The dtype there.
    pub dtype: String,
    /// The shape there.
    pub shape: Vec<usize>,
}

impl fmt::Display for TensorSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has {} {:?}",
            self.file.display(),
            self.dtype,
            self.shape
        )
    }
}

/// Why a checkpoint could not be read, or a synthetic one not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file could not be opened, mapped, listed or written.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done ("read", "map", "write"...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` or the shard index is not valid JSON.
    #[error("{path}: malformed JSON at line {line}, column {column}: {detail}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        detail: String,
    },
    /// A required field is absent.
    #[error("{path}: field `{field}` is missing ({detail})")]
    MissingField {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field (`quantization_config.quant_method`).
        field: String,
        /// What it is needed for.
        detail: String,
    },
    /// A field has a value this loader cannot use.
    #[error("{path}: field `{field}` {detail}")]
    InvalidField {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// `quantization_config.quant_method` is not `fp8`.
    #[error(
        "{path}: unknown quant_method `{method}` in `quantization_config` (this loader reads \
         `fp8` checkpoints: FP8 e4m3 weights with per-tensor or block scales)"
    )]
    UnknownQuantMethod {
        /// The file.
        path: PathBuf,
        /// The method named there.
        method: String,
    },
    /// The directory holds no safetensors files.
    #[error("{dir}: no *.safetensors file and no model.safetensors.index.json")]
    NoWeights {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// The checkpoint holds no FP8 linear weights at all.
    #[error("{dir}: no FP8 (F8_E4M3) `*.weight` tensor found; {tensors} tensors were read")]
    NoQuantizedLayers {
        /// The checkpoint directory.
        dir: PathBuf,
        /// How many tensors the shards hold.
        tensors: usize,
    },
    /// A safetensors header is malformed (bad length, bad UTF-8, bad JSON, bad offsets).
    #[error("{file}: malformed safetensors header: {detail}")]
    Header {
        /// The shard.
        file: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A safetensors file is shorter than its header says.
    #[error("{file}: truncated file: {detail}")]
    Truncated {
        /// The shard.
        file: PathBuf,
        /// What is missing (names the first tensor cut off, when the header can be read).
        detail: String,
    },
    /// A quantized layer has no weight scale tensor (or a static layer no input scale).
    #[error("layer `{layer}`: missing scale tensor `{expected}` ({detail})")]
    MissingScale {
        /// The layer (module name).
        layer: String,
        /// The tensor name that was looked for.
        expected: String,
        /// Why it is needed.
        detail: String,
    },
    /// A scale tensor's shape does not fit its weight.
    #[error(
        "tensor `{tensor}` has shape {got:?}; for weight [N={n}, K={k}] it must be {expected}"
    )]
    ScaleShape {
        /// The scale tensor.
        tensor: String,
        /// Its shape.
        got: Vec<usize>,
        /// What it must be (with the formula).
        expected: String,
        /// N of the weight.
        n: usize,
        /// K of the weight.
        k: usize,
    },
    /// A tensor has a dtype the loader cannot use in its role.
    #[error("tensor `{tensor}` has dtype {got}; expected {expected}")]
    DType {
        /// The tensor.
        tensor: String,
        /// The dtype(s) accepted.
        expected: String,
        /// The dtype found.
        got: String,
    },
    /// A tensor has the wrong rank or a zero-sized dimension.
    #[error("tensor `{tensor}` has shape {shape:?}; expected {expected}")]
    Rank {
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// What was expected.
        expected: &'static str,
    },
    /// The same tensor appears in two shards with different shapes or dtypes.
    #[error("tensor `{tensor}` disagrees between shards: {first} vs {second}")]
    ShardConflict {
        /// The tensor.
        tensor: String,
        /// Where it was seen first.
        first: Box<TensorSite>,
        /// Where it was seen again, differently.
        second: Box<TensorSite>,
    },
    /// The shard index names a tensor its shard does not hold.
    #[error("{index}: tensor `{tensor}` is mapped to {file}, which does not hold it")]
    IndexMismatch {
        /// The index file.
        index: PathBuf,
        /// The tensor.
        tensor: String,
        /// The shard the index names.
        file: PathBuf,
    },
    /// A scale tensor has no FP8 weight beside it.
    #[error("scale tensor `{tensor}` has no FP8 weight `{weight}` beside it")]
    OrphanScale {
        /// The scale tensor.
        tensor: String,
        /// The weight it should belong to.
        weight: String,
    },
    /// A scale value is NaN, infinite or negative.
    #[error("tensor `{tensor}` holds an invalid scale {value} at index {index} (scales must be finite and >= 0)")]
    BadScale {
        /// The scale tensor.
        tensor: String,
        /// Flat index of the first bad value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A ue8m0 checkpoint holds a scale that is not a power of two.
    #[error("tensor `{tensor}`: scale {value} at index {index} is not a power of two, but the config says scale_fmt = ue8m0")]
    NotPowerOfTwo {
        /// The scale tensor.
        tensor: String,
        /// Flat index of the first bad value.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A module listed as not converted holds an FP8 weight.
    #[error("tensor `{tensor}` is FP8, but its module is listed as not quantized (`{entry}` in modules_to_not_convert / ignored_layers)")]
    IgnoredButQuantized {
        /// The weight tensor.
        tensor: String,
        /// The list entry that matched.
        entry: String,
    },
    /// A layer handed to [`crate::Checkpoint::layer_tensors`] names a tensor this checkpoint
    /// does not hold (it came from another checkpoint).
    #[error("tensor `{tensor}` is not in this checkpoint")]
    UnknownTensor {
        /// The tensor.
        tensor: String,
    },
    /// No quantized layer has the name asked for, and no tensor `<name>.weight` exists.
    #[error(
        "{dir}: no quantized layer `{layer}` (no tensor `{layer}.weight`); the checkpoint has {} quantized layers{}",
        .known.len(),
        known_list(.known)
    )]
    UnknownLayer {
        /// The name asked for.
        layer: String,
        /// The checkpoint (directory or file).
        dir: PathBuf,
        /// The names of the layers it does have, in order.
        known: Vec<String>,
    },
    /// The name asked for is a tensor of another kind: its weight is not FP8 (an
    /// unquantized `lm_head`, a norm), so there is no FP8 layer to build.
    #[error("`{layer}` is not a quantized layer: `{weight}` has dtype {got}, not F8_E4M3")]
    NotQuantized {
        /// The name asked for.
        layer: String,
        /// Its weight tensor.
        weight: String,
        /// The weight's dtype.
        got: String,
    },
    /// The experts of one projection do not form a group: a gap or a repeat in their
    /// numbering, or experts of different shapes or quantization.
    #[error("experts `{group}`: {detail}")]
    Experts {
        /// The group (`model.layers.0.mlp.experts.gate_proj`).
        group: String,
        /// What is wrong.
        detail: String,
    },
    /// The generator was asked for something it cannot write.
    #[error("cannot generate checkpoint: {0}")]
    Generate(String),
}

/// `: a, b, c, ...` (the first few names), or nothing for an empty list.
fn known_list(known: &[String]) -> String {
    const SHOWN: usize = 4;
    if known.is_empty() {
        return String::new();
    }
    let names: Vec<String> = known.iter().take(SHOWN).map(|n| format!("`{n}`")).collect();
    let more = if known.len() > SHOWN { ", ..." } else { "" };
    format!(": {}{more}", names.join(", "))
}

impl CheckpointError {
    /// Shorthand for an [`CheckpointError::Io`] error.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CheckpointError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A [`CheckpointError::Json`] error from serde_json.
    pub fn json(path: impl Into<PathBuf>, e: &serde_json::Error) -> Self {
        CheckpointError::Json {
            path: path.into(),
            line: e.line(),
            column: e.column(),
            detail: e.to_string(),
        }
    }
}
