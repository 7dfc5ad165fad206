use fp8_linear::{fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct K<T>(T);

impl<T: Send + 'static> Fp8Kernel for K<T> {
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
