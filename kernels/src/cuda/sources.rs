//! Every CUDA C source of the kernels and every module built from them: the one registry.
//! The sources live in `cu/`, are embedded in the binary and compiled by NVRTC at run time
//! (header-free: no CUDA toolkit needed to build or run, and no `#include`). A module is the
//! shared headers it needs, then its body, put together at compile time of this crate:
//! `cu/ptx.cuh` (the basic types and every PTX wrapper) first in every module, then
//! `cu/quant.cuh` (e4m3 encoding, scales, group quantization, the scale block geometry) and
//! `cu/epilogue.cuh` (output stores, bias, the split-K last-arriver protocol) where used.

use fp8_linear_cuda::ModuleSpec;

/// The text of `cu/<file>`.
macro_rules! cu {
    ($file:literal) => {
        include_str!(concat!("cu/", $file))
    };
}

/// The compiled-in source of a module: `cu/ptx.cuh`, each of the `cu/` headers named, then
/// the body `cu/<body>`, a newline between each two.
macro_rules! embedded_source {
    ([$($header:literal),*] $body:literal) => {
        concat!(cu!("ptx.cuh"), "\n", $(cu!($header), "\n",)* cu!($body))
    };
}

/// The source a module is compiled from: [`embedded_source!`], or with the `dev-sources`
/// feature the same files read from [`dev::ENV_CU_DIR`] when it is set.
macro_rules! module_source {
    ([$($header:literal),*] $body:literal) => {
        dev::or(
            embedded_source!([$($header),*] $body),
            &["ptx.cuh", $($header,)* $body],
        )
    };
}

/// The development knob (cargo feature `dev-sources`, off by default): kernel sources read at
/// run time from a directory instead of the compiled-in copy, so one GPU run can time
/// edited kernels without rebuilding the Rust binaries.
pub mod dev {
    /// Environment variable naming the directory of `.cu` / `.cuh` files (the layout of
    /// `kernels/src/cuda/cu/`) that modules are compiled from, read only with the
    /// `dev-sources` feature.
    pub const ENV_CU_DIR: &str = "FP8_LINEAR_CU_DIR";

    /// `embedded`, or `files` read from [`ENV_CU_DIR`] and joined by newlines (once per
    /// module source; kept for the process). A file that cannot be read falls back to
    /// `embedded`, saying so on stderr.
    #[cfg(feature = "dev-sources")]
    pub fn or(embedded: &'static str, files: &[&str]) -> &'static str {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};
        static READ: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
        let Some(dir) = std::env::var_os(ENV_CU_DIR) else {
            return embedded;
        };
        let dir = std::path::PathBuf::from(dir);
        let key = format!("{}:{}", dir.display(), files.join(","));
        let mut read = READ
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(src) = read.get(&key) {
            return src;
        }
        let parts: Result<Vec<String>, String> = files
            .iter()
            .map(|f| {
                std::fs::read_to_string(dir.join(f))
                    .map_err(|e| format!("{}: {e}", dir.join(f).display()))
            })
            .collect();
        match parts {
            Ok(parts) => {
                let src: &'static str = Box::leak(parts.join("\n").into_boxed_str());
                eprintln!(
                    "fp8-linear: {ENV_CU_DIR}: module sources {files:?} from {}",
                    dir.display()
                );
                read.insert(key, src);
                src
            }
            Err(e) => {
                eprintln!("fp8-linear: {ENV_CU_DIR}: {e}; the compiled-in sources instead");
                embedded
            }
        }
    }

    /// `embedded` (the `dev-sources` feature is off).
    #[cfg(not(feature = "dev-sources"))]
    #[inline]
    pub fn or(embedded: &'static str, _files: &[&str]) -> &'static str {
        embedded
    }
}

/// The Marlin-class W8A16 module's compiled-in source (`cu/marlin.cu` after `ptx.cuh` and
/// `epilogue.cuh`).
pub const MARLIN: &str = embedded_source!(["epilogue.cuh"] "marlin.cu");

/// The single `cu/` files the modules are put together from, for the assembly test below
/// (the host models compile whole modules).
#[cfg(test)]
mod testing {
    /// The basic types and every PTX wrapper (first in every module).
    pub const PTX: &str = cu!("ptx.cuh");
    /// Quantization helpers (e4m3 encoding, scales, group quantization, scale blocks).
    pub const QUANT_HELPERS: &str = cu!("quant.cuh");
    /// Output stores, bias, the split-K last-arriver protocol.
    pub const EPILOGUE: &str = cu!("epilogue.cuh");
    /// Activation quantization kernels and the weight row-padding kernel.
    pub const QUANT_BODY: &str = cu!("quant.cu");
    /// The portable block-FP8 GEMM and its split-K epilogue.
    pub const BLOCK_GEMM_BODY: &str = cu!("block_gemm.cu");
    /// The wgmma wrappers of the Hopper GEMM, one per tile width.
    pub const WGMMA: &str = cu!("wgmma.cuh");
    /// The Hopper block-FP8 GEMM (wgmma + TMA) and its split-K epilogue.
    pub const HOPPER_GEMM_BODY: &str = cu!("hopper_gemm.cu");
    /// The decode block-FP8 GEMM (M <= 16, quantization and split-K reduction inside).
    pub const DECODE_GEMM_BODY: &str = cu!("decode_gemm.cu");
    /// The Marlin-class W8A16 kernel.
    pub const MARLIN_BODY: &str = cu!("marlin.cu");
}

/// `cu/ptx.cuh` then `cu/quant.cuh`: the device encoders and quantization helpers, for test
/// kernels that check them on a GPU (tests/tests/gpu_quant.rs).
#[doc(hidden)]
pub const QUANT_HEADERS: &str = concat!(cu!("ptx.cuh"), "\n", cu!("quant.cuh"));

/// The quantization module.
pub fn quant_module() -> ModuleSpec {
    ModuleSpec::new("fp8_quant", module_source!(["quant.cuh"] "quant.cu"))
}

/// The `-D` options of a scale block `(rows along N, cols along K)` (none for 128 x 128,
/// the sources' default).
fn scale_block_options(spec: ModuleSpec, (rows, cols): (usize, usize)) -> ModuleSpec {
    if (rows, cols) == (128, 128) {
        return spec;
    }
    spec.option(format!("-DSBN={rows}"))
        .option(format!("-DSBK={cols}"))
}

/// The portable GEMM module for `mt` m16 tiles per warp (BM = 32 * mt), `stages` pipeline
/// stages, registers for `blocks_per_sm` resident blocks (1, the sources' default, or 2:
/// at most 128 per thread) and weight scale blocks of `block` = (rows along N, cols along K).
pub fn block_gemm_module(
    mt: u32,
    stages: u32,
    blocks_per_sm: u32,
    block: (usize, usize),
) -> ModuleSpec {
    block_spec("fp8_block_gemm", mt, stages, blocks_per_sm, block)
}

/// The grouped portable module: the same source with `-DBLOCK_GROUPED`, whose kernels
/// (`block_grouped_{f32,f16,bf16}`) run E stacked experts over row tiles of their rows,
/// with per-row routing weights (arguments as [`block_gemm_module`]).
pub fn block_grouped_module(
    mt: u32,
    stages: u32,
    blocks_per_sm: u32,
    block: (usize, usize),
) -> ModuleSpec {
    block_spec("fp8_block_grouped", mt, stages, blocks_per_sm, block)
        .option("-DBLOCK_GROUPED".to_string())
}

/// The portable source as module `name` (see [`block_gemm_module`]).
fn block_spec(
    name: &'static str,
    mt: u32,
    stages: u32,
    blocks_per_sm: u32,
    block: (usize, usize),
) -> ModuleSpec {
    let mut spec = ModuleSpec::new(
        name,
        module_source!(["quant.cuh", "epilogue.cuh"] "block_gemm.cu"),
    )
    .option(format!("-DMT={mt}"))
    .option(format!("-DSTAGES={stages}"));
    if blocks_per_sm > 1 {
        spec = spec.option(format!("-DMINB={blocks_per_sm}"));
    }
    scale_block_options(spec, block)
}

/// The Hopper module (compiled for the arch-specific `sm_90a`) for weight scale blocks of
/// `block` = (rows along N, cols along K) and the output dtype as a float index
/// (`dtype::float_index`: 0 f32, 1 f16, 2 bf16, the sources' default; `-DHOPPER_OUT`).
pub fn hopper_module(block: (usize, usize), output: usize) -> ModuleSpec {
    hopper_spec("fp8_hopper_gemm", block, output)
}

/// The grouped Hopper module: the same source with `-DHOPPER_GROUPED`, whose kernels
/// (`hopper_grouped_*`, one per tile without clusters) run E stacked experts over segments
/// of the rows, with per-row routing weights.
pub fn hopper_grouped_module(block: (usize, usize), output: usize) -> ModuleSpec {
    hopper_spec("fp8_hopper_grouped", block, output).option("-DHOPPER_GROUPED".to_string())
}

/// The Hopper source as module `name`, for `block` and `output` (see [`hopper_module`]).
fn hopper_spec(name: &'static str, block: (usize, usize), output: usize) -> ModuleSpec {
    let mut spec = ModuleSpec::new(
        name,
        module_source!(["quant.cuh", "epilogue.cuh", "wgmma.cuh"] "hopper_gemm.cu"),
    )
    .arch_specific();
    if output != 2 {
        spec = spec.option(format!("-DHOPPER_OUT={output}"));
    }
    scale_block_options(spec, block)
}

/// The decode module for weight scale blocks of `block` = (rows along N, 128 along K) and
/// the layer's (input, output) dtypes as float indices (`dtype::float_index`: 0 f32, 1 f16,
/// 2 bf16; `-DDEC_IN` / `-DDEC_OUT`).
pub fn decode_module(block: (usize, usize), (input, output): (usize, usize)) -> ModuleSpec {
    let spec = ModuleSpec::new(
        "fp8_decode_gemm",
        module_source!(["quant.cuh", "epilogue.cuh"] "decode_gemm.cu"),
    )
    .option(format!("-DDEC_IN={input}"))
    .option(format!("-DDEC_OUT={output}"));
    scale_block_options(spec, block)
}

/// The Marlin module. Load it with [`Gpu::module_for`](fp8_linear_cuda::Gpu::module_for) to
/// compile for an older target.
pub fn marlin_module() -> ModuleSpec {
    ModuleSpec::new("marlin_w8a16", module_source!(["epilogue.cuh"] "marlin.cu"))
}

/// The grouped Marlin module: the same source with `-DMARLIN_GROUPED`, whose kernels
/// (`marlin_grouped_{f16,bf16}_mt{1,2,4,8}`) run E stacked experts over items of their rows
/// (see `cu/marlin.cu`).
pub fn marlin_grouped_module() -> ModuleSpec {
    ModuleSpec::new(
        "marlin_grouped",
        module_source!(["epilogue.cuh"] "marlin.cu"),
    )
    .option("-DMARLIN_GROUPED".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line-by-line port of the device encoder `f32_to_e4m3` in `cu/quant.cuh` (integer
    /// RNE on the f32 bits), checked against core's reference encoder on every 251st f32 bit
    /// pattern (17 million values, all exponents, both signs, NaN and infinities).
    fn device_encoder(x: f32) -> u8 {
        let sign = ((x.to_bits() >> 24) & 0x80) as u8;
        if x.is_nan() {
            return 0x7f;
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

    /// A port of the device's `div_by_scale`: q0 = x r, e = q0 s - x, q = q0 - e r.
    fn device_division(x: f32, s: f32, r: f32) -> f32 {
        let q0 = x * r;
        let e = q0.mul_add(s, -x);
        (-e).mul_add(r, q0)
    }

    /// A port of the device's `scale_from_amax_bits` for a finite absmax: the division by
    /// 448 as `div_by_scale` with the correctly rounded 1 / 448.
    fn device_scale(amax: f32) -> f32 {
        device_division(amax.max(1e-10), 448.0, f32::from_bits(0x3b12_4925))
    }

    #[test]
    fn device_reciprocal_of_448_is_correctly_rounded() {
        assert_eq!(f32::from_bits(0x3b12_4925), 1.0 / 448.0);
        // Every 97th finite absmax >= 1e-10 (the kernels' floor), both ends included.
        for bits in (0x2edb_e6ffu32..0x7f80_0000)
            .step_by(97)
            .chain([0x7f7f_ffff])
        {
            let a = f32::from_bits(bits);
            assert_eq!(device_scale(a), a.max(1e-10) / 448.0, "amax = {a:e}");
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
            assert_eq!(device_scale(amax), scale, "amax = {amax:e}");
            let q = device_division(x, scale, 1.0 / scale);
            assert_eq!(q.is_sign_negative(), x.is_sign_negative(), "x = {x:e}");
            assert_eq!(
                device_encoder(q),
                fp8_linear_core::fp8::f32_to_e4m3(x / scale),
                "x = {x:e}, scale = {scale:e}"
            );
        }
    }

    /// The modules are `ptx.cuh`, the headers they use, then the body, a newline between
    /// each two (the disk cache's keys hash the source).
    #[test]
    fn module_sources_put_the_helpers_first() {
        use testing::*;
        let parts: [(ModuleSpec, &[&str]); 5] = [
            (quant_module(), &[PTX, QUANT_HELPERS, QUANT_BODY]),
            (
                block_gemm_module(1, 4, 1, (128, 128)),
                &[PTX, QUANT_HELPERS, EPILOGUE, BLOCK_GEMM_BODY],
            ),
            (
                hopper_module((128, 128), 2),
                &[PTX, QUANT_HELPERS, EPILOGUE, WGMMA, HOPPER_GEMM_BODY],
            ),
            (
                decode_module((128, 128), (2, 2)),
                &[PTX, QUANT_HELPERS, EPILOGUE, DECODE_GEMM_BODY],
            ),
            (marlin_module(), &[PTX, EPILOGUE, MARLIN_BODY]),
        ];
        for (spec, parts) in parts {
            assert_eq!(spec.source, parts.join("\n"), "{}", spec.name);
        }
        assert_eq!(marlin_module().source, MARLIN);
        // No body includes anything (NVRTC gets no include paths).
        for body in [PTX, QUANT_HELPERS, EPILOGUE, QUANT_BODY, BLOCK_GEMM_BODY]
            .into_iter()
            .chain([WGMMA, HOPPER_GEMM_BODY, DECODE_GEMM_BODY, MARLIN_BODY])
        {
            assert!(!body.contains("#include"));
        }
        assert!(hopper_module((32, 32), 2).arch_specific);
        // The output dtype is a `-D` option but for bf16, the sources' default.
        assert!(hopper_module((128, 128), 2).options.is_empty());
        assert_eq!(hopper_module((128, 128), 0).options, ["-DHOPPER_OUT=0"]);
        // The grouped module: the same source, its own name and `-DHOPPER_GROUPED`.
        let grouped = hopper_grouped_module((128, 128), 2);
        assert_eq!(grouped.source, hopper_module((128, 128), 2).source);
        assert_eq!(grouped.options, ["-DHOPPER_GROUPED"]);
        assert_ne!(grouped.name, hopper_module((128, 128), 2).name);
        assert_eq!(marlin_grouped_module().source, MARLIN);
        assert_eq!(marlin_grouped_module().options, ["-DMARLIN_GROUPED"]);
        // 128 x 128 blocks are the sources' default; other blocks are `-D` options.
        assert!(block_gemm_module(1, 4, 1, (128, 128)).options.len() == 2);
        assert!(block_gemm_module(1, 4, 1, (32, 64)).options.len() == 4);
        assert!(block_gemm_module(1, 4, 2, (128, 128)).options.len() == 3);
        assert!(!quant_module().arch_specific);
    }

    /// Compiles every module for the targets it runs on when NVRTC is installed (no GPU
    /// needed); prints why it skipped otherwise.
    #[test]
    fn sources_compile_with_nvrtc() {
        if let Err(e) = fp8_linear_cuda::probe::nvrtc() {
            eprintln!("skipped: {e}");
            return;
        }
        // FP8 mma needs sm_89; wgmma and TMA sm_90a; Marlin's bf16 mma sm_80.
        let specs: [(ModuleSpec, &[&str]); 22] = [
            (quant_module(), &["sm_80", "sm_89", "sm_90"]),
            (block_gemm_module(1, 4, 1, (128, 128)), &["sm_89", "sm_90"]),
            (block_gemm_module(2, 4, 1, (128, 128)), &["sm_89", "sm_90"]),
            (block_gemm_module(4, 4, 1, (128, 128)), &["sm_89", "sm_90"]),
            (block_gemm_module(4, 3, 2, (128, 128)), &["sm_89", "sm_90"]),
            (block_gemm_module(4, 4, 1, (32, 32)), &["sm_89"]),
            (block_gemm_module(1, 4, 1, (8, 64)), &["sm_89"]),
            (block_gemm_module(2, 4, 1, (128, 64)), &["sm_89"]),
            (
                block_grouped_module(4, 4, 1, (128, 128)),
                &["sm_89", "sm_90"],
            ),
            (block_grouped_module(1, 3, 2, (64, 64)), &["sm_89"]),
            (hopper_module((128, 128), 2), &["sm_90a"]),
            (hopper_module((128, 128), 0), &["sm_90a"]),
            (hopper_module((32, 32), 1), &["sm_90a"]),
            (hopper_module((64, 64), 2), &["sm_90a"]),
            (hopper_module((128, 64), 0), &["sm_90a"]),
            (hopper_grouped_module((128, 128), 2), &["sm_90a"]),
            (hopper_grouped_module((64, 64), 1), &["sm_90a"]),
            (marlin_module(), &["sm_80", "sm_86", "sm_89"]),
            (marlin_grouped_module(), &["sm_80", "sm_89"]),
            (decode_module((128, 128), (2, 2)), &["sm_89", "sm_90"]),
            (decode_module((128, 128), (0, 1)), &["sm_90"]),
            (decode_module((8, 128), (1, 0)), &["sm_90"]),
        ];
        for (spec, arches) in &specs {
            for arch in *arches {
                let cubin = spec.compile_cubin(arch).unwrap_or_else(|e| panic!("{e}"));
                assert!(cubin.len() > 1000, "{} {arch}", spec.name);
            }
        }
    }
}
