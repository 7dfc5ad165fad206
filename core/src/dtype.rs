//! Element types of tensors.

use std::fmt;

/// Element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit float e4m3fn (max 448, no infinities), stored as raw bytes.
    F8E4m3,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::F8E4m3 => 1,
        }
    }

    /// Short lower-case name (`f32`, `f16`, `bf16`, `f8e4m3`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F8E4m3 => "f8e4m3",
        }
    }

    /// Parses a name as printed by [`DType::name`].
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::Bf16),
            "f8e4m3" | "fp8" | "e4m3" | "float8_e4m3fn" => Some(DType::F8E4m3),
            _ => None,
        }
    }

    /// `self == other`, usable in `const fn`.
    pub const fn same(self, other: DType) -> bool {
        self as u8 == other as u8
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
