//! What a kernel's constructor receives: the layer, the device selection judged it against,
//! the kernel options, and the device's runtime handle (the CUDA context and stream of a
//! real GPU), so the device flows one way: caller -> selection -> constructor -> launch.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::config::LayerConfig;
use crate::device::Device;
use crate::error::KernelError;
use crate::options::KernelOptions;
use crate::shared::SharedWeights;

/// The build context of one layer. Made by the facade (`fp8_linear::Target`) or by hand for
/// a kernel built without selection.
#[derive(Copy, Clone)]
pub struct BuildCtx<'a> {
    config: &'a LayerConfig,
    device: &'a Device,
    options: &'a KernelOptions,
    runtime: Option<&'a (dyn Any + Send + Sync)>,
    shared: Option<&'a Arc<SharedWeights>>,
}

impl<'a> BuildCtx<'a> {
    /// A context without a runtime handle: enough for CPU kernels; GPU kernels refuse it
    /// with [`KernelError::NoRuntime`] (or [`KernelError::ProfileDevice`] for a profile).
    pub fn new(config: &'a LayerConfig, device: &'a Device, options: &'a KernelOptions) -> Self {
        BuildCtx {
            config,
            device,
            options,
            runtime: None,
            shared: None,
        }
    }

    /// Attaches the layer's store of weight copies, which the layer's kernels share (see
    /// [`SharedWeights`]); without one a kernel keeps its own copy.
    pub fn with_shared(mut self, shared: &'a Arc<SharedWeights>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The layer's store of weight copies, if the context has one.
    pub fn shared(&self) -> Option<&'a Arc<SharedWeights>> {
        self.shared
    }

    /// Attaches the device's runtime handle (for CUDA: `Arc<fp8_linear_cuda::Gpu>`, the
    /// context and stream the layer uploads to and launches on).
    pub fn with_runtime(mut self, runtime: &'a (dyn Any + Send + Sync)) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// The layer.
    pub fn config(&self) -> &'a LayerConfig {
        self.config
    }

    /// The device the kernel was selected for.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// The kernel options.
    pub fn options(&self) -> &'a KernelOptions {
        self.options
    }

    /// The runtime handle, when it is a `T`.
    pub fn runtime<T: Any>(&self) -> Option<&'a T> {
        self.runtime.and_then(|r| r.downcast_ref::<T>())
    }

    /// The runtime handle as a `T`, or the typed error that says why there is none: the
    /// device is a profile (no hardware behind it), or no handle was attached.
    pub fn require_runtime<T: Any>(&self, kernel: &'static str) -> Result<&'a T, KernelError> {
        if let Some(r) = self.runtime::<T>() {
            return Ok(r);
        }
        if self.device.is_profile() {
            return Err(KernelError::ProfileDevice {
                kernel,
                device: self.device.to_string(),
            });
        }
        Err(KernelError::NoRuntime {
            kernel,
            device: self.device.to_string(),
        })
    }
}

impl fmt::Debug for BuildCtx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildCtx")
            .field("config", self.config)
            .field("device", self.device)
            .field("options", self.options)
            .field("runtime", &self.runtime.is_some())
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn runtime_is_found_by_type_or_refused_with_the_reason() {
        let cfg = LayerConfig::block_128(256, 256, DType::Bf16, DType::Bf16);
        let opts = KernelOptions::none();
        let a100 = Device::profile("a100").unwrap();
        let ctx = BuildCtx::new(&cfg, &a100, &opts);
        assert!(matches!(
            ctx.require_runtime::<u32>("K"),
            Err(KernelError::ProfileDevice { kernel: "K", .. })
        ));
        let mut real = a100.clone();
        real.ordinal = Some(1);
        let handle: u32 = 7;
        let ctx = BuildCtx::new(&cfg, &real, &opts);
        assert!(matches!(
            ctx.require_runtime::<u32>("K"),
            Err(KernelError::NoRuntime { .. })
        ));
        let ctx = ctx.with_runtime(&handle);
        assert_eq!(ctx.require_runtime::<u32>("K").unwrap(), &7);
        assert!(
            ctx.runtime::<u64>().is_none(),
            "another type is not handed out"
        );
        assert_eq!(ctx.config().n, 256);
    }
}
