//! The float dtypes the kernels are instantiated for, in their order (f32, f16, bf16): the
//! index of a dtype into a kernel's function array and the name suffix of each.

use fp8_linear_core::{DType, KernelError};

/// The name suffix of each float dtype in kernel names, in instantiation order.
pub const FLOAT_NAMES: [&str; 3] = ["f32", "f16", "bf16"];

/// Index of a float dtype in the kernels' instantiation order; None for e4m3.
pub const fn float_slot(d: DType) -> Option<usize> {
    match d {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::Bf16 => Some(2),
        DType::F8E4m3 => None,
    }
}

/// Index of a float dtype in the kernels' instantiation order, or a typed error naming
/// `what` for e4m3.
pub fn float_index(what: &'static str, d: DType) -> Result<usize, KernelError> {
    float_slot(d).ok_or_else(|| KernelError::DType {
        what,
        expected: "f32, f16 or bf16".into(),
        got: d,
    })
}
