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
//! ## One call from a checkpoint layer to a ready `Linear`
//!
//! [`Checkpoint::linear`] finds a layer by its module name, selects the kernel for the
//! target's device, builds it there and hands it the weights; [`load_linear`] does the same
//! from a path, which may also be one `.safetensors` file without a `config.json` (tensors
//! `<name>.weight` + `<name>.weight_scale_inv` are 128x128 blocks; a file holding one layer
//! may name them just `weight` and `weight_scale_inv`, the layer's name is then `""`; its
//! activations are bf16 unless [`Checkpoint::with_dtype`] says otherwise). Every problem is a typed error: [`LoadError::Checkpoint`] for the file (an unknown layer,
//! a missing tensor, a wrong dtype or scale shape), [`LoadError::Linear`] when no kernel
//! fits the layer on the target (with every candidate's reason).
//!
//! ```
//! use fp8_linear::{bf16, Options, Target, Tensor, TensorMut};
//! use fp8_linear_checkpoint::{generate, Checkpoint, GenOptions, Preset};
//!
//! // A tiny synthetic checkpoint in the Hugging Face format (128x128 block scales).
//! let dir = std::env::temp_dir().join(format!("fp8-ckpt-doc-{}", std::process::id()));
//! generate(&dir, &GenOptions::new(Preset::Tiny))?;
//!
//! let target = Target::best_available(); // GPU 0 when usable, else the CPU
//! let ck = Checkpoint::open(&dir)?;
//! let mut down = ck.linear(&target, "model.layers.0.mlp.down_proj", &Options::none())?;
//! let (n, k) = (down.config().n, down.config().k); // 256 x 688, bf16 in and out
//! # if target.device().platform == fp8_linear::Platform::Cpu {
//! let x = vec![bf16::from_f32(0.5); 2 * k];
//! let mut y = vec![bf16::ZERO; 2 * n];
//! down.forward(&Tensor::bf16(&x, [2, k]), &mut TensorMut::bf16(&mut y, [2, n]))?;
//! # }
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On a GPU target the layer's input and output are device memory of that GPU (see
//! `fp8_linear::Linear`); the example runs `forward` on host memory only when the target is
//! the CPU.
//!
//! ## Reading a checkpoint
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
mod experts;
pub mod generate;
pub mod index;
mod layer;
mod load;
pub mod presets;
pub mod quant_config;
pub mod scales;
pub mod shard;

pub use checkpoint::{Checkpoint, TensorRef};
pub use discover::{layer_config, natural_cmp};
pub use error::{CheckpointError, TensorSite};
pub use experts::{ExpertGroup, GroupedTensors};
pub use generate::{generate, GenOptions, GenSummary};
pub use layer::{LayerTensors, QuantLayer};
pub use load::{load_linear, LoadError};
pub use presets::{ModelShape, MoeNaming, MoeShape, Preset, UnknownPreset};
pub use quant_config::{QuantConfig, ScaleFormat};
