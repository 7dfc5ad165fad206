//! `fp8_table! { ... }`: parse -> validate -> expand.

mod ast;
mod expand;
mod valid;

use proc_macro2::TokenStream;

/// Entry point: every table of the invocation, or all errors together.
pub fn expand_macro(input: TokenStream) -> TokenStream {
    let raw = match syn::parse2::<ast::RawTables>(input) {
        Ok(r) => r,
        Err(e) => return e.to_compile_error(),
    };
    match valid::validate(&raw) {
        Ok(()) => expand::expand(&raw),
        Err(e) => e.to_compile_error(),
    }
}
