//! Marlin-class FP8 weight-only (W8A16) kernel: FP8 e4m3 weights streamed through a
//! shared-memory ring by cp.async, dequantized in registers to f16 / bf16 by a bit trick,
//! tensor-core `mma.sync` m16n8k16 with f32 accumulation, 16-bit activations, output in the
//! activation dtype, optional bias. The weight is cut into one contiguous range per resident
//! block, so every SM streams an equal share whatever the layer's shape; stripes cut between
//! blocks are summed in the kernel, in a fixed order (reruns are bit-identical).
//!
//! This is the kernel whose absence broke FP8 block checkpoints on A100s upstream: it runs
//! on sm_80..sm_89 (no FP8 tensor cores needed) and sits in the block-scaled table after
//! the Hopper kernels and before the portable FP8 kernel (which needs sm_89), first in the
//! per-tensor / per-channel table, and alone in the weight-only table. Forced by name
//! (`FP8_LINEAR_FORCE=MarlinFp8`), it runs on newer GPUs too.
//!
//! Its constructor takes the layer's parameter names ([`LayerParams<4>`]), the block
//! kernels' the config alone; the attribute checks both at compile time.
//!
//! - `repack`: the weight repack, scale conversion and padding (host side);
//! - `emulate`: a CPU model of the kernel's arithmetic, for tests (both reached by tests
//!   through the hidden `fp8_linear::cuda::testing`, not part of the API);
//! - [`plan`]: the launch plan (M tile, weight ranges, ring depth, workspace) and the
//!   pipeline tuning ([`plan::MarlinPipeline`]);
//! - `device`: the repacked weight on the device, the module's kernels and the launch
//!   arguments, which [`MarlinGroupedFp8`] (E experts in one launch) shares.

mod device;
pub(crate) mod emulate;
mod grouped;
pub mod plan;
pub(crate) mod repack;

pub use grouped::MarlinGroupedFp8;

use std::sync::Arc;

use cudarc::driver::PushKernelArg;
use fp8_linear_core::tensor::Storage;
use fp8_linear_core::validate::{check_config_basics, check_layer_weights};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Capability, DType, Fp8Kernel, KernelError, LayerConfig, LayerParam,
    LayerParams, LayerWeights, Tensor, Unsupported,
};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::Gpu;

use crate::cuda::skeleton::device_io::download;
use crate::cuda::skeleton::error::{be, be_at, compile_target};
use crate::cuda::skeleton::launch::{grid, launch};
use crate::cuda::skeleton::layer::{skeleton_calls, Call, GpuLayer, Io, Recipe};
use crate::cuda::skeleton::scratch::Scratch;
use crate::cuda::skeleton::weights::small_to_host;
use crate::cuda::sources;
use device::{DeviceMarlin, KernelNames};
use plan::{LaunchPlan, MarlinPipeline};
use repack::{k_group, K_ALIGN, STRIPE};

const NAME: &str = MarlinFp8::NAME;

/// The kernel's CUDA C source (`cu/marlin.cu`, header-free; NVRTC, sm_80 and newer), as
/// registered in [`sources`].
pub const SOURCE: &str = sources::MARLIN;

/// Largest N: the grid's y dimension counts weight ranges, one per 128-channel stripe when the
/// M chunks alone fill the GPU (at most 65535).
pub const MAX_N: usize = 65535 * STRIPE;

/// Marlin-class FP8 weight-only GEMM (W8A16) for Ampere-class GPUs (sm_80..sm_89; forcible
/// on newer ones). Weight scales per tensor, per output channel, per 1 x G group or per
/// Bn x Bk block with G / Bk a multiple of 32 (128 in checkpoints); activations f16 or bf16
/// and never quantized (a block layer's dynamic 1 x 128 activation key is ignored: the
/// kernel multiplies the 16-bit activations directly); any M, N, K.
#[fp8_kernel(platform = Cuda, priority = 4, arch = sm80..sm89, force_arch = sm80..,
             params = [weight, weight_scale, input_scale, input_scale_ub], backend = marlin,
             numerics = W8A16)]
pub struct MarlinFp8 {
    layer: GpuLayer<State>,
    params: LayerParams<4>,
    target: Option<Capability>,
    tuning: MarlinPipeline,
}

struct State {
    dev: DeviceMarlin,
    work: Scratch<f32>,
    counters: Scratch<u8>,
}

impl MarlinFp8 {
    /// Builds the kernel for a layer on the context's GPU with its parameters (`weight`,
    /// `weight_scale`, `input_scale`, `input_scale_ub`): the typed constructor the attribute
    /// checks. The options' `compile_for` picks an older target (see
    /// [`MarlinFp8::compile_for`]). Nothing touches the GPU until `process_weights`.
    pub fn new(ctx: &BuildCtx<'_>, params: LayerParams<4>) -> Result<Self, KernelError> {
        let config = ctx.config();
        Self::can_implement(config).map_err(|reason| KernelError::Unsupported {
            kernel: NAME,
            reason,
        })?;
        let mut k = MarlinFp8 {
            layer: GpuLayer::new(NAME, ctx)?,
            params,
            target: None,
            tuning: MarlinPipeline::default(),
        };
        if let Some(cap) = ctx.options().compile_for {
            k.compile_for(cap)?;
        }
        Ok(k)
    }

    /// Compiles the kernel for an older compute capability than the device's (say 8.0 on an
    /// H200, to run the code an A100 runs): NVRTC emits PTX for `compute_XY` and the driver
    /// compiles it for the device at load. Call before `process_weights`. Capabilities below
    /// 8.0 are refused (bf16 mma and `fma.bf16x2` need sm_80).
    pub fn compile_for(&mut self, cap: Capability) -> Result<(), KernelError> {
        let needs = "the Marlin kernel needs compute capability 8.0 or newer";
        self.target = Some(compile_target(NAME, cap, Capability::new(8, 0), needs)?);
        Ok(())
    }

    /// Sets the shared-memory ring depth, the blocks per SM and the tallest M tile (for
    /// benchmarks and tuning; the default suits H100/H200-class GPUs). Takes effect at the
    /// next call.
    pub fn set_tuning(&mut self, tuning: MarlinPipeline) -> Result<(), KernelError> {
        if !tuning.is_valid() {
            return Err(KernelError::backend(
                NAME,
                format!(
                    "tuning out of range (stages 2..=8, blocks per SM 1..=2, max tile rows 8, \
                     16, 32 or 64): {tuning:?}"
                ),
            ));
        }
        self.tuning = tuning;
        Ok(())
    }

    /// The layer parameter names this kernel was built with.
    pub fn params(&self) -> &LayerParams<4> {
        &self.params
    }
}

/// The FP8 codes of the weight on the host (copied back from the device if need be).
fn host_codes(w: &Tensor<'_>, n: usize, k: usize, gpu: &Arc<Gpu>) -> Result<Vec<u8>, KernelError> {
    match w.data {
        Storage::F8E4m3(s) => Ok(s[..n * k].to_vec()),
        Storage::Device(mem, DType::F8E4m3) => {
            let mut out = vec![0u8; n * k];
            // The producer may still be writing on the layer's stream.
            gpu.synchronize().map_err(be(NAME))?;
            download(NAME, "weight", &mem, gpu, &mut out)?;
            Ok(out)
        }
        _ => Err(KernelError::DType {
            what: "weight",
            expected: "f8e4m3".into(),
            got: w.dtype(),
        }),
    }
}

const KERNELS: KernelNames = [
    [
        "marlin_w8a16_f16_mt1",
        "marlin_w8a16_f16_mt2",
        "marlin_w8a16_f16_mt4",
        "marlin_w8a16_f16_mt8",
    ],
    [
        "marlin_w8a16_bf16_mt1",
        "marlin_w8a16_bf16_mt2",
        "marlin_w8a16_bf16_mt4",
        "marlin_w8a16_bf16_mt8",
    ],
];

impl Fp8Kernel for MarlinFp8 {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        check_config_basics(config)?;
        if !matches!(config.input_dtype, DType::F16 | DType::Bf16) {
            return Err(Unsupported::new(
                "Marlin is weight-only (W8A16): activations must be f16 or bf16",
            ));
        }
        if !config.output_dtype.same(config.input_dtype) {
            return Err(Unsupported::new(
                "Marlin writes its output in the activation dtype (output dtype must equal input dtype)",
            ));
        }
        if k_group(config.weight.group).is_none() {
            return Err(Unsupported::new(
                "Marlin needs weight scale groups along K that are a multiple of 32 (128 in checkpoints)",
            ));
        }
        if config.n > MAX_N {
            return Err(
                Unsupported::new("N is too large for the Marlin grid").with("n", config.n as u64)
            );
        }
        if config.k > (i32::MAX as usize) / 2 {
            return Err(
                Unsupported::new("K is too large for the Marlin kernel").with("k", config.k as u64)
            );
        }
        // The kernel counts the weight's 16 KiB stages in 32-bit integers.
        let stages = (config.n.div_ceil(STRIPE) as u128) * (config.k.div_ceil(K_ALIGN) as u128);
        if stages >= 1 << 31 {
            return Err(Unsupported::new(
                "the weight is too large for the Marlin kernel (2^31 or more 16 KiB stages)",
            )
            .with("n", config.n as u64)
            .with("k", config.k as u64));
        }
        Ok(())
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        let c = self.layer.config;
        check_layer_weights(&c, weights)?;
        let w = self.params.require(NAME, weights, LayerParam::Weight)?;
        let ws = self
            .params
            .require(NAME, weights, LayerParam::WeightScale)?;
        self.layer.clear();
        let gpu = &self.layer.gpu;
        let codes = host_codes(&w, c.n, c.k, gpu)?;
        let scales = small_to_host(NAME, "weight_scale", &ws, gpu)?;
        let mw = |_| repack::prepare(&c, &codes, &scales);
        let bias = match (&weights.bias, c.bias) {
            (Some(b), true) => Some(small_to_host(NAME, "bias", b, gpu)?),
            _ => None,
        };
        let module = (&sources::marlin_module(), &KERNELS, self.target);
        let state = State {
            dev: DeviceMarlin::upload(NAME, gpu, module, (1, mw), bias.as_deref())?,
            work: Scratch::default(),
            counters: Scratch::default(),
        };
        self.layer.set(state);
        Ok(())
    }

    skeleton_calls!(layer, |k| k.tuning);
}

impl Recipe for State {
    type Knobs = MarlinPipeline;
    type Plan = LaunchPlan;
    /// The split-K workspace and arrival counters when ranges cut stripes (else 0, 0).
    type Scratch = (u64, u64);

    const NO_PRE_QUANTIZED: Option<&'static str> = Some(
        "it is a W8A16 kernel: it reads unquantized 16-bit activations and multiplies them \
         with 16-bit tensor-core instructions, so FP8 codes and scales are not its input",
    );

    /// The launch plan of a call of `m` rows.
    fn plan(&mut self, call: Call<'_>, tuning: &MarlinPipeline) -> Result<LaunchPlan, KernelError> {
        let (gpu, m) = (call.gpu, call.m);
        let dev = &self.dev;
        LaunchPlan::new(
            m,
            dev.stripes(),
            dev.ksteps(),
            gpu.device().sm_count as usize,
            dev.smem_optin,
            tuning,
        )
        .ok_or_else(|| dev.too_few_stages(NAME, None))
    }

    /// The split-K workspace and arrival counters when ranges cut stripes.
    fn reserve(&mut self, call: Call<'_>, p: &LaunchPlan) -> Result<(u64, u64), KernelError> {
        let (gpu, m) = (call.gpu, call.m);
        if !p.cuts_stripes() {
            return Ok((0, 0));
        }
        let work = self
            .work
            .get(gpu, p.workspace_floats())
            .map_err(be_at(NAME, m))?
            .ptr();
        // Zeroed when allocated; the last block of each stripe resets its counter.
        let counters = self
            .counters
            .get(gpu, p.counters() * 4)
            .map_err(be_at(NAME, m))?
            .ptr();
        Ok((work, counters))
    }

    fn keep_retired(&mut self, _max_m: usize) {
        self.work.keep_retired();
        self.counters.keep_retired();
    }

    fn enqueue(
        &mut self,
        call: Call<'_>,
        p: LaunchPlan,
        (work, counters): (u64, u64),
        Io(m, xin, xout, _): Io,
    ) -> Result<(), KernelError> {
        let (c, gpu) = (call.c, call.gpu);
        let st = self;
        let args = st.dev.args(
            c,
            m,
            (xin.ptr, xout.ptr),
            (work, counters),
            (p.stripes, p.stages),
        );
        let mut b = gpu.stream().launch_builder(&st.dev.funcs[p.variant()]);
        b.arg(&args);
        let cfg = grid(
            (p.chunks as u32, p.ranges as u32, 1),
            plan::THREADS,
            p.smem as u32,
        );
        // SAFETY: every pointer in `args` covers what the kernel reads or writes for these
        // sizes: weights/scales/channel were built for (n_pad, k_pad, groups); input and
        // output were checked by check_io (contiguous [m, k] / [m, n], buffers long
        // enough); the workspace and counters were sized by the plan; the counters are zero
        // between launches (the last block of each stripe resets its counter); the shared
        // memory is within the limit the functions were loaded with.
        unsafe { launch(b, cfg, "marlin_w8a16") }.map_err(be(NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(n: usize, k: usize) -> Option<String> {
        let cfg = LayerConfig::block_128(n, k, DType::Bf16, DType::Bf16);
        MarlinFp8::can_implement(&cfg).err().map(|e| e.to_string())
    }

    #[test]
    fn layers_past_the_kernel_limits_get_a_reason() {
        assert_eq!(reason(7748, 3884), None);
        let wide = reason(MAX_N + 1, 128).expect("N past the grid");
        assert!(wide.contains("N is too large"), "{wide}");
        // 65535 stripes x 2^16 stages of K: 2^32 stages.
        let huge = reason(MAX_N, K_ALIGN << 16).expect("2^32 stages");
        assert!(huge.contains("the weight is too large"), "{huge}");
    }
}
