//! `#[fp8_kernel(...)]`: parse ([`ast`]) -> interpret values ([`attr`]) -> cross-field
//! rules ([`valid`]) -> generate ([`expand`]).

mod ast;
pub(crate) mod attr;
mod expand;
mod valid;

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;

/// Entry point. On any error, emits the original item unchanged, its `NAME` and
/// `KernelName` impl (so the kernel's `impl Fp8Kernel` does not cascade into "KernelName is
/// not implemented"), and every error.
pub fn expand_attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    let parsed_item: syn::Item = match syn::parse2(item.clone()) {
        Ok(i) => i,
        Err(_) => {
            let err = syn::Error::new_spanned(&item, valid::NOT_A_TYPE).to_compile_error();
            return quote!(#item #err);
        }
    };
    let mut errs = Errors::default();
    // A parse error is reported alone: the cross-field rules would only add "missing key"
    // errors for the arguments that did not parse.
    let result = match syn::parse2::<ast::RawArgs>(args) {
        Ok(raw) => {
            let attrs = attr::interpret(&raw, &mut errs);
            let krate = attr::krate(&attrs);
            valid::validate(&attrs, &parsed_item, errs).map_err(|e| (e, krate))
        }
        Err(e) => Err((e, None)),
    };
    match result {
        Ok(spec) => {
            let generated = expand::expand(&spec);
            quote!(#item #generated)
        }
        Err((e, krate)) => {
            let err = e.to_compile_error();
            let names = valid::item_name(&parsed_item).map(|(name, generics)| {
                let krate = krate.unwrap_or_else(|| syn::parse_quote!(::fp8_linear));
                expand::name_items(&expand::private(&krate), name, generics)
            });
            quote!(#item #names #err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_item_and_its_name_items() {
        let out = expand_attribute(
            quote!(platform = Metal, priority = 1),
            quote!(
                pub struct K;
            ),
        )
        .to_string();
        assert!(out.contains("pub struct K ;"));
        assert!(out.contains("KernelName for K"));
        assert!(out.contains("compile_error !"));
        assert!(out.contains("unknown platform `Metal`"));
        assert!(!out.contains("Registered"));
    }

    #[test]
    fn a_parse_error_is_reported_alone() {
        let out = expand_attribute(
            quote!(platform),
            quote!(
                pub struct K<T>(T);
            ),
        )
        .to_string();
        assert!(out.contains("expected `platform = ...`"));
        assert!(!out.contains("needs `priority"));
        assert!(out.contains("impl < T > :: fp8_linear :: __private :: KernelName for K < T >"));
    }

    #[test]
    fn a_valid_attribute_registers() {
        let out = expand_attribute(
            quote!(platform = Cpu, priority = 1, crate = fp8_linear_core),
            quote!(
                pub struct K;
            ),
        )
        .to_string();
        assert!(out.contains("impl fp8_linear_core :: __private :: Registered for K"));
        assert!(!out.contains("compile_error"));
    }
}
