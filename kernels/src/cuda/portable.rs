//! Our own block-scaled FP8 GEMM for sm_89 and newer: FP8 `mma.sync` m16n8k32 with f32
//! accumulation, 1x128 activation / 128x128 weight scales applied per 128-long K block,
//! masking for any M, N, K, split-K for small grids. The role the Triton block kernel plays
//! upstream, with an honest arch (FP8 tensor-core instructions exist from sm_89 on).

use fp8_linear_core::kernel::processed;
use std::sync::Arc;

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use fp8_linear_core::quant::{GroupShape, ScaleDtype};
use fp8_linear_core::validate::check_config_basics;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, DType, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor,
    TensorMut, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{DeviceBuffer, Gpu};

use super::common::{be, check_row_count, device_io, float_index, gpu_of, Scratch, FLOAT_NAMES};
use super::quant::{ActQuant, GroupQuantBuffers, ScaleOrder};
use super::sources;
use super::weights::DeviceWeights;

const NAME: &str = PortableBlockFp8::NAME;

/// Portable block-scaled FP8 GEMM (FP8 `mma.sync`, sm_89+), 128x128 weight blocks and
/// dynamic 1x128 activation groups, any M, N, K, bf16/f16/f32 in and out, optional bias.
#[fp8_kernel(platform = Cuda, priority = 5, arch = sm89.., backend = portable)]
pub struct PortableBlockFp8 {
    config: LayerConfig,
    gpu: Arc<Gpu>,
    state: Option<State>,
    forced: (Option<u32>, Option<usize>),
}

/// One compiled tile configuration.
struct Variant {
    mt: u32,
    stages: u32,
    smem: u32,
    gemm: [CudaFunction; 3],
    _module: Arc<CudaModule>,
}

struct State {
    w: DeviceWeights,
    /// Weight block scales `[ceil(n/128), ceil(k/128)]` row-major.
    bs: DeviceBuffer<f32>,
    quant: ActQuant,
    variants: Vec<Variant>,
    finalize: [CudaFunction; 3],
    act: GroupQuantBuffers,
    ws: Scratch<f32>,
}

impl PortableBlockFp8 {
    /// Builds the kernel for a layer on the context's GPU (nothing touches the GPU until
    /// `process_weights`).
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(PortableBlockFp8 {
            config: *ctx.config(),
            gpu: gpu_of(NAME, ctx)?,
            state: None,
            forced: (None, None),
        })
    }

    /// Forces the tile height (`mt` m16 tiles per warp: BM = 32 * mt, one of 1, 2, 4) and
    /// the split-K factor (clamped to the K-block count) instead of choosing them from M and
    /// the SM count; for tests and tuning. `None` keeps the automatic choice.
    pub fn force_launch(&mut self, mt: Option<u32>, splits: Option<usize>) {
        self.forced = (mt, splits);
    }
}

/// Layers the block-FP8 CUDA kernels accept: 128x128 f32 weight blocks, dynamic 1x128 f32
/// activation groups, float input and output.
pub(crate) const fn block_128_checks(config: &LayerConfig) -> Result<(), Unsupported> {
    if let Err(e) = check_config_basics(config) {
        return Err(e);
    }
    match config.weight.group {
        GroupShape::Block {
            rows: 128,
            cols: 128,
        } => {}
        _ => {
            return Err(Unsupported::new(
                "weights must be quantized in 128x128 blocks",
            ))
        }
    }
    if matches!(config.weight.scale_dtype, ScaleDtype::Ue8m0) {
        return Err(Unsupported::new("ue8m0 weight scales are not supported"));
    }
    match config.activation {
        Some(a) => {
            if !matches!(a.group, GroupShape::Group { cols: 128 }) {
                return Err(Unsupported::new(
                    "activations must be quantized in 1x128 groups",
                ));
            }
            if !a.dynamic {
                return Err(Unsupported::new(
                    "only dynamic per-token-group activation quantization is supported",
                ));
            }
            if matches!(a.scale_dtype, ScaleDtype::Ue8m0) {
                return Err(Unsupported::new(
                    "ue8m0 activation scales are not supported",
                ));
            }
        }
        None => return Err(Unsupported::new("activations must be quantized (W8A8)")),
    }
    if matches!(config.input_dtype, DType::F8E4m3) {
        return Err(Unsupported::new("input dtype must be f32, f16 or bf16"));
    }
    if matches!(config.output_dtype, DType::F8E4m3) {
        return Err(Unsupported::new("output dtype must be f32, f16 or bf16"));
    }
    if config.n > i32::MAX as usize || config.k > i32::MAX as usize {
        return Err(Unsupported::new("N and K must fit in 32 bits"));
    }
    Ok(())
}

fn load_variant(gpu: &Arc<Gpu>, mt: u32, optin: u32) -> Result<Variant, KernelError> {
    let stage_bytes = (32 * mt + 128) * 128;
    let stages = (optin / stage_bytes).clamp(2, 4);
    let smem = stages * stage_bytes;
    let (module, _) = gpu
        .module(&sources::block_gemm_module(mt, stages))
        .map_err(be(NAME))?;
    let f = |suffix: &str| -> Result<CudaFunction, KernelError> {
        let name = format!("block_gemm_{suffix}");
        let func = module
            .load_function(&name)
            .map_err(|e| KernelError::backend(NAME, format!("loading {name}: {e:?}")))?;
        // SAFETY: a valid function handle; raising its dynamic shared memory limit.
        unsafe {
            cudarc::driver::result::function::set_function_attribute(
                func.cu_function(),
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
        }
        .map_err(|e| {
            KernelError::backend(
                NAME,
                format!("setting {smem} B shared memory on {name}: {e:?}"),
            )
        })?;
        Ok(func)
    };
    Ok(Variant {
        mt,
        stages,
        smem,
        gemm: [f(FLOAT_NAMES[0])?, f(FLOAT_NAMES[1])?, f(FLOAT_NAMES[2])?],
        _module: module,
    })
}

impl Fp8Kernel for PortableBlockFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        block_128_checks(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let gpu = self.gpu.clone();
        let w = DeviceWeights::load(NAME, &gpu, &self.config, weights)?;
        let bs = DeviceBuffer::from_host(&gpu, &w.host_scales).map_err(be(NAME))?;
        let quant = ActQuant::new(&gpu).map_err(be(NAME))?;
        let optin = gpu
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| KernelError::backend(NAME, format!("shared memory limit: {e:?}")))?
            as u32;
        let variants = [1, 2, 4]
            .into_iter()
            .map(|mt| load_variant(&gpu, mt, optin))
            .collect::<Result<Vec<_>, _>>()?;
        let m0 = &variants[0]._module;
        let fin = |s: &str| {
            m0.load_function(&format!("splitk_finalize_{s}"))
                .map_err(|e| {
                    KernelError::backend(NAME, format!("loading splitk_finalize_{s}: {e:?}"))
                })
        };
        let finalize = [fin("f32")?, fin("f16")?, fin("bf16")?];
        self.state = Some(State {
            w,
            bs,
            quant,
            variants,
            finalize,
            act: GroupQuantBuffers::default(),
            ws: Scratch::default(),
        });
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let c = self.config;
        let gpu = self.gpu.clone();
        let st = processed(&mut self.state, NAME)?;
        let (m, x, out) = device_io(NAME, &c, &gpu, input, output)?;
        let (n, k) = (c.n, c.k);
        check_row_count(input, m, n)?;
        let kb = k.div_ceil(128);
        let ldk = st.w.ldk;
        let stream = gpu.raw_stream();
        // SAFETY: x holds the m * k input elements (checked by device_io) on this GPU.
        let (q, a_s) = unsafe {
            st.act.quantize(
                &st.quant,
                &gpu,
                x.ptr,
                c.input_dtype,
                (m, k, m, ldk),
                ScaleOrder::RowMajor,
            )
        }
        .map_err(be(NAME))?;

        let v = match (self.forced.0, m) {
            (Some(1), _) | (None, 0..=32) => &st.variants[0],
            (Some(2), _) | (None, 33..=64) => &st.variants[1],
            _ => &st.variants[2],
        };
        let bm = 32 * v.mt as usize;
        let (gn, gm) = (n.div_ceil(128), m.div_ceil(bm));
        let tiles = gn * gm;
        let sms = gpu.device().sm_count.max(1) as usize;
        let mut splits = match self.forced.1 {
            Some(s) => s.clamp(1, kb),
            None if tiles >= sms => 1,
            None => (2 * sms).div_ceil(tiles).min(kb),
        };
        let kb_per_split = kb.div_ceil(splits.max(1));
        splits = kb.div_ceil(kb_per_split);
        if gm > 65535 {
            return Err(KernelError::shape(
                "input",
                "[M <= 65535 * 128, K]",
                format!("{:?}", input.shape),
            ));
        }
        let oi = float_index("output", c.output_dtype)?;
        let ws = if splits > 1 {
            let buf = st.ws.get(&gpu, m * n).map_err(be(NAME))?;
            let p = buf.ptr();
            // SAFETY: p addresses at least m*n floats of this GPU.
            unsafe {
                cudarc::driver::result::memset_d8_async(
                    p,
                    0,
                    m * n * 4,
                    stream as cudarc::driver::sys::CUstream,
                )
            }
            .map_err(|e| {
                KernelError::backend(NAME, format!("clearing the split-K workspace: {e:?}"))
            })?;
            p
        } else {
            0u64
        };
        let bias = st.w.bias.as_ref().map(|b| b.ptr()).unwrap_or(0);
        let (wptr, bsptr) = (st.w.codes.ptr(), st.bs.ptr());
        let (mi, ni, ki, kpi) = (m as i32, n as i32, k as i32, ldk as i32);
        let ld = ldk as i32;
        let kbs = kb_per_split as i32;
        // SAFETY: the stream belongs to this GPU (checked ordinal); every pointer addresses
        // memory of the sizes the kernel reads/writes (A m*ldk, As m*kb, B n*ldk, Bs
        // ceil(n/128)*kb, out m*n, ws m*n when split); masking keeps accesses in bounds.
        unsafe {
            let s = gpu.stream();
            let mut b = s.launch_builder(&v.gemm[oi]);
            b.arg(&q)
                .arg(&ld)
                .arg(&a_s)
                .arg(&wptr)
                .arg(&ld)
                .arg(&bsptr)
                .arg(&out.ptr)
                .arg(&ws)
                .arg(&bias);
            b.arg(&mi).arg(&ni).arg(&ki).arg(&kpi).arg(&kbs);
            b.launch(LaunchConfig {
                grid_dim: (gn as u32, gm as u32, splits as u32),
                block_dim: (256, 1, 1),
                shared_mem_bytes: v.smem,
            })
            .map_err(|e| {
                KernelError::backend(
                    NAME,
                    format!("launching block_gemm (BM={bm}, {} stages): {e:?}", v.stages),
                )
            })?;
            if splits > 1 {
                let blocks = ((m * n).div_ceil(256)).min(4096) as u32;
                let mut f = s.launch_builder(&st.finalize[oi]);
                f.arg(&ws).arg(&out.ptr).arg(&bias).arg(&mi).arg(&ni);
                f.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                })
                .map_err(|e| {
                    KernelError::backend(NAME, format!("launching splitk_finalize: {e:?}"))
                })?;
            }
        }
        Ok(())
    }
}
