//! Expand: the kernel's name items, its `LAYER_PARAMS`, and its `Registered` entry, whose
//! uniform constructor calls the typed `new` through a signature check that reports each
//! wrong constructor with a message saying what to write (see [`constructor`]).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;

use super::attr::{Arch, Cap};
use super::valid::KernelSpec;
use crate::vocab::LayerKind;

/// `path::__private`, the module the generated code names everything through.
pub fn private(krate: &syn::Path) -> TokenStream {
    quote!(#krate::__private)
}

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

/// `NAME` and the `KernelName` impl: emitted for every struct or enum the attribute is on,
/// also when the attribute has errors, so the kernel's `impl Fp8Kernel` (which needs
/// `KernelName`) does not add errors of its own.
pub fn name_items(p: &TokenStream, name: &Ident, generics: &syn::Generics) -> TokenStream {
    let name_str = name.to_string();
    let (ig, tg, wc) = generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #ig #name #tg #wc {
            /// The kernel's registered name (its type name), as in its entry.
            pub const NAME: &'static str = #name_str;
        }

        #[automatically_derived]
        #[diagnostic::do_not_recommend]
        impl #ig #p::KernelName for #name #tg #wc {
            fn name(&self) -> &'static str {
                #name_str
            }
        }
    }
}

/// Generates every item that registers `spec.name`.
pub fn expand(spec: &KernelSpec) -> TokenStream {
    let p = private(&spec.krate);
    let name = &spec.name;
    let name_str = name.to_string();
    let platform = spec.platform.value.ident(spec.platform.span);
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
    let rows = {
        let first = spec.rows.0 as usize;
        match spec.rows.1 {
            Some(last) => {
                let last = last as usize;
                quote!(#p::RowRange::new(#first, #last))
            }
            None => quote!(#p::RowRange::from(#first)),
        }
    };
    let numerics = match &spec.numerics {
        Some(n) => {
            let id = n.value.ident(n.span);
            quote_spanned!(n.span=> #p::Numerics::#id)
        }
        None => quote!(#p::Numerics::Layer),
    };
    let (params_const, param_list) = match &spec.params {
        Some(params) => {
            let n = params.value.len();
            // Each name becomes a path into core's closed set of parameter names, spanned at
            // the user's token: a misspelled name fails to resolve right there, with the
            // compiler's "a constant with a similar name exists" hint.
            let paths: Vec<TokenStream> = params
                .value
                .iter()
                .map(|id| quote_spanned!(id.span()=> #p::layer_param::#id))
                .collect();
            let konst = quote! {
                #[automatically_derived]
                impl #name {
                    /// The layer parameters declared in `#[fp8_kernel(params = [...])]`, in
                    /// order: what the typed constructor `new` receives.
                    pub const LAYER_PARAMS: #p::LayerParams<#n> = #p::LayerParams::new([#(#paths),*]);
                }
            };
            (konst, quote!(&[#(#paths),*]))
        }
        None => (quote!(), quote!(&[])),
    };
    let names = name_items(&p, name, &syn::Generics::default());
    let construct = constructor(&p, spec);
    // The trait of the kernel's kind and its constructor variant. A grouped kernel's trait
    // is named at the user's `kind = Grouped`, so a kernel that does not implement it is
    // reported there.
    let (kernel_trait, variant, can_implement, boxed) = match spec.kind.value {
        LayerKind::Linear => (
            quote!(#p::Fp8Kernel),
            quote!(Linear),
            quote!(<#name as #p::Fp8Kernel>::can_implement),
            quote!(#p::Box::new(kernel?)),
        ),
        LayerKind::Grouped => {
            let at = spec.kind.span;
            let kernel_at = Ident::new(&name_str, at);
            (
                quote!(#p::Fp8GroupedKernel),
                quote!(Grouped),
                quote_spanned!(at=> <#kernel_at as #p::Fp8GroupedKernel>::can_implement),
                quote_spanned!(at=> #p::boxed_grouped::<#kernel_at>(kernel?)),
            )
        }
    };

    quote! {
        #params_const

        #names

        // Not offered as a candidate when a table lists a type that is not registered (the
        // compiler would list every registered kernel in scope).
        #[automatically_derived]
        #[diagnostic::do_not_recommend]
        impl #p::Registered for #name {
            const ENTRY: #p::KernelEntry = #p::KernelEntry {
                name: #name_str,
                platform: #p::Platform::#platform,
                priority: #priority,
                arch: #arch_tokens,
                force_arch: #force_arch,
                backend: #backend,
                rows: #rows,
                params: #param_list,
                numerics: #numerics,
                can_implement: #can_implement,
                construct: #p::Constructor::#variant({
                    #[doc(hidden)]
                    #[allow(dead_code, non_upper_case_globals, non_camel_case_types, clippy::all, clippy::pedantic)]
                    fn __fp8_construct(
                        ctx: &#p::BuildCtx<'_>,
                    ) -> ::core::result::Result<#p::Box<dyn #kernel_trait>, #p::KernelError> {
                        #construct
                        ::core::result::Result::Ok(#boxed)
                    }
                    __fp8_construct
                }),
            };
        }
    }
}

/// Fills a diagnostic template: `%K` the kernel, `%N` the declared count, `%P` "N layer
/// parameter(s)", `%S` the signature `new` must have. The rest is
/// `#[diagnostic::on_unimplemented]` syntax (`{M}` a placeholder, `{{` a brace).
fn fill(template: &str, kernel: &str, n: usize, sig: &str) -> String {
    let count = match n {
        1 => "1 layer parameter".to_string(),
        n => format!("{n} layer parameters"),
    };
    template
        .replace("%K", kernel)
        .replace("%N", &n.to_string())
        .replace("%P", &count)
        .replace("%S", sig)
        .replace("{M}", "{__FP8_M}")
}

/// The signature `new` must have, as users write it.
pub fn signature(params: Option<usize>) -> String {
    match params {
        Some(n) => format!(
            "pub fn new(ctx: &BuildCtx<'_>, params: LayerParams<{n}>) -> Result<Self, KernelError>"
        ),
        None => "pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError>".to_string(),
    }
}

/// One way `new` can be wrong: the message, label and note of its diagnostic.
struct Diag {
    message: String,
    label: String,
    note: String,
}

impl Diag {
    fn new(t: [&str; 3], kernel: &str, n: usize, sig: &str) -> Self {
        Diag {
            message: fill(t[0], kernel, n, sig),
            label: fill(t[1], kernel, n, sig),
            note: fill(t[2], kernel, n, sig),
        }
    }

    fn attr(&self) -> TokenStream {
        let Diag {
            message,
            label,
            note,
        } = self;
        quote!(#[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)])
    }
}

/// The diagnostics of a kernel that declares `params` (N names).
fn params_diags(kernel: &str, n: usize) -> [Diag; 4] {
    let sig = signature(Some(n));
    let d = |t| Diag::new(t, kernel, n, &sig);
    [
        // `new` takes another `LayerParams<M>`.
        d([
            "`%K::new` takes `LayerParams<{M}>`, but `params = [...]` declares %P",
            "%P declared here: `new` must take `LayerParams<%N>`",
            "write `%S`, or list the {M} parameters `new` receives in `params = [...]`",
        ]),
        // `new` takes only the build context.
        d([
            "`params = [...]` declares %P, but `%K::new` takes only the build context",
            "declared here: `new` must also take `LayerParams<%N>`",
            "write `%S`, or remove `params = [...]` if the kernel reads no layer parameters",
        ]),
        // No `new` at all.
        d([
            "`%K` has no constructor `new`",
            "`params = [...]` declares %P, so `new` takes `LayerParams<%N>`",
            "add `impl %K {{ %S {{ .. }} }}`",
        ]),
        // Anything else.
        d([
            "`%K::new` does not have the signature of a kernel constructor",
            "`params = [...]` declares %P, so `new` takes `LayerParams<%N>`",
            "write `%S`",
        ]),
    ]
}

/// The diagnostics of a kernel without `params`.
fn no_params_diags(kernel: &str) -> [Diag; 3] {
    let sig = signature(None);
    let d = |t| Diag::new(t, kernel, 0, &sig);
    [
        d([
            "`%K::new` takes `LayerParams<{M}>`, but `#[fp8_kernel]` declares no `params`",
            "no `params = [...]` declared for `%K`",
            "declare the {M} layer parameters `new` receives with `params = [...]` in \
             `#[fp8_kernel(...)]`, or write `%S`",
        ]),
        d([
            "`%K` has no constructor `new`",
            "registered here without `params`, so `new` takes only the build context",
            "add `impl %K {{ %S {{ .. }} }}`",
        ]),
        d([
            "`%K::new` does not have the signature of a kernel constructor",
            "registered here without `params`, so `new` takes only the build context",
            "write `%S`",
        ]),
    ]
}

/// The body of the uniform constructor up to `let kernel: Result<Kernel, KernelError>`:
/// calls the typed `new` with the context (and `LAYER_PARAMS`).
///
/// `new` is reached through autoref-ranked probes, so a wrong constructor is one error with
/// a message naming what `new` takes and what to write, at the user's `params = [...]` (or
/// the type's name when none are declared), instead of the compiler's arity suggestions
/// for generated code: `(&&&&Probe(K::new)).__fp8_build(ctx)` resolves to the first impl
/// that applies, in order: `new` has the right signature (`&&&Probe`; builds the kernel);
/// it takes another `LayerParams<M>` (`&&&&Probe`); it takes only the context
/// (`&&Probe`, with params); there is no `new` (`&Probe<NoConstructor>`: `K::new` then
/// resolves to a fallback constant); anything else (`Probe`). Each wrong level's method
/// requires a trait that the kernel never implements, whose `on_unimplemented` is that
/// case's message.
pub fn constructor(p: &TokenStream, spec: &KernelSpec) -> TokenStream {
    let name = &spec.name;
    let kernel = name.to_string();
    // Reported at the user's `params = [...]` (or the type's name).
    let span: Span = match &spec.params {
        Some(params) => params.span,
        None => name.span(),
    };
    // The locals shared with the enclosing `__fp8_construct`, at the call site: tokens at
    // `span` carry the hygiene of a `macro_rules!` the attribute may be written in.
    let ctx = Ident::new("ctx", Span::call_site());
    let kernel_var = Ident::new("kernel", Span::call_site());
    let ctx_ty = quote!(&#p::BuildCtx<'_>);
    let ret = quote!(::core::result::Result<#name, #p::KernelError>);
    // The body of every wrong level (never run: choosing one fails to compile).
    let unreachable = quote!(#p::KernelError::backend(#kernel, "not a kernel constructor"));

    // What differs between a kernel with and without params: the right signature and its
    // call, the diagnostics, and (with params) the "takes only the context" level.
    let (exact_args, exact_call, other_arity, ctx_only, no_new, other) = match &spec.params {
        Some(params) => {
            let n = params.value.len();
            let [other_arity, ctx_only, no_new, other] = params_diags(&kernel, n);
            (
                quote!(#ctx_ty, #p::LayerParams<#n>),
                quote!((self.0)(ctx, #name::LAYER_PARAMS)),
                other_arity,
                Some(ctx_only),
                no_new,
                other,
            )
        }
        None => {
            let [other_arity, no_new, other] = no_params_diags(&kernel);
            (
                quote!(#ctx_ty),
                quote!((self.0)(ctx)),
                other_arity,
                None,
                no_new,
                other,
            )
        }
    };
    // At the call site (never reported; its `self` and `ctx` are the call's).
    let exact = quote! {
        trait __Fp8Exact {
            fn __fp8_build(&self, ctx: #ctx_ty) -> #ret;
        }
        impl<__Fp8F: Fn(#exact_args) -> #ret> __Fp8Exact for &&&__Fp8Probe<__Fp8F> {
            fn __fp8_build(&self, ctx: #ctx_ty) -> #ret {
                #exact_call
            }
        }
    };
    let other_arity_attr = other_arity.attr();
    let no_new_attr = no_new.attr();
    let other_attr = other.attr();
    let ctx_only_level = ctx_only.map(|d| {
        let attr = d.attr();
        quote_spanned! {span=>
            #attr
            trait __Fp8NewTakesOnlyTheCtx {}
            #[diagnostic::do_not_recommend]
            impl __Fp8NewTakesOnlyTheCtx for __Fp8Never {}
            trait __Fp8CtxOnly<__Fp8K> {
                fn __fp8_build(&self, _: #ctx_ty) -> #ret
                where
                    __Fp8K: __Fp8NewTakesOnlyTheCtx,
                {
                    ::core::result::Result::Err(#unreachable)
                }
            }
            impl<__Fp8F: Fn(#ctx_ty) -> #ret> __Fp8CtxOnly<#name> for &&__Fp8Probe<__Fp8F> {}
        }
    });

    quote_spanned! {span=>
        struct __Fp8Probe<__Fp8F>(__Fp8F);
        struct __Fp8NoConstructor;
        // Implements each diagnostic trait, hidden from diagnostics, so that the compiler
        // does not suggest implementing them.
        struct __Fp8Never;
        // `K::new` when the kernel `K` has no inherent `new` (an inherent one always wins).
        trait __Fp8NoNew {
            const new: __Fp8NoConstructor = __Fp8NoConstructor;
        }
        impl<__Fp8T: ?Sized> __Fp8NoNew for __Fp8T {}

        #exact

        #other_arity_attr
        trait __Fp8WrongParamCount<const __FP8_M: usize> {}
        #[diagnostic::do_not_recommend]
        impl<const __FP8_M: usize> __Fp8WrongParamCount<__FP8_M> for __Fp8Never {}
        trait __Fp8OtherArity<__Fp8K, const __FP8_M: usize> {
            fn __fp8_build(&self, _: #ctx_ty) -> #ret
            where
                __Fp8K: __Fp8WrongParamCount<__FP8_M>,
            {
                ::core::result::Result::Err(#unreachable)
            }
        }
        impl<__Fp8F: Fn(#ctx_ty, #p::LayerParams<__FP8_M>) -> #ret, const __FP8_M: usize>
            __Fp8OtherArity<#name, __FP8_M> for &&&&__Fp8Probe<__Fp8F> {}

        #ctx_only_level

        #no_new_attr
        trait __Fp8HasNoNew {}
        #[diagnostic::do_not_recommend]
        impl __Fp8HasNoNew for __Fp8Never {}
        trait __Fp8Missing<__Fp8K> {
            fn __fp8_build(&self, _: #ctx_ty) -> #ret
            where
                __Fp8K: __Fp8HasNoNew,
            {
                ::core::result::Result::Err(#unreachable)
            }
        }
        impl __Fp8Missing<#name> for &__Fp8Probe<__Fp8NoConstructor> {}

        #other_attr
        trait __Fp8WrongSignature {}
        #[diagnostic::do_not_recommend]
        impl __Fp8WrongSignature for __Fp8Never {}
        trait __Fp8Other<__Fp8K> {
            fn __fp8_build(&self, _: #ctx_ty) -> #ret
            where
                __Fp8K: __Fp8WrongSignature,
            {
                ::core::result::Result::Err(#unreachable)
            }
        }
        impl<__Fp8F> __Fp8Other<#name> for __Fp8Probe<__Fp8F> {}

        let #kernel_var: #ret = (&&&&__Fp8Probe(#name::new)).__fp8_build(#ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::Errors;
    use crate::kernel::{ast::RawArgs, attr, valid};
    use quote::quote;

    fn spec(args: TokenStream) -> KernelSpec {
        let raw: RawArgs = syn::parse2(args).unwrap();
        let mut errs = Errors::default();
        let attrs = attr::interpret(&raw, &mut errs);
        let item: syn::Item = syn::parse_quote!(
            pub struct MarlinFp8;
        );
        valid::validate(&attrs, &item, errs).ok().unwrap()
    }

    fn flat(t: &TokenStream) -> String {
        t.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn expansion_is_valid_rust() {
        for args in [
            quote!(
                platform = Cuda,
                priority = 4,
                arch = sm80..sm89,
                force_arch = sm80..,
                params = [weight, weight_scale, input_scale, input_scale_ub],
                backend = marlin,
                numerics = W8A16
            ),
            quote!(platform = Cpu, priority = 10),
        ] {
            let out = expand(&spec(args));
            syn::parse2::<syn::File>(out.clone()).unwrap_or_else(|e| panic!("{e}: {out}"));
        }
    }

    #[test]
    fn entry_fields() {
        let out = flat(&expand(&spec(quote!(
            platform = Cuda,
            priority = 4,
            arch = sm80..sm89,
            force_arch = sm80..,
            params = [weight, weight_scale],
            backend = marlin,
            numerics = W8A16
        ))));
        assert!(out.contains("platform : :: fp8_linear :: __private :: Platform :: Cuda"));
        assert!(out.contains("priority : 4u16"));
        assert!(out.contains(
            "arch : :: fp8_linear :: __private :: ArchSpec :: Range { lo : :: fp8_linear :: __private :: Capability :: new (8u8 , 0u8) , hi : :: fp8_linear :: __private :: Capability :: new (8u8 , 9u8) }"
        ));
        assert!(out.contains("backend : \"marlin\""));
        assert!(out.contains("numerics : :: fp8_linear :: __private :: Numerics :: W8A16"));
        assert!(out.contains(
            "params : & [:: fp8_linear :: __private :: layer_param :: weight , :: fp8_linear :: __private :: layer_param :: weight_scale]"
        ));
        assert!(out.contains(
            "pub const LAYER_PARAMS : :: fp8_linear :: __private :: LayerParams < 2usize >"
        ));
        assert!(out.contains("pub const NAME : & 'static str = \"MarlinFp8\""));
        assert!(out.contains("impl :: fp8_linear :: __private :: KernelName for MarlinFp8"));
    }

    #[test]
    fn defaults_and_crate_path() {
        let out = flat(&expand(&spec(quote!(
            platform = Cpu,
            priority = 10,
            crate = my::krate
        ))));
        assert!(out.contains("numerics : my :: krate :: __private :: Numerics :: Layer"));
        assert!(out.contains("params : & []"));
        assert!(out.contains("force_arch : :: core :: option :: Option :: None"));
        assert!(out.contains("backend : \"cpu\""));
        assert!(!out.contains("LAYER_PARAMS :"));
        assert!(out.contains("construct : my :: krate :: __private :: Constructor :: Linear"));
        assert!(
            out.contains("< MarlinFp8 as my :: krate :: __private :: Fp8Kernel > :: can_implement")
        );
    }

    #[test]
    fn a_grouped_kernel_names_the_grouped_trait() {
        let out = flat(&expand(&spec(quote!(
            platform = Cpu,
            priority = 1,
            kind = Grouped
        ))));
        assert!(out.contains("construct : :: fp8_linear :: __private :: Constructor :: Grouped"));
        assert!(out.contains(
            "< MarlinFp8 as :: fp8_linear :: __private :: Fp8GroupedKernel > :: can_implement"
        ));
        assert!(out.contains("Box < dyn :: fp8_linear :: __private :: Fp8GroupedKernel >"));
        assert!(out.contains("boxed_grouped :: < MarlinFp8 > (kernel ?)"));
    }

    #[test]
    fn constructor_messages_keep_the_arity() {
        let out = expand(&spec(quote!(
            platform = Cuda,
            priority = 4,
            arch = sm80..sm89,
            params = [weight, weight_scale, input_scale, input_scale_ub]
        )))
        .to_string();
        assert!(out.contains(
            "`params = [...]` declares 4 layer parameters, but `MarlinFp8::new` takes only the build context"
        ));
        assert!(out.contains(
            "write `pub fn new(ctx: &BuildCtx<'_>, params: LayerParams<4>) -> Result<Self, KernelError>`"
        ));
        assert!(out.contains("`MarlinFp8::new` takes `LayerParams<{__FP8_M}>`"));
        assert!(out.contains("add `impl MarlinFp8 {{ pub fn new("));
        let out = expand(&spec(quote!(platform = Cpu, priority = 1))).to_string();
        assert!(out.contains("but `#[fp8_kernel]` declares no `params`"));
        assert!(!out.contains("__Fp8CtxOnly"));
        assert!(out.contains("write `pub fn new(ctx: &BuildCtx<'_>) -> Result<Self, KernelError>`"));
    }

    #[test]
    fn one_parameter_is_singular() {
        assert_eq!(fill("%P", "K", 1, ""), "1 layer parameter");
        assert_eq!(fill("%P / %N", "K", 3, ""), "3 layer parameters / 3");
    }
}
