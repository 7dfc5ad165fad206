//! Tensor-parallel shards on the CPU agree with the whole layer: each layer is split the way
//! engines split it (`fp8_linear::tensor_parallel`: column-parallel over N, row-parallel
//! over K), each shard's weights cut from the whole layer's host weights
//! (`Shard::weights`), its activations from the whole layer's (`Shard::input`), its layer
//! built and run on the CPU, and the outputs put together (`Shard::gather`: columns, or a
//! sum with the bias on rank 0 only). Ragged splits are included: N = 7748 -> 3874 per
//! shard (rank 1 starts inside a 128-row block: padded with 34 zero rows) and K = 3884 ->
//! 1942 (rank 1 starts inside a 128-wide group: padded with 22 zero columns), a 32x32 ue8m0
//! layout cut in both directions, per-channel and per-tensor layers, bias.
//!
//! Every gathered output is checked against the gathered f64 references of the shards (each
//! shard's own layer on its own activations: what a tensor-parallel run computes), to the
//! CPU kernel's f32 accuracy, and against the whole layer: column shards compute the same
//! dot products (equal to f32 rounding); row shards quantize their own slice of the
//! activations, so the sum agrees with the whole layer within the FP8 quantization error of
//! what is requantized: a block layer only the groups a shard boundary cuts, a per-token
//! layer every activation (its own per-token scale), a static per-tensor layer nothing. The GPU version
//! (each shard on the GPU of its rank) is `gpu_tensor_parallel.rs`.

use fp8_linear::cpu::reference::rel_frobenius;
use fp8_linear::tensor_parallel::{ShardNote, Split};
use fp8_linear::{DType, LayerConfig, Linear, Options, ScaleDtype, Target, Tensor, TensorMut};
use fp8_linear_tests::layers::{random_activations, HostLayer, WeightGen};
use fp8_linear_tests::tp::run_sharded;

/// Runs a layer on the CPU (f32 in and out): the output and the kernel's name.
fn cpu_forward(layer: &HostLayer, x: &[f32]) -> Result<(Vec<f32>, &'static str), String> {
    let cfg = &layer.config;
    let mut layer = Linear::new(&Target::cpu(), cfg, &layer.weights(), &Options::none())
        .map_err(|e| e.to_string())?;
    let m = x.len() / cfg.k;
    let mut out = vec![0f32; m * cfg.n];
    layer
        .forward(
            &Tensor::f32(x, [m, cfg.k]),
            &mut TensorMut::f32(&mut out, [m, cfg.n]),
        )
        .map_err(|e| e.to_string())?;
    Ok((
        out,
        layer.entry_for(m).expect("the plan serves every M").name,
    ))
}

/// The layers: (what, config, tensor-parallel sizes), f32 in and out.
fn layers() -> Vec<(&'static str, LayerConfig, &'static [usize])> {
    let f = DType::F32;
    vec![
        (
            "block 7748x3884",
            LayerConfig::block_128(7748, 3884, f, f),
            &[2],
        ),
        (
            "block 1000x1000 bias",
            LayerConfig {
                bias: true,
                ..LayerConfig::block_128(1000, 1000, f, f)
            },
            &[2, 4],
        ),
        (
            "32x32 ue8m0 1000x1000",
            LayerConfig::block(1000, 1000, (32, 32), ScaleDtype::Ue8m0, f, f),
            &[2, 4],
        ),
        (
            "per-token x per-channel 7748x3884",
            LayerConfig::per_token_per_channel(7748, 3884, f, f),
            &[2],
        ),
        (
            "per-tensor static 1024x1000 bias",
            LayerConfig {
                bias: true,
                ..LayerConfig::per_tensor_static(1024, 1000, f, f)
            },
            &[2, 4],
        ),
    ]
}

#[test]
fn shards_on_the_cpu_agree_with_the_whole_layer() {
    let m = 3;
    let mut padded = (false, false);
    for (what, cfg, tps) in layers() {
        let layer = HostLayer::random(&cfg, WeightGen::Spread(4));
        let x = random_activations(m, cfg.k);
        let (whole, kernel) = cpu_forward(&layer, &x).unwrap();
        let whole: Vec<f64> = whole.iter().map(|&v| f64::from(v)).collect();
        for split in [Split::Column, Split::Row] {
            for &tp in tps {
                let size = if split == Split::Column { cfg.n } else { cfg.k };
                if !size.is_multiple_of(tp) {
                    continue;
                }
                let mut fwd = |_rank: usize, l: &HostLayer, xs: &[f32]| cpu_forward(l, xs);
                let sh = run_sharded(&layer, &x, m, split, tp, &mut fwd)
                    .unwrap_or_else(|e| panic!("{what} {split} tp={tp}: {e}"));
                for r in &sh.runs {
                    for n in &r.shard.notes {
                        match n {
                            ShardNote::PaddedN { .. } => padded.0 = true,
                            ShardNote::PaddedK { .. } => padded.1 = true,
                            ShardNote::Ragged { .. } => {}
                        }
                    }
                }
                let vs_ref = rel_frobenius(&sh.out, &sh.reference);
                let vs_whole = rel_frobenius(&sh.out, &whole);
                // Row shards requantize what their boundaries cut (see `requantized`).
                let requantized = sh.requantized(&cfg, split);
                let bound = 1e-6 + 5e-2 * requantized.sqrt();
                eprintln!(
                    "{what:<36} {split:<6} tp={tp}: vs the shards' f64 references {vs_ref:.2e}, \
                     vs the whole layer ({kernel}) {vs_whole:.2e} (shards: {})",
                    sh.runs
                        .iter()
                        .map(|r| r.kernel)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                assert!(
                    vs_ref <= 1e-5,
                    "{what} {split} tp={tp}: {vs_ref:.3e} off the shards' f64 references"
                );
                assert!(
                    vs_whole <= bound,
                    "{what} {split} tp={tp}: the gathered shards differ from the whole layer \
                     by {vs_whole:.3e} (bound {bound:.0e})"
                );
            }
        }
    }
    assert!(
        padded.0 && padded.1,
        "the layers must include shards padded along N and along K"
    );
}

#[test]
fn wrong_host_buffers_are_errors() {
    use fp8_linear::tensor_parallel::{shard, ShardError};
    let cfg = LayerConfig::block_128(300, 256, DType::F32, DType::F32);
    let layer = HostLayer::random(&cfg, WeightGen::Spread(2));
    let s = &shard(&cfg, Split::Row, 2).unwrap()[1];
    let short = &layer.codes[..100];
    assert!(matches!(
        s.weights(&cfg, short, &layer.scales, None),
        Err(ShardError::Size {
            what: "weight codes",
            ..
        })
    ));
    assert!(matches!(
        s.weights(&cfg, &layer.codes, &layer.scales[..1], None),
        Err(ShardError::Size {
            what: "weight scales",
            ..
        })
    ));
    assert!(matches!(
        s.input(&[0f32; 7], 2, 256),
        Err(ShardError::Size {
            what: "activations",
            ..
        })
    ));
    let mut out = vec![0f32; 600];
    assert!(matches!(
        s.gather(&[0f32; 3], 2, &mut out, 300),
        Err(ShardError::Size {
            what: "shard output",
            ..
        })
    ));
    assert!(s
        .weights(&cfg, &layer.codes, &layer.scales, None)
        .is_ok_and(|w| w.codes.len() == w.config.n * w.config.k));
}
