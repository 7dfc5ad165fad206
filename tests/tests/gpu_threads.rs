//! Threads and streams.
//!
//! - `Linear` is `Send` (checked at compile time below): a layer can move to the thread
//!   that runs it. It is not `Sync`, and need not be: its kernel is a `Box<dyn Fp8Kernel>`
//!   (the trait asks for `Send` only) and every call that touches the kernel (`forward`,
//!   `prepare`) takes `&mut self`, so a `&Linear` can do nothing a second thread would want;
//!   share one layer between threads behind a `Mutex` (as `fp8-linear-candle` does). The GPU
//!   handle and `Target` are `Send + Sync`.
//! - GPU: 8 threads, each with its own layer on its own stream (`gpu.fork_stream()` of one
//!   context, so they share the context's loaded modules), built concurrently; every CUDA
//!   kernel that runs on this GPU takes part (thread i runs kernel i mod count); each thread
//!   runs a bounded number of forwards at varying M, each output checked against the f64
//!   reference. Skips without a GPU unless FP8_REQUIRE_CUDA=1.
//! - CPU (runs everywhere): 8 threads with a layer each, and 8 threads sharing one layer
//!   behind a mutex, outputs checked.
//!
//! No timing is asserted.

use std::sync::{Arc, Barrier, Mutex};

use fp8_linear::cuda::interop::Gpu;
use fp8_linear::{
    Capability, DType, KernelEntry, KernelOptions, LayerConfig, Linear, Options, Platform, Target,
    Tensor, TensorMut,
};
use fp8_linear_tests::gpu::{entry_rel_err, gpu_or_skip, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{random_activations, HostLayer, WeightGen};
use half::bf16;

/// Compile-time checks: `Linear` is `Send`; the GPU handle and `Target` are `Send + Sync`.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<Linear>();
    send_sync::<Gpu>();
    send_sync::<Target>();
};

/// Compile-time check that `Linear` is *not* `Sync` (see the module docs): with `Sync`, the
/// two blanket impls below would both apply and the call would be ambiguous. If `Linear`
/// becomes `Sync` on purpose, delete this check.
#[allow(dead_code)]
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
#[allow(dead_code)]
struct IsSync;
impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}
const _: fn() = || <Linear as AmbiguousIfSync<_>>::check();

const THREADS: usize = 8;
const ITERATIONS: usize = 12;
/// M of the iterations, in turn.
const MS: [usize; 4] = [1, 7, 33, 64];
const TOLERANCE: f64 = 1e-2;

/// The CUDA block-table kernels that run on a GPU of capability `cap` (natively or forced).
fn block_kernels(cap: Capability, cfg: &LayerConfig) -> Vec<&'static KernelEntry> {
    let table = fp8_linear::tables::BUILTIN
        .find(Platform::Cuda, cfg.family())
        .expect("a CUDA block table");
    table
        .entries
        .iter()
        .filter(|e| e.arch.matches(Some(cap)) || e.force_arch.is_some_and(|a| a.matches(Some(cap))))
        .filter(|e| (e.can_implement)(cfg).is_ok())
        .collect()
}

/// One GPU thread: its own stream and layer, `ITERATIONS` checked forwards.
fn gpu_thread(
    base: &Arc<Gpu>,
    entry: &'static KernelEntry,
    cfg: &LayerConfig,
    start: &Barrier,
) -> Result<usize, String> {
    start.wait();
    let gpu = base
        .fork_stream()
        .map_err(|e| format!("fork_stream: {e}"))?;
    let target = Target::from_gpu(gpu.clone());
    let host = HostLayer::random(cfg, WeightGen::Spread(4));
    let mut layer =
        Linear::with_entry(entry, &target, cfg, &host.weights(), &KernelOptions::none())
            .map_err(|e| format!("build: {e}"))?;
    let (n, k) = (cfg.n, cfg.k);
    // The M the kernel serves (the decode kernel: M = 1).
    let ms: Vec<usize> = MS.into_iter().filter(|&m| entry.rows.contains(m)).collect();
    for i in 0..ITERATIONS {
        let m = ms[i % ms.len()];
        let (xin, exact) = upload_as(&gpu, &random_activations(m, k), cfg.input_dtype);
        let mut y = AnyBuffer::poisoned(&gpu, m * n, cfg.output_dtype);
        layer
            .forward(&xin.tensor([m, k]), &mut y.tensor_mut([m, n]))
            .map_err(|e| format!("iteration {i} (M={m}): {e}"))?;
        // Downloads wait for this thread's stream only.
        let got = y.to_f32();
        let err = entry_rel_err(entry, &host, &exact, m, &got)
            .map_err(|e| format!("iteration {i} (M={m}): {e}"))?;
        if err >= TOLERANCE {
            return Err(format!("iteration {i} (M={m}): rel err {err:.3e}"));
        }
    }
    Ok(ITERATIONS)
}

#[test]
fn eight_threads_with_a_layer_and_a_stream_each() {
    let Some(base) = gpu_or_skip("eight_threads_with_a_layer_and_a_stream_each") else {
        return;
    };
    let cfg = LayerConfig::block_128(1040, 1536, DType::Bf16, DType::Bf16);
    let kernels = block_kernels(base.capability(), &cfg);
    assert!(!kernels.is_empty(), "no CUDA block kernel runs on this GPU");
    let start = Barrier::new(THREADS);
    let results: Vec<(usize, &'static str, Result<usize, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let entry = kernels[t % kernels.len()];
                let (base, cfg, start) = (&base, &cfg, &start);
                (
                    t,
                    entry.name,
                    s.spawn(move || gpu_thread(base, entry, cfg, start)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(t, name, h)| {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err("the thread panicked".into()));
                (t, name, r)
            })
            .collect()
    });
    let mut failures = Vec::new();
    for (t, name, r) in &results {
        match r {
            Ok(n) => eprintln!("thread {t}: {name}: {n} forwards checked"),
            Err(e) => failures.push(format!("thread {t} ({name}): {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A CPU forward of `m` rows of fresh activations: the output and the activations as the
/// layer saw them (f32).
fn cpu_forward(layer: &mut Linear, m: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
    let (n, k) = (layer.config().n, layer.config().k);
    let x = random_activations(m, k);
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let exact: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
    let mut y = vec![bf16::from_bits(0xffff); m * n];
    layer
        .forward(
            &Tensor::bf16(&xb, [m, k]),
            &mut TensorMut::bf16(&mut y, [m, n]),
        )
        .map_err(|e| format!("M={m}: {e}"))?;
    Ok((y.iter().map(|v| v.to_f32()).collect(), exact))
}

/// Checks a CPU output against the reference.
fn cpu_check(
    entry: &KernelEntry,
    host: &HostLayer,
    m: usize,
    (got, exact): (Vec<f32>, Vec<f32>),
) -> Result<(), String> {
    let err = entry_rel_err(entry, host, &exact, m, &got)?;
    if err >= TOLERANCE {
        return Err(format!("M={m}: rel err {err:.3e}"));
    }
    Ok(())
}

#[test]
fn cpu_layers_on_eight_threads() {
    let cfg = LayerConfig::block_128(272, 400, DType::Bf16, DType::Bf16);
    let start = Barrier::new(THREADS);
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (cfg, start) = (&cfg, &start);
                s.spawn(move || -> Result<(), String> {
                    let host = HostLayer::random(cfg, WeightGen::Spread(4));
                    let mut layer =
                        Linear::new(&Target::cpu(), cfg, &host.weights(), &Options::none())
                            .map_err(|e| e.to_string())?;
                    start.wait();
                    for i in 0..ITERATIONS {
                        // M on both sides of the CPU kernel's decode / GEMM crossover.
                        let m = [1, 5, 24, 40][(i + t) % 4];
                        cpu_forward(&mut layer, m)
                            .and_then(|out| {
                                cpu_check(
                                    layer.entry_for(m).expect("the plan serves every M"),
                                    &host,
                                    m,
                                    out,
                                )
                            })
                            .map_err(|e| format!("thread {t}, iteration {i}: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some("a thread panicked".into()),
            })
            .collect()
    });
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn one_cpu_layer_shared_by_eight_threads() {
    let cfg = LayerConfig::block_128(272, 400, DType::Bf16, DType::Bf16);
    let host = HostLayer::random(&cfg, WeightGen::Spread(4));
    let layer = Mutex::new(
        Linear::new(&Target::cpu(), &cfg, &host.weights(), &Options::none())
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let start = Barrier::new(THREADS);
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (layer, host, start) = (&layer, &host, &start);
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    for i in 0..ITERATIONS {
                        let m = [1, 5, 24, 40][(i + t) % 4];
                        // The call under the lock, the check outside it.
                        let (out, entry) = {
                            let mut l = layer.lock().map_err(|_| "poisoned lock".to_string())?;
                            (
                                cpu_forward(&mut l, m),
                                l.entry_for(m).expect("the plan serves every M"),
                            )
                        };
                        out.and_then(|out| cpu_check(entry, host, m, out))
                            .map_err(|e| format!("thread {t}, iteration {i}: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some("a thread panicked".into()),
            })
            .collect()
    });
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
