//! Keywords of the attribute and table syntax, defined once.

syn::custom_keyword!(platform);
syn::custom_keyword!(priority);
syn::custom_keyword!(arch);
syn::custom_keyword!(params);
syn::custom_keyword!(backend);
syn::custom_keyword!(force_arch);

/// Platforms accepted in `platform = ...` and in table headers.
pub const PLATFORMS: [&str; 5] = ["Cuda", "Rocm", "Cpu", "Xpu", "Tpu"];

/// Families accepted in table headers.
pub const FAMILIES: [&str; 3] = ["BlockScaled", "Scaled", "WeightOnly"];

/// Keys accepted by `#[fp8_kernel(...)]`, for the "unsupported argument" message.
pub const KERNEL_KEYS: &str = "platform, priority, arch, params, numerics, backend, force_arch, crate";
