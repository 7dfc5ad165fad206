//! The f64-accumulating CPU kernel: slow, exact, the oracle the other kernels are tested
//! against.

use fp8_linear_core::fp8::e4m3_to_f32;
use fp8_linear_core::kernel::processed;
use fp8_linear_core::validate::check_io;
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut,
    Unsupported,
};

use super::checks::cpu_can_implement;
use super::host::{to_f32, write_output, ActScratch, HostWeights};

/// f64-accumulating reference kernel for every FP8 layer kind (block-scaled, scaled,
/// weight-only). Quantizes activations exactly as the fast kernels do, then sums
/// `deq(A) * deq(B)` in f64.
#[fp8_kernel(platform = Cpu, priority = 100, backend = cpu_reference)]
pub struct CpuReference {
    config: LayerConfig,
    weights: Option<HostWeights>,
    act: ActScratch,
    acc: Vec<f32>,
}

impl CpuReference {
    /// Builds the kernel for the context's layer.
    pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
        Ok(Self::for_layer(ctx.config()))
    }

    /// The reference for a layer: it needs no device, so it can be made from the config
    /// alone (the oracle tests and the CLI check other kernels against).
    pub fn for_layer(config: &LayerConfig) -> Self {
        CpuReference {
            config: *config,
            weights: None,
            act: ActScratch::default(),
            acc: Vec::new(),
        }
    }
}

impl Fp8Kernel for CpuReference {
    fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
        cpu_can_implement(config)
    }

    fn process_weights(&mut self, weights: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.weights = Some(HostWeights::load(Self::NAME, &self.config, weights)?);
        Ok(())
    }

    fn apply(&mut self, input: &Tensor<'_>, output: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let name = Self::NAME;
        let c = self.config;
        let w = processed(&mut self.weights, name)?;
        let m = check_io(&c, input, output)?;
        let (n, k) = (c.n, c.k);
        to_f32(name, "input", input, &mut self.act.x)?;
        self.act.quantize(&c, w, m);
        let a: Vec<f64> = (0..m * k)
            .map(|idx| match c.activation {
                None => self.act.x[idx] as f64,
                Some(_) => {
                    e4m3_to_f32(self.act.codes[idx]) as f64
                        * self.act.scale(&c, idx / k, idx % k) as f64
                }
            })
            .collect();
        let b: Vec<f64> = (0..n * k)
            .map(|idx| e4m3_to_f32(w.codes[idx]) as f64 * w.scale(idx / k, idx % k) as f64)
            .collect();
        self.acc.clear();
        for i in 0..m {
            let ar = &a[i * k..(i + 1) * k];
            for j in 0..n {
                let br = &b[j * k..(j + 1) * k];
                let mut s: f64 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
                if let Some(bias) = &w.bias {
                    s += bias[j] as f64;
                }
                self.acc.push(s as f32);
            }
        }
        write_output(name, &self.acc, output)
    }
}
