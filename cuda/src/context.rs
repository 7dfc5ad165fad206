//! [`Gpu`]: a CUDA context and the stream a layer works on, with the context's loaded
//! modules and a cuBLASLt handle. The caller makes it (from an ordinal, or from the cudarc
//! context and stream its framework already owns) and hands it to the layers it builds;
//! nothing in this crate finds a GPU by itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUstreamCaptureStatus};
use cudarc::driver::{CudaContext, CudaModule, CudaStream};
use fp8_linear_core::{Capability, Device};

use crate::cache::CacheKey;
use crate::cublaslt::Lt;
use crate::error::CudaError;
use crate::{device, probe};

/// What every stream of one context shares: the context, its description and its loaded
/// modules.
struct Shared {
    ctx: Arc<CudaContext>,
    device: Device,
    capability: Capability,
    modules: Mutex<HashMap<CacheKey, Arc<CudaModule>>>,
}

/// A CUDA device ready for work: a context and the stream every layer built on this handle
/// allocates, copies and launches on. Handles made with [`Gpu::with_stream`] share the
/// context's loaded modules.
pub struct Gpu {
    shared: Arc<Shared>,
    stream: Arc<CudaStream>,
    lt: OnceLock<Result<Arc<Lt>, CudaError>>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.shared.device)
            .field("stream", &(self.stream.cu_stream() as usize))
            .finish()
    }
}

impl Gpu {
    /// Opens device `ordinal` (its primary context) with the context's default stream.
    /// [`CudaError::NoSuchDevice`] when the machine has no such device, other errors (no
    /// driver) as values.
    pub fn open(ordinal: u32) -> Result<Arc<Gpu>, CudaError> {
        probe::driver()?;
        let count = device::device_count()?;
        if ordinal as usize >= count {
            return Err(CudaError::NoSuchDevice {
                ordinal,
                count: count as u32,
            });
        }
        let ctx = CudaContext::new(ordinal as usize)
            .map_err(|e| CudaError::driver(format!("creating a context on device {ordinal}"), e))?;
        // Kernels take raw device pointers; ordering is by stream, not by cudarc's
        // per-allocation events.
        // SAFETY: done before any allocation through this context handle.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        Self::from_cudarc(ctx, stream)
    }

    /// A handle over a context and stream the caller already owns (an engine's, candle's):
    /// layers built on it upload to that context and launch on that stream. The context's
    /// settings (event tracking) are left as the caller made them.
    pub fn from_cudarc(
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
    ) -> Result<Arc<Gpu>, CudaError> {
        probe::driver()?;
        if !Arc::ptr_eq(stream.context(), &ctx) {
            return Err(CudaError::InvalidArgument(format!(
                "the stream belongs to the context of device {}, not to device {}'s context",
                stream.context().ordinal(),
                ctx.ordinal()
            )));
        }
        let device = device::describe(ctx.ordinal())?;
        let capability = device.capability.ok_or_else(|| CudaError::NoDevice {
            detail: "the device reports no compute capability".into(),
        })?;
        Ok(Arc::new(Gpu {
            shared: Arc::new(Shared {
                ctx,
                device,
                capability,
                modules: Mutex::new(HashMap::new()),
            }),
            stream,
            lt: OnceLock::new(),
        }))
    }

    /// A handle on the same context (and its loaded modules) with another stream of it.
    pub fn with_stream(&self, stream: Arc<CudaStream>) -> Result<Arc<Gpu>, CudaError> {
        if !Arc::ptr_eq(stream.context(), &self.shared.ctx) {
            return Err(CudaError::InvalidArgument(
                "the stream belongs to another context".into(),
            ));
        }
        Ok(Arc::new(Gpu {
            shared: self.shared.clone(),
            stream,
            lt: OnceLock::new(),
        }))
    }

    /// A handle on the same context with a new stream of its own.
    pub fn fork_stream(&self) -> Result<Arc<Gpu>, CudaError> {
        let stream = self
            .shared
            .ctx
            .new_stream()
            .map_err(|e| CudaError::driver("creating a stream", e))?;
        self.with_stream(stream)
    }

    /// The device's description.
    pub fn device(&self) -> &Device {
        &self.shared.device
    }

    /// The device's exact compute capability.
    pub fn capability(&self) -> Capability {
        self.shared.capability
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.ctx.ordinal() as u32
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.shared.ctx
    }

    /// The stream this handle allocates, copies and launches on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The stream as a raw `CUstream` address (for cuBLASLt and raw driver calls).
    pub fn raw_stream(&self) -> u64 {
        self.stream.cu_stream() as u64
    }

    /// The most dynamic shared memory a block may opt in to on this device, in bytes.
    pub fn max_shared_memory_per_block(&self) -> Result<u32, CudaError> {
        let v = self
            .shared
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| CudaError::driver("querying the shared memory limit", e))?;
        Ok(v.max(0) as u32)
    }

    /// The device memory `(free, total)` in bytes, as the driver reports it for this GPU
    /// (`cuMemGetInfo` with this handle's context current): what every process has
    /// allocated on the device counts, so a difference before and after shows what this
    /// process allocated there.
    pub fn memory_info(&self) -> Result<(usize, usize), CudaError> {
        self.shared
            .ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("making the context current", e))?;
        cudarc::driver::result::mem_get_info()
            .map_err(|e| CudaError::driver("querying the device memory (cuMemGetInfo)", e))
    }

    /// The loaded modules of the context (shared by every stream's handle).
    pub(crate) fn modules(&self) -> &Mutex<HashMap<CacheKey, Arc<CudaModule>>> {
        &self.shared.modules
    }

    /// Whether this handle's stream is being captured into a CUDA graph
    /// (`cuStreamIsCapturing`: active, or invalidated by an illegal call and not yet ended).
    pub fn is_capturing(&self) -> Result<bool, CudaError> {
        let status = self
            .stream
            .capture_status()
            .map_err(|e| CudaError::driver("querying the stream's capture status", e))?;
        Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// [`CudaError::Capturing`] naming `what` (built only then) when this handle's stream is
    /// being captured; the check before every allocation, synchronization or plan a kernel
    /// makes on its own (the slow path of a call at a new size).
    pub fn refuse_in_capture(&self, what: impl FnOnce() -> String) -> Result<(), CudaError> {
        if self.is_capturing()? {
            return Err(CudaError::Capturing { what: what() });
        }
        Ok(())
    }

    /// Blocks until all work on this handle's stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("stream synchronize", e))
    }

    /// This handle's cuBLASLt handle and 32 MiB workspace, created on first use.
    pub fn cublaslt(&self) -> Result<Arc<Lt>, CudaError> {
        self.lt
            .get_or_init(|| Lt::new(self.shared.ctx.clone(), self.stream.clone()).map(Arc::new))
            .clone()
    }
}
