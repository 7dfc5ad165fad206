//! A downstream crate's table: the built-in CPU block table plus its own kernel, sorted and
//! validated at compile time, used for selection.
use fp8_linear::{
    fp8_kernel, fp8_table, select, DType, Device, Fp8Kernel, KernelError, LayerConfig,
    LayerWeights, Overrides, Tensor, TensorMut, Unsupported,
};

#[fp8_kernel(platform = Cpu, priority = 50, backend = mine)]
pub struct MyCpuKernel;

impl MyCpuKernel {
    pub fn new(_config: &LayerConfig) -> Result<Self, KernelError> {
        Ok(MyCpuKernel)
    }
}

impl Fp8Kernel for MyCpuKernel {
    fn can_implement(c: &LayerConfig) -> Result<(), Unsupported> {
        if c.k % 256 == 0 {
            Ok(())
        } else {
            Err(Unsupported::new("K must be a multiple of 256").with("K", c.k as u64))
        }
    }
    fn process_weights(&mut self, _: &LayerWeights<'_>) -> Result<(), KernelError> {
        Ok(())
    }
    fn apply(&mut self, _: &Tensor<'_>, _: &mut TensorMut<'_>) -> Result<(), KernelError> {
        Ok(())
    }
}

fp8_table! {
    /// The built-in CPU block table with our kernel tried first.
    pub MY_CPU_BLOCK: Cpu, BlockScaled = fp8_linear::tables::CPU_BLOCK + [MyCpuKernel => 5];
}

fn main() {
    assert_eq!(MY_CPU_BLOCK.entries.len(), fp8_linear::tables::CPU_BLOCK.entries.len() + 1);
    assert_eq!(MY_CPU_BLOCK.entries[0].name, "MyCpuKernel");
    let cpu = Device::cpu(2);
    let fits = LayerConfig::block_128(512, 512, DType::Bf16, DType::Bf16);
    let s = select(&MY_CPU_BLOCK, &cpu, &fits, &Overrides::none()).unwrap();
    assert_eq!(s.entry.name, "MyCpuKernel");
    let ragged = LayerConfig::block_128(512, 300, DType::Bf16, DType::Bf16);
    let s = select(&MY_CPU_BLOCK, &cpu, &ragged, &Overrides::none()).unwrap();
    assert_eq!(s.entry.name, "CpuFp8Gemm");
}
