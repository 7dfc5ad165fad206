//! # fp8-linear
//!
//! FP8 linear-layer kernels (CPU and CUDA) and a dispatcher that picks, per layer and per
//! device, the kernel to run. Kernels are declared with `#[fp8_kernel(...)]`; tables are
//! constant and validated at compile time; selection walks them against the device.
//!
//! The device goes one way: the caller names a [`Target`] (the CPU, a GPU with the CUDA
//! context and stream the engine owns, or a profile for plans), selection judges kernels
//! against its device, the kernel's constructor receives it in a [`BuildCtx`], and every
//! launch uses its stream.
//!
//! ```
//! use fp8_linear::{tables::BUILTIN, DType, LayerConfig, Overrides, Target};
//!
//! let layer = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
//! let target = Target::cpu();
//! let chosen = BUILTIN.select(target.device(), &layer, &Overrides::none()).unwrap();
//! assert_eq!(chosen.entry.name, "CpuFp8Gemm");
//! ```
//!
//! ## Where to start
//!
//! - A layer from your own tensors: [`LayerConfig`] + [`LayerWeights`] (FP8 codes, scales
//!   that multiply them, optional bias), then [`Linear::new`] on a [`Target`]
//!   ([`Target::best_available`] picks GPU 0 when usable, else the CPU) and
//!   [`Linear::forward`], which checks the input and output before the kernel runs.
//! - A layer from a Hugging Face FP8 checkpoint, or from one `.safetensors` file: the
//!   `fp8-linear-checkpoint` crate, `Checkpoint::open(dir)?.linear(&target, name, &options)`
//!   or `load_linear(path, name, &target, &options)`.
//! - Activations your engine already quantized (fused into the op before, such as the
//!   MLP's SiLU-and-multiply): [`ActivationQuantizer`] (the layer's own quantization, and
//!   [`ActivationQuantizer::silu_mul`]) and [`Linear::forward_quantized`].
//! - Mixture-of-experts layers (the E experts of one projection): [`GroupedWeights`] (the
//!   experts' tensors stacked) and [`GroupedLinear`], called with a [`Routing`]
//!   (contiguous rows by offsets or per-row expert ids, or masked per-expert counts),
//!   planned from [`tables::GROUPED`] (on a GPU `cuda::HopperGroupedFp8` on sm_90a,
//!   `cuda::MarlinGroupedFp8` W8A16 on sm_80..sm_89, `cuda::PortableGroupedFp8` on sm_89+;
//!   on the CPU `cpu::CpuGroupedFp8Gemm`).
//! - Why a kernel was or was not chosen: [`Registry::explain`] on [`tables::BUILTIN`].
//! - A kernel of your own: [`docs::writing_kernels`] (what `apply` receives, what the
//!   scales mean, extending a built-in table, a complete CPU kernel using the helpers in
//!   [`cpu::host`]).
//!
//! The pages of [`docs`]: [`docs::design`] (why the project exists, the crates, the
//! attribute contract, selection, the device flow and the stream rule),
//! [`docs::numerics`] (e4m3fn, quantization, the W8A8 and W8A16 formulas, tolerances),
//! [`docs::gpu_host`] (how GPU code is built and how to run it on a GPU host without Rust).
//!
//! ## Features
//!
//! `cuda` (on by default) builds the CUDA kernels and tables. They need no CUDA toolkit at
//! build time: the driver, NVRTC and cuBLASLt are loaded when first used, and without them
//! every GPU path is an error value. Without the feature only the CPU kernels exist.

#![warn(missing_docs)]

extern crate self as fp8_linear;

pub mod autotune;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod docs;
mod grouped_linear;
mod linear;
mod quantizer;
pub mod tables;
mod target;
pub mod tensor_parallel;

pub use grouped_linear::{GroupedLinear, GroupedLinearError};
pub use linear::{Linear, LinearError};
pub use quantizer::ActivationQuantizer;
pub use target::Target;

// The core vocabulary an engine author needs, re-exported by name.
pub use fp8_linear_core::{
    fp8_kernel, fp8_table, ArchSpec, BuildCtx, Candidate, Capability, Choice, Constructor, DType,
    Device, DeviceMasked, DeviceMemory, Explanation, Family, Fp8GroupedKernel, Fp8Kernel,
    GroupShape, GroupedWeights, KernelEntry, KernelError, KernelName, KernelOptions, LayerConfig,
    LayerKind, LayerParam, LayerParams, LayerWeights, Numerics, Options, OptionsError,
    OverrideSource, Overrides, Plan, PlanRange, Platform, QuantKey, Registered, Registry, Routing,
    RoutingError, RowRange, ScaleDtype, SelectError, Selected, SharedWeights, Storage, StorageMut,
    Table, Tensor, TensorMut, Tuned, TuningError, TuningFile, UnknownProfile, Unsupported, Verdict,
};
// Modules with helpers for kernel authors (checks, FP8 conversion, tuning-file keys).
pub use fp8_linear_core::{fp8, grouped, kernel, options, plan, select, tuning, validate};
/// The element types of 16-bit activations.
pub use half::{bf16, f16};

/// Paths the macros' generated code uses. Not a stable API.
#[doc(hidden)]
pub use fp8_linear_core::__private;

/// The README's Rust examples, compiled as doctests so the README stays true: the workspace's
/// README.md in the repository, the copy cargo puts at the package's root in the published
/// crate (build.rs sets `readme_in_package` there).
#[cfg(doctest)]
#[cfg_attr(not(readme_in_package), doc = include_str!("../../README.md"))]
#[cfg_attr(readme_in_package, doc = include_str!("../README.md"))]
pub struct ReadmeDoctests;
