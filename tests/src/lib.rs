//! Helpers shared by the integration tests: random FP8 layers (seeded, replayable), the
//! test-only quantization oracle, output comparison with per-dtype tolerances, GPU helpers
//! and skips that show.

pub mod check;
pub mod gpu;
pub mod grouped_model;
pub mod host_model;
pub mod layers;
pub mod oracle;
pub mod seed;
pub mod skip;
pub mod tp;

/// Implements [`fp8_linear::Fp8Kernel`] for a test-only type that accepts every layer and
/// computes nothing: the UI tests use it so each file shows only the attribute and the
/// constructor under test. The type's name ([`fp8_linear::KernelName`]) comes from its
/// `#[fp8_kernel]` attribute, which generates it even when the attribute has errors. Never
/// put such a type in a real table.
#[macro_export]
macro_rules! inert_kernel_impl {
    ($name:ident) => {
        impl ::fp8_linear::Fp8Kernel for $name {
            fn can_implement(
                _: &::fp8_linear::LayerConfig,
            ) -> ::core::result::Result<(), ::fp8_linear::Unsupported> {
                Ok(())
            }
            fn process_weights(
                &mut self,
                _: &::fp8_linear::LayerWeights<'_>,
            ) -> ::core::result::Result<(), ::fp8_linear::KernelError> {
                Ok(())
            }
            fn apply(
                &mut self,
                _: &::fp8_linear::Tensor<'_>,
                _: &mut ::fp8_linear::TensorMut<'_>,
            ) -> ::core::result::Result<(), ::fp8_linear::KernelError> {
                Ok(())
            }
        }
    };
}

/// An `Fp8GroupedKernel` impl that does nothing, for UI tests of grouped kernels.
#[macro_export]
macro_rules! inert_grouped_kernel_impl {
    ($name:ident) => {
        impl ::fp8_linear::Fp8GroupedKernel for $name {
            fn can_implement(
                _: &::fp8_linear::LayerConfig,
            ) -> ::core::result::Result<(), ::fp8_linear::Unsupported> {
                Ok(())
            }
            fn process_weights(
                &mut self,
                _: &::fp8_linear::GroupedWeights<'_>,
            ) -> ::core::result::Result<(), ::fp8_linear::KernelError> {
                Ok(())
            }
            fn apply(
                &mut self,
                _: &::fp8_linear::Tensor<'_>,
                _: &::fp8_linear::Routing<'_>,
                _: ::core::option::Option<&[f32]>,
                _: &mut ::fp8_linear::TensorMut<'_>,
            ) -> ::core::result::Result<(), ::fp8_linear::KernelError> {
                Ok(())
            }
        }
    };
}
