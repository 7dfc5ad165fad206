//! A grouped layer run as one dense CPU kernel per expert: the one way both grouped CPU
//! kernels (the f64 reference and the fast kernel) compute experts, so that they differ only
//! in the dense kernel they use.

use fp8_linear_core::grouped::{GroupedWeights, Routing};
use fp8_linear_core::{
    BuildCtx, DType, Device, Fp8Kernel, KernelEntry, KernelError, KernelOptions, LayerConfig,
    Tensor, TensorMut,
};

use super::host::write_output;

/// E dense kernels of one entry, one per expert, and the f32 scratch their results go
/// through (where the routing weights are multiplied in, before the output dtype).
pub(super) struct ExpertKernels {
    kernel: &'static str,
    dense: &'static KernelEntry,
    /// One expert's layer, with f32 output (the scratch's dtype).
    config: LayerConfig,
    device: Device,
    options: KernelOptions,
    experts: Vec<Box<dyn Fp8Kernel>>,
    scratch: Vec<f32>,
}

impl ExpertKernels {
    /// The grouped kernel `kernel` over the dense kernel `dense`, for the context's layer.
    pub(super) fn new(
        kernel: &'static str,
        dense: &'static KernelEntry,
        ctx: &BuildCtx<'_>,
    ) -> Self {
        ExpertKernels {
            kernel,
            dense,
            config: LayerConfig {
                output_dtype: DType::F32,
                ..*ctx.config()
            },
            device: ctx.device().clone(),
            options: *ctx.options(),
            experts: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Builds one dense kernel per expert and processes its slice of the stack.
    pub(super) fn process_weights(&mut self, w: &GroupedWeights<'_>) -> Result<(), KernelError> {
        w.check(&self.config)?;
        let ctx = BuildCtx::new(&self.config, &self.device, &self.options);
        self.experts = (0..w.experts)
            .map(|e| {
                let mut k = self.dense.build(&ctx)?;
                k.process_weights(&w.expert(e)?)?;
                Ok(k)
            })
            .collect::<Result<_, KernelError>>()?;
        Ok(())
    }

    /// Each segment of the routing on its expert's dense kernel, into the scratch, times
    /// the routing weights, then into the output's rows.
    pub(super) fn apply(
        &mut self,
        input: &Tensor<'_>,
        routing: &Routing<'_>,
        route_weights: Option<&[f32]>,
        output: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        if self.experts.is_empty() {
            return Err(KernelError::WeightsNotProcessed {
                kernel: self.kernel,
            });
        }
        let (experts, rows, n) = (self.experts.len(), input.shape[0], self.config.n);
        routing.check(experts, rows)?;
        for (e, range) in routing.segments(experts, rows) {
            let m = range.len();
            self.scratch.clear();
            self.scratch.resize(m * n, 0.0);
            let x = input.rows("input", range.clone())?;
            let mut acc = TensorMut::f32(&mut self.scratch, [m, n]);
            self.experts[e].apply(&x, &mut acc)?;
            if let Some(w) = route_weights {
                for (row, &wr) in self.scratch.chunks_mut(n).zip(&w[range.clone()]) {
                    row.iter_mut().for_each(|v| *v *= wr);
                }
            }
            write_output(
                self.kernel,
                &self.scratch,
                &mut output.rows_mut("output", range)?,
            )?;
        }
        Ok(())
    }
}
