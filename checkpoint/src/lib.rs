//! # fp8-linear-checkpoint
//!
//! Reads Hugging Face style FP8 checkpoints and turns every quantized linear layer into a
//! [`LayerConfig`](fp8_linear_core::LayerConfig) plus zero-copy weight views that the
//! kernels of `fp8-linear` take; also writes small synthetic checkpoints in the same format.
//!
//! A checkpoint directory holds `config.json` (with a `quantization_config`:
//! `quant_method: "fp8"`, optional `weight_block_size`, `activation_scheme`,
//! `modules_to_not_convert` / `ignored_layers`, `scale_fmt`) and one or more
//! `*.safetensors` files (sharded ones listed in `model.safetensors.index.json`). Each
//! `<module>.weight` in `F8_E4M3` is a quantized layer, with `<module>.weight_scale_inv`
//! (block scales) or `<module>.weight_scale` (per tensor or per channel) beside it, and
//! `<module>.input_scale` for static activation schemes. Other tensors (norms, embeddings,
//! an unquantized `lm_head`) are left alone.
//!
//! Files are memory-mapped: opening a checkpoint reads headers and scales only; the FP8
//! weights stay in the page cache until a kernel reads them. Every structural problem is a
//! typed [`CheckpointError`] that names the file, tensor or field.
//!
//! ```no_run
//! use fp8_linear_checkpoint::Checkpoint;
//!
//! let ck = Checkpoint::open("path/to/checkpoint")?;
//! for layer in ck.layers() {
//!     let tensors = ck.layer_tensors(layer)?;
//!     let weights = tensors.view(); // LayerWeights for Linear::new / process_weights
//!     println!("{}: {} ({} scales)", layer.name, layer.config, weights.weight_scale.shape[0]);
//! }
//! # Ok::<(), fp8_linear_checkpoint::CheckpointError>(())
//! ```

#![warn(missing_docs)]

mod checkpoint;
mod discover;
pub mod error;
pub mod generate;
pub mod index;
mod layer;
pub mod presets;
pub mod quant_config;
pub mod scales;
pub mod shard;

pub use checkpoint::{Checkpoint, TensorRef};
pub use discover::{layer_config, natural_cmp};
pub use error::{CheckpointError, TensorSite};
pub use generate::{generate, GenOptions, GenSummary};
pub use layer::{LayerTensors, QuantLayer};
pub use presets::{ModelShape, Preset, UnknownPreset};
pub use quant_config::{QuantConfig, ScaleFormat};
