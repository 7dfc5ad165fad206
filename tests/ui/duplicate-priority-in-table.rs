//! Two kernels with the same priority in one table: rejected at compile time.
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

#[fp8_kernel(platform = Cpu, priority = 1)]
pub struct B;

impl B {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(B)
    }
}

impl Fp8Kernel for B {
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
        "B"
    }
}

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [A, B];
}

fn main() {}
