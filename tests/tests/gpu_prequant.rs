//! Pre-quantized activations on the GPU: for every CUDA entry of the built-in tables that
//! takes a layer and runs on this GPU, `Linear::forward_quantized` on the codes and scales
//! of the GPU `ActivationQuantizer` equals `forward` on the same input bit for bit (outputs
//! poisoned first), at M = 1, 3, 64 and 200 (those the entry serves), on block layers
//! (128x128 f32 and ue8m0, 64x64, 128x32 blocks), per-tensor static and dynamic and
//! per-token layers, K a multiple of 16 (the given codes read in place) and ragged (copied
//! into the layer's padded scratch), given buffers aligned and not (copied). The GPU
//! quantizer's codes and scales equal the CPU quantizer's bit for bit, and so do the fused
//! SiLU-and-multiply's, on awkward gates (large |g| of both signs, zeros, infinities, NaN,
//! subnormals). Kernels that read unquantized activations (Marlin, W8A16) and the decode
//! kernel (which quantizes inside its GEMM) refuse with `KernelError::PreQuantized`.
//! `silu_mul` then `forward_quantized`, prepared, capture into a CUDA graph (thread-local
//! mode: any allocation or synchronization fails it) whose replay equals the eager calls.
//! Skips without a GPU unless FP8_REQUIRE_CUDA=1.

use std::sync::Arc;

use fp8_linear::cuda::runtime::{DeviceBuffer, Gpu};
use fp8_linear::{
    ActivationQuantizer, DType, DeviceMemory, GroupShape, KernelError, KernelOptions, LayerConfig,
    Linear, ScaleDtype, Target, Tensor, TensorMut,
};
use fp8_linear_tests::gpu::{cuda_entries, gpu_or_skip, upload_as, AnyBuffer, DeviceLayer};
use fp8_linear_tests::layers::{
    block_config, nasty_activations, random_activations, HostLayer, WeightGen, AWKWARD_GATES,
};

const MS: [usize; 4] = [1, 3, 64, 200];

fn block(n: usize, k: usize, blk: (u32, u32), ue8m0: bool, io: DType) -> LayerConfig {
    let fmt = if ue8m0 {
        ScaleDtype::Ue8m0
    } else {
        ScaleDtype::F32
    };
    block_config(blk, (fmt, fmt), (n, k), (io, io))
}

/// The layers: (name, config). K = 7168 and 256 are multiples of 16, 300 and 1000 are not.
fn layers() -> Vec<(String, LayerConfig)> {
    let mut v = Vec::new();
    for (n, k) in [(256, 7168), (384, 300), (512, 1000)] {
        for io in [DType::Bf16, DType::F16] {
            v.push((
                format!("block128 {n}x{k} {io}"),
                block(n, k, (128, 128), false, io),
            ));
        }
        v.push((
            format!("block128 ue8m0 {n}x{k}"),
            block(n, k, (128, 128), true, DType::Bf16),
        ));
    }
    v.push((
        "block64x64".into(),
        block(256, 512, (64, 64), false, DType::Bf16),
    ));
    v.push((
        "block128x32 f32".into(),
        block(256, 300, (128, 32), false, DType::F32),
    ));
    for (n, k) in [(256, 512), (384, 304)] {
        let st = LayerConfig::per_tensor_static(n, k, DType::Bf16, DType::Bf16);
        v.push((format!("per tensor static {n}x{k}"), st));
        let mut dy = st;
        dy.activation.as_mut().unwrap().dynamic = true;
        v.push((format!("per tensor dynamic {n}x{k}"), dy));
        let tok = LayerConfig::per_token_per_channel(n, k, DType::Bf16, DType::Bf16);
        v.push((format!("per token {n}x{k}"), tok));
        let mut tw = tok;
        tw.weight.group = GroupShape::PerTensor;
        v.push((format!("per token, tensor weight {n}x{k}"), tw));
    }
    v
}

/// Whether two calls of kernel `name` gave the same output: bit for bit, except the portable
/// kernel, which adds its own K splits (it takes no split cap) with atomics, so two calls of
/// it agree to the summation order only: 1e-5 of the largest output in f32, and then one unit
/// in the last place of a 16-bit output, where the two sums may round to neighbours. The
/// error names the first difference, the largest one and the largest finite output.
fn same_result(name: &str, dtype: DType, a: &[f32], b: &[f32]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} against {} outputs", a.len(), b.len()));
    }
    if bits(a) == bits(b) {
        return Ok(());
    }
    // (Over the finite outputs: a 16-bit output may overflow to the same infinity in both.)
    let top = a
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |t, v| t.max(v.abs()));
    let ulp = match dtype {
        DType::Bf16 => 2f32.powi(-7),
        DType::F16 => 2f32.powi(-10),
        _ => 0.0,
    };
    let close = |p: f32, q: f32| {
        p.to_bits() == q.to_bits() || (p - q).abs() <= 1e-5 * top + ulp * p.abs().max(q.abs())
    };
    if name == "PortableBlockFp8" && a.iter().zip(b).all(|(&p, &q)| close(p, q)) {
        return Ok(());
    }
    let first = a
        .iter()
        .zip(b)
        .position(|(p, q)| p.to_bits() != q.to_bits());
    let worst = a
        .iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max);
    Err(format!(
        "first difference at {first:?}, largest {worst:e}, largest finite output {top:e}"
    ))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The bits of `v` with every NaN as the canonical quiet NaN (a NaN scale's payload is not
/// part of the contract: the GPU's division gives 0x7fffffff where the CPU's gives
/// 0x7fc00000).
fn bits_nan_canonical(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| {
            if x.is_nan() {
                f32::NAN.to_bits()
            } else {
                x.to_bits()
            }
        })
        .collect()
}

/// Build options for the bit-for-bit comparisons: no K splits where the kernel takes a cap
/// (the portable kernel plans its own splits and sums them with atomics: compared to the
/// summation order instead).
fn unsplit() -> KernelOptions {
    KernelOptions::none().max_splits(1)
}

/// Device buffers for a quantizer's output, poisoned (codes 0x7f: NaN; scales NaN), with
/// `offset` bytes of slack in front of each so that the views can start unaligned.
struct QuantOut {
    codes: DeviceBuffer<u8>,
    scales: DeviceBuffer<f32>,
    shape: [usize; 2],
    m: usize,
    k: usize,
}

impl QuantOut {
    const SLACK: usize = 64;

    fn new(gpu: &Arc<Gpu>, c: &LayerConfig, m: usize) -> Self {
        let shape = fp8_linear::validate::activation_scale_shape(c, m).unwrap();
        let mut codes = DeviceBuffer::<u8>::zeros(gpu, m * c.k + Self::SLACK).unwrap();
        codes.fill_bytes(0x7f).unwrap();
        let mut scales =
            DeviceBuffer::<f32>::zeros(gpu, shape[0] * shape[1] + Self::SLACK / 4).unwrap();
        scales.fill_bytes(0xff).unwrap();
        QuantOut {
            codes,
            scales,
            shape,
            m,
            k: c.k,
        }
    }

    /// The device memory of a buffer from byte `offset` on.
    fn at(mem: DeviceMemory, offset: usize) -> DeviceMemory {
        DeviceMemory {
            ptr: mem.ptr + offset as u64,
            bytes: mem.bytes - offset,
            ..mem
        }
    }

    fn views(&self, offset: usize) -> (Tensor<'_>, Tensor<'_>) {
        let q = Tensor::device(
            Self::at(self.codes.memory(), offset),
            DType::F8E4m3,
            [self.m, self.k],
        );
        let s = Tensor::device(
            Self::at(self.scales.memory(), offset),
            DType::F32,
            self.shape,
        );
        (q, s)
    }

    fn views_mut(&mut self, offset: usize) -> (TensorMut<'_>, TensorMut<'_>) {
        let q = TensorMut::device(
            Self::at(self.codes.memory(), offset),
            DType::F8E4m3,
            [self.m, self.k],
        );
        let s = TensorMut::device(
            Self::at(self.scales.memory(), offset),
            DType::F32,
            self.shape,
        );
        (q, s)
    }

    /// The codes and scales from `offset` (synchronizes).
    fn host(&self, offset: usize) -> (Vec<u8>, Vec<f32>) {
        let q = self.codes.to_host().unwrap();
        let s = self.scales.to_host().unwrap();
        let ns = self.shape[0] * self.shape[1];
        (
            q[offset..offset + self.m * self.k].to_vec(),
            s[offset / 4..offset / 4 + ns].to_vec(),
        )
    }
}

/// The CPU quantizer's codes and scales of `x` (as the device holds it, f32) for `c`
/// (the input dtype taken as f32: the values are exact).
fn cpu_quantize(
    c: &LayerConfig,
    layer: &HostLayer,
    x: &[f32],
    m: usize,
    gated: bool,
) -> (Vec<u8>, Vec<f32>) {
    let c32 = LayerConfig {
        input_dtype: DType::F32,
        ..*c
    };
    let mut q = ActivationQuantizer::new(&Target::cpu(), &c32, &layer.weights()).unwrap();
    let shape = fp8_linear::validate::activation_scale_shape(c, m).unwrap();
    let (mut codes, mut scales) = (vec![0u8; m * c.k], vec![0f32; shape[0] * shape[1]]);
    let cols = if gated { 2 * c.k } else { c.k };
    let (qt, st) = (
        &mut TensorMut::fp8(&mut codes, [m, c.k]),
        &mut TensorMut::f32(&mut scales, shape),
    );
    if gated {
        q.silu_mul(&Tensor::f32(x, [m, cols]), qt, st).unwrap();
    } else {
        q.quantize(&Tensor::f32(x, [m, cols]), qt, st).unwrap();
    }
    (codes, scales)
}

#[test]
fn forward_quantized_equals_forward_on_every_gpu_kernel() {
    let Some(gpu) = gpu_or_skip("forward_quantized_equals_forward_on_every_gpu_kernel") else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let cap = gpu.capability();
    let mut ran: Vec<&str> = Vec::new();
    let mut failures = Vec::new();
    for (name, c) in layers() {
        let host = HostLayer::random(&c, WeightGen::Spread(4));
        let dev = DeviceLayer::upload(&gpu, &host).unwrap();
        let w = dev.weights();
        let mut quant = ActivationQuantizer::new(&target, &c, &w).unwrap();
        for entry in cuda_entries() {
            if !entry.arch.matches(Some(cap)) || (entry.can_implement)(&c).is_err() {
                continue;
            }
            let mut l = match Linear::with_entry(entry, &target, &c, &w, &unsplit()) {
                Ok(l) => l,
                Err(e) => panic!("{} on {name}: {e}", entry.name),
            };
            let served: Vec<usize> = MS
                .into_iter()
                .filter(|&m| l.entry_for(m).is_some())
                .collect();
            for m in served {
                let x = if m == 3 {
                    nasty_activations(m, c.k)
                } else {
                    random_activations(m, c.k)
                };
                let (xin, exact) = upload_as(&gpu, &x, c.input_dtype);
                let mut qo = QuantOut::new(&gpu, &c, m);
                // Aligned views, and views 16 bytes in (not 256-aligned: copied).
                for offset in [0usize, 16] {
                    let what = format!("{} {name} M={m} offset {offset}", entry.name);
                    {
                        let (mut qt, mut st) = qo.views_mut(offset);
                        quant
                            .quantize(&xin.tensor([m, c.k]), &mut qt, &mut st)
                            .unwrap();
                    }
                    let (codes, scales) = qo.host(offset);
                    let want = cpu_quantize(&c, &host, &exact, m, false);
                    if codes != want.0 || bits(&scales) != bits(&want.1) {
                        failures.push(format!("{what}: GPU quantizer != CPU quantizer"));
                        continue;
                    }
                    let mut y0 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
                    let mut y1 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
                    l.forward(&xin.tensor([m, c.k]), &mut y0.tensor_mut([m, c.n]))
                        .unwrap();
                    let (qt, st) = qo.views(offset);
                    match l.forward_quantized(&qt, &st, &mut y1.tensor_mut([m, c.n])) {
                        Ok(()) => {}
                        Err(KernelError::PreQuantized { kernel, reason }) => {
                            let expected = ["MarlinFp8", "DecodeBlockFp8"];
                            assert!(expected.contains(&kernel), "{what}: {kernel}: {reason}");
                            eprintln!("{what}: refused as expected: {reason}");
                            continue;
                        }
                        Err(e) => panic!("{what}: {e}"),
                    }
                    let (a, b) = (y0.to_f32(), y1.to_f32());
                    if let Err(e) = same_result(entry.name, c.output_dtype, &a, &b) {
                        failures.push(format!("{what}: {e}"));
                    } else if bits(&a) != bits(&b) {
                        eprintln!("{what}: equal to the summation order (atomic K splits)");
                    } else {
                        eprintln!("{what}: equal");
                        if !ran.contains(&entry.name) {
                            ran.push(entry.name);
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("kernels checked: {ran:?}");
    assert!(
        !ran.is_empty(),
        "no CUDA kernel ran a pre-quantized call on {cap}"
    );
}

#[test]
fn silu_mul_on_the_gpu_equals_the_cpu_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("silu_mul_on_the_gpu_equals_the_cpu_bit_for_bit") else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    for (name, c) in layers() {
        let host = HostLayer::random(&c, WeightGen::Spread(4));
        let w = host.weights();
        let mut quant = ActivationQuantizer::new(&target, &c, &w).unwrap();
        for m in MS {
            let mut gu = random_activations(m, 2 * c.k);
            for (i, g) in AWKWARD_GATES.iter().enumerate() {
                // NaN only in a group of its own for the per-tensor keys' sake: one row.
                if !g.is_nan() || m > 1 {
                    gu[(i * 37) % c.k] = *g;
                }
            }
            // A dense sweep of gates in the last row: -120..120.
            let last = (m - 1) * 2 * c.k;
            for j in 0..c.k {
                gu[last + j] = -120.0 + 240.0 * j as f32 / c.k as f32;
            }
            let (xin, exact) = upload_as(&gpu, &gu, c.input_dtype);
            let mut qo = QuantOut::new(&gpu, &c, m);
            {
                let (mut qt, mut st) = qo.views_mut(0);
                quant
                    .silu_mul(&xin.tensor([m, 2 * c.k]), &mut qt, &mut st)
                    .unwrap();
            }
            let (codes, scales) = qo.host(0);
            let want = cpu_quantize(&c, &host, &exact, m, true);
            assert_eq!(
                bits_nan_canonical(&scales),
                bits_nan_canonical(&want.1),
                "{name} M={m}: scales"
            );
            let [sr, sc] = fp8_linear::validate::activation_scale_shape(&c, m).unwrap();
            let span = match c.activation.map(|a| a.group) {
                Some(GroupShape::Group { cols }) => cols as usize,
                _ => c.k,
            };
            for (e, (&got, &want_code)) in codes.iter().zip(&want.0).enumerate() {
                let (r, col) = (e / c.k, e % c.k);
                let s = want.1[(r % sr) * sc + col / span];
                // Known difference of the existing quantizer (see quant_host_model.rs): a
                // group whose absmax is infinite gets NaN codes on the GPU, zeros on the CPU.
                if !s.is_infinite() {
                    assert_eq!(got, want_code, "{name} M={m}: code [{r}, {col}]");
                }
            }
        }
    }
}

/// Captures `f` on `gpu`'s stream in thread-local mode (any allocation or synchronization
/// from this thread fails the capture); the capture ends whatever happened.
fn capture(
    gpu: &Arc<Gpu>,
    f: impl FnOnce() -> Result<(), KernelError>,
) -> Result<fp8_linear::cuda::interop::cudarc::driver::CudaGraph, String> {
    use fp8_linear::cuda::interop::cudarc::driver::sys;
    let stream = gpu.stream();
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| format!("begin_capture: {e:?}"))?;
    let r = f();
    let g = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(|e| format!("end_capture (the capture was invalidated?): {e:?}"));
    r.map_err(|e| format!("while capturing: {e}"))?;
    g?.ok_or_else(|| "the capture recorded nothing".into())
}

/// The MLP's tail as an engine captures it: `silu_mul` into given buffers, then
/// `forward_quantized`, prepared for M up to 64 and captured at M = 3 and 33 on a stream of
/// its own, for every CUDA entry that takes pre-quantized calls; the replayed graph's output
/// equals the eager calls' bit for bit. K = 7168 reads the given codes in place, K = 300
/// copies them into the layer's padded scratch.
#[test]
fn silu_mul_and_forward_quantized_capture_into_a_graph() {
    let Some(base) = gpu_or_skip("silu_mul_and_forward_quantized_capture_into_a_graph") else {
        return;
    };
    let gpu = base.fork_stream().unwrap();
    let target = Target::from_gpu(gpu.clone());
    let cap = gpu.capability();
    let kinds = [
        block(256, 7168, (128, 128), false, DType::Bf16),
        block(384, 300, (128, 128), false, DType::Bf16),
        LayerConfig::per_tensor_static(256, 512, DType::Bf16, DType::Bf16),
        LayerConfig::per_token_per_channel(256, 512, DType::Bf16, DType::Bf16),
    ];
    let mut captured = Vec::new();
    for c in kinds {
        let host = HostLayer::random(&c, WeightGen::Spread(4));
        let w = host.weights();
        for entry in cuda_entries() {
            if !entry.arch.matches(Some(cap)) || (entry.can_implement)(&c).is_err() {
                continue;
            }
            let mut l = Linear::with_entry(entry, &target, &c, &w, &unsplit()).unwrap();
            let mut quant = ActivationQuantizer::new(&target, &c, &w).unwrap();
            l.prepare(64).unwrap();
            quant.prepare(64).unwrap();
            let served: Vec<usize> = [3usize, 33]
                .into_iter()
                .filter(|&m| l.entry_for(m).is_some())
                .collect();
            for m in served {
                let what = format!("{} {c} M={m}", entry.name);
                let (xin, _) = upload_as(&gpu, &random_activations(m, 2 * c.k), c.input_dtype);
                let mut qo = QuantOut::new(&gpu, &c, m);
                let mut y0 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
                let mut y1 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
                let mut step = |y: &mut AnyBuffer| -> Result<(), KernelError> {
                    {
                        let (mut qt, mut st) = qo.views_mut(0);
                        quant.silu_mul(&xin.tensor([m, 2 * c.k]), &mut qt, &mut st)?;
                    }
                    let (qt, st) = qo.views(0);
                    l.forward_quantized(&qt, &st, &mut y.tensor_mut([m, c.n]))
                };
                match step(&mut y0) {
                    Ok(()) => {}
                    Err(KernelError::PreQuantized { kernel, .. }) => {
                        assert!(["MarlinFp8", "DecodeBlockFp8"].contains(&kernel), "{what}");
                        continue;
                    }
                    Err(e) => panic!("{what}: eager: {e}"),
                }
                gpu.synchronize().unwrap();
                let graph =
                    capture(&gpu, || step(&mut y1)).unwrap_or_else(|e| panic!("{what}: {e}"));
                gpu.synchronize().unwrap();
                assert!(
                    y1.to_f32().iter().all(|v| v.is_nan()),
                    "{what}: output written before the graph was launched"
                );
                graph.launch().unwrap();
                gpu.synchronize().unwrap();
                if let Err(e) = same_result(entry.name, c.output_dtype, &y0.to_f32(), &y1.to_f32())
                {
                    panic!("{what}: replay != eager: {e}");
                }
                eprintln!("{what}: captured, replayed, equal to the eager calls");
                captured.push(entry.name);
            }
        }
    }
    assert!(
        !captured.is_empty(),
        "no CUDA kernel captured a pre-quantized call on {cap}"
    );
}

/// A plan whose first kernel has no path for given codes (on an H200 with the Hopper kernel
/// disabled: the decode kernel at M = 1, then cuBLASLt block) serves `forward_quantized` at
/// every M: where the planned kernel refuses, the plan's next kernel for those rows runs the
/// call, so the output equals `forward` of the same layer planned without the decode
/// kernel, bit for bit.
#[test]
fn the_default_plan_serves_pre_quantized_calls_at_every_m() {
    use fp8_linear::{Options, Overrides};
    let Some(gpu) = gpu_or_skip("the_default_plan_serves_pre_quantized_calls_at_every_m") else {
        return;
    };
    let target = Target::from_gpu(gpu.clone());
    let c = block(512, 1024, (128, 128), false, DType::Bf16);
    let host = HostLayer::random(&c, WeightGen::Spread(4));
    let dev = DeviceLayer::upload(&gpu, &host).unwrap();
    let w = dev.weights();
    let no_hopper = Options {
        overrides: Overrides::none().disable("HopperBlockFp8"),
        kernel: KernelOptions::none(),
    };
    let mut planned = Linear::new(&target, &c, &w, &no_hopper).unwrap();
    let without = Options {
        overrides: Overrides::none()
            .disable("HopperBlockFp8")
            .disable("DecodeBlockFp8"),
        kernel: KernelOptions::none(),
    };
    let mut plain = Linear::new(&target, &c, &w, &without).unwrap();
    let mut quant = ActivationQuantizer::new(&target, &c, &w).unwrap();
    eprintln!("plan: {}; without decode: {}", planned.plan(), plain.plan());
    for m in [1, 2, 16, 64, 200] {
        let what = format!("{c} M={m} ({})", planned.entry_for(m).unwrap().name);
        let (xin, _) = upload_as(&gpu, &random_activations(m, c.k), c.input_dtype);
        let mut qo = QuantOut::new(&gpu, &c, m);
        {
            let (mut qt, mut st) = qo.views_mut(0);
            quant
                .quantize(&xin.tensor([m, c.k]), &mut qt, &mut st)
                .unwrap();
        }
        let mut y0 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
        let mut y1 = AnyBuffer::poisoned(&gpu, m * c.n, c.output_dtype);
        plain
            .forward(&xin.tensor([m, c.k]), &mut y0.tensor_mut([m, c.n]))
            .unwrap();
        let (qt, st) = qo.views(0);
        planned
            .forward_quantized(&qt, &st, &mut y1.tensor_mut([m, c.n]))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            bits(&y1.to_f32()),
            bits(&y0.to_f32()),
            "{what}: differs from the plan without the decode kernel"
        );
        eprintln!("{what}: served, equal to the plan without the decode kernel");
    }
}
