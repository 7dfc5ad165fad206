//! # fp8-linear-candle
//!
//! fp8-linear in [candle](https://docs.rs/candle-core): [`Fp8Linear`], a candle [`Module`]
//! that runs one FP8 linear layer of a Hugging Face checkpoint with the kernel fp8-linear
//! selects for the device, loaded from a [`VarBuilder`] the way candle-transformers loads a
//! layer.
//!
//! [`Module`]: candle_core::Module
//! [`VarBuilder`]: candle_nn::VarBuilder
//!
//! # Integrating into an engine
//!
//! An engine hands fp8-linear the device it owns and gets back a layer that runs there.
//! Three ways in, depending on what the engine is built on.
//!
//! ## 1. A candle engine
//!
//! Replace `candle_nn::linear(in_dim, out_dim, vb)` for the checkpoint's quantized layers by
//! [`Fp8Linear::load`] (or [`linear`], which keeps the modules the quantization config lists
//! as not converted, such as `lm_head`, as plain `candle_nn::Linear`s). The checkpoint's
//! `quantization_config` ([`QuantConfig::read`] on the checkpoint directory) decides the
//! layer's quantization: `weight` (F8E4M3) with `weight_scale_inv` per block of
//! `weight_block_size` (128x128, 32x32, 64x64, 128x64, ...; `scale_fmt: "ue8m0"` makes the
//! activation scales powers of two too), or
//! `weight_scale` per tensor / per output channel with `input_scale` for a static
//! activation scheme; `bias` when the checkpoint has one. The VarBuilder's dtype is the
//! activation dtype (bf16, f16 or f32) and its device the layer's.
//!
//! ```
//! use candle_core::{DType, Device, Module, Tensor};
//! use candle_nn::VarBuilder;
//! use fp8_linear_candle::{Fp8Linear, QuantConfig};
//! use fp8_linear_checkpoint::{generate, GenOptions, Preset};
//!
//! // A tiny synthetic checkpoint in the Hugging Face FP8 format (128x128 block scales).
//! let dir = std::env::temp_dir().join(format!("fp8-candle-doc-{}", std::process::id()));
//! generate(&dir, &GenOptions::new(Preset::Tiny))?;
//!
//! let quant = QuantConfig::read(&dir)?;
//! let files = [dir.join("model.safetensors")];
//! // SAFETY: the file is not modified while it is mapped.
//! let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::BF16, &Device::Cpu)? };
//! let mlp = vb.pp("model.layers.0.mlp");
//! let gate = Fp8Linear::load(256, 688, mlp.pp("gate_proj"), &quant)?;
//! let down = Fp8Linear::load(688, 256, mlp.pp("down_proj"), &quant)?;
//! println!("{}", down.explain()); // the device, the table, every candidate's verdict
//! assert_eq!(down.kernel_name(), "CpuFp8Gemm");
//!
//! // Any leading dimensions: [batch, tokens, hidden].
//! let x = Tensor::randn(0f32, 1f32, (2, 3, 256), &Device::Cpu)?.to_dtype(DType::BF16)?;
//! let y = down.forward(&candle_nn::ops::silu(&gate.forward(&x)?)?)?;
//! assert_eq!(y.dims(), &[2, 3, 256]);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On a CUDA device (feature `cuda`, see below), load with a VarBuilder on
//! `Device::new_cuda(0)?`: the layer is built on that candle device's own cudarc context
//! and stream (`Target::from_cudarc(ctx, stream)`, one GPU handle per candle stream, shared
//! by all its layers), takes its weights from the device, and every `forward` enqueues its
//! kernels on that stream, reading the input tensor in place and returning a new device
//! tensor: no copy to the host, no synchronization. Candle's own ops before and after are
//! on the same stream, so they are ordered with it.
//!
//! Every load or call problem is a candle error naming the layer and the problem (a
//! missing tensor, a scale of the wrong shape, an input dtype or shape the layer does not
//! take, no kernel for the layer on the device with every candidate's reason); see
//! [`Fp8LinearError`].
//!
//! [`Fp8Linear::kernel_name`] and [`Fp8Linear::explain`] say which kernel runs the layer
//! and why; [`dequantized_linear`] gives candle's own `Linear` on the dequantized weights,
//! to compare with.
//!
//! ## 2. An engine that owns a raw cudarc context and stream
//!
//! Without candle, build fp8-linear's [`Linear`](fp8_linear::Linear) directly on the
//! engine's context and stream (fp8-linear with its `cuda` feature, the default). Weights
//! may be host slices (uploaded to the context) or device memory; inputs and outputs are
//! device memory of that GPU, ready on that stream, and `forward` enqueues there without
//! waiting:
//!
//! ```ignore
//! use fp8_linear::cuda::interop::CudaContext;
//! use fp8_linear::{DType, DeviceMemory, LayerConfig, Linear, Options, Target, Tensor, TensorMut};
//!
//! let ctx = CudaContext::new(0)?;   // the engine's context ...
//! let stream = ctx.new_stream()?;   // ... and stream
//! let target = Target::from_cudarc(ctx.clone(), stream.clone())?;
//! let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
//! let mut layer = Linear::new(&target, &cfg, &weights, &Options::none())?;
//! // x: [m, k] bf16 and y: [m, n] bf16, device memory of GPU 0 (raw addresses and sizes).
//! let xin = Tensor::device(DeviceMemory { ptr: x_ptr, bytes: m * k * 2, ordinal: 0 }, DType::Bf16, [m, k]);
//! let mut yout = TensorMut::device(DeviceMemory { ptr: y_ptr, bytes: m * n * 2, ordinal: 0 }, DType::Bf16, [m, n]);
//! layer.forward(&xin, &mut yout)?; // enqueued on `stream`
//! ```
//!
//! (`tests/tests/gpu_stream.rs` of the workspace is this code, compiled and run.) To run
//! layers on several streams, build them on `Gpu::fork_stream` / `Gpu::with_stream`
//! handles of one context: they share its loaded kernel modules.
//!
//! ## 3. CPU only
//!
//! Nothing to set up: `Target::cpu()` (what [`Fp8Linear`] uses for `Device::Cpu`), host
//! slices in and out; the CPU kernels decode the FP8 weights on the fly for small batches
//! and dequantize into a threaded SGEMM above. See the `fp8_linear` crate docs.
//!
//! ## CUDA graphs
//!
//! A layer's `forward` can be captured into a CUDA graph on its stream once it has run, or
//! been prepared, at that M outside the capture: [`Fp8Linear::prepare`]`(max_m)` (or
//! `fp8_linear::Linear::prepare`) makes the scratch and cuBLASLt plans of every M up to
//! `max_m` ahead, so those calls allocate nothing, plan nothing and never synchronize. A
//! call that would have to, while the stream is being captured, returns
//! `KernelError::NotPrepared` instead of breaking the capture. Graphs keep the layer's
//! scratch addresses; a prepared layer keeps outgrown scratch alive, so eager calls at a
//! larger M afterwards do not invalidate graphs captured before.
//!
//! ## Threads
//!
//! `fp8_linear::Linear` is `Send` (not `Sync`: every call takes `&mut self`);
//! [`Fp8Linear`] is `Send + Sync` (calls are serialized on the layer: its scratch is reused
//! by every call; on candle's default per-thread CUDA stream, a call from another thread
//! than the previous one first synchronizes the context, so that the other thread's call
//! is done with the scratch). One layer per stream runs concurrently with the others.
//!
//! ## Features
//!
//! - default: CPU only. No CUDA anything at build time or run time.
//! - `cuda`: candle's CUDA backend and fp8-linear's CUDA kernels. Candle's backend compiles
//!   its kernels with `nvcc` at build time (candle-kernels) and links the CUDA libraries
//!   (cudarc's `dynamic-linking`, which it requires), so this feature needs a CUDA 13
//!   toolkit on the build machine (the workspace pins cudarc's `cuda-13000` bindings);
//!   fp8-linear's own kernels still compile with NVRTC at run time. Without one,
//!   `scripts/candle-cuda-bundle.sh` builds it from NVIDIA's CUDA 13.0 wheels and link-time
//!   stubs of the libraries, and bundles the test binaries and the example for a GPU host.
//!
//! ## The example
//!
//! `cargo run --release -p fp8-linear-candle --example llama_mlp [-- CHECKPOINT_DIR [TOKENS]]`
//! loads a checkpoint made by `fp8-linear gen-checkpoint` (or generates the tiny preset, or
//! the one `-- --preset NAME` names, into a temporary directory), runs every decoder
//! layer's MLP (`down(silu(gate(x)) * up(x))`) and attention projections in candle on the
//! CPU, and on GPU 0 with the `cuda` feature when one is present, and prints each layer's
//! kernel and its relative error against candle's bf16 `Linear` on the dequantized weights.

#![warn(missing_docs)]

#[cfg(feature = "cuda")]
mod cuda;
mod error;
mod experts;
mod linear;
mod prequant;
mod weights;

pub use error::{Fp8LinearError, Problem};
pub use experts::{Fp8Experts, Routed};
pub use fp8_linear_checkpoint::QuantConfig;
pub use linear::{linear, Fp8Linear, LinearLayer};
pub use weights::dequantized_linear;
