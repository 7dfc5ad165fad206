//! One [`Gpu`] per device ordinal, created on first use and shared process-wide, so kernels
//! built from a `LayerConfig` find their GPU: the CUDA context, its stream, loaded modules
//! and the cuBLASLt handle with its workspace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaModule, CudaStream};
use fp8_linear_core::{Capability, Device};

use crate::cache::CacheKey;
use crate::cublaslt::Lt;
use crate::error::CudaError;
use crate::{device, probe};

/// A CUDA device ready for work.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    device: Device,
    capability: Capability,
    pub(crate) modules: Mutex<HashMap<CacheKey, Arc<CudaModule>>>,
    lt: OnceLock<Result<Arc<Lt>, CudaError>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("device", &self.device).finish()
    }
}

/// The process-wide [`Gpu`] for a device ordinal, created on first use. Errors (no driver,
/// no such device) are values.
pub fn gpu(ordinal: u32) -> Result<Arc<Gpu>, CudaError> {
    static GPUS: OnceLock<Mutex<HashMap<u32, Arc<Gpu>>>> = OnceLock::new();
    let map = GPUS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().expect("gpu registry poisoned");
    if let Some(g) = map.get(&ordinal) {
        return Ok(g.clone());
    }
    let g = Arc::new(Gpu::open(ordinal)?);
    map.insert(ordinal, g.clone());
    Ok(g)
}

impl Gpu {
    fn open(ordinal: u32) -> Result<Self, CudaError> {
        probe::driver()?;
        let device = device::describe(ordinal as usize)?;
        let ctx = CudaContext::new(ordinal as usize)
            .map_err(|e| CudaError::driver(format!("creating a context on device {ordinal}"), e))?;
        // Kernels take raw device pointers; ordering is by stream, not by cudarc's
        // per-allocation events.
        // SAFETY: done before any allocation on this context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let capability = device.capability.expect("CUDA devices have a capability");
        Ok(Gpu {
            ctx,
            stream,
            device,
            capability,
            modules: Mutex::new(HashMap::new()),
            lt: OnceLock::new(),
        })
    }

    /// The device's description.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's exact compute capability.
    pub fn capability(&self) -> Capability {
        self.capability
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ctx.ordinal() as u32
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream this crate allocates and copies on (the context's default stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A stream handle for a raw `CUstream` taken from a tensor's
    /// [`DeviceMemory`](fp8_linear_core::DeviceMemory) (0 is the default stream).
    ///
    /// # Safety
    /// `raw` must be 0 or a live stream of this device's context that outlives the returned
    /// handle's use.
    pub unsafe fn borrow_stream(&self, raw: u64) -> Arc<CudaStream> {
        if raw == 0 {
            self.stream.clone()
        } else {
            self.ctx
                .wrap_borrowed_stream(raw as cudarc::driver::sys::CUstream)
        }
    }

    /// Blocks until all work on the default stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("stream synchronize", e))
    }

    /// The device's cuBLASLt handle and 32 MiB workspace, created on first use.
    pub fn cublaslt(&self) -> Result<Arc<Lt>, CudaError> {
        self.lt
            .get_or_init(|| Lt::new(self.ctx.clone(), self.stream.clone()).map(Arc::new))
            .clone()
    }
}
