//! The selection matrix: for every device profile, every layer kind and both 16-bit output
//! dtypes, the kernel chosen (or `-` when nothing fits, in which case the error must list
//! every candidate of the table with its reason). Update the table when a kernel is added.

use fp8_linear::{DType, Device, LayerConfig, Overrides, QuantKey, SelectError};

/// Columns of [`EXPECTED`], each for bf16 then f16 output.
const KINDS: [&str; 4] = ["block", "per-tensor-static", "per-token", "per-channel"];

fn config(kind: &str, out: DType) -> LayerConfig {
    let (n, k) = (4096, 7168);
    match kind {
        "block" => LayerConfig::block_128(n, k, DType::Bf16, out),
        "per-tensor-static" => LayerConfig::per_tensor_static(n, k, DType::Bf16, out),
        "per-token" => LayerConfig {
            weight: QuantKey::WEIGHT_PER_TENSOR,
            ..LayerConfig::per_token_per_channel(n, k, DType::Bf16, out)
        },
        "per-channel" => LayerConfig::per_token_per_channel(n, k, DType::Bf16, out),
        _ => unreachable!("unknown kind {kind}"),
    }
}

const CPU: &str = "CpuFp8Gemm";
const HOP: &str = "HopperBlockFp8";
const LT_BLOCK: &str = "CublasLtBlockFp8";
const PORTABLE: &str = "PortableBlockFp8";
const LT_TENSOR: &str = "CublasLtFp8PerTensor";
const LT_ROW: &str = "CublasLtFp8Rowwise";
const MARLIN: &str = "MarlinFp8";

/// sm_80..sm_86 (Ampere): Marlin W8A16 for every layer kind whose output dtype is the
/// activation dtype (bf16 here); nothing for f16 output from bf16 activations.
const AMPERE: [&str; 8] = [MARLIN, "-", MARLIN, "-", MARLIN, "-", MARLIN, "-"];

/// sm_89 (Ada): FP8 tensor cores, no cuBLASLt outer-vector or block scales.
const ADA: [&str; 8] = [PORTABLE, PORTABLE, LT_TENSOR, LT_TENSOR, "-", "-", "-", "-"];
/// sm_90 (Hopper): cuBLASLt block-scaled for bf16 output (measured faster), our wgmma + TMA
/// block kernel for f16 output.
const HOPPER: [&str; 8] = [
    LT_BLOCK, HOP, LT_TENSOR, LT_TENSOR, LT_ROW, "-", LT_ROW, "-",
];
/// sm_100+ : no cuBLASLt block kernel wired (it is declared sm_90 exactly).
const NEWER: [&str; 8] = [
    PORTABLE, PORTABLE, LT_TENSOR, LT_TENSOR, LT_ROW, "-", LT_ROW, "-",
];

/// (profile, [block bf16, block f16, per-tensor-static bf16, f16, per-token bf16, f16,
/// per-channel bf16, f16])
const EXPECTED: &[(&str, [&str; 8])] = &[
    ("cpu", [CPU; 8]),
    ("v100", ["-"; 8]),
    ("t4", ["-"; 8]),
    ("a100", AMPERE),
    ("a10", AMPERE),
    ("rtx3090", AMPERE),
    ("l4", ADA),
    ("l40s", ADA),
    ("rtx4090", ADA),
    ("h100", HOPPER),
    ("h200", HOPPER),
    ("b200", NEWER),
    ("rtx5090", NEWER),
    ("sm89", ADA),
];

#[test]
fn every_profile_has_a_row() {
    for p in Device::profile_names() {
        assert!(
            EXPECTED.iter().any(|(name, _)| *name == p),
            "profile {p} missing from the selection matrix"
        );
    }
}

#[test]
fn selection_matrix() {
    let ov = Overrides::none();
    let mut mismatches = Vec::new();
    for (profile, row) in EXPECTED {
        let device = Device::profile(profile).unwrap();
        for (col, want) in row.iter().enumerate() {
            let kind = KINDS[col / 2];
            let out = if col % 2 == 0 {
                DType::Bf16
            } else {
                DType::F16
            };
            let cfg = config(kind, out);
            let got = match fp8_linear::tables::BUILTIN.select(&device, &cfg, &ov) {
                Ok(s) => s.entry.name.to_string(),
                Err(SelectError::NoKernel { table, reasons, .. }) => {
                    let t = fp8_linear::tables::BUILTIN
                        .tables()
                        .iter()
                        .find(|t| t.name == table)
                        .unwrap();
                    assert_eq!(
                        reasons.len(),
                        t.entries.len(),
                        "the error must give one reason per candidate"
                    );
                    assert!(reasons.iter().all(|(_, r)| !r.is_empty()));
                    "-".to_string()
                }
                Err(SelectError::NoTable { .. }) => "-".to_string(),
                Err(e) => panic!("unexpected error for {profile} {kind} {out}: {e}"),
            };
            if got != *want {
                mismatches.push(format!(
                    "{profile:>8} {kind:>18} {out:>4}: expected {want}, got {got}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "selection matrix mismatches:\n{}",
        mismatches.join("\n")
    );
}
