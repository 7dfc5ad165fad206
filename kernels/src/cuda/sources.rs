//! The CUDA C sources of the kernels, embedded in the binary and compiled by NVRTC at run
//! time (header-free: no CUDA toolkit needed to build or run).

use fp8_linear_cuda::ModuleSpec;

/// Device helpers shared by every module (e4m3 encoding, bf16/f16 conversion).
pub const COMMON: &str = include_str!("cu/common.cuh");
/// Activation quantization kernels and the weight row-padding kernel.
pub const QUANT_BODY: &str = include_str!("cu/quant.cu");
/// The portable block-FP8 GEMM and its split-K epilogue.
pub const BLOCK_GEMM_BODY: &str = include_str!("cu/block_gemm.cu");

fn joined(body: &str) -> &'static str {
    // Leaked once per module kind (a handful of strings per process).
    Box::leak(format!("{COMMON}\n{body}").into_boxed_str())
}

/// The quantization module.
pub fn quant_module() -> ModuleSpec {
    use std::sync::OnceLock;
    static SRC: OnceLock<&'static str> = OnceLock::new();
    ModuleSpec::new("fp8_quant", SRC.get_or_init(|| joined(QUANT_BODY)))
}

/// The portable GEMM module for `mt` m16 tiles per warp (BM = 32 * mt) and `stages`
/// pipeline stages.
pub fn block_gemm_module(mt: u32, stages: u32) -> ModuleSpec {
    use std::sync::OnceLock;
    static SRC: OnceLock<&'static str> = OnceLock::new();
    ModuleSpec::new(
        "fp8_block_gemm",
        SRC.get_or_init(|| joined(BLOCK_GEMM_BODY)),
    )
    .option(format!("-DMT={mt}"))
    .option(format!("-DSTAGES={stages}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear_cuda::nvrtc;

    /// A line-by-line port of the device encoder `f32_to_e4m3` in `cu/common.cuh` (integer
    /// RNE on the f32 bits), checked against core's reference encoder on every 251st f32 bit
    /// pattern (17 million values, all exponents, both signs, NaN and infinities).
    fn device_encoder(x: f32) -> u8 {
        let sign = ((x.to_bits() >> 24) & 0x80) as u8;
        if x.is_nan() {
            return 0x7f | sign;
        }
        let a = x.abs().min(448.0);
        let ax = a.to_bits();
        let code = if a < 0.015625 {
            (a * 512.0).round_ties_even() as u32
        } else {
            ((ax + 0x7ffff + ((ax >> 20) & 1)) >> 20) - (120 << 3)
        };
        sign | code as u8
    }

    #[test]
    fn device_encoder_matches_core() {
        for bits in (0..=u32::MAX).step_by(251) {
            let x = f32::from_bits(bits);
            assert_eq!(
                device_encoder(x),
                fp8_linear_core::fp8::f32_to_e4m3(x),
                "x = {x:e} ({bits:#x})"
            );
        }
    }

    /// A port of the device's `div_by_scale` (Markstein step with a correctly rounded
    /// reciprocal) gives the same e4m3 code as an IEEE division for scales as the kernels
    /// make them and activations in and far outside their range.
    #[test]
    fn device_division_gives_ieee_codes() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..3_000_000u64 {
            let bits = next();
            let amax = f32::from_bits((bits as u32) & 0x7f7f_ffff);
            let scale = amax.max(1e-10) / 448.0;
            let frac = ((bits >> 32) as u32 >> 8) as f32 / (1u32 << 24) as f32;
            let x = if i % 3 == 0 {
                f32::from_bits((bits >> 32) as u32 & 0x7fff_ffff).min(amax)
            } else {
                (frac * 2.0 - 1.0) * amax
            };
            let r = 1.0 / scale;
            let q0 = x * r;
            let q = ((-q0).mul_add(scale, x)).mul_add(r, q0);
            let q = if q == 0.0 { 0f32.copysign(x) } else { q };
            assert_eq!(
                device_encoder(q),
                fp8_linear_core::fp8::f32_to_e4m3(x / scale),
                "x = {x:e}, scale = {scale:e}"
            );
        }
    }

    /// Compiles every module for sm_89 and sm_90 when NVRTC is installed (no GPU needed);
    /// prints why it skipped otherwise.
    #[test]
    fn sources_compile_with_nvrtc() {
        if let Err(e) = fp8_linear_cuda::probe::nvrtc() {
            eprintln!("skipped: {e}");
            return;
        }
        let specs = [
            quant_module(),
            block_gemm_module(1, 4),
            block_gemm_module(2, 4),
            block_gemm_module(4, 4),
            block_gemm_module(4, 3),
        ];
        for arch in ["sm_89", "sm_90", "sm_80"] {
            for spec in &specs {
                if arch == "sm_80" && spec.name != "fp8_quant" {
                    continue; // FP8 mma needs sm_89
                }
                let mut opts = vec!["--std=c++17".to_string(), "-default-device".to_string()];
                opts.extend(spec.options.iter().cloned());
                let cubin = nvrtc::compile_cubin(spec.name, spec.source, arch, &opts, &[])
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(cubin.len() > 1000, "{} {arch}", spec.name);
            }
        }
    }
}
