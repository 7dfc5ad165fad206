//! The grouped (mixture-of-experts) CPU kernels: the f64 reference and the fast default,
//! each one dense CPU kernel per expert ([`super::experts`]).

use fp8_linear_core::grouped::{Fp8GroupedKernel, GroupedWeights, Routing};
use fp8_linear_core::{
    fp8_kernel, BuildCtx, Fp8Kernel, KernelError, LayerConfig, Registered, Tensor, TensorMut,
    Unsupported,
};

use super::experts::ExpertKernels;
use super::{CpuFp8Gemm, CpuReference};

/// Declares a grouped CPU kernel over a dense one: the struct, its constructor and its
/// `Fp8GroupedKernel` impl, which hand every call to [`ExpertKernels`].
macro_rules! grouped_cpu_kernel {
    ($(#[$doc:meta])* $name:ident over $dense:ty, $($attr:tt)*) => {
        $(#[$doc])*
        #[fp8_kernel(platform = Cpu, kind = Grouped, $($attr)*)]
        pub struct $name(ExpertKernels);

        impl $name {
            /// Builds the kernel for the context's layer (one expert's config).
            pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError> {
                Ok($name(ExpertKernels::new(
                    Self::NAME,
                    &<$dense as Registered>::ENTRY,
                    ctx,
                )))
            }
        }

        // Not listed among "other types that implement it" in the error for a type that
        // does not implement `Fp8GroupedKernel`.
        #[diagnostic::do_not_recommend]
        impl Fp8GroupedKernel for $name {
            fn can_implement(config: &LayerConfig) -> Result<(), Unsupported> {
                <$dense as Fp8Kernel>::can_implement(config)
            }

            fn process_weights(&mut self, w: &GroupedWeights<'_>) -> Result<(), KernelError> {
                self.0.process_weights(w)
            }

            fn apply(
                &mut self,
                input: &Tensor<'_>,
                routing: &Routing<'_>,
                route_weights: Option<&[f32]>,
                output: &mut TensorMut<'_>,
            ) -> Result<(), KernelError> {
                self.0.apply(input, routing, route_weights, output)
            }
        }
    };
}

grouped_cpu_kernel! {
    /// The grouped default on the CPU: [`CpuFp8Gemm`] per expert (each expert's rows one
    /// GEMM), the routing weights multiplied into its f32 result.
    CpuGroupedFp8Gemm over CpuFp8Gemm, priority = 10, backend = cpu
}

grouped_cpu_kernel! {
    /// The grouped f64 oracle: [`CpuReference`] per expert, the routing weights multiplied
    /// into its result.
    CpuGroupedReference over CpuReference, priority = 100, backend = cpu_reference
}
