//! A Cuda kernel in a Cpu table.
use fp8_linear::{fp8_kernel, fp8_table, Fp8Kernel, KernelError, LayerConfig, LayerWeights, Tensor, TensorMut, Unsupported};
#[fp8_kernel(platform = Cuda, priority = 1, arch = sm89..)]
pub struct GpuOnly;

impl GpuOnly {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(GpuOnly)
    }
}

impl Fp8Kernel for GpuOnly {
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
        "GpuOnly"
    }
}

fp8_table! {
    pub MY_TABLE: Cpu, BlockScaled = [GpuOnly];
}

fn main() {}
