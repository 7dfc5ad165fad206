//! The keywords of `#[fp8_kernel(...)]`, defined once: the attribute's keys are matched by
//! peeking these (see `kernel::ast`). `crate` is Rust's own `Token![crate]`.

syn::custom_keyword!(platform);
syn::custom_keyword!(priority);
syn::custom_keyword!(arch);
syn::custom_keyword!(force_arch);
syn::custom_keyword!(params);
syn::custom_keyword!(backend);
syn::custom_keyword!(numerics);
syn::custom_keyword!(rows);
syn::custom_keyword!(kind);
