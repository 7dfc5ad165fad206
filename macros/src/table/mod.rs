//! `fp8_table! { ... }`: parse ([`ast`], declaration by declaration) -> validate
//! ([`valid`]) -> generate ([`expand`]).

mod ast;
mod expand;
mod valid;

use proc_macro2::TokenStream;

use crate::errors::Errors;

/// Entry point: every valid table, a placeholder for each declaration with errors, and all
/// errors together.
pub fn expand_macro(input: TokenStream) -> TokenStream {
    let mut errs = Errors::default();
    let raw = ast::parse(input, &mut errs);
    let checked = valid::validate(&raw, &mut errs);
    let generated = expand::expand(raw.krate.as_ref(), &checked);
    let errors = errs.finish().err().map(|e| e.to_compile_error());
    quote::quote!(#generated #errors)
}
