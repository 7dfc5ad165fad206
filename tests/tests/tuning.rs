//! Measured, shape-aware selection: with a tuning file, `select_tuned` picks the recorded
//! winner for the M bucket; without one (or for another bucket, device, or a winner that
//! cannot run), the static order.

use fp8_linear::autotune::autotune_layer;
use fp8_linear::tables::CPU_BLOCK;
use fp8_linear::tuning::device_key;
use fp8_linear::{DType, Device, LayerConfig, Overrides, TuningFile};

fn layer() -> LayerConfig {
    LayerConfig::block_128(512, 384, DType::Bf16, DType::Bf16)
}

#[test]
fn winner_is_used_per_bucket_and_static_order_otherwise() {
    let cpu = Device::cpu(2);
    let key = device_key(&cpu);
    let none = Overrides::none();
    let mut t = TuningFile::new();
    t.record(&cpu, &layer(), 16, "CpuReference", 1e-3);
    let pick = |m: usize, t: &TuningFile, ov: &Overrides| {
        CPU_BLOCK
            .select_tuned(&cpu, &key, &layer(), m, t, ov)
            .unwrap()
            .entry
            .name
    };
    assert_eq!(pick(16, &t, &none), "CpuReference");
    assert_eq!(pick(9, &t, &none), "CpuReference"); // same bucket
    assert_eq!(pick(128, &t, &none), "CpuFp8Gemm"); // no measurement: static order
    assert_eq!(pick(16, &TuningFile::new(), &none), "CpuFp8Gemm"); // no file
                                                                   // A disabled winner is skipped; a forced kernel beats the measurement.
    let off = Overrides::none().disable("CpuReference");
    assert_eq!(pick(16, &t, &off), "CpuFp8Gemm");
    let forced = Overrides::none().force("CpuFp8Gemm");
    assert_eq!(pick(16, &t, &forced), "CpuFp8Gemm");
    // Another device's measurements do not apply.
    let other = Device::cpu(64);
    let s = CPU_BLOCK
        .select_tuned(&other, "other cpu", &layer(), 16, &t, &none)
        .unwrap();
    assert_eq!(s.entry.name, "CpuFp8Gemm");
}

#[test]
fn autotune_records_the_fastest_per_m_and_survives_a_file_roundtrip() {
    let cpu = Device::cpu(2);
    let mut t = TuningFile::new();
    // A deterministic clock: the reference kernel "wins" at small M, the fast one at large M.
    let ms = autotune_layer(
        &fp8_linear::tables::BUILTIN,
        &cpu,
        &layer(),
        &[1, 256],
        &Overrides::none(),
        &mut t,
        |entry, m| {
            Ok(match (entry.name, m) {
                ("CpuReference", 1) => 1.0,
                ("CpuReference", _) => 9.0,
                (_, 1) => 2.0,
                _ => 3.0,
            })
        },
    )
    .unwrap();
    assert_eq!(ms.len(), 4);
    assert_eq!(ms.iter().filter(|x| x.winner).count(), 2);
    let dir = std::env::temp_dir().join(format!("fp8-tuning-{}", std::process::id()));
    let path = dir.join("autotune.tsv");
    t.save(&path).unwrap();
    let back = TuningFile::load(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let key = device_key(&cpu);
    let pick = |m| {
        CPU_BLOCK
            .select_tuned(&cpu, &key, &layer(), m, &back, &Overrides::none())
            .unwrap()
            .entry
            .name
    };
    assert_eq!(pick(1), "CpuReference");
    assert_eq!(pick(200), "CpuFp8Gemm");
    // A missing file is an empty tuning, not an error.
    assert!(TuningFile::load(&dir.join("none.tsv")).unwrap().is_empty());
}
