use fp8_linear::{fp8_kernel, fp8_table, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct A;

impl A {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(A)
    }
}

impl Fp8Kernel for A {
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
        "A"
    }
}

fp8_table! {
    pub MY_TABLE: Cpu, Blocky = [A];
}

fn main() {}
