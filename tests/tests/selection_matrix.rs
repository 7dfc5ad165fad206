//! The selection matrix: for every device profile, every layer kind and both 16-bit output
//! dtypes, the kernel chosen (or `-` when nothing fits, in which case the error must list
//! every candidate of the table with its reason); and for every device profile and every
//! checkpoint layout (weight block shape, f32 or ue8m0 scales), the kernel chosen. Update
//! the tables when a kernel is added.

use fp8_linear::{DType, Device, LayerConfig, Overrides, QuantKey, ScaleDtype, SelectError};

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
const PORTABLE: &str = "PortableBlockFp8";
const LT_TENSOR: &str = "CublasLtFp8PerTensor";
const LT_ROW: &str = "CublasLtFp8Rowwise";
const MARLIN: &str = "MarlinFp8";
/// Our Hopper kernel (M = 1..=64) with cuBLASLt block-scaled above it.
const HOP_LT: &str = "HopperBlockFp8+CublasLtBlockFp8";
/// The decode kernel at M = 1 where the Hopper kernel does not take the layer, the portable
/// kernel above it.
const DEC_PORTABLE: &str = "DecodeBlockFp8+PortableBlockFp8";

/// sm_80..sm_86 (Ampere): Marlin W8A16 for every layer kind whose output dtype is the
/// activation dtype (bf16 here); nothing for f16 output from bf16 activations.
const AMPERE: [&str; 8] = [MARLIN, "-", MARLIN, "-", MARLIN, "-", MARLIN, "-"];

/// sm_89 (Ada): FP8 tensor cores, no cuBLASLt outer-vector or block scales.
const ADA: [&str; 8] = [PORTABLE, PORTABLE, LT_TENSOR, LT_TENSOR, "-", "-", "-", "-"];
/// sm_90 (Hopper): block layers, for bf16 output, on our wgmma + TMA block kernel at
/// M = 1..=64 and cuBLASLt block-scaled above (each where it measured faster), for f16
/// output on the wgmma kernel.
const HOPPER: [&str; 8] = [HOP_LT, HOP, LT_TENSOR, LT_TENSOR, LT_ROW, "-", LT_ROW, "-"];
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

/// The kernels of the plan the built-in tables make for `cfg` on `device`, by increasing M
/// (`DecodeBlockFp8+CublasLtBlockFp8`: M = 1 on the first, the rest on the second), or `-`
/// when none fits (the error then gives one reason per candidate of the table).
fn selected(device: &Device, cfg: &LayerConfig, what: &str) -> String {
    match fp8_linear::tables::BUILTIN.plan(device, cfg, &Overrides::none()) {
        Ok(plan) => {
            let names: Vec<&str> = plan.kernels().iter().map(|e| e.name).collect();
            names.join("+")
        }
        Err(SelectError::NoKernel { table, reasons, .. }) => {
            let t = fp8_linear::tables::BUILTIN
                .tables()
                .iter()
                .find(|t| t.name == table)
                .unwrap();
            assert_eq!(
                reasons.len(),
                t.entries.len(),
                "{what}: the error must give one reason per candidate"
            );
            assert!(reasons.iter().all(|(_, r)| !r.is_empty()), "{what}");
            "-".to_string()
        }
        Err(SelectError::NoTable { .. }) => "-".to_string(),
        Err(e) => panic!("unexpected error for {what}: {e}"),
    }
}

#[test]
fn selection_matrix() {
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
            let got = selected(&device, &cfg, &format!("{profile} {kind} {out}"));
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

/// The layouts of [`LAYOUT_EXPECTED`]: (rows along N, cols along K, ue8m0 scales).
const LAYOUTS: [(u32, u32, bool); 10] = [
    (128, 128, true),
    (32, 32, false),
    (32, 32, true),
    (64, 64, false),
    (128, 64, false),
    (64, 128, false),
    (16, 128, false),
    (8, 32, false),
    (96, 128, false),
    (128, 16, false),
];

/// A bf16 layer of 4096 x 7168 in R x C blocks with dynamic 1 x C activation groups.
fn layout_config((rows, cols, ue8m0): (u32, u32, bool)) -> LayerConfig {
    let scale_dtype = if ue8m0 {
        ScaleDtype::Ue8m0
    } else {
        ScaleDtype::F32
    };
    LayerConfig::block(
        4096,
        7168,
        (rows, cols),
        scale_dtype,
        DType::Bf16,
        DType::Bf16,
    )
}

/// Ampere: Marlin (W8A16) takes every block whose K width is a multiple of 32.
const AMPERE_LAYOUTS: [&str; 10] = [
    MARLIN, MARLIN, MARLIN, MARLIN, MARLIN, MARLIN, MARLIN, MARLIN, MARLIN, "-",
];
/// Ada and newer without Hopper's kernels: the portable kernel takes every R x C block with
/// R a multiple of 8 and C 32, 64 or 128.
const PORTABLE_LAYOUTS: [&str; 10] = [
    PORTABLE, PORTABLE, PORTABLE, PORTABLE, PORTABLE, PORTABLE, PORTABLE, PORTABLE, PORTABLE, "-",
];
/// Hopper: the wgmma kernel at M = 1..=64 and cuBLASLt above for 128x128 (ue8m0 too: the
/// scales are f32 powers of two), the wgmma kernel alone for blocks of 32, 64 or 128 rows
/// (narrower ones too); blocks 128 columns wide of other multiples of 8 rows on the decode
/// kernel at M = 1 and the portable kernel above.
const HOPPER_LAYOUTS: [&str; 10] = [
    HOP_LT,
    HOP,
    HOP,
    HOP,
    HOP,
    HOP,
    DEC_PORTABLE,
    PORTABLE,
    DEC_PORTABLE,
    "-",
];

/// (profile, the kernel for each of [`LAYOUTS`])
const LAYOUT_EXPECTED: &[(&str, [&str; 10])] = &[
    ("cpu", [CPU; 10]),
    ("v100", ["-"; 10]),
    ("t4", ["-"; 10]),
    ("a100", AMPERE_LAYOUTS),
    ("a10", AMPERE_LAYOUTS),
    ("rtx3090", AMPERE_LAYOUTS),
    ("l4", PORTABLE_LAYOUTS),
    ("l40s", PORTABLE_LAYOUTS),
    ("rtx4090", PORTABLE_LAYOUTS),
    ("h100", HOPPER_LAYOUTS),
    ("h200", HOPPER_LAYOUTS),
    ("b200", PORTABLE_LAYOUTS),
    ("rtx5090", PORTABLE_LAYOUTS),
    ("sm89", PORTABLE_LAYOUTS),
];

#[test]
fn every_profile_has_a_layout_row() {
    for p in Device::profile_names() {
        assert!(
            LAYOUT_EXPECTED.iter().any(|(name, _)| *name == p),
            "profile {p} missing from the layout matrix"
        );
    }
}

#[test]
fn layout_matrix() {
    let mut mismatches = Vec::new();
    for (profile, row) in LAYOUT_EXPECTED {
        let device = Device::profile(profile).unwrap();
        for (layout, want) in LAYOUTS.iter().zip(row) {
            let cfg = layout_config(*layout);
            let what = format!("{profile} {}", cfg.weight);
            let got = selected(&device, &cfg, &what);
            if got != *want {
                mismatches.push(format!("{what}: expected {want}, got {got}"));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "layout matrix mismatches:\n{}",
        mismatches.join("\n")
    );
}
