//! A kernel declared outside the kernels crate, with params, built through its entry.
use fp8_linear::{
    fp8_kernel, Fp8Kernel, KernelError, LayerConfig, LayerParams, LayerWeights, Registered,
    Tensor, TensorMut, Unsupported,
};

#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89, force_arch = sm75..,
             params = [weight, weight_scale, input_scale, input_scale_ub], backend = marlin)]
pub struct MyMarlin {
    params: LayerParams<4>,
}

impl MyMarlin {
    pub fn new(_config: &LayerConfig, params: LayerParams<4>) -> Result<Self, KernelError> {
        Ok(MyMarlin { params })
    }
}

impl Fp8Kernel for MyMarlin {
    fn can_implement(_: &LayerConfig) -> Result<(), Unsupported> {
        Ok(())
    }
    fn process_weights(&mut self, _: &LayerWeights<'_>) -> Result<(), KernelError> {
        Ok(())
    }
    fn apply(&mut self, _: &Tensor<'_>, _: &mut TensorMut<'_>) -> Result<(), KernelError> {
        Ok(())
    }
}

fn main() {
    let e = MyMarlin::ENTRY;
    assert_eq!(e.name, "MyMarlin");
    assert_eq!(e.priority, 4);
    assert_eq!(e.backend, "marlin");
    assert_eq!(e.params, &["weight", "weight_scale", "input_scale", "input_scale_ub"]);
    assert_eq!(MyMarlin::LAYER_PARAMS.names()[3], "input_scale_ub");
    let config = fp8_linear::LayerConfig::block_128(256, 256, fp8_linear::DType::Bf16, fp8_linear::DType::Bf16);
    let k = (e.construct)(&config).unwrap();
    assert_eq!(k.name(), "MyMarlin");
    // The typed constructor, called directly:
    let direct = MyMarlin::new(&config, MyMarlin::LAYER_PARAMS).unwrap();
    assert_eq!(direct.params.names().len(), 4);
}
