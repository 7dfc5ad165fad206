//! CUDA graphs: a layer's `forward` can be captured into a graph on the caller's stream and
//! replayed, once the layer has been prepared (`Linear::prepare(max_m)`) or has run at that
//! M outside the capture.
//!
//! - Every CUDA kernel of the built-in tables that runs on this GPU (natively, or forced
//!   through its `force_arch`), on every layer kind of a small list that it accepts (128x128
//!   blocks, per-tensor static and dynamic, per-token x per-channel; bf16 in and out), is
//!   prepared for M up to 40 and its `forward` captured, at M = 1, 5 and 33, on a stream of
//!   its own (`gpu.fork_stream()`), in thread-local capture mode (any allocation,
//!   synchronization or other call a graph cannot record, made from this thread, fails the
//!   capture). Nothing may reach the (poisoned) output before the graph is launched. The
//!   graph is then replayed three times with new activations written into the same input
//!   buffer, each output (poisoned before) checked against the f64 reference of the
//!   kernel's numerics.
//! - A layer that was neither prepared nor run refuses a captured call with the typed
//!   `KernelError::NotPrepared` (kernel and M named), leaves the capture valid (it ends
//!   without error), and works afterwards: eagerly, then captured at the same M.
//! - Without a GPU: `prepare` of a CPU layer does nothing and succeeds.
//!
//! The GPU tests skip without a GPU unless FP8_REQUIRE_CUDA=1.

use std::sync::Arc;

use fp8_linear::cuda::interop::cudarc::driver::{sys, CudaGraph, CudaStream};
use fp8_linear::cuda::interop::Gpu;
use fp8_linear::{
    Capability, DType, KernelEntry, KernelError, KernelOptions, LayerConfig, Linear, Options,
    QuantKey, Target, Tensor, TensorMut,
};
use fp8_linear_tests::gpu::{cuda_entries, entry_rel_err, gpu_or_skip, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{random_activations, reference_rows, HostLayer, WeightGen};
use half::bf16;

/// N not a multiple of 128 (masked tiles), K of 12 blocks (split-K at small M).
const N: usize = 528;
const K: usize = 1536;
/// The layers are prepared for M up to this.
const MAX_M: usize = 40;
/// The captured M: one row, a row count cuBLASLt's block mode pads (to 8), a tile and a bit.
const CAPTURED_M: [usize; 3] = [1, 5, 33];
const REPLAYS: usize = 3;

/// The layer kinds, bf16 in and out.
fn layer_kinds() -> Vec<(&'static str, LayerConfig)> {
    let (n, k, d) = (N, K, DType::Bf16);
    vec![
        ("block 128x128", LayerConfig::block_128(n, k, d, d)),
        (
            "per-tensor static",
            LayerConfig::per_tensor_static(n, k, d, d),
        ),
        (
            "per-tensor dynamic",
            LayerConfig {
                activation: Some(QuantKey::ACT_PER_TENSOR_DYNAMIC),
                ..LayerConfig::per_tensor_static(n, k, d, d)
            },
        ),
        (
            "per-token x per-channel",
            LayerConfig::per_token_per_channel(n, k, d, d),
        ),
    ]
}

/// Every CUDA entry of the built-in tables that runs on a GPU of capability `cap`
/// (natively or forced), each kernel once, in table order.
fn runnable_entries(cap: Capability) -> Vec<&'static KernelEntry> {
    cuda_entries()
        .into_iter()
        .filter(|e| e.arch.matches(Some(cap)) || e.force_arch.is_some_and(|a| a.matches(Some(cap))))
        .collect()
}

/// Captures `forward` on `stream` in thread-local mode; the capture ends whatever happened.
/// Returns the forward's result and the capture's.
fn capture(
    layer: &mut Linear,
    stream: &Arc<CudaStream>,
    x: &Tensor<'_>,
    y: &mut TensorMut<'_>,
) -> (Result<(), KernelError>, Result<Option<CudaGraph>, String>) {
    if let Err(e) =
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    {
        return (Ok(()), Err(format!("begin_capture: {e:?}")));
    }
    let r = layer.forward(x, y);
    let g = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(|e| format!("end_capture (the capture was invalidated?): {e:?}"));
    (r, g)
}

/// Writes `x` (as bf16) into the start of the bf16 device buffer `buf`, on its stream;
/// returns the values as the device holds them.
fn write_bf16(buf: &mut AnyBuffer, x: &[f32]) -> Vec<f32> {
    let AnyBuffer::Bf16(b) = buf else {
        panic!("a bf16 buffer")
    };
    let v: Vec<bf16> = x.iter().map(|&f| bf16::from_f32(f)).collect();
    b.upload(&v).unwrap_or_else(|e| panic!("upload: {e}"));
    v.iter().map(|e| e.to_f32()).collect()
}

/// Fills a device buffer with 0xff bytes (NaN in every float dtype).
fn poison(buf: &mut AnyBuffer) {
    let r = match buf {
        AnyBuffer::F32(b) => b.fill_bytes(0xff),
        AnyBuffer::F16(b) => b.fill_bytes(0xff),
        AnyBuffer::Bf16(b) => b.fill_bytes(0xff),
    };
    r.unwrap_or_else(|e| panic!("poison: {e}"));
}

/// Bf16 output throughout: the bar of the GPU matrix for bf16 output.
const TOLERANCE: f64 = 1e-2;

/// One prepared layer: every captured M, replayed with new inputs.
fn replay_prepared(
    gpu: &Arc<Gpu>,
    entry: &'static KernelEntry,
    kind: &str,
    cfg: &LayerConfig,
) -> Result<(), String> {
    let target = Target::from_gpu(gpu.clone());
    let host = HostLayer::random(cfg, WeightGen::Spread(4));
    let mut layer =
        Linear::with_entry(entry, &target, cfg, &host.weights(), &KernelOptions::none())
            .map_err(|e| format!("build: {e}"))?;
    layer
        .prepare(MAX_M)
        .map_err(|e| format!("prepare({MAX_M}): {e}"))?;
    // The M the kernel serves (the decode kernel: M = 1).
    for m in CAPTURED_M.into_iter().filter(|&m| entry.rows.contains(m)) {
        // The buffers the graph will address, made before the capture.
        let (mut xin, _) = upload_as(gpu, &random_activations(m, K), DType::Bf16);
        let mut y = AnyBuffer::poisoned(gpu, m * N, DType::Bf16);
        gpu.synchronize().map_err(|e| e.to_string())?;
        let (r, g) = capture(
            &mut layer,
            gpu.stream(),
            &xin.tensor([m, K]),
            &mut y.tensor_mut([m, N]),
        );
        r.map_err(|e| format!("M={m}: forward while capturing: {e}"))?;
        let graph = g
            .map_err(|e| format!("M={m}: {e}"))?
            .ok_or_else(|| format!("M={m}: the capture recorded nothing"))?;
        gpu.context().synchronize().map_err(|e| format!("{e:?}"))?;
        let written = y.to_f32().iter().filter(|v| !v.is_nan()).count();
        if written > 0 {
            return Err(format!(
                "M={m}: {written} output elements written before the graph was launched"
            ));
        }
        for replay in 0..REPLAYS {
            let exact = write_bf16(&mut xin, &random_activations(m, K));
            poison(&mut y);
            graph
                .launch()
                .map_err(|e| format!("M={m} replay {replay}: launch: {e:?}"))?;
            gpu.synchronize().map_err(|e| e.to_string())?;
            let err = entry_rel_err(entry, &host, &exact, m, &y.to_f32())
                .map_err(|e| format!("M={m} replay {replay}: {e}"))?;
            eprintln!(
                "{:<20} {kind:<24} M={m:<3} replay {replay}: rel err {err:.2e}",
                entry.name
            );
            if err >= TOLERANCE {
                return Err(format!("M={m} replay {replay}: rel err {err:.3e}"));
            }
        }
    }
    Ok(())
}

#[test]
fn every_cuda_kernel_replays_a_captured_forward_with_new_inputs() {
    let Some(base) = gpu_or_skip("every_cuda_kernel_replays_a_captured_forward_with_new_inputs")
    else {
        return;
    };
    let gpu = base
        .fork_stream()
        .unwrap_or_else(|e| panic!("fork_stream: {e}"));
    let entries = runnable_entries(gpu.capability());
    let mut failures = Vec::new();
    for entry in &entries {
        let mut kinds = 0;
        for (kind, cfg) in layer_kinds() {
            if (entry.can_implement)(&cfg).is_err() {
                continue;
            }
            kinds += 1;
            if let Err(e) = replay_prepared(&gpu, entry, kind, &cfg) {
                failures.push(format!("{} ({kind}): {e}", entry.name));
            }
        }
        if kinds == 0 {
            failures.push(format!("{}: no layer kind of the list fits it", entry.name));
        }
    }
    eprintln!(
        "captured and replayed: {}",
        entries
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(!entries.is_empty(), "no CUDA kernel runs on this GPU");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A fresh layer refuses a captured call, then works eagerly and captured.
fn refuse_then_recover(
    gpu: &Arc<Gpu>,
    entry: &'static KernelEntry,
    cfg: &LayerConfig,
) -> Result<(), String> {
    let m = 1;
    let target = Target::from_gpu(gpu.clone());
    let host = HostLayer::random(cfg, WeightGen::Spread(4));
    let mut layer =
        Linear::with_entry(entry, &target, cfg, &host.weights(), &KernelOptions::none())
            .map_err(|e| format!("build: {e}"))?;
    let (mut xin, exact) = upload_as(gpu, &random_activations(m, K), DType::Bf16);
    let mut y = AnyBuffer::poisoned(gpu, m * N, DType::Bf16);
    gpu.synchronize().map_err(|e| e.to_string())?;

    // Every kernel's first call needs scratch (activation codes, or for Marlin at M = 1 the
    // split-K workspace: 9 column stripes never fill a GPU, so K is split).
    let (r, g) = capture(
        &mut layer,
        gpu.stream(),
        &xin.tensor([m, K]),
        &mut y.tensor_mut([m, N]),
    );
    match &r {
        Err(
            e @ KernelError::NotPrepared {
                kernel, m: got_m, ..
            },
        ) if *kernel == entry.name && *got_m == m => {
            eprintln!("{:<20} unprepared capture refused: {e}", entry.name);
        }
        Err(e) => return Err(format!("expected KernelError::NotPrepared, got {e:?}")),
        Ok(()) => {
            return Err("a call needing scratch ran while its stream was captured".into());
        }
    }
    g.map_err(|e| format!("the refused call left a broken capture: {e}"))?;
    if gpu.is_capturing().map_err(|e| e.to_string())? {
        return Err("the stream is still capturing".into());
    }

    // Eagerly: allocates what it needs, gives the right numbers.
    layer
        .forward(&xin.tensor([m, K]), &mut y.tensor_mut([m, N]))
        .map_err(|e| format!("eager forward after the refusal: {e}"))?;
    let err = entry_rel_err(entry, &host, &exact, m, &y.to_f32())?;
    if err >= TOLERANCE {
        return Err(format!(
            "eager forward after the refusal: rel err {err:.3e}"
        ));
    }

    // It has run at this M: the same call is captured now, and the graph replays.
    poison(&mut y);
    gpu.synchronize().map_err(|e| e.to_string())?;
    let (r, g) = capture(
        &mut layer,
        gpu.stream(),
        &xin.tensor([m, K]),
        &mut y.tensor_mut([m, N]),
    );
    r.map_err(|e| format!("capture after an eager call at the same M: {e}"))?;
    let graph = g?.ok_or("the capture recorded nothing")?;
    let exact = write_bf16(&mut xin, &random_activations(m, K));
    graph.launch().map_err(|e| format!("launch: {e:?}"))?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    let err = entry_rel_err(entry, &host, &exact, m, &y.to_f32())?;
    if err >= TOLERANCE {
        return Err(format!("graph after an eager call: rel err {err:.3e}"));
    }
    Ok(())
}

#[test]
fn an_unprepared_capture_is_a_typed_error() {
    let Some(base) = gpu_or_skip("an_unprepared_capture_is_a_typed_error") else {
        return;
    };
    let gpu = base
        .fork_stream()
        .unwrap_or_else(|e| panic!("fork_stream: {e}"));
    let entries = runnable_entries(gpu.capability());
    let mut failures = Vec::new();
    for entry in &entries {
        let Some((kind, cfg)) = layer_kinds()
            .into_iter()
            .find(|(_, c)| (entry.can_implement)(c).is_ok())
        else {
            failures.push(format!("{}: no layer kind of the list fits it", entry.name));
            continue;
        };
        if let Err(e) = refuse_then_recover(&gpu, entry, &cfg) {
            failures.push(format!("{} ({kind}): {e}", entry.name));
        }
    }
    assert!(!entries.is_empty(), "no CUDA kernel runs on this GPU");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn preparing_a_cpu_layer_does_nothing() {
    let (n, k) = (256, 384);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let host = HostLayer::random(&cfg, WeightGen::Spread(3));
    let mut layer = Linear::new(&Target::cpu(), &cfg, &host.weights(), &Options::none())
        .unwrap_or_else(|e| panic!("{e}"));
    layer.prepare(4096).unwrap_or_else(|e| panic!("{e}"));
    let m = 3;
    let x = random_activations(m, k);
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let exact: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
    let mut y = vec![bf16::ZERO; m * n];
    layer
        .forward(
            &Tensor::bf16(&xb, [m, k]),
            &mut TensorMut::bf16(&mut y, [m, n]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
    let rows: Vec<usize> = (0..m).collect();
    let want = reference_rows(
        &layer
            .entry_for(m)
            .expect("the plan serves every M")
            .reference_config(&cfg),
        &host,
        &exact,
        m,
        &rows,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = fp8_linear::cpu::reference::rel_frobenius(&got, &want);
    assert!(err < TOLERANCE, "rel err {err}");
}
