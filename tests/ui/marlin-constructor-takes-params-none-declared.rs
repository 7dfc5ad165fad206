//! The reverse: the constructor takes four layer params, the attribute declares none.
use fp8_linear::{fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerParams, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89)]
pub struct MarlinFp8;

impl MarlinFp8 {
    pub fn new(_config: &LayerConfig, _params: LayerParams<4>) -> Result<Self, KernelError> {
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
