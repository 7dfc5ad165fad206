//! Layer parameter names: the closed set of tensors a kernel can ask for by name in
//! `#[fp8_kernel(params = [...])]`, and [`LayerParams`], what its constructor receives.
//!
//! The set is defined once, here. The attribute turns each declared name into a path to a
//! constant of [`names`], so a misspelled name (`params = [wieght]`) is a compile error at
//! the name, with the compiler's "a constant with a similar name exists" hint.

use std::fmt;

use crate::error::KernelError;
use crate::tensor::{LayerWeights, Tensor};

/// A tensor of one linear layer, by role.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LayerParam {
    /// The FP8 weight `[N, K]`.
    Weight,
    /// The weight scales (multipliers; `weight_scale_inv` in Hugging Face block checkpoints).
    WeightScale,
    /// The static activation scale `[1, 1]`.
    InputScale,
    /// The upper bound of dynamic per-token activation scales `[1, 1]`.
    InputScaleUb,
    /// The bias `[1, N]`.
    Bias,
}

impl LayerParam {
    /// Every parameter, in declaration order.
    pub const ALL: [LayerParam; 5] = [
        LayerParam::Weight,
        LayerParam::WeightScale,
        LayerParam::InputScale,
        LayerParam::InputScaleUb,
        LayerParam::Bias,
    ];

    /// The name as written in `params = [...]` and in checkpoints.
    pub const fn name(self) -> &'static str {
        match self {
            LayerParam::Weight => "weight",
            LayerParam::WeightScale => "weight_scale",
            LayerParam::InputScale => "input_scale",
            LayerParam::InputScaleUb => "input_scale_ub",
            LayerParam::Bias => "bias",
        }
    }

    /// `self == other`, usable in `const fn`.
    pub const fn same(self, other: LayerParam) -> bool {
        self as u8 == other as u8
    }
}

impl fmt::Display for LayerParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names `params = [...]` accepts, one constant each (the attribute expands
/// `params = [weight]` to `names::weight`). Not for direct use: write [`LayerParam`].
#[doc(hidden)]
#[allow(non_upper_case_globals)]
pub mod names {
    use super::LayerParam;
    /// `weight`
    pub const weight: LayerParam = LayerParam::Weight;
    /// `weight_scale`
    pub const weight_scale: LayerParam = LayerParam::WeightScale;
    /// `input_scale`
    pub const input_scale: LayerParam = LayerParam::InputScale;
    /// `input_scale_ub`
    pub const input_scale_ub: LayerParam = LayerParam::InputScaleUb;
    /// `bias`
    pub const bias: LayerParam = LayerParam::Bias;
}

/// The layer parameters a kernel declared with `params = [...]`, handed to its constructor.
/// `N` is the number of names, so a constructor that takes `LayerParams<4>` cannot be
/// registered with three names, and one that takes none cannot be registered with any:
/// the arity is checked by the compiler.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LayerParams<const N: usize> {
    params: [LayerParam; N],
}

impl<const N: usize> LayerParams<N> {
    /// Wraps the declared parameters (the attribute generates this call).
    pub const fn new(params: [LayerParam; N]) -> Self {
        LayerParams { params }
    }

    /// The declared parameters, in declaration order.
    pub const fn params(&self) -> &[LayerParam; N] {
        &self.params
    }

    /// Whether `param` was declared.
    pub const fn declares(&self, param: LayerParam) -> bool {
        let mut i = 0;
        while i < N {
            if self.params[i].same(param) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The tensor for a declared parameter the kernel cannot do without, or
    /// [`KernelError::MissingParam`] when the layer lacks it or the kernel did not declare it.
    pub fn require<'w>(
        &self,
        kernel: &'static str,
        weights: &LayerWeights<'w>,
        param: LayerParam,
    ) -> Result<Tensor<'w>, KernelError> {
        self.optional(weights, param)
            .ok_or(KernelError::MissingParam {
                kernel,
                name: param.name(),
            })
    }

    /// The tensor for a declared optional parameter (e.g. `input_scale`), if the layer has it;
    /// None for a parameter the kernel did not declare.
    pub fn optional<'w>(
        &self,
        weights: &LayerWeights<'w>,
        param: LayerParam,
    ) -> Option<Tensor<'w>> {
        if self.declares(param) {
            weights.get(param)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn named_access_only_to_declared_params() {
        let w = [0u8; 4];
        let s = [1f32];
        let ub = [10f32];
        let weights = LayerWeights::new(Tensor::fp8(&w, [2, 2]), Tensor::f32(&s, [1, 1]))
            .with_input_scale_ub(Tensor::f32(&ub, [1, 1]));
        let p = LayerParams::new([names::weight, names::input_scale_ub]);
        assert!(p.declares(LayerParam::Weight));
        assert!(!p.declares(LayerParam::WeightScale));
        assert_eq!(
            p.require("k", &weights, LayerParam::Weight).unwrap().shape,
            [2, 2]
        );
        assert!(p.optional(&weights, LayerParam::InputScaleUb).is_some());
        // Present in the layer but not declared: not handed out.
        assert!(p.optional(&weights, LayerParam::WeightScale).is_none());
        assert_eq!(
            p.require("k", &weights, LayerParam::WeightScale)
                .unwrap_err(),
            KernelError::MissingParam {
                kernel: "k",
                name: "weight_scale"
            }
        );
        // Declared but absent from the layer.
        let q = LayerParams::new([names::bias]);
        assert!(q.require("k", &weights, LayerParam::Bias).is_err());
        assert_eq!(
            LayerParam::ALL.map(LayerParam::name),
            [
                "weight",
                "weight_scale",
                "input_scale",
                "input_scale_ub",
                "bias"
            ]
        );
    }
}
