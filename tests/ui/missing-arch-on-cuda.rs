//! A Cuda kernel must say which compute capabilities its code runs on.
use fp8_linear::{fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cuda, priority = 5)]
pub struct TritonLike;

impl TritonLike {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(TritonLike)
    }
}

impl Fp8Kernel for TritonLike {
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
        "TritonLike"
    }
}

fn main() {}
