use fp8_linear::{fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cpu, priority = 0)]
pub struct K;

impl K {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(K)
    }
}

impl Fp8Kernel for K {
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
        "K"
    }
}

fn main() {}
