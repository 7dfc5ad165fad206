//! `#[fp8_kernel(...)]`: parse -> validate -> expand.

mod ast;
mod expand;
mod valid;

use proc_macro2::TokenStream;
use quote::quote;

/// Entry point: on any error, emits the original item unchanged plus every error, so one
/// mistake does not cascade into "cannot find type" errors elsewhere.
pub fn expand_attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    let parsed_item: syn::Item = match syn::parse2(item.clone()) {
        Ok(i) => i,
        Err(e) => {
            let err = e.to_compile_error();
            return quote!(#item #err);
        }
    };
    let raw = match syn::parse::Parser::parse2(ast::RawArgs::parse_terminated, args) {
        Ok(r) => r,
        Err(e) => {
            let err = e.to_compile_error();
            return quote!(#item #err);
        }
    };
    match valid::validate(raw, &parsed_item) {
        Ok(spec) => {
            let generated = expand::expand(&spec);
            quote!(#item #generated)
        }
        Err(e) => {
            let err = e.to_compile_error();
            quote!(#item #err)
        }
    }
}
