//! A kernel declared outside the kernels crate, with params: its entry, its typed
//! constructor, and building it through the entry for a device profile (and not for the CPU).
use fp8_linear::{
    fp8_kernel, BuildCtx, Capability, DType, Fp8Kernel, KernelError, KernelOptions, LayerConfig,
    LayerParam, LayerParams, LayerWeights, Numerics, Platform, Registered, Target, Tensor,
    TensorMut, Unsupported,
};

#[fp8_kernel(platform = Cuda, priority = 4, arch = sm75..sm89, force_arch = sm75..,
             params = [weight, weight_scale, input_scale, input_scale_ub], backend = marlin,
             numerics = W8A16)]
pub struct MyMarlin {
    params: LayerParams<4>,
    capability: Option<Capability>,
    max_splits: Option<u16>,
}

impl MyMarlin {
    pub fn new(ctx: &BuildCtx<'_>, params: LayerParams<4>) -> Result<Self, KernelError> {
        Ok(MyMarlin {
            params,
            capability: ctx.device().capability,
            max_splits: ctx.options().max_splits,
        })
    }
}

impl Fp8Kernel for MyMarlin {
    fn can_implement(c: &LayerConfig) -> Result<(), Unsupported> {
        if c.n % 64 == 0 {
            Ok(())
        } else {
            Err(Unsupported::new("N must be a multiple of 64").with("N", c.n as u64))
        }
    }
    fn process_weights(&mut self, w: &LayerWeights<'_>) -> Result<(), KernelError> {
        self.params
            .require(Self::NAME, w, LayerParam::Weight)
            .map(|_| ())
    }
    fn apply(&mut self, _: &Tensor<'_>, _: &mut TensorMut<'_>) -> Result<(), KernelError> {
        Err(KernelError::backend(
            Self::NAME,
            "this test kernel does not compute",
        ))
    }
}

fn main() {
    let e = MyMarlin::ENTRY;
    assert_eq!(e.name, "MyMarlin");
    assert_eq!(MyMarlin::NAME, "MyMarlin");
    assert_eq!(e.platform, Platform::Cuda);
    assert_eq!(e.priority, 4);
    assert_eq!(e.backend, "marlin");
    assert_eq!(e.numerics, Numerics::W8A16);
    let declared = [
        LayerParam::Weight,
        LayerParam::WeightScale,
        LayerParam::InputScale,
        LayerParam::InputScaleUb,
    ];
    assert_eq!(e.params, &declared);
    assert_eq!(MyMarlin::LAYER_PARAMS.params(), &declared);
    assert!(!MyMarlin::LAYER_PARAMS.declares(LayerParam::Bias));

    let config = LayerConfig::block_128(256, 256, DType::Bf16, DType::Bf16);
    let options = KernelOptions::none().max_splits(4);

    // For an A100 profile (sm_80, inside sm75..sm89) the entry builds the kernel; the
    // context carries the device and the options to the typed constructor.
    let a100 = Target::profile("a100").unwrap();
    let mut k = e.build(&a100.build_ctx(&config, &options)).unwrap();
    assert_eq!(k.name(), "MyMarlin");
    let codes = vec![0u8; 256 * 256];
    let scales = vec![1f32; 4];
    let weights = LayerWeights::new(
        Tensor::fp8(&codes, [256, 256]),
        Tensor::f32(&scales, [2, 2]),
    );
    k.process_weights(&weights).unwrap();

    // The typed constructor, called directly.
    let direct = MyMarlin::new(&a100.build_ctx(&config, &options), MyMarlin::LAYER_PARAMS).unwrap();
    assert_eq!(direct.params.params().len(), 4);
    assert_eq!(direct.capability, Some(Capability::new(8, 0)));
    assert_eq!(direct.max_splits, Some(4));

    // Not for the CPU, and not for a layer the kernel rejects.
    let cpu = Target::cpu();
    match e.build(&cpu.build_ctx(&config, &options)) {
        Err(KernelError::WrongDevice { kernel, .. }) => assert_eq!(kernel, "MyMarlin"),
        other => panic!("expected WrongDevice, got {:?}", other.err()),
    }
    let ragged = LayerConfig::block_128(100, 256, DType::Bf16, DType::Bf16);
    assert!(matches!(
        e.build(&a100.build_ctx(&ragged, &options)),
        Err(KernelError::Unsupported {
            kernel: "MyMarlin",
            ..
        })
    ));
}
