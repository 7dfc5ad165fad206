//! The platforms a kernel can be written for.

use std::fmt;

/// The kind of hardware a kernel runs on. A table holds kernels of one platform.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Platform {
    /// NVIDIA GPUs through the CUDA driver.
    Cuda,
    /// AMD GPUs through ROCm.
    Rocm,
    /// The host CPU.
    Cpu,
    /// Intel GPUs.
    Xpu,
    /// Google TPUs.
    Tpu,
}

impl Platform {
    /// Every platform, in declaration order.
    pub const ALL: [Platform; 5] = [
        Platform::Cuda,
        Platform::Rocm,
        Platform::Cpu,
        Platform::Xpu,
        Platform::Tpu,
    ];

    /// The lower-case name used in the CLI and in JSON output.
    pub const fn name(self) -> &'static str {
        match self {
            Platform::Cuda => "cuda",
            Platform::Rocm => "rocm",
            Platform::Cpu => "cpu",
            Platform::Xpu => "xpu",
            Platform::Tpu => "tpu",
        }
    }

    /// Whether two platforms are the same (usable in `const fn`).
    pub const fn same(self, other: Platform) -> bool {
        self as u8 == other as u8
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
