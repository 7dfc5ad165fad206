//! GPU test helpers: find the GPU or say why there is none (visibly, see [`crate::skip`];
//! failing instead when `FP8_REQUIRE_CUDA=1`), check that a kernel can run on it, move
//! tensors and layers to and from the device, run a kernel on device tensors, and compute
//! the f64 reference on a subset of rows for large layers.

use std::sync::Arc;

use fp8_linear::cpu::reference;
use fp8_linear::cuda::runtime::buffer::Element;
use fp8_linear::cuda::runtime::{self, DeviceBuffer, Gpu};
use fp8_linear::{
    DType, Fp8Kernel, KernelEntry, KernelError, KernelOptions, LayerConfig, LayerWeights, Target,
    Tensor,
};
use half::{bf16, f16};

use crate::layers::HostLayer;
pub use crate::skip::cuda_required;
use crate::skip::{arch_skip, no_gpu_skip};

/// The GPU (device 0, with NVRTC available; opened once per test process, on its default
/// stream), or None after reporting the skip (`SKIPPED <test>: ...` on the uncaptured
/// stderr). Panics instead of skipping when `FP8_REQUIRE_CUDA=1`.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    static GPU: std::sync::OnceLock<Result<Arc<Gpu>, runtime::CudaError>> =
        std::sync::OnceLock::new();
    let got = GPU
        .get_or_init(|| runtime::probe::nvrtc().and_then(|_| Gpu::open(0)))
        .clone();
    match got {
        Ok(g) => Some(g),
        Err(e) => {
            no_gpu_skip(test, &format!("no usable CUDA device: {e}"));
            None
        }
    }
}

/// Every GPU of the machine (each with its primary context and default stream) when there
/// are at least `want`; None after reporting a skip otherwise. No GPU at all is
/// [`no_gpu_skip`] (a failure under `FP8_REQUIRE_CUDA=1`); fewer
/// than `want` is a hardware skip like an architecture skip: a failure under
/// `FP8_REQUIRE_CUDA=1` unless `FP8_ALLOW_ARCH_SKIPS` allows it.
pub fn gpus_or_skip(test: &str, want: usize) -> Option<Vec<Arc<Gpu>>> {
    let count = match runtime::probe::nvrtc().and_then(|_| runtime::device_count()) {
        Ok(c) => c,
        Err(e) => {
            no_gpu_skip(test, &format!("no usable CUDA device: {e}"));
            return None;
        }
    };
    if count < want {
        if count == 0 {
            no_gpu_skip(test, "the CUDA driver reports no device");
        } else {
            arch_skip(
                test,
                &format!("needs {want} GPUs, this machine has {count}"),
            );
        }
        return None;
    }
    let gpus: Result<Vec<_>, _> = (0..count as u32).map(Gpu::open).collect();
    match gpus {
        Ok(g) => Some(g),
        Err(e) => {
            no_gpu_skip(test, &format!("cannot open every GPU: {e}"));
            None
        }
    }
}

/// Whether `entry` runs on a GPU of capability `cap`: its `arch`, or with `forced` also its
/// `force_arch` (the range allowed when the kernel is forced by name).
pub fn entry_runs_on(entry: &KernelEntry, cap: fp8_linear::Capability, forced: bool) -> bool {
    entry.arch.matches(Some(cap))
        || (forced && entry.force_arch.is_some_and(|a| a.matches(Some(cap))))
}

/// The GPU when `entry` can run on it (see [`entry_runs_on`]); None after reporting an
/// architecture skip, which fails the test under `FP8_REQUIRE_CUDA=1` unless
/// `FP8_ALLOW_ARCH_SKIPS` allows it (see [`crate::skip`]).
pub fn gpu_for_entry_or_skip(test: &str, entry: &KernelEntry, forced: bool) -> Option<Arc<Gpu>> {
    let gpu = gpu_or_skip(test)?;
    let cap = gpu.capability();
    if entry_runs_on(entry, cap, forced) {
        return Some(gpu);
    }
    let arch = match (forced, entry.force_arch) {
        (true, Some(f)) => format!("arch {}, forced {f}", entry.arch),
        _ => format!("arch {}", entry.arch),
    };
    arch_skip(
        test,
        &format!(
            "{} needs {arch}; this GPU is sm_{}{}",
            entry.name, cap.major, cap.minor
        ),
    );
    None
}

/// Host values converted to a device element type.
pub trait FromF32: Element {
    /// The element nearest to `v` (RNE).
    fn from_f32(v: f32) -> Self;
    /// The element as f32.
    fn to_f32(self) -> f32;
}
impl FromF32 for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}
impl FromF32 for bf16 {
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}
impl FromF32 for f16 {
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// A device copy of `x` in dtype `d`, plus the values as the device holds them (f32).
pub fn upload_as(gpu: &Arc<Gpu>, x: &[f32], d: DType) -> (AnyBuffer, Vec<f32>) {
    fn go<T: FromF32>(gpu: &Arc<Gpu>, x: &[f32]) -> (DeviceBuffer<T>, Vec<f32>) {
        let v: Vec<T> = x.iter().map(|&f| T::from_f32(f)).collect();
        let exact = v.iter().map(|e| e.to_f32()).collect();
        (DeviceBuffer::from_host(gpu, &v).expect("upload"), exact)
    }
    match d {
        DType::F32 => {
            let (b, e) = go::<f32>(gpu, x);
            (AnyBuffer::F32(b), e)
        }
        DType::F16 => {
            let (b, e) = go::<f16>(gpu, x);
            (AnyBuffer::F16(b), e)
        }
        DType::Bf16 => {
            let (b, e) = go::<bf16>(gpu, x);
            (AnyBuffer::Bf16(b), e)
        }
        DType::F8E4m3 => panic!("upload_as takes a float dtype"),
    }
}

/// A device buffer of any float dtype.
pub enum AnyBuffer {
    /// f32 elements.
    F32(DeviceBuffer<f32>),
    /// f16 elements.
    F16(DeviceBuffer<f16>),
    /// bf16 elements.
    Bf16(DeviceBuffer<bf16>),
}

impl AnyBuffer {
    /// A zeroed buffer of `len` elements of `d`, poisoned with 0xff bytes (NaN in every
    /// float dtype) so unwritten elements show.
    pub fn poisoned(gpu: &Arc<Gpu>, len: usize, d: DType) -> Self {
        let mut b = match d {
            DType::F32 => AnyBuffer::F32(DeviceBuffer::zeros(gpu, len).unwrap()),
            DType::F16 => AnyBuffer::F16(DeviceBuffer::zeros(gpu, len).unwrap()),
            DType::Bf16 => AnyBuffer::Bf16(DeviceBuffer::zeros(gpu, len).unwrap()),
            DType::F8E4m3 => panic!("float dtypes only"),
        };
        match &mut b {
            AnyBuffer::F32(x) => x.fill_bytes(0xff).unwrap(),
            AnyBuffer::F16(x) => x.fill_bytes(0xff).unwrap(),
            AnyBuffer::Bf16(x) => x.fill_bytes(0xff).unwrap(),
        }
        b
    }

    /// A read-only tensor view `[rows, cols]`.
    pub fn tensor(&self, shape: [usize; 2]) -> Tensor<'_> {
        match self {
            AnyBuffer::F32(x) => x.tensor(shape),
            AnyBuffer::F16(x) => x.tensor(shape),
            AnyBuffer::Bf16(x) => x.tensor(shape),
        }
    }

    /// A writable tensor view `[rows, cols]`.
    pub fn tensor_mut(&mut self, shape: [usize; 2]) -> fp8_linear::TensorMut<'_> {
        match self {
            AnyBuffer::F32(x) => x.tensor_mut(shape),
            AnyBuffer::F16(x) => x.tensor_mut(shape),
            AnyBuffer::Bf16(x) => x.tensor_mut(shape),
        }
    }

    /// The contents as f32 (synchronizes).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            AnyBuffer::F32(x) => x.to_host().unwrap(),
            AnyBuffer::F16(x) => x.to_host().unwrap().iter().map(|v| v.to_f32()).collect(),
            AnyBuffer::Bf16(x) => x.to_host().unwrap().iter().map(|v| v.to_f32()).collect(),
        }
    }
}

/// Builds a kernel from its entry on `gpu` (device and config checked), processes the
/// weights.
pub fn build(
    gpu: &Arc<Gpu>,
    entry: &'static KernelEntry,
    cfg: &LayerConfig,
    w: &LayerWeights<'_>,
) -> Result<Box<dyn Fp8Kernel>, KernelError> {
    let target = Target::from_gpu(gpu.clone());
    let mut k = entry.build(&target.build_ctx(cfg, &KernelOptions::none()))?;
    k.process_weights(w)?;
    Ok(k)
}

/// Runs a processed kernel on host activations `x` `[m, k]` uploaded as the config's input
/// dtype; returns the output as f32 and the activations as the device held them.
pub fn run(
    gpu: &Arc<Gpu>,
    kernel: &mut dyn Fp8Kernel,
    cfg: &LayerConfig,
    x: &[f32],
    m: usize,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    run_with(gpu, cfg, x, m, |x, out| kernel.apply(x, out))
}

/// Like [`run`], for a layer: its `forward` (the plan's kernel for `m` rows).
pub fn run_linear(
    gpu: &Arc<Gpu>,
    layer: &mut fp8_linear::Linear,
    x: &[f32],
    m: usize,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    let cfg = *layer.config();
    run_with(gpu, &cfg, x, m, |x, out| layer.forward(x, out))
}

/// Uploads `x` `[m, k]` as the config's input dtype, calls `f` on it and a poisoned
/// `[m, n]` output, and returns the output as f32 and the activations as uploaded.
fn run_with(
    gpu: &Arc<Gpu>,
    cfg: &LayerConfig,
    x: &[f32],
    m: usize,
    f: impl FnOnce(&Tensor<'_>, &mut fp8_linear::TensorMut<'_>) -> Result<(), KernelError>,
) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
    let (xin, exact) = upload_as(gpu, x, cfg.input_dtype);
    let mut out = AnyBuffer::poisoned(gpu, m * cfg.n, cfg.output_dtype);
    f(&xin.tensor([m, cfg.k]), &mut out.tensor_mut([m, cfg.n]))?;
    Ok((out.to_f32(), exact))
}

/// The rows of an `[m, cols]` row-major matrix picked by `rows`, concatenated.
pub fn pick_rows<T: Copy>(v: &[T], cols: usize, rows: &[usize]) -> Vec<T> {
    rows.iter()
        .flat_map(|&r| v[r * cols..(r + 1) * cols].iter().copied())
        .collect()
}

/// The rows to check for an M-row output: all of them for small work, else a spread of
/// up to 12 (first, last, and evenly spaced), so the f64 reference stays fast.
pub fn check_rows(m: usize, n: usize, k: usize) -> Vec<usize> {
    if m * n * k <= 1 << 27 {
        return (0..m).collect();
    }
    let mut r: Vec<usize> = (0..12).map(|i| i * (m - 1) / 11).collect();
    r.dedup();
    r
}

/// f64 block-scaled reference on the chosen rows: activations quantized per 1x128 group
/// (`aq`, `as_` for all rows), weight `w` with block scales `ws`.
#[allow(clippy::too_many_arguments)]
pub fn block_reference_rows(
    aq: &[u8],
    as_: &[f32],
    w: &[u8],
    ws: &[f32],
    n: usize,
    k: usize,
    rows: &[usize],
) -> Vec<f64> {
    let kb = k.div_ceil(128);
    let a = pick_rows(aq, k, rows);
    let s = pick_rows(as_, kb, rows);
    reference::block_gemm_f64(&a, &s, w, ws, rows.len(), n, k, (128, 128))
}

/// Fails on any NaN (unwritten or poisoned output) and returns the relative Frobenius error.
pub fn rel_err(got: &[f32], want: &[f64], what: &str) -> f64 {
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("{what}: NaN at output index {i} (unwritten or poisoned element)");
    }
    reference::rel_frobenius(got, want)
}

/// The relative error of a full `[m, N]` output `got` against the f64 reference of
/// `entry`'s numerics on `host` with the activations `exact` (as the device held them); NaN
/// (an unwritten or poisoned element) is an error, not a number.
pub fn entry_rel_err(
    entry: &KernelEntry,
    host: &HostLayer,
    exact: &[f32],
    m: usize,
    got: &[f32],
) -> Result<f64, String> {
    if let Some(i) = first_nan(got) {
        return Err(format!("NaN at output index {i} (unwritten or poisoned)"));
    }
    let rows: Vec<usize> = (0..m).collect();
    let want =
        crate::layers::reference_rows(&entry.reference_config(&host.config), host, exact, m, &rows)
            .map_err(|e| format!("the CPU reference failed: {e}"))?;
    Ok(reference::rel_frobenius(got, &want))
}

/// A layer's tensors copied to the GPU: weights that already live on the device, as an
/// engine that loads checkpoints straight to the GPU hands them over.
pub struct DeviceLayer {
    config: LayerConfig,
    codes: DeviceBuffer<u8>,
    scales: DeviceBuffer<f32>,
    input_scale: Option<DeviceBuffer<f32>>,
    bias: Option<DeviceBuffer<f32>>,
}

impl DeviceLayer {
    /// Copies every tensor of `layer` to `gpu` (on its stream).
    pub fn upload(gpu: &Arc<Gpu>, layer: &HostLayer) -> Result<Self, runtime::CudaError> {
        Ok(DeviceLayer {
            config: layer.config,
            codes: DeviceBuffer::from_host(gpu, &layer.codes)?,
            scales: DeviceBuffer::from_host(gpu, &layer.scales)?,
            input_scale: layer
                .input_scale
                .map(|s| DeviceBuffer::from_host(gpu, &[s]))
                .transpose()?,
            bias: layer
                .bias
                .as_ref()
                .map(|b| DeviceBuffer::from_host(gpu, b))
                .transpose()?,
        })
    }

    /// Device views of the layer's tensors, as `process_weights` takes them.
    pub fn weights(&self) -> LayerWeights<'_> {
        let c = &self.config;
        let mut w = LayerWeights::new(
            self.codes.tensor([c.n, c.k]),
            self.scales.tensor(c.weight_scale_shape()),
        );
        if let Some(s) = &self.input_scale {
            w = w.with_input_scale(s.tensor([1, 1]));
        }
        if let Some(b) = &self.bias {
            w = w.with_bias(b.tensor([1, c.n]));
        }
        w
    }
}

/// The index of the first NaN (an unwritten, still poisoned element, or a real NaN).
pub fn first_nan(v: &[f32]) -> Option<usize> {
    v.iter().position(|x| x.is_nan())
}

/// Every CUDA entry of the built-in tables, each kernel once (in table order), by its widest
/// listing (a kernel listed for some rows and again for the rest runs every M it serves).
pub fn cuda_entries() -> Vec<&'static KernelEntry> {
    let mut v: Vec<&'static KernelEntry> = Vec::new();
    for t in fp8_linear::tables::BUILTIN.tables() {
        if t.platform != fp8_linear::Platform::Cuda {
            continue;
        }
        for e in t.kernels() {
            if !v.iter().any(|x| x.name == e.name) {
                v.push(e);
            }
        }
    }
    v
}
