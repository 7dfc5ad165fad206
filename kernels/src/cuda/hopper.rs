//! Hopper block-scaled FP8 GEMM (sm_90a, the DeepGEMM class): TMA loads into a multi-stage
//! shared-memory ring with mbarriers, a producer warpgroup with few registers (setmaxnreg),
//! math warpgroups issuing wgmma m64n128k32 e4m3 from 128B-swizzled descriptors, per-128-K
//! promotion into f32 with the 1x128 activation and 128x128 weight scales, persistent tile
//! scheduling, and split-K (each split stores its partial tile to an f32 workspace, an
//! epilogue kernel sums them in order) when the tiles do not fill the GPU.
//! Source: `cu/hopper_gemm.cu`.

use fp8_linear_core::kernel::processed;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut,
    Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{DeviceBuffer, Gpu, ModuleSpec};

use super::common::{be, check_row_count, device_io, float_index, gpu_of, Scratch, FLOAT_NAMES};
use super::portable::block_128_checks;
use super::quant::{ActQuant, GroupQuantBuffers, ScaleOrder};
use super::sources::COMMON;
use super::tma::TensorMap;
use super::weights::DeviceWeights;

const NAME: &str = HopperBlockFp8::NAME;
/// The kernel body (device code of the module after the shared helpers).
const BODY: &str = include_str!("cu/hopper_gemm.cu");

/// The Hopper module spec (compiled for `sm_90a`).
pub fn hopper_module() -> ModuleSpec {
    static SRC: OnceLock<&'static str> = OnceLock::new();
    let src = SRC.get_or_init(|| Box::leak(format!("{COMMON}\n{BODY}").into_boxed_str()));
    ModuleSpec {
        arch_specific: true,
        ..ModuleSpec::new("fp8_hopper_gemm", src)
    }
}

/// Block-scaled FP8 GEMM with wgmma and TMA for Hopper (sm_90a exactly): 128x128 weight
/// blocks, dynamic 1x128 activation groups, any M, N, K, f32/f16/bf16 in and out, bias.
#[fp8_kernel(platform = Cuda, priority = 1, arch = sm90a, backend = hopper)]
pub struct HopperBlockFp8 {
    config: LayerConfig,
    gpu: Arc<Gpu>,
    /// Upper bound on K splits (the build options' `max_splits`, default 16).
    max_splits: usize,
    state: Option<State>,
}

/// One tile height: BM rows per CTA (64 * math warpgroups), its pipeline depth and kernels.
struct Variant {
    bm: usize,
    smem: u32,
    gemm: [CudaFunction; 3],
}

/// BM 64 (one math warpgroup, 8 stages of 24 KiB) and BM 128 (two, 6 stages of 32 KiB);
/// must match `HOPPER_KERNEL` in the source. 1 KiB covers the 1024-byte alignment.
const VARIANTS: [(usize, u32, &str); 2] = [
    (64, 1024 + 8 * (64 * 128 + 128 * 128) + 16 * 8, "bm64"),
    (128, 1024 + 6 * (128 * 128 + 128 * 128) + 16 * 6, "bm128"),
];

struct State {
    w: DeviceWeights,
    /// Weight block scales `[ceil(n/128), ceil(k/128)]` row-major.
    bs: DeviceBuffer<f32>,
    /// Tensor map of the weight codes (box 128 x 128).
    tb: TensorMap,
    quant: ActQuant,
    variants: [Variant; 2],
    finalize: [CudaFunction; 3],
    _module: Arc<CudaModule>,
    act: GroupQuantBuffers,
    ws: Scratch<f32>,
    /// Last activation tensor map: (codes address, M, BM) -> map.
    ta: Option<((u64, usize, usize), TensorMap)>,
}

impl HopperBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(HopperBlockFp8 {
            config: *ctx.config(),
            gpu: gpu_of(NAME, ctx)?,
            max_splits: ctx
                .options()
                .max_splits
                .map_or(16, usize::from)
                .clamp(1, 16),
            state: None,
        })
    }
}

/// K splits for `tiles` output tiles (of `mn` output elements in all) and `kb` K blocks on
/// `sms` SMs, at most `max` (<= 16): returns (splits, K blocks per split). A cost model fitted
/// on an H200 (BENCHMARKS.md, "GPU: Hopper wgmma block-FP8 kernel", the columns with and
/// without splits; it reproduces those times within about 10 %): per wave of CTAs, a K block
/// takes 0.4 us or the time to stream the wave's 16 KiB weight tiles at 4.3 TB/s, whichever
/// is longer, and a work unit adds 1.4 us (pipeline fill, promotion, epilogue); splitting
/// adds 6 us (the epilogue kernel) plus writing and reading an f32 partial per split and
/// output element at about 3 TB/s. No split when the tiles fill two waves.
pub fn plan_splits(tiles: usize, kb: usize, sms: usize, mn: usize, max: usize) -> (usize, usize) {
    let sms = sms.max(1);
    if tiles >= 2 * sms || kb <= 1 {
        return (1, kb);
    }
    let cost = |s: usize| -> (f64, usize, usize) {
        let per = kb.div_ceil(s);
        let s_eff = kb.div_ceil(per);
        let mut left = tiles * s_eff;
        let mut t = 0.0;
        while left > 0 {
            let active = left.min(sms);
            let t_kb = ((active * 16384) as f64 / 4.3e6).max(0.4);
            t += per as f64 * t_kb + 1.4;
            left -= active;
        }
        if s_eff > 1 {
            t += 6.0 + (s_eff * mn * 8) as f64 / 3e6;
        }
        (t, s_eff, per)
    };
    let mut best = cost(1);
    for s in 2..=kb.min(max.clamp(1, 16)) {
        let c = cost(s);
        if c.0 < best.0 * 0.97 {
            best = c;
        }
    }
    (best.1, best.2)
}

/// The loaded module, its two tile variants and the split-K epilogues.
type Loaded = (Arc<CudaModule>, [Variant; 2], [CudaFunction; 3]);

fn load(gpu: &Arc<Gpu>) -> Result<Loaded, KernelError> {
    let optin = gpu
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| KernelError::backend(NAME, format!("shared memory limit: {e:?}")))?
        as u32;
    let (module, _) = gpu.module(&hopper_module()).map_err(be(NAME))?;
    let func = |name: String| -> Result<CudaFunction, KernelError> {
        module
            .load_function(&name)
            .map_err(|e| KernelError::backend(NAME, format!("loading {name}: {e:?}")))
    };
    let variant = |(bm, smem, tag): (usize, u32, &str)| -> Result<Variant, KernelError> {
        if smem > optin {
            return Err(KernelError::backend(
                NAME,
                format!("needs {smem} B of shared memory per block, the device allows {optin}"),
            ));
        }
        let mut fs = Vec::with_capacity(3);
        for suffix in FLOAT_NAMES {
            let name = format!("hopper_gemm_{tag}_{suffix}");
            let f = func(name.clone())?;
            // SAFETY: a valid function handle; raising its dynamic shared memory limit.
            unsafe {
                cudarc::driver::result::function::set_function_attribute(
                    f.cu_function(),
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            }
            .map_err(|e| KernelError::backend(NAME, format!("shared memory on {name}: {e:?}")))?;
            fs.push(f);
        }
        let [a, b, c]: [CudaFunction; 3] = fs
            .try_into()
            .map_err(|_| KernelError::backend(NAME, "three output dtypes expected".to_string()))?;
        Ok(Variant {
            bm,
            smem,
            gemm: [a, b, c],
        })
    };
    let variants = [variant(VARIANTS[0])?, variant(VARIANTS[1])?];
    let finalize = [
        func("hopper_finalize_f32".into())?,
        func("hopper_finalize_f16".into())?,
        func("hopper_finalize_bf16".into())?,
    ];
    Ok((module, variants, finalize))
}

impl Fp8Kernel for HopperBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        // Rows are padded to 16 bytes at load (TMA's stride rule), so any K works; TMA
        // zero-fills partial tiles and the stores are masked, so any M and N work.
        block_128_checks(config)?;
        // Tile coordinates (up to N + 127) are 32-bit in the kernel and in TMA.
        if config.n > i32::MAX as usize - 256 || config.k > i32::MAX as usize - 256 {
            return Err(Unsupported::new("N and K must be below 2^31 - 256"));
        }
        Ok(())
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let gpu = self.gpu.clone();
        let w = DeviceWeights::load(NAME, &gpu, &self.config, weights)?;
        let bs = DeviceBuffer::from_host(&gpu, &w.host_scales).map_err(be(NAME))?;
        let quant = ActQuant::new(&gpu).map_err(be(NAME))?;
        let (module, variants, finalize) = load(&gpu)?;
        let tb = TensorMap::e4m3_2d(w.codes.ptr(), self.config.n, w.ldk, w.ldk, 128, 128)
            .map_err(|e| KernelError::backend(NAME, e))?;
        self.state = Some(State {
            w,
            bs,
            tb,
            quant,
            variants,
            finalize,
            _module: module,
            act: GroupQuantBuffers::default(),
            ws: Scratch::default(),
            ta: None,
        });
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let c = self.config;
        let gpu = self.gpu.clone();
        let max_splits = self.max_splits;
        let st = processed(&mut self.state, NAME)?;
        let (m, x, out) = device_io(NAME, &c, &gpu, input, output)?;
        let (n, k) = (c.n, c.k);
        check_row_count(input, m, n)?;
        let kb = k.div_ceil(128);
        let ldk = st.w.ldk;
        // SAFETY: x holds the m * k input elements (checked by device_io) on this GPU.
        let (q, a_s) = unsafe {
            st.act.quantize(
                &st.quant,
                &gpu,
                x.ptr,
                c.input_dtype,
                (m, k, m, ldk),
                ScaleOrder::ColMajor,
            )
        }
        .map_err(be(NAME))?;

        let v = if m <= 64 {
            &st.variants[0]
        } else {
            &st.variants[1]
        };
        let key = (q, m, v.bm);
        let ta = match &st.ta {
            Some((k0, map)) if *k0 == key => *map,
            _ => {
                let map = TensorMap::e4m3_2d(q, m, ldk, ldk, v.bm as u32, 128)
                    .map_err(|e| KernelError::backend(NAME, e))?;
                st.ta = Some((key, map));
                map
            }
        };
        let tiles = m.div_ceil(v.bm) * n.div_ceil(128);
        let sms = gpu.device().sm_count.max(1) as usize;
        let (splits, kbps) = plan_splits(tiles, kb, sms, m * n, max_splits);
        let units = tiles * splits;
        if units > i32::MAX as usize {
            // The kernel numbers its work units with 32-bit integers.
            return Err(KernelError::shape(
                "input",
                "[M, K] with fewer than 2^31 work units of 64 or 128 rows x 128 columns",
                format!("{:?}", input.shape),
            ));
        }
        let grid = units.min(sms) as u32;
        let oi = float_index("output", c.output_dtype)?;
        let ws = if splits > 1 {
            // Every split stores every valid element of its tiles: no clearing needed.
            let len = (m * n).checked_mul(splits).ok_or_else(|| {
                KernelError::backend(NAME, format!("split-K workspace of {splits} x {m} x {n}"))
            })?;
            st.ws.get(&gpu, len).map_err(be(NAME))?.ptr()
        } else {
            0u64
        };
        let bias = st.w.bias.as_ref().map(|b| b.ptr()).unwrap_or(0);
        let bsptr = st.bs.ptr();
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (kbpsi, splitsi) = (kbps as i32, splits as i32);
        let tb = st.tb;
        // SAFETY: the layer's stream belongs to this GPU; the tensor maps cover A
        // (m x ldk bytes at q) and B (n x ldk bytes of the weight codes); As holds kb*m
        // floats, Bs ceil(n/128)*kb, out m*n elements, ws splits*m*n floats when split; the
        // kernel masks every store and TMA zero-fills out-of-bounds boxes.
        unsafe {
            let s = gpu.stream();
            let mut b = s.launch_builder(&v.gemm[oi]);
            b.arg(&ta)
                .arg(&tb)
                .arg(&a_s)
                .arg(&bsptr)
                .arg(&out.ptr)
                .arg(&ws)
                .arg(&bias);
            b.arg(&mi).arg(&ni).arg(&ki).arg(&kbpsi).arg(&splitsi);
            b.launch(LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (128 * (v.bm as u32 / 64 + 1), 1, 1),
                shared_mem_bytes: v.smem,
            })
            .map_err(|e| {
                KernelError::backend(
                    NAME,
                    format!(
                        "launching hopper_gemm (BM={}, {splits} splits): {e:?}",
                        v.bm
                    ),
                )
            })?;
            if splits > 1 {
                let blocks = ((m * n).div_ceil(256)).min(4096) as u32;
                let mut f = s.launch_builder(&st.finalize[oi]);
                f.arg(&ws)
                    .arg(&out.ptr)
                    .arg(&bias)
                    .arg(&mi)
                    .arg(&ni)
                    .arg(&splitsi);
                f.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(|e| {
                    KernelError::backend(NAME, format!("launching hopper_finalize: {e:?}"))
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear_cuda::nvrtc;

    #[test]
    fn splits_fill_the_gpu_without_overshooting() {
        // Many tiles: no split.
        assert_eq!(plan_splits(1792, 56, 132, 4096 * 7168, 16), (1, 56));
        // M = 1, N = 4096 (32 tiles), 56 K blocks: one wave of at least 4 splits.
        let (s, per) = plan_splits(32, 56, 132, 4096, 16);
        assert!(s * 32 <= 132 && s >= 4, "{s}");
        assert!(per * s >= 56 && per * (s - 1) < 56);
        // The cap holds; never more splits than K blocks.
        assert_eq!(plan_splits(32, 56, 132, 4096, 1), (1, 56));
        assert_eq!(plan_splits(1, 1, 132, 1, 16), (1, 1));
        let (s, per) = plan_splits(3, 5, 132, 300, 16);
        assert!(s <= 5 && per * s >= 5);
        // Choices the H200 measurements back: a short K (16 blocks) over 56 tiles is not
        // split at M = 1 (splitting measured 1.7x slower); a long K over 32 or 144 tiles is.
        assert_eq!(plan_splits(56, 16, 132, 7168, 16).0, 1);
        assert!(plan_splits(32, 56, 132, 4096, 16).0 >= 3);
        assert!(plan_splits(144, 56, 132, 18432, 16).0 > 1);
        // Large outputs split less: the partials cost more than the waves they save.
        let (s_small, _) = plan_splits(68, 56, 132, 64 * 2112, 16);
        let (s_large, _) = plan_splits(68, 56, 132, 4096 * 2112, 16);
        assert!(s_large <= s_small, "{s_large} > {s_small}");
    }

    #[test]
    fn accepts_model_shapes_and_rejects_32_bit_overflow() {
        use fp8_linear_core::DType;
        for (n, k) in [(7748, 3884), (1, 1), (24576, 1536), (7, 16384)] {
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            assert!(HopperBlockFp8::can_implement(&c).is_ok(), "{n}x{k}");
        }
        let big = i32::MAX as usize - 100;
        for (n, k) in [(big, 128), (128, big)] {
            let c = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
            assert!(HopperBlockFp8::can_implement(&c).is_err(), "{n}x{k}");
        }
    }

    /// Compiles the module for sm_90a when NVRTC is installed (no GPU needed).
    #[test]
    fn source_compiles_for_sm90a() {
        if let Err(e) = fp8_linear_cuda::probe::nvrtc() {
            eprintln!("skipped: {e}");
            return;
        }
        let spec = hopper_module();
        let opts = vec!["--std=c++17".to_string(), "-default-device".to_string()];
        let cubin = nvrtc::compile_cubin(spec.name, spec.source, "sm_90a", &opts, &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(cubin.len() > 1000);
    }
}
