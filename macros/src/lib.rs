//! Procedural macros of fp8-linear: `#[fp8_kernel(...)]` registers a kernel type and checks
//! its constructor's signature; `fp8_table! { ... }` builds a constant, priority-sorted,
//! compile-time-validated kernel table.
//!
//! Both are re-exported by `fp8-linear-core` and `fp8-linear`; depend on those, not on this
//! crate. Each macro is split into parse (tokens -> typed model), validate (model ->
//! checked model, all errors collected and spanned at the user's tokens) and expand
//! (checked model -> tokens).

mod errors;
mod kernel;
mod kw;
mod table;

use proc_macro::TokenStream;

/// Registers a kernel type. See the `fp8-linear` crate docs for the attribute contract:
/// `platform`, `priority`, `arch` (required on Cuda), `params`, and optionally `backend`,
/// `force_arch` and `crate`.
#[proc_macro_attribute]
pub fn fp8_kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::expand_attribute(args.into(), item.into()).into()
}

/// Declares constant kernel tables:
/// `pub NAME: Platform, Family = [KernelA, KernelB => 4, ...];`, or
/// `pub NAME: Platform, Family = path::TO::BASE + [MyKernel => 3];` to extend a table.
#[proc_macro]
pub fn fp8_table(input: TokenStream) -> TokenStream {
    table::expand_macro(input.into()).into()
}
