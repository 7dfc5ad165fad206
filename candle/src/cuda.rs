//! The CUDA path (feature `cuda`): layers on a candle CUDA device launch on that device's
//! context and stream, through one fp8-linear GPU handle per candle stream.

use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use candle_core::backend::BackendStorage;
use candle_core::cuda::{CudaDType, CudaDevice};
use candle_core::{CudaStorage, DType, Layout, Shape};
use fp8_linear::cuda::interop::cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr};
use fp8_linear::cuda::interop::Gpu;
use fp8_linear::{
    bf16, f16, DType as FpDType, DeviceMemory, KernelError, LayerConfig, Linear, LinearError,
    Target, Tensor, TensorMut,
};

use crate::linear::{Fp8Linear, State};

/// The raw handle of CUDA's per-thread default stream (`CU_STREAM_PER_THREAD`), the stream
/// of a candle device made by `Device::new_cuda`.
const PER_THREAD_STREAM: u64 = 0x2;

/// The GPU handles made so far, by the address of the candle stream they wrap (alive while a
/// layer holds the handle, which holds the stream).
static GPUS: Mutex<Vec<(usize, Weak<Gpu>)>> = Mutex::new(Vec::new());

/// The target of a candle CUDA device: `Target::from_cudarc` with the device's context and
/// stream, made once per candle stream and shared by every layer on it (one set of loaded
/// kernel modules and one cuBLASLt handle and workspace per stream, not per layer).
pub(crate) fn target(d: &CudaDevice) -> Result<Target, KernelError> {
    let stream = d.cuda_stream();
    let key = Arc::as_ptr(&stream) as usize;
    let mut gpus = GPUS.lock().unwrap_or_else(|p| p.into_inner());
    gpus.retain(|(_, g)| g.strong_count() > 0);
    if let Some(gpu) = gpus
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, g)| g.upgrade())
    {
        return Ok(Target::from_gpu(gpu));
    }
    let target = Target::from_cudarc(stream.context().clone(), stream)?;
    let gpu = target.gpu().expect("a CUDA target has its GPU handle");
    gpus.push((key, Arc::downgrade(gpu)));
    Ok(target)
}

/// Runs `build` on the FP8 codes `[N, K]` of a CUDA storage (starting at element `start`)
/// as a device tensor. The codes are read on the layer's stream (the candle device's), and
/// the weight processing waits for its copies before returning.
pub(crate) fn with_device_codes(
    s: &CudaStorage,
    start: usize,
    c: &LayerConfig,
    build: impl FnOnce(Tensor<'_>) -> Result<Linear, LinearError>,
) -> candle_core::Result<Result<Linear, LinearError>> {
    let slice = s.as_cuda_slice::<float8::F8E4M3>()?;
    let stream = s.device.cuda_stream();
    let (ptr, _read) = slice.device_ptr(&stream);
    let mem = DeviceMemory {
        ptr: ptr + start as u64,
        bytes: c.n * c.k,
        ordinal: stream.context().ordinal() as u32,
    };
    Ok(build(Tensor::device(mem, FpDType::F8E4m3, [c.n, c.k])))
}

/// What orders the calls of one layer made from several threads. A layer's scratch is
/// reused by every call; on one stream the calls are ordered by it. Candle's default device
/// stream is the per-thread default stream, a different stream for every thread: before a
/// call from another thread than the last one, the context is synchronized, so the last
/// thread's call has finished with the scratch.
#[derive(Default)]
pub(crate) struct CallOrder {
    last: Option<ThreadId>,
}

impl CallOrder {
    fn before_call(&mut self, gpu: &Gpu) -> Result<(), KernelError> {
        if gpu.raw_stream() != PER_THREAD_STREAM {
            return Ok(());
        }
        let me = std::thread::current().id();
        if self.last.is_some_and(|t| t != me) {
            gpu.context().synchronize().map_err(|e| {
                KernelError::backend(
                    "fp8-linear-candle",
                    format!("synchronizing before a call from another thread: {e:?}"),
                )
            })?;
        }
        self.last = Some(me);
        Ok(())
    }
}

/// One call on a CUDA tensor `[m, k]` of element `T` (starting at element `start`): a new
/// `[m, n]` output on the device, written by the kernel on the layer's stream.
#[allow(clippy::too_many_arguments)]
fn run<T: CudaDType + DeviceRepr>(
    l: &Fp8Linear,
    st: &mut State,
    gpu: &Gpu,
    s: &CudaStorage,
    dtype: FpDType,
    start: usize,
    m: usize,
) -> candle_core::Result<CudaStorage> {
    let (n, k) = (l.config().n, l.config().k);
    let es = std::mem::size_of::<T>();
    let ordinal = gpu.ordinal();
    let stream = gpu.stream();
    let x = s.as_cuda_slice::<T>()?;
    // SAFETY: the kernels write every element of the [m, n] output before anything reads it.
    let mut y = unsafe { stream.alloc::<T>(m * n) }.map_err(|e| {
        candle_core::Error::msg(format!(
            "Fp8Linear `{}`: allocating the [{m}, {n}] output: {e:?}",
            l.name()
        ))
    })?;
    {
        // The guards record the call's use of both tensors on the stream when dropped
        // (cudarc's event tracking, in a context that has it on).
        let (xp, _read) = x.device_ptr(stream);
        let (yp, _write) = y.device_ptr_mut(stream);
        let input = Tensor::device(
            DeviceMemory {
                ptr: xp + (start * es) as u64,
                bytes: m * k * es,
                ordinal,
            },
            dtype,
            [m, k],
        );
        let mut output = TensorMut::device(
            DeviceMemory {
                ptr: yp,
                bytes: m * n * es,
                ordinal,
            },
            dtype,
            [m, n],
        );
        st.linear
            .forward(&input, &mut output)
            .map_err(|e| l.kernel_error(e))?;
    }
    Ok(CudaStorage::wrap_cuda_slice(y, s.device.clone()))
}

/// The layer on a contiguous `[M, K]` CUDA input in the layer's dtype.
pub(crate) fn forward(
    l: &Fp8Linear,
    s: &CudaStorage,
    layout: &Layout,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (n, k) = (l.config().n, l.config().k);
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::msg("fp8-linear: non-contiguous input"))?;
    let m = (end - start) / k;
    let gpu = l
        .target()
        .gpu()
        .ok_or_else(|| candle_core::Error::msg("fp8-linear: a CUDA layer without its GPU"))?
        .clone();
    if !Arc::ptr_eq(gpu.stream(), &s.device.cuda_stream()) {
        return Err(candle_core::Error::msg(format!(
            "Fp8Linear `{}`: the input's CUDA device has another stream than the layer's",
            l.name()
        )));
    }
    let mut st = l.lock()?;
    st.order.before_call(&gpu).map_err(|e| l.kernel_error(e))?;
    let out = match s.dtype() {
        DType::BF16 => run::<bf16>(l, &mut st, &gpu, s, FpDType::Bf16, start, m)?,
        DType::F16 => run::<f16>(l, &mut st, &gpu, s, FpDType::F16, start, m)?,
        DType::F32 => run::<f32>(l, &mut st, &gpu, s, FpDType::F32, start, m)?,
        other => {
            return Err(candle_core::Error::msg(format!(
                "Fp8Linear `{}`: input dtype {other:?}; expected bf16, f16 or f32",
                l.name()
            )))
        }
    };
    Ok((out, Shape::from((m, n))))
}
