//! [`Target`]: the device a layer is built for, named by the caller. For a GPU it carries
//! the CUDA context and stream (the engine's own, or one opened here) that the layer's
//! weights are uploaded to and its kernels launch on.

use fp8_linear_core::{BuildCtx, Device, KernelOptions, LayerConfig, UnknownProfile};

#[cfg(feature = "cuda")]
use fp8_linear_core::KernelError;

#[cfg(feature = "cuda")]
use std::sync::Arc;

#[cfg(feature = "cuda")]
use crate::cuda::interop::{CudaContext, CudaStream, Gpu};

/// The device layers are built for: the host CPU, a real GPU with its context and stream, or
/// a profile (a description such as `a100`: kernels can be selected and explained for it,
/// never built).
#[derive(Clone, Debug)]
pub struct Target {
    device: Device,
    #[cfg(feature = "cuda")]
    gpu: Option<Arc<Gpu>>,
}

impl Target {
    /// The host CPU.
    pub fn cpu() -> Self {
        Target::describe(Device::host_cpu())
    }

    /// A device profile by name (see [`Device::profile`]): for plans and explanations.
    pub fn profile(name: &str) -> Result<Self, UnknownProfile> {
        Ok(Target::describe(Device::profile(name)?))
    }

    /// A target from a description alone: the CPU, or a profile. A CUDA description builds
    /// nothing (kernels return [`KernelError::ProfileDevice`](fp8_linear_core::KernelError::ProfileDevice)
    /// or [`KernelError::NoRuntime`](fp8_linear_core::KernelError::NoRuntime));
    /// open real GPUs with [`Target::cuda`].
    pub fn describe(device: Device) -> Self {
        Target {
            device,
            #[cfg(feature = "cuda")]
            gpu: None,
        }
    }

    /// GPU `ordinal` with its primary context and default stream;
    /// [`KernelError::NoSuchDevice`] when the machine has no such GPU.
    #[cfg(feature = "cuda")]
    pub fn cuda(ordinal: u32) -> Result<Self, KernelError> {
        Ok(Target::from_gpu(Gpu::open(ordinal)?))
    }

    /// The context and stream an engine already owns (cudarc's handles, as candle has them):
    /// weights are uploaded there and every kernel launches on that stream.
    #[cfg(feature = "cuda")]
    pub fn from_cudarc(
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
    ) -> Result<Self, KernelError> {
        Ok(Target::from_gpu(Gpu::from_cudarc(ctx, stream)?))
    }

    /// A GPU handle made with [`Gpu::open`], [`Gpu::from_cudarc`] or [`Gpu::with_stream`].
    #[cfg(feature = "cuda")]
    pub fn from_gpu(gpu: Arc<Gpu>) -> Self {
        Target {
            device: gpu.device().clone(),
            gpu: Some(gpu),
        }
    }

    /// The best device this machine offers, for a program that just wants its layers to
    /// run: GPU 0 on its primary context and default stream ([`Target::cuda`]`(0)`) when
    /// the crate is built with the `cuda` feature (the default) and the CUDA driver, a GPU
    /// and NVRTC (which compiles the kernels at run time) can all be loaded; the host CPU
    /// otherwise. It never fails and never panics; it does not say why it fell back to the
    /// CPU: call [`Target::cuda`] for the typed error, and check [`Target::device`] for
    /// what you got.
    ///
    /// Layers on a GPU target take device memory as input and output (see
    /// [`Linear`](crate::Linear)); on the CPU target, host slices.
    ///
    /// ```
    /// use fp8_linear::{tables::BUILTIN, DType, LayerConfig, Overrides, Platform, Target};
    ///
    /// let target = Target::best_available();
    /// println!("running on {}", target.device());
    /// // Selection works the same on either: the best kernel for this layer on this device,
    /// // or every candidate's reason when none fits (a GPU older than the kernels, say).
    /// let layer = LayerConfig::block_128(4096, 7168, DType::Bf16, DType::Bf16);
    /// match BUILTIN.select(target.device(), &layer, &Overrides::none()) {
    ///     Ok(chosen) => println!("{} runs it", chosen.entry.name),
    ///     Err(why) => println!("{why}"),
    /// }
    /// if target.device().platform == Platform::Cpu {
    ///     let chosen = BUILTIN.select(target.device(), &layer, &Overrides::none()).unwrap();
    ///     assert_eq!(chosen.entry.name, "CpuFp8Gemm");
    /// }
    /// ```
    pub fn best_available() -> Self {
        #[cfg(feature = "cuda")]
        if fp8_linear_cuda::probe::nvrtc().is_ok() {
            if let Ok(t) = Target::cuda(0) {
                return t;
            }
        }
        Target::cpu()
    }

    /// The device, as selection judges kernels against it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The GPU handle of a real CUDA target.
    #[cfg(feature = "cuda")]
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        self.gpu.as_ref()
    }

    /// The build context of a layer on this target.
    pub fn build_ctx<'a>(
        &'a self,
        config: &'a LayerConfig,
        options: &'a KernelOptions,
    ) -> BuildCtx<'a> {
        let ctx = BuildCtx::new(config, &self.device, options);
        #[cfg(feature = "cuda")]
        if let Some(gpu) = &self.gpu {
            return ctx.with_runtime(gpu);
        }
        ctx
    }
}
