//! The GPU side of the CLI: running layers on device memory of the run's GPU. The GPU
//! itself comes from the run's [`Target`](fp8_linear::Target) (`--gpu N`, or GPU 0 when
//! usable); layers built on that target launch on its stream, and this executor copies and
//! times on the same stream.

use std::sync::Arc;

use fp8_linear::cuda::runtime::buffer::Element;
use fp8_linear::cuda::runtime::{DeviceBuffer, EventTimer, Gpu};
use fp8_linear::{bf16, f16, DType, LayerConfig, Linear};

use crate::error::CliError;
use crate::executor::{Executor, POISON_16};
use crate::sizes::{try_collect, try_filled};

/// Runs layers on device memory: uploads the input, times the call with CUDA events,
/// downloads the output.
pub struct GpuExecutor {
    gpu: Arc<Gpu>,
}

impl GpuExecutor {
    /// An executor on `gpu`.
    pub fn new(gpu: Arc<Gpu>) -> Self {
        GpuExecutor { gpu }
    }
}

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::runtime(e.to_string())
}

/// An element the CLI moves between host f32 and device buffers.
trait Convert: Element {
    fn from_f32(v: f32) -> Self;
    fn into_f32(self) -> f32;
    /// The NaN output buffers are filled with before a call (0xffff for 16-bit types).
    fn poison() -> Self;
}

impl Convert for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn poison() -> Self {
        f32::NAN
    }
    fn into_f32(self) -> f32 {
        self
    }
}

impl Convert for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn into_f32(self) -> f32 {
        self.to_f32()
    }
    fn poison() -> Self {
        bf16::from_bits(POISON_16)
    }
}

impl Convert for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn into_f32(self) -> f32 {
        self.to_f32()
    }
    fn poison() -> Self {
        f16::from_bits(POISON_16)
    }
}

/// Uploads `x` as `I`, runs one call into a poisoned output of `O`, downloads it; returns
/// the event-timed milliseconds of the call.
fn timed<I: Convert, O: Convert>(
    gpu: &Arc<Gpu>,
    linear: &mut Linear,
    x: &[f32],
    shape: (usize, usize, usize),
    out: &mut [f32],
) -> Result<f32, CliError> {
    let (m, n, k) = shape;
    let host: Vec<I> = try_collect("host input", x.len(), x.iter().map(|v| I::from_f32(*v)))?;
    let input = DeviceBuffer::from_host(gpu, &host).map_err(err)?;
    drop(host);
    let poison = try_filled("host output", m * n, O::poison())?;
    let mut o = DeviceBuffer::<O>::from_host(gpu, &poison).map_err(err)?;
    drop(poison);
    let timer = EventTimer::new(gpu).map_err(err)?;
    timer.start(gpu.stream()).map_err(err)?;
    linear
        .forward(&input.tensor([m, k]), &mut o.tensor_mut([m, n]))
        .map_err(err)?;
    let ms = timer.stop(gpu.stream()).map_err(err)?;
    let back = o.to_host().map_err(err)?;
    out.iter_mut()
        .zip(back)
        .for_each(|(d, v)| *d = v.into_f32());
    Ok(ms)
}

fn timed_in<I: Convert>(
    gpu: &Arc<Gpu>,
    linear: &mut Linear,
    out_dtype: DType,
    x: &[f32],
    shape: (usize, usize, usize),
    out: &mut [f32],
) -> Result<f32, CliError> {
    match out_dtype {
        DType::Bf16 => timed::<I, bf16>(gpu, linear, x, shape, out),
        DType::F16 => timed::<I, f16>(gpu, linear, x, shape, out),
        DType::F32 => timed::<I, f32>(gpu, linear, x, shape, out),
        d => Err(CliError::bad_input(format!(
            "the CLI cannot produce {d} outputs"
        ))),
    }
}

impl Executor for GpuExecutor {
    fn forward(
        &mut self,
        linear: &mut Linear,
        config: &LayerConfig,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<f64, CliError> {
        let shape = (m, config.n, config.k);
        let (g, o) = (&self.gpu, config.output_dtype);
        let ms = match config.input_dtype {
            DType::Bf16 => timed_in::<bf16>(g, linear, o, x, shape, out),
            DType::F16 => timed_in::<f16>(g, linear, o, x, shape, out),
            DType::F32 => timed_in::<f32>(g, linear, o, x, shape, out),
            d => Err(CliError::bad_input(format!(
                "the CLI cannot feed {d} inputs"
            ))),
        }?;
        Ok(ms as f64 / 1e3)
    }
}
