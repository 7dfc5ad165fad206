//! The seed bug: a kernel declared with four layer params whose constructor takes only
//! the config. Upstream this was a TypeError at model load; here it does not compile.
use fp8_linear::{fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89,
             params = [weight, weight_scale, input_scale, input_scale_ub])]
pub struct MarlinFp8;

impl MarlinFp8 {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(MarlinFp8)
    }
}

impl Fp8Kernel for MarlinFp8 {
    fn can_implement(_: &LayerConfig) -> Result<(), Unsupported> {
        Ok(())
    }
    fn process_weights(&mut self, _: &LayerWeights<'_>) -> Result<(), KernelError> {
        Ok(())
    }
    fn apply(&mut self, _: &Tensor<'_>, _: &mut TensorMut<'_>) -> Result<(), KernelError> {
        Ok(())
    }
    fn name(&self) -> &'static str {
        "MarlinFp8"
    }
}

fn main() {}
