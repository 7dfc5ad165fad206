//! The CPU kernels against an f32 SGEMM of the same size, in the same run: the SGEMM is the
//! same threaded routine the fast kernel ends in, on f32 operands, so the ratio is the cost
//! of FP8 (activation quantization and dequantization).
//!
//! `cargo bench -p fp8-linear --bench cpu`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fp8_linear::cpu::{sgemm_abt, CpuFp8Gemm};
use fp8_linear::fp8::f32_to_e4m3;
use fp8_linear::{
    DType, KernelOptions, LayerConfig, LayerWeights, Linear, Registered, Target, Tensor, TensorMut,
};
use rand::Rng;

fn bench_cpu(c: &mut Criterion) {
    let mut rng = rand::rng();
    let target = Target::cpu();
    let mut g = c.benchmark_group("cpu-block-fp8");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (m, n, k) in [
        (1, 4096, 4096),
        (16, 4096, 4096),
        (128, 4096, 4096),
        (128, 2048, 7168),
    ] {
        let flops = 2 * m * n * k;
        g.throughput(Throughput::Elements(flops as u64));
        let id = format!("M{m}xN{n}xK{k}");
        let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let wf: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut out = vec![0f32; m * n];
        g.bench_function(BenchmarkId::new("sgemm-f32", &id), |b| {
            b.iter(|| sgemm_abt(black_box(&x), black_box(&wf), &mut out, m, n, k))
        });

        let cfg = LayerConfig::block_128(n, k, DType::F32, DType::F32);
        let codes: Vec<u8> = wf.iter().map(|v| f32_to_e4m3(v * 448.0)).collect();
        let scales = vec![1.0f32 / 448.0; n.div_ceil(128) * k.div_ceil(128)];
        let weights = LayerWeights {
            weight: Tensor::fp8(&codes, [n, k]),
            weight_scale: Tensor::f32(&scales, [n.div_ceil(128), k.div_ceil(128)]),
            input_scale: None,
            input_scale_ub: None,
            bias: None,
        };
        let mut lin = Linear::with_entry(
            &CpuFp8Gemm::ENTRY,
            &target,
            &cfg,
            &weights,
            &KernelOptions::none(),
        )
        .unwrap();
        g.bench_function(BenchmarkId::new("CpuFp8Gemm", &id), |b| {
            b.iter(|| {
                lin.forward(
                    &Tensor::f32(black_box(&x), [m, k]),
                    &mut TensorMut::f32(&mut out, [m, n]),
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_cpu);
criterion_main!(benches);
