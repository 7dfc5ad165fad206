//! Several GPUs of one host, and tensor-parallel shards on GPUs.
//!
//! - `each_gpu_runs_its_own_layer` (needs two GPUs): one process builds a `Linear` per GPU
//!   from the same host weights, each selected for its own device and running on its own
//!   context and stream; the layers run at the same time from two threads (a batch of
//!   calls each), every output checked against the f64 reference of the kernel's numerics.
//!   The driver's per-device memory (`cuMemGetInfo`) shows that building and running the
//!   layer of one GPU allocates nothing on the other.
//! - `shards_on_the_gpus_agree_with_the_whole_layer` (one GPU or more): layers split into 2
//!   column-parallel (N) and 2 row-parallel (K) shards, shard r on GPU r % (GPUs), outputs
//!   put together on the host (columns, or a sum), compared with the gathered f64
//!   references of the shards and with the whole layer run on GPU 0, including the ragged
//!   split N = 7748 -> 3874 per shard, K = 3884 -> 1942, where the second shard starts
//!   inside a 128x128 scale block (served padded, see `fp8_linear::tensor_parallel`).
//!
//! With fewer GPUs than a test needs it skips with the reason printed; under
//! `FP8_REQUIRE_CUDA=1` that is a failure unless `FP8_ALLOW_ARCH_SKIPS` allows it (the
//! bundle's run.sh allows the two-GPU test on a one-GPU host and says so). No NCCL: the host
//! gathers.

use std::sync::{Arc, Barrier};

use fp8_linear::cpu::reference::rel_frobenius;
use fp8_linear::cuda::runtime::Gpu;
use fp8_linear::tensor_parallel::Split;
use fp8_linear::{DType, LayerConfig, Linear, Options, ScaleDtype, Target};
use fp8_linear_tests::gpu::{entry_rel_err, first_nan, gpus_or_skip, upload_as, AnyBuffer};
use fp8_linear_tests::layers::{random_activations, HostLayer, WeightGen};
use fp8_linear_tests::tp::run_sharded;
use half::bf16;

/// Device memory may move by allocation granularity for reasons of the driver's own; more
/// than this on a GPU the layer does not use is an allocation there.
const SLACK: usize = 2 << 20;

/// Runs `layer` on `gpu` (host weights uploaded there, the kernel selected for it) on the
/// activations `x` `[m, k]`: the output as f32 and the kernel's name.
fn gpu_forward(
    gpu: &Arc<Gpu>,
    layer: &HostLayer,
    x: &[f32],
) -> Result<(Vec<f32>, &'static str), String> {
    let c = &layer.config;
    let target = Target::from_gpu(gpu.clone());
    let mut l =
        Linear::new(&target, c, &layer.weights(), &Options::none()).map_err(|e| e.to_string())?;
    let m = x.len() / c.k;
    let (xin, _) = upload_as(gpu, x, c.input_dtype);
    let mut out = AnyBuffer::poisoned(gpu, m * c.n, c.output_dtype);
    l.forward(&xin.tensor([m, c.k]), &mut out.tensor_mut([m, c.n]))
        .map_err(|e| e.to_string())?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    let v = out.to_f32();
    if let Some(i) = first_nan(&v) {
        return Err(format!("NaN at output element {i}"));
    }
    Ok((v, l.entry_for(m).expect("the plan serves every M").name))
}

/// Free device memory of every GPU, in bytes.
fn free_memory(gpus: &[Arc<Gpu>]) -> Vec<usize> {
    gpus.iter()
        .map(|g| g.memory_info().expect("cuMemGetInfo").0)
        .collect()
}

/// Fails when a GPU other than `own` lost more than [`SLACK`] of free memory.
fn only_own_gpu_allocated(before: &[usize], after: &[usize], own: usize, what: &str) {
    for (g, (b, a)) in before.iter().zip(after).enumerate() {
        if g != own {
            assert!(
                b.saturating_sub(*a) <= SLACK,
                "{what} on GPU {own} took {} bytes of GPU {g}'s memory",
                b - a
            );
        }
    }
}

/// What a GPU's thread gives back: the GPU, the output, the kernel, the activations as the
/// device held them, the seconds of its calls.
type GpuRun = (
    usize,
    Vec<f32>,
    &'static fp8_linear::KernelEntry,
    Vec<f32>,
    f64,
);

#[test]
fn each_gpu_runs_its_own_layer() {
    let Some(gpus) = gpus_or_skip("each_gpu_runs_its_own_layer", 2) else {
        return;
    };
    let gpus = &gpus[..2];
    let cfg = LayerConfig::block_128(4096, 3884, DType::Bf16, DType::Bf16);
    let host = HostLayer::random(&cfg, WeightGen::Spread(4));
    let (m, calls) = (33, 20);
    let x = random_activations(m, cfg.k);
    // Build and run once per GPU, one after the other, watching the other GPU's memory.
    let mut layers = Vec::new();
    for (g, gpu) in gpus.iter().enumerate() {
        let before = free_memory(gpus);
        let target = Target::from_gpu(gpu.clone());
        let mut layer = Linear::new(&target, &cfg, &host.weights(), &Options::none())
            .unwrap_or_else(|e| panic!("GPU {g}: {e}"));
        layer.prepare(m).unwrap();
        let (xin, exact) = upload_as(gpu, &x, cfg.input_dtype);
        let mut out = AnyBuffer::poisoned(gpu, m * cfg.n, cfg.output_dtype);
        layer
            .forward(&xin.tensor([m, cfg.k]), &mut out.tensor_mut([m, cfg.n]))
            .unwrap();
        gpu.synchronize().unwrap();
        let after = free_memory(gpus);
        only_own_gpu_allocated(&before, &after, g, "building and running a layer");
        assert!(
            before[g] > after[g],
            "the layer of GPU {g} allocated nothing on it"
        );
        eprintln!(
            "GPU {g} ({}): {} selected; {} MiB allocated there, {} on the other",
            gpu.device(),
            layer.plan(),
            (before[g] - after[g]) >> 20,
            (before[1 - g].saturating_sub(after[1 - g])) >> 20
        );
        layers.push((layer, xin, out, exact));
    }
    // Both at once, from two threads: each its layer, its GPU, its stream.
    let before = free_memory(gpus);
    let start = Arc::new(Barrier::new(2));
    let results: Vec<GpuRun> = std::thread::scope(|s| {
        let handles: Vec<_> = layers
            .into_iter()
            .enumerate()
            .map(|(g, (mut layer, xin, mut out, exact))| {
                let (gpu, start) = (gpus[g].clone(), start.clone());
                s.spawn(move || {
                    start.wait();
                    let t0 = std::time::Instant::now();
                    for _ in 0..calls {
                        layer
                            .forward(&xin.tensor([m, cfg.k]), &mut out.tensor_mut([m, cfg.n]))
                            .unwrap_or_else(|e| panic!("GPU {g}: {e}"));
                    }
                    gpu.synchronize().unwrap();
                    let secs = t0.elapsed().as_secs_f64();
                    (
                        g,
                        out.to_f32(),
                        layer.entry_for(m).expect("the plan serves every M"),
                        exact,
                        secs,
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = free_memory(gpus);
    for g in 0..2 {
        // Prepared layers allocate nothing while they run: on no GPU.
        assert!(
            before[g].saturating_sub(after[g]) <= SLACK,
            "running the prepared layers took {} bytes of GPU {g}",
            before[g] - after[g]
        );
    }
    for (g, got, entry, exact, secs) in results {
        let err =
            entry_rel_err(entry, &host, &exact, m, &got).unwrap_or_else(|e| panic!("GPU {g}: {e}"));
        eprintln!(
            "GPU {g}: {calls} calls of {} in {:.3} ms ({:.1} us per call, both GPUs at once), \
             rel err {err:.2e}",
            entry.name,
            secs * 1e3,
            secs * 1e6 / calls as f64
        );
        assert!(first_nan(&got).is_none(), "GPU {g}: NaN");
        assert!(err < 1e-2, "GPU {g}: {err:.3e} off the f64 reference");
    }
}

#[test]
fn shards_on_the_gpus_agree_with_the_whole_layer() {
    let Some(gpus) = gpus_or_skip("shards_on_the_gpus_agree_with_the_whole_layer", 1) else {
        return;
    };
    let b = DType::Bf16;
    let layers = [
        ("block 7748x3884", LayerConfig::block_128(7748, 3884, b, b)),
        (
            "32x32 ue8m0 7748x3884",
            LayerConfig::block(7748, 3884, (32, 32), ScaleDtype::Ue8m0, b, b),
        ),
        (
            "block 1024x1000 bias",
            LayerConfig {
                bias: true,
                ..LayerConfig::block_128(1024, 1000, b, b)
            },
        ),
        // cuBLASLt's scaled GEMMs (the H200's per-channel kernels) need N % 16 == 0 per
        // shard.
        (
            "per-token x per-channel 4096x3884",
            LayerConfig::per_token_per_channel(4096, 3884, b, b),
        ),
    ];
    eprintln!(
        "{} GPU(s): shard r runs on GPU r % {}",
        gpus.len(),
        gpus.len()
    );
    for (what, cfg) in layers {
        let host = HostLayer::random(&cfg, WeightGen::Spread(4));
        for m in [1, 33] {
            // The activations as the GPU holds them (bf16), so the references see the same.
            let x: Vec<f32> = random_activations(m, cfg.k)
                .iter()
                .map(|&v| bf16::from_f32(v).to_f32())
                .collect();
            let (whole, kernel) = gpu_forward(&gpus[0], &host, &x).unwrap();
            let whole: Vec<f64> = whole.iter().map(|&v| f64::from(v)).collect();
            for split in [Split::Column, Split::Row] {
                let mut fwd = |rank: usize, l: &HostLayer, xs: &[f32]| {
                    gpu_forward(&gpus[rank % gpus.len()], l, xs)
                };
                let sh = run_sharded(&host, &x, m, split, 2, &mut fwd)
                    .unwrap_or_else(|e| panic!("{what} {split} M={m}: {e}"));
                let vs_ref = rel_frobenius(&sh.out, &sh.reference);
                let vs_whole = rel_frobenius(&sh.out, &whole);
                // bf16 outputs: each side rounded once; row shards also requantize what
                // their boundaries cut (`Sharded::requantized`).
                let bound = 1e-2 + 5e-2 * sh.requantized(&cfg, split).sqrt();
                let notes: Vec<String> = sh
                    .runs
                    .iter()
                    .flat_map(|r| {
                        r.shard
                            .notes
                            .iter()
                            .map(|n| format!("rank {}: {n}", r.shard.rank))
                    })
                    .collect();
                eprintln!(
                    "{what:<34} {split:<6} M={m:<3}: vs the shards' f64 references {vs_ref:.2e}, \
                     vs the whole layer ({kernel}) {vs_whole:.2e}; shards: {}; {}",
                    sh.runs
                        .iter()
                        .map(|r| r.kernel)
                        .collect::<Vec<_>>()
                        .join(", "),
                    notes.join("; ")
                );
                assert!(
                    vs_ref < 1e-2,
                    "{what} {split} M={m}: {vs_ref:.3e} off the shards' f64 references"
                );
                assert!(
                    vs_whole < bound,
                    "{what} {split} M={m}: {vs_whole:.3e} off the whole layer (bound {bound:.0e})"
                );
            }
        }
    }
}
