//! A layer built for the caller's own CUDA context and stream does its work on that stream,
//! as a user crate (an engine that owns its context, like candle) needs:
//!
//! - cudarc's `CudaContext::new(0)` and `ctx.new_stream()` handed to
//!   `Target::from_cudarc`: the target's GPU handle holds exactly that context and stream;
//!   a block layer runs on buffers the caller made with cudarc on its stream, and after
//!   waiting for an event recorded on that stream alone (no device-wide synchronize), a copy
//!   on that stream reads the finished output.
//! - `Gpu::open(0)` then `gpu.fork_stream()`: every CUDA kernel that takes a block layer
//!   on this GPU runs `forward` while that stream is being captured into a CUDA graph. Work
//!   on any other stream would run at once and write the (poisoned) output; work on the
//!   captured stream only runs when the graph is launched. So the output must still be
//!   poisoned after the capture, and right after the graph ran.
//!
//! Skips without a GPU unless FP8_REQUIRE_CUDA=1.

use std::sync::Arc;

use fp8_linear::cuda::interop::cudarc::driver::{sys, CudaGraph, DevicePtr, DevicePtrMut};
use fp8_linear::cuda::interop::{CudaContext, CudaStream, Gpu};
use fp8_linear::{
    DType, DeviceMemory, KernelEntry, KernelOptions, LayerConfig, Linear, Options, Platform,
    Target, Tensor, TensorMut,
};
use fp8_linear_tests::check::{compare, Comparison, Tolerance};
use fp8_linear_tests::gpu::{entry_runs_on, gpu_or_skip, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{random_activations, reference_rows, HostLayer, WeightGen};
use fp8_linear_tests::skip::arch_skip;
use half::bf16;

/// A full output against the reference of `entry`'s numerics, with `entry`'s bounds (a NaN,
/// unwritten or poisoned, fails them).
fn check(
    entry: &KernelEntry,
    host: &HostLayer,
    exact: &[f32],
    m: usize,
    got: &[f32],
) -> Comparison {
    let rows: Vec<usize> = (0..m).collect();
    let want = reference_rows(&entry.reference_config(&host.config), host, exact, m, &rows)
        .unwrap_or_else(|e| panic!("the CPU reference failed: {e}"));
    compare(
        got,
        &want,
        host.config.n,
        Tolerance::for_kernel(entry, &host.config),
    )
}

#[test]
fn cudarc_context_and_stream_of_the_caller() {
    if gpu_or_skip("cudarc_context_and_stream_of_the_caller").is_none() {
        return;
    }
    // What the engine owns: a context (event tracking left on, as cudarc makes it) and a
    // stream of its own (non-blocking: no implicit order with the legacy default stream).
    let ctx = CudaContext::new(0).unwrap_or_else(|e| panic!("CudaContext::new(0): {e:?}"));
    let stream = ctx
        .new_stream()
        .unwrap_or_else(|e| panic!("new_stream: {e:?}"));
    let target = Target::from_cudarc(ctx.clone(), stream.clone()).unwrap_or_else(|e| panic!("{e}"));
    let gpu = target
        .gpu()
        .expect("a CUDA target has a GPU handle")
        .clone();
    assert!(
        Arc::ptr_eq(gpu.stream(), &stream),
        "the target's stream is the one passed"
    );
    assert!(Arc::ptr_eq(gpu.context(), &ctx));
    assert_eq!(gpu.raw_stream(), stream.cu_stream() as u64);

    let (m, n, k) = (33, 2112, 1536);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    if let Err(e) =
        fp8_linear::tables::BUILTIN.select(gpu.device(), &cfg, &Options::none().overrides)
    {
        arch_skip(
            "cudarc_context_and_stream_of_the_caller",
            &format!("no CUDA block kernel runs on this GPU: {e}"),
        );
        return;
    }
    let host = HostLayer::random(&cfg, WeightGen::Spread(5));
    let mut layer = Linear::new(&target, &cfg, &host.weights(), &Options::none())
        .unwrap_or_else(|e| panic!("{e}"));

    // The engine's buffers, made with cudarc on its stream; the output poisoned (NaN).
    let x = random_activations(m, k);
    let xh: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let exact: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    let xd = stream.clone_htod(&xh).unwrap_or_else(|e| panic!("{e:?}"));
    let mut yd = stream
        .clone_htod(&vec![bf16::from_bits(0xffff); m * n])
        .unwrap_or_else(|e| panic!("{e:?}"));
    let ordinal = ctx.ordinal() as u32;
    {
        let (xp, _x_read) = xd.device_ptr(&stream);
        let (yp, _y_write) = yd.device_ptr_mut(&stream);
        let xt = Tensor::device(
            DeviceMemory {
                ptr: xp,
                bytes: m * k * 2,
                ordinal,
            },
            DType::Bf16,
            [m, k],
        );
        let mut yt = TensorMut::device(
            DeviceMemory {
                ptr: yp,
                bytes: m * n * 2,
                ordinal,
            },
            DType::Bf16,
            [m, n],
        );
        layer
            .forward(&xt, &mut yt)
            .unwrap_or_else(|e| panic!("{}: {e}", layer.plan()));
    }
    // Wait for the caller's stream alone, then read with a copy on that stream.
    let done = stream
        .record_event(None)
        .unwrap_or_else(|e| panic!("{e:?}"));
    done.synchronize().unwrap_or_else(|e| panic!("{e:?}"));
    let y = stream.clone_dtoh(&yd).unwrap_or_else(|e| panic!("{e:?}"));
    stream.synchronize().unwrap_or_else(|e| panic!("{e:?}"));
    let got: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
    let entry = layer.entry_for(m).expect("the plan serves every M");
    let c = check(entry, &host, &exact, m, &got);
    eprintln!(
        "caller's cudarc context and stream: {} M={m} N={n} K={k}: {}",
        layer.plan(),
        c.summary()
    );
    c.assert_ok(entry.name);
}

/// Runs `forward` while `stream` is being captured (relaxed mode: other threads' work and
/// the legacy stream are left alone); the capture ends whatever happened.
fn capture(
    layer: &mut Linear,
    stream: &Arc<CudaStream>,
    x: &Tensor<'_>,
    y: &mut TensorMut<'_>,
) -> Result<CudaGraph, String> {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(|e| format!("begin_capture: {e:?}"))?;
    let r = layer.forward(x, y);
    let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    r.map_err(|e| format!("forward while the stream was captured: {e}"))?;
    graph
        .map_err(|e| format!("end_capture: {e:?}"))?
        .ok_or_else(|| "the capture recorded nothing: no work went to the stream".to_string())
}

#[test]
fn forked_stream_work_is_captured_on_that_stream() {
    if gpu_or_skip("forked_stream_work_is_captured_on_that_stream").is_none() {
        return;
    }
    let opened = Gpu::open(0).unwrap_or_else(|e| panic!("Gpu::open(0): {e}"));
    let gpu = opened
        .fork_stream()
        .unwrap_or_else(|e| panic!("fork_stream: {e}"));
    assert!(Arc::ptr_eq(gpu.context(), opened.context()));
    assert!(!Arc::ptr_eq(gpu.stream(), opened.stream()));
    let target = Target::from_gpu(gpu.clone());
    assert!(Arc::ptr_eq(
        target.gpu().expect("GPU target").stream(),
        gpu.stream()
    ));
    let cap = gpu.capability();

    let (m, n, k) = (33, 2112, 1536);
    let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
    let host = HostLayer::random(&cfg, WeightGen::Spread(5));
    let x = random_activations(m, k);
    let (xin, exact) = upload_as(&gpu, &x, DType::Bf16);
    let table = fp8_linear::tables::BUILTIN
        .find(Platform::Cuda, cfg.family())
        .expect("a CUDA block table");
    let mut ran = Vec::new();
    let mut failures = Vec::new();
    for entry in table.entries {
        // A kernel of bounded rows (the decode kernel: M = 1) does not serve M = 33.
        if !entry_runs_on(entry, cap, true)
            || (entry.can_implement)(&cfg).is_err()
            || !entry.rows.contains(m)
        {
            continue;
        }
        let name = entry.name;
        let mut layer = match Linear::with_entry(
            entry,
            &target,
            &cfg,
            &host.weights(),
            &KernelOptions::none(),
        ) {
            Ok(l) => l,
            Err(e) => {
                failures.push(format!("{name}: build failed: {e}"));
                continue;
            }
        };
        // A first call outside the capture: modules loaded, scratch and plans made.
        let mut y = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
        if let Err(e) = layer.forward(&xin.tensor([m, k]), &mut y.tensor_mut([m, n])) {
            failures.push(format!("{name}: forward failed: {e}"));
            continue;
        }
        let c = check(entry, &host, &exact, m, &y.to_f32());
        if !c.ok() {
            failures.push(format!("{name} before the capture: {}", c.summary()));
            continue;
        }
        // The captured call: nothing may reach the output until the graph runs.
        let mut y = AnyBuffer::poisoned(&gpu, m * n, DType::Bf16);
        gpu.synchronize().unwrap_or_else(|e| panic!("{e}"));
        let graph = match capture(
            &mut layer,
            gpu.stream(),
            &xin.tensor([m, k]),
            &mut y.tensor_mut([m, n]),
        ) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        // Everything on the device that was queued before is done; the captured work has
        // not run.
        opened
            .context()
            .synchronize()
            .unwrap_or_else(|e| panic!("{e:?}"));
        let before = y.to_f32();
        let written = before.iter().filter(|v| !v.is_nan()).count();
        if written > 0 {
            failures.push(format!(
                "{name}: {written} of {} output elements written outside the captured stream",
                m * n
            ));
            continue;
        }
        if let Err(e) = graph.launch() {
            failures.push(format!("{name}: graph launch: {e:?}"));
            continue;
        }
        gpu.synchronize().unwrap_or_else(|e| panic!("{e}"));
        let c = check(entry, &host, &exact, m, &y.to_f32());
        eprintln!(
            "{name:<18} forward captured on the forked stream, replayed: {}",
            c.summary()
        );
        if c.ok() {
            ran.push(name);
        } else {
            failures.push(format!("{name} after the graph ran: {}", c.summary()));
        }
    }
    eprintln!("captured on the caller's stream: {}", ran.join(", "));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if ran.is_empty() {
        arch_skip(
            "forked_stream_work_is_captured_on_that_stream",
            &format!("no CUDA block kernel runs on this GPU ({cap})"),
        );
    }
}
