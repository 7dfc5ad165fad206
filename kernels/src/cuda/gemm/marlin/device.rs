//! A Marlin weight on the device (one layer's, or E experts' stacked one after another) with
//! the kernels of its module, and the argument block of a launch over it: what the dense and
//! the grouped Marlin kernels share.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule, DeviceRepr};
use fp8_linear_core::{Capability, KernelError, LayerConfig};
use fp8_linear_cuda::cudarc;
use fp8_linear_cuda::{function_with_shared_memory, DeviceBuffer, Gpu, ModuleSpec};

use super::plan;
use super::repack::{MarlinWeights, STEP};
use crate::cuda::skeleton::error::be;

/// The kernel's argument block (`struct Args` in `cu/marlin.cu`, same field order and types).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub(crate) struct Args {
    w: u64,
    s: u64,
    chan: u64,
    bias: u64,
    x: u64,
    out: u64,
    work: u64,
    counters: u64,
    m: i32,
    n: i32,
    k: i32,
    ldx: i32,
    ldo: i32,
    ksteps: i32,
    steps_per_group: i32,
    groups: i32,
    spg_shift: i32,
    stripes: i32,
    stages: i32,
    x_vec: i32,
}

// SAFETY: plain-old-data with the C layout the kernel's `Args` has.
unsafe impl DeviceRepr for Args {}

/// The repacked weight, its scales and bias on the device, and the module's kernels.
pub(crate) struct DeviceMarlin {
    weight: DeviceBuffer<u8>,
    scales: DeviceBuffer<u8>,
    channel: DeviceBuffer<f32>,
    bias: Option<DeviceBuffer<f32>>,
    /// Kernels for 1, 2, 4 and 8 m8 tiles per warp.
    pub funcs: [CudaFunction; 4],
    _module: Arc<CudaModule>,
    /// One layer's (one expert's) N rounded up to whole stripes.
    pub n_pad: usize,
    /// K rounded up to whole stages.
    pub k_pad: usize,
    groups: usize,
    steps_per_group: usize,
    /// The device's opt-in shared memory per block (the ring is sized from it).
    pub smem_optin: usize,
}

/// A module's kernels by activation dtype (f16, bf16) and M tile (1, 2, 4, 8 m8 tiles).
pub(crate) type KernelNames = [[&'static str; 4]; 2];

impl DeviceMarlin {
    /// Uploads `parts` repacked layers of one shape one after another (one layer's weight, or
    /// E experts' stacked: part e's stages, group scales and channel scales after those of
    /// parts 0..e-1), each made by `part(e)` and uploaded into its place before the next is
    /// made, so the host never holds more than one; then `bias` (all parts'); and loads the
    /// kernels `names` of `module` (for `target`, or the device's capability) with the
    /// largest ring a plan can ask for.
    pub fn upload(
        kernel: &'static str,
        gpu: &Arc<Gpu>,
        (module, names, target): (&ModuleSpec, &KernelNames, Option<Capability>),
        (parts, mut part): (
            usize,
            impl FnMut(usize) -> Result<MarlinWeights, KernelError>,
        ),
        bias: Option<&[f32]>,
    ) -> Result<Self, KernelError> {
        // Part 0 gives the shape every part has (and the fields kept below).
        let mw = part(0)?;
        let (w, s, c) = (mw.weight.len(), mw.group_scales.len() * 2, mw.channel.len());
        let alloc = |len| DeviceBuffer::<u8>::zeros(gpu, len).map_err(be(kernel));
        let (mut weight, mut scales) = (alloc(parts * w)?, alloc(parts * s)?);
        let mut channel = DeviceBuffer::<f32>::zeros(gpu, parts * c).map_err(be(kernel))?;
        let mut put = |e: usize, p: &MarlinWeights| -> Result<(), KernelError> {
            if (p.weight.len(), p.channel.len()) != (w, c) {
                return Err(KernelError::backend(kernel, "the parts differ in shape"));
            }
            weight.upload_at(e * w, &p.weight).map_err(be(kernel))?;
            scales
                .upload_at(e * s, &p.group_scale_bytes())
                .map_err(be(kernel))?;
            channel.upload_at(e * c, &p.channel).map_err(be(kernel))
        };
        put(0, &mw)?;
        for e in 1..parts {
            put(e, &part(e)?)?;
        }
        let bias = bias
            .map(|b| DeviceBuffer::from_host(gpu, b))
            .transpose()
            .map_err(be(kernel))?;
        let (module, _) = gpu.module_for(module, target).map_err(be(kernel))?;
        let optin = gpu.max_shared_memory_per_block().map_err(be(kernel))?;
        // The largest ring a plan can ask for (the static variables need their share).
        let dynamic = plan::max_dynamic_smem(optin as usize) as u32;
        let load =
            |name: &str| function_with_shared_memory(&module, name, dynamic).map_err(be(kernel));
        let [f1, f2, f4, f8] = names[usize::from(mw.bf16)];
        Ok(DeviceMarlin {
            weight,
            scales,
            channel,
            bias,
            funcs: [load(f1)?, load(f2)?, load(f4)?, load(f8)?],
            _module: module,
            n_pad: mw.n_pad,
            k_pad: mw.k_pad,
            groups: mw.groups,
            steps_per_group: mw.steps_per_group,
            smem_optin: optin as usize,
        })
    }

    /// Stripes of one layer (one expert).
    pub fn stripes(&self) -> usize {
        self.n_pad / super::repack::STRIPE
    }

    /// K steps of one layer (one expert).
    pub fn ksteps(&self) -> usize {
        self.k_pad / STEP
    }

    /// The error of `kernel` when the device's shared memory per block holds fewer than two
    /// stages (beside `also`, what else a block keeps there, when given).
    pub fn too_few_stages(&self, kernel: &'static str, also: Option<String>) -> KernelError {
        let beside = also.map_or(String::new(), |a| format!(" beside {a}"));
        KernelError::backend(
            kernel,
            format!(
                "the device's {} B of shared memory per block hold fewer than two stages ({} B \
                 each){beside}",
                self.smem_optin,
                plan::stage_bytes(1)
            ),
        )
    }

    /// The arguments of a launch of `m` rows of layer `c`: activations at `x`, output at
    /// `out` (contiguous `[m, k]` and `[m, n]`), the split-K `work`space and `counters` (0
    /// when unused), `stripes` (the dense kernel's; one expert's for the grouped one) in a
    /// ring of `stages`.
    pub fn args(
        &self,
        c: &LayerConfig,
        m: usize,
        (x, out): (u64, u64),
        (work, counters): (u64, u64),
        (stripes, stages): (usize, usize),
    ) -> Args {
        let spg = self.steps_per_group;
        Args {
            w: self.weight.ptr(),
            s: self.scales.ptr(),
            chan: self.channel.ptr(),
            bias: self.bias.as_ref().map_or(0, |b| b.ptr()),
            x,
            out,
            work,
            counters,
            m: m as i32,
            n: c.n as i32,
            k: c.k as i32,
            ldx: c.k as i32,
            ldo: c.n as i32,
            ksteps: self.ksteps() as i32,
            steps_per_group: spg as i32,
            groups: self.groups as i32,
            spg_shift: if spg.is_power_of_two() {
                spg.trailing_zeros() as i32
            } else {
                -1
            },
            stripes: stripes as i32,
            stages: stages as i32,
            x_vec: plan::x_copy_bytes(c.k, x),
        }
    }
}
