//! The built-in kernel tables, one per (platform, family, kind), and the registries that
//! hold them ([`BUILTIN`] for linear layers, [`GROUPED`] for experts). Downstream crates build their own with `fp8_table!` (see the crate docs).

use fp8_linear_core::{fp8_table, Capability, Device, Platform, Registry};

use crate::cpu::{CpuFp8Gemm, CpuGroupedFp8Gemm, CpuGroupedReference, CpuReference};
#[cfg(feature = "cuda")]
use crate::cuda::{
    CublasLtBlockFp8, CublasLtFp8PerTensor, CublasLtFp8Rowwise, DecodeBlockFp8, HopperBlockFp8,
    HopperGroupedFp8, MarlinFp8, MarlinGroupedFp8, PortableBlockFp8, PortableGroupedFp8,
};

fp8_table! {
    /// Block-scaled W8A8 on the CPU.
    pub CPU_BLOCK: Cpu, BlockScaled = [CpuFp8Gemm, CpuReference];
    /// Per-tensor / per-token / per-channel W8A8 on the CPU.
    pub CPU_SCALED: Cpu, Scaled = [CpuFp8Gemm, CpuReference];
    /// Weight-only FP8 (W8A16) on the CPU.
    pub CPU_WEIGHT_ONLY: Cpu, WeightOnly = [CpuFp8Gemm, CpuReference];
}

fp8_table! {
    /// Block-scaled grouped (mixture-of-experts) W8A8 on the CPU.
    pub CPU_GROUPED_BLOCK: Cpu, BlockScaled, Grouped = [CpuGroupedFp8Gemm, CpuGroupedReference];
    /// Per-tensor / per-token / per-channel grouped W8A8 on the CPU.
    pub CPU_GROUPED_SCALED: Cpu, Scaled, Grouped = [CpuGroupedFp8Gemm, CpuGroupedReference];
    /// Weight-only grouped FP8 (W8A16) on the CPU.
    pub CPU_GROUPED_WEIGHT_ONLY: Cpu, WeightOnly, Grouped = [CpuGroupedFp8Gemm, CpuGroupedReference];
}

// Grouped CUDA tables in the dense tables' order: the Hopper grouped kernel on sm_90a (its
// contiguous calls measured 0.73-1.21x the dense Hopper kernel's time on the same total rows
// and its masked decode 1.06-2.2x the read-once time of the experts touched, H100,
// docs/perf-log.md "Issue 34"), Marlin W8A16 on sm_80..sm_89, the portable kernel on sm_89+.
#[cfg(feature = "cuda")]
fp8_table! {
    /// Block-scaled grouped (mixture-of-experts) W8A8 on CUDA GPUs: the Hopper grouped
    /// kernel (sm_90a), Marlin grouped W8A16 (sm_80..sm_89: weight-only with 16-bit
    /// activations), then the portable grouped kernel (sm_89+).
    pub CUDA_GROUPED_BLOCK: Cuda, BlockScaled, Grouped = [
        HopperGroupedFp8 => 1,
        MarlinGroupedFp8 => 2,
        PortableGroupedFp8 => 3,
    ];
    /// Per-tensor / per-channel grouped FP8 on CUDA GPUs: Marlin grouped W8A16
    /// (sm_80..sm_89, weight-only).
    pub CUDA_GROUPED_SCALED: Cuda, Scaled, Grouped = [MarlinGroupedFp8];
    /// Weight-only grouped FP8 (W8A16) on CUDA GPUs: Marlin grouped.
    pub CUDA_GROUPED_WEIGHT_ONLY: Cuda, WeightOnly, Grouped = [MarlinGroupedFp8];
}

/// Every built-in grouped (mixture-of-experts) table: selection for experts starts here.
#[cfg(feature = "cuda")]
pub static GROUPED: Registry = Registry::grouped(&[
    &CUDA_GROUPED_BLOCK,
    &CUDA_GROUPED_SCALED,
    &CUDA_GROUPED_WEIGHT_ONLY,
    &CPU_GROUPED_BLOCK,
    &CPU_GROUPED_SCALED,
    &CPU_GROUPED_WEIGHT_ONLY,
]);

/// Every built-in grouped (mixture-of-experts) table: selection for experts starts here.
#[cfg(not(feature = "cuda"))]
pub static GROUPED: Registry = Registry::grouped(&[
    &CPU_GROUPED_BLOCK,
    &CPU_GROUPED_SCALED,
    &CPU_GROUPED_WEIGHT_ONLY,
]);

// CUDA tables, fastest first, as measured (docs/perf-log.md): our Hopper kernel first for
// M = 1..=64, where it measured 1.04-1.33x cuBLASLt block-scaled end to end at M = 16 and 64
// on all six DeepSeek-V3 shapes (H200) and 1.05-1.22x faster than the decode kernel at M = 1
// on all eight decode-bench shapes (H100, 2026-12-06); the decode kernel next, for M = 1 of
// the block layers the Hopper kernel does not take; cuBLASLt block-scaled for larger M (our
// Hopper kernel is 0.8-1.2x of it at M = 128 and 0.5-0.9x above); the Hopper kernel again
// for what cuBLASLt cannot (f16/f32 output, bias, blocks other than 128x128). The decode
// and Hopper kernels read cuBLASLt's copy of the weights when it is in the plan, so a layer
// holds them once. `fp8-linear autotune` records
// per-shape winners that override this order where measured.
#[cfg(feature = "cuda")]
fp8_table! {
    /// Block-scaled W8A8 on CUDA GPUs: our Hopper wgmma + TMA kernel for M = 1..=64
    /// (sm_90a), the decode kernel (sm_90; serves M = 1 of the layers the Hopper kernel does
    /// not take), cuBLASLt block-scaled (sm_90, bf16 output), the Hopper kernel for every M
    /// cuBLASLt cannot take, then Marlin W8A16
    /// (sm_80..sm_89: the A100 / RTX 30xx path, weight-only with 16-bit activations), then
    /// the portable mma.sync kernel (sm_89+).
    pub CUDA_BLOCK: Cuda, BlockScaled = [
        HopperBlockFp8 { rows = 1..=64 } => 1,
        DecodeBlockFp8 => 2,
        CublasLtBlockFp8 => 3,
        HopperBlockFp8 => 4,
        MarlinFp8 => 5,
        PortableBlockFp8 => 6,
    ];
    /// Per-tensor / per-token / per-channel W8A8 on CUDA GPUs: Marlin W8A16 (sm_80..sm_89,
    /// weight-only), cuBLASLt per-tensor (sm_89+), then cuBLASLt outer-vector (sm_90+).
    pub CUDA_SCALED: Cuda, Scaled = [MarlinFp8 => 1, CublasLtFp8PerTensor, CublasLtFp8Rowwise];
    /// Weight-only FP8 (W8A16) on CUDA GPUs: Marlin.
    pub CUDA_WEIGHT_ONLY: Cuda, WeightOnly = [MarlinFp8];
}

/// Every built-in table: selection for any device and layer starts here.
#[cfg(feature = "cuda")]
pub static BUILTIN: Registry = Registry::new(&[
    &CUDA_BLOCK,
    &CUDA_SCALED,
    &CUDA_WEIGHT_ONLY,
    &CPU_BLOCK,
    &CPU_SCALED,
    &CPU_WEIGHT_ONLY,
]);

/// Every built-in table: selection for any device and layer starts here.
#[cfg(not(feature = "cuda"))]
pub static BUILTIN: Registry = Registry::new(&[&CPU_BLOCK, &CPU_SCALED, &CPU_WEIGHT_ONLY]);

/// What a CUDA GPU that no built-in kernel serves would need, for messages such as
/// `fp8-linear explain`: `Some` for a capability below sm_80 (Turing: T4, RTX 20xx; Volta),
/// where every built-in CUDA table is empty of candidates that fit; `None` for any other
/// device (including the CPU, whose kernels take every layer).
pub fn below_every_cuda_kernel(device: &Device) -> Option<&'static str> {
    match (device.platform, device.capability) {
        (Platform::Cuda, Some(c)) if !c.at_least(Capability::new(8, 0)) => Some(
            "no built-in kernel runs below sm_80. The oldest, MarlinFp8 (W8A16), needs sm_80 \
             for cp.async, bf16 and mma.sync m16n8k16. A Turing GPU (sm_75: T4, RTX 20xx) would \
             need a weight-only kernel with f16 activations on mma.sync m16n8k8 and the weight \
             staged through registers (ld.global, st.shared); this library has none. Run the \
             layer on the CPU (--device cpu: CpuFp8Gemm) or serve the checkpoint dequantized \
             to f16.",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cuda_gpus_below_sm80_get_the_note() {
        let t4 = Device::profile("t4").unwrap();
        assert!(below_every_cuda_kernel(&t4).unwrap().contains("Turing"));
        for name in ["a100", "h200", "cpu"] {
            let d = Device::profile(name).unwrap();
            assert_eq!(below_every_cuda_kernel(&d), None, "{name}");
        }
    }
}
