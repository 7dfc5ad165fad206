//! `select` on the success path (first candidate, and a walk past rejected candidates) and
//! on the all-rejected path (which builds the full error).
//!
//! `cargo bench -p fp8-linear --bench select`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use fp8_linear::tables::{BUILTIN, CPU_BLOCK};
use fp8_linear::{DType, Device, LayerConfig, Overrides};

fn bench_select(c: &mut Criterion) {
    let layer = LayerConfig::block_128(7168, 2048, DType::Bf16, DType::Bf16);
    let cpu = Device::cpu(2);
    let none = Overrides::none();
    let mut g = c.benchmark_group("select");
    g.bench_function("success/cpu-first-candidate", |b| {
        b.iter(|| {
            BUILTIN
                .select(black_box(&cpu), black_box(&layer), &none)
                .map(|s| s.entry.name)
        })
    });
    let skip_first = Overrides::none().disable("CpuFp8Gemm");
    g.bench_function("success/cpu-after-disabled", |b| {
        b.iter(|| {
            CPU_BLOCK
                .select(black_box(&cpu), black_box(&layer), &skip_first)
                .map(|s| s.entry.name)
        })
    });
    for profile in ["a100", "h200"] {
        let dev = Device::profile(profile).unwrap();
        if BUILTIN.select(&dev, &layer, &none).is_ok() {
            g.bench_function(format!("success/{profile}-builtin"), |b| {
                b.iter(|| {
                    BUILTIN
                        .select(black_box(&dev), black_box(&layer), &none)
                        .map(|s| s.entry.name)
                })
            });
        }
    }
    let all_off = Overrides::none()
        .disable("CpuFp8Gemm")
        .disable("CpuReference");
    g.bench_function("all-rejected/cpu", |b| {
        b.iter(|| {
            CPU_BLOCK
                .select(black_box(&cpu), black_box(&layer), &all_off)
                .is_err()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_select);
criterion_main!(benches);
