//! Procedural macros of fp8-linear: `#[fp8_kernel(...)]` registers a kernel type and checks
//! its constructor's signature; `fp8_table! { ... }` builds a constant, priority-sorted,
//! compile-time-validated kernel table.
//!
//! Both are re-exported by `fp8-linear-core` and `fp8-linear`; depend on those, not on this
//! crate. Each macro is split like serde_derive's: parse tokens into a raw model (`ast`),
//! interpret the values into typed ones with their spans (`attr`, for the attribute),
//! check the rules across them (`valid`; every error collected and spanned at the user's
//! tokens), and generate (`expand`). On errors both still emit what the rest of the crate
//! names (the kernel's `KernelName`, a placeholder table), so one mistake is one error.

mod errors;
mod kernel;
mod kw;
mod table;
mod vocab;

use proc_macro::TokenStream;

/// Registers a kernel type. See the `fp8-linear` crate docs for the attribute contract:
/// `platform`, `priority`, `arch` (required on Cuda), `params`, and optionally `numerics`,
/// `backend`, `force_arch`, `rows`, `kind` (`Linear`, the default, or `Grouped` for a
/// mixture-of-experts kernel implementing `Fp8GroupedKernel`) and `crate`. The type's inherent
/// `fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError>` (with `params = [..]` of N
/// names: `fn new(ctx: &BuildCtx<'_>, params: LayerParams<N>) -> ...`) is checked at
/// compile time.
#[proc_macro_attribute]
pub fn fp8_kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::expand_attribute(args.into(), item.into()).into()
}

/// Declares constant kernel tables:
/// `pub NAME: Platform, Family = [KernelA, KernelB => 4, ...];`, or
/// `pub NAME: Platform, Family = path::TO::BASE + [MyKernel => 3];` to extend a table;
/// `pub NAME: Platform, Family, Grouped = [...]` for a table of grouped (mixture-of-experts)
/// kernels. `Kernel { rows = 2..=64 } => 2` lists a kernel for some of its rows only (listed
/// again, lower, it takes the rest). A kernel of another platform or kind, two kernels of
/// one priority, a kernel listed twice for the same rows or a window outside its rows is a
/// compile error at that kernel.
#[proc_macro]
pub fn fp8_table(input: TokenStream) -> TokenStream {
    table::expand_macro(input.into()).into()
}
