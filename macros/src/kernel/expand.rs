//! Expand: the registration impl, the typed-constructor check and the `LAYER_PARAMS` const.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::valid::{Arch, Cap, KernelSpec};

fn cap(p: &TokenStream, c: Cap) -> TokenStream {
    let (maj, min) = c;
    quote!(#p::Capability::new(#maj, #min))
}

fn arch(p: &TokenStream, a: Arch) -> TokenStream {
    match a {
        Arch::Any => quote!(#p::ArchSpec::Any),
        Arch::Exact(c, specific) => {
            let c = cap(p, c);
            quote!(#p::ArchSpec::Exact { cap: #c, specific: #specific })
        }
        Arch::AtLeast(c) => {
            let c = cap(p, c);
            quote!(#p::ArchSpec::AtLeast(#c))
        }
        Arch::Range(lo, hi) => {
            let (lo, hi) = (cap(p, lo), cap(p, hi));
            quote!(#p::ArchSpec::Range { lo: #lo, hi: #hi })
        }
    }
}

/// Generates the items that register `spec.name`.
pub fn expand(spec: &KernelSpec) -> TokenStream {
    let krate = &spec.krate;
    let p = quote!(#krate::__private);
    let name = &spec.name;
    let name_str = name.to_string();
    let platform = &spec.platform;
    let priority = spec.priority;
    let arch_tokens = arch(&p, spec.arch);
    let force_arch = match spec.force_arch {
        Some(a) => {
            let a = arch(&p, a);
            quote!(::core::option::Option::Some(#a))
        }
        None => quote!(::core::option::Option::None),
    };
    let backend = &spec.backend;

    // The typed constructor call, spanned at the user's `params = [...]` (or at the type's
    // name when no params are declared) so a wrong arity is reported there.
    let numerics = match &spec.numerics {
        Some(id) => quote_spanned!(id.span()=> #p::Numerics::#id),
        None => quote!(#p::Numerics::Layer),
    };
    let (params_const, param_names, call) = match &spec.params {
        Some((span, names)) => {
            let n = names.len();
            // Each name becomes a path into core's closed set of parameter names, spanned at
            // the user's token: a misspelled name fails to resolve right there.
            let paths: Vec<TokenStream> = names
                .iter()
                .map(|id| quote_spanned!(id.span()=> #p::layer_param::#id))
                .collect();
            let call = quote_spanned! {*span=>
                let params: #p::LayerParams<#n> = #name::LAYER_PARAMS;
                let kernel: ::core::result::Result<#name, #p::KernelError> = #name::new(ctx, params);
            };
            let konst = quote! {
                #[automatically_derived]
                impl #name {
                    /// The layer parameters declared in `#[fp8_kernel(params = [...])]`, in
                    /// order: what the typed constructor `new` receives.
                    pub const LAYER_PARAMS: #p::LayerParams<#n> = #p::LayerParams::new([#(#paths),*]);
                }
            };
            (konst, quote!(&[#(#paths),*]), call)
        }
        None => {
            let call = quote_spanned! {name.span()=>
                let kernel: ::core::result::Result<#name, #p::KernelError> = #name::new(ctx);
            };
            (quote!(), quote!(&[]), call)
        }
    };

    quote! {
        #params_const

        #[automatically_derived]
        impl #name {
            /// The kernel's registered name (its type name), as in its entry.
            pub const NAME: &'static str = #name_str;
        }

        #[automatically_derived]
        impl #p::KernelName for #name {
            fn name(&self) -> &'static str {
                #name_str
            }
        }

        #[automatically_derived]
        impl #p::Registered for #name {
            const ENTRY: #p::KernelEntry = #p::KernelEntry {
                name: #name_str,
                platform: #p::Platform::#platform,
                priority: #priority,
                arch: #arch_tokens,
                force_arch: #force_arch,
                backend: #backend,
                params: #param_names,
                numerics: #numerics,
                can_implement: <#name as #p::Fp8Kernel>::can_implement,
                construct: {
                    #[doc(hidden)]
                    fn __fp8_construct(
                        ctx: &#p::BuildCtx<'_>,
                    ) -> ::core::result::Result<#p::Box<dyn #p::Fp8Kernel>, #p::KernelError> {
                        #call
                        ::core::result::Result::Ok(#p::Box::new(kernel?))
                    }
                    __fp8_construct
                },
            };
        }
    }
}
