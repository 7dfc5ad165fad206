//! Kernel and table names that the generated code's own helpers could shadow (generic
//! parameters `F`, `T`, `M`; table-local constants such as `BASE` and `N`) still work.
use fp8_linear::{
    fp8_kernel, fp8_table, BuildCtx, Fp8Kernel, KernelError, LayerConfig, LayerParams,
    LayerWeights, Registered, Tensor, TensorMut, Unsupported,
};

macro_rules! cpu_kernel {
    ($name:ident, $priority:literal) => {
        #[fp8_kernel(platform = Cpu, priority = $priority)]
        pub struct $name;

        impl $name {
            pub fn new(_ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
                Ok($name)
            }
        }

        impl Fp8Kernel for $name {
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
    };
}

cpu_kernel!(F, 1);
cpu_kernel!(T, 2);
cpu_kernel!(N, 3);

/// A kernel named `M` with params.
#[fp8_kernel(platform = Cpu, priority = 4, params = [weight])]
pub struct M(LayerParams<1>);

impl M {
    pub fn new(_ctx: &BuildCtx<'_>, params: LayerParams<1>) -> Result<Self, KernelError> {
        Ok(M(params))
    }
}

impl Fp8Kernel for M {
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

fp8_table! {
    /// A table named like the generated code's local constant.
    pub BASE: Cpu, BlockScaled = [F, T];
    /// Extends `BASE`.
    pub EXTRA: Cpu, BlockScaled = BASE + [N, M];
    /// No kernels (a use of every generated constant is optional).
    pub EMPTY: Cpu, Scaled = [];
    /// `BASE` again.
    pub SAME: Cpu, BlockScaled = BASE + [];
    /// A suffixed priority override is the same number.
    pub SUFFIXED: Cpu, WeightOnly = [F => 7u8, T => 8u16];
}

fn main() {
    let names: Vec<&str> = EXTRA.entries.iter().map(|e| e.name).collect();
    assert_eq!(names, ["F", "T", "N", "M"]);
    assert_eq!(BASE.entries.len(), 2);
    assert!(EMPTY.entries.is_empty());
    assert_eq!(SAME.entries.len(), 2);
    let priorities: Vec<u16> = SUFFIXED.entries.iter().map(|e| e.priority).collect();
    assert_eq!(priorities, [7, 8]);
    let ctx_config =
        LayerConfig::block_128(128, 128, fp8_linear::DType::Bf16, fp8_linear::DType::Bf16);
    let target = fp8_linear::Target::cpu();
    let options = fp8_linear::KernelOptions::none();
    let ctx = target.build_ctx(&ctx_config, &options);
    for e in EXTRA.entries {
        assert_eq!(e.build(&ctx).unwrap().name(), e.name);
    }
    assert_eq!(M::ENTRY.params.len(), 1);
}
