//! Validate: the rules across arguments (each key at most once, `platform` and `priority`
//! required, Cuda kernels declare `arch`) and on the item (a struct or enum, not generic),
//! producing the checked [`KernelSpec`]. Every error is collected, spanned at the user's
//! tokens.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::Ident;

use super::ast::Key;
use super::attr::{Arch, Attr, Value};
use crate::errors::Errors;
use crate::vocab::{Numerics, Platform, Spanned};

/// The checked attribute.
pub struct KernelSpec {
    /// The kernel type's name.
    pub name: Ident,
    /// The platform, at the user's token.
    pub platform: Spanned<Platform>,
    /// Priority, >= 1.
    pub priority: u16,
    /// Declared arch (`Any` when not given, which only non-Cuda kernels may do).
    pub arch: Arch,
    /// Arch allowed when forced.
    pub force_arch: Option<Arch>,
    /// Declared params (as written, each spanned at the user's name), at the span of the
    /// `params` value.
    pub params: Option<Spanned<Vec<Ident>>>,
    /// Declared numerics, at the user's token.
    pub numerics: Option<Spanned<Numerics>>,
    /// Backend family name.
    pub backend: String,
    /// Path of the crate that re-exports `__private` (default `::fp8_linear`).
    pub krate: syn::Path,
}

/// The name of the kernel type `#[fp8_kernel]` is on, when the item is a struct or enum
/// (generic or not): enough for the items emitted even when the attribute has errors.
pub fn item_name(item: &syn::Item) -> Option<(&Ident, &syn::Generics)> {
    match item {
        syn::Item::Struct(s) => Some((&s.ident, &s.generics)),
        syn::Item::Enum(e) => Some((&e.ident, &e.generics)),
        _ => None,
    }
}

/// Checks the interpreted arguments and the item. `errs` may already hold the errors of
/// `attr`; the spec is returned only when there are none at all.
pub fn validate(attrs: &[Attr], item: &syn::Item, mut errs: Errors) -> syn::Result<KernelSpec> {
    let name = match item_name(item) {
        Some((name, generics)) => {
            if !generics.params.is_empty() {
                errs.spanned(
                    generics,
                    "#[fp8_kernel] types cannot be generic: a table entry names one concrete kernel",
                );
            }
            Some(name.clone())
        }
        None => {
            errs.spanned(
                item,
                "#[fp8_kernel] goes on a struct or enum that implements Fp8Kernel",
            );
            None
        }
    };

    let mut seen: Vec<Key> = Vec::new();
    let mut platform = None;
    let mut priority = None;
    let mut arch = None;
    let mut force_arch = None;
    let mut params = None;
    let mut numerics = None;
    let mut backend = None;
    let mut krate = None;
    for a in attrs {
        if seen.contains(&a.key) {
            errs.at(a.key_span, format!("`{}` set more than once", a.key.name()));
            continue;
        }
        seen.push(a.key);
        let span = a.span;
        match a.value.clone() {
            None => {}
            Some(Value::Platform(p)) => platform = Some(Spanned::new(p, span)),
            Some(Value::Priority(p)) => priority = Some(p),
            Some(Value::Arch(x)) if a.key == Key::ForceArch => force_arch = Some(x),
            Some(Value::Arch(x)) => arch = Some(x),
            Some(Value::Params(p)) => params = Some(Spanned::new(p, span)),
            Some(Value::Numerics(n)) => numerics = Some(Spanned::new(n, span)),
            Some(Value::Backend(b)) => backend = Some(b),
            Some(Value::Crate(c)) => krate = Some(c),
        }
    }

    let anchor = name
        .as_ref()
        .map(Ident::span)
        .unwrap_or_else(|| item.span());
    if !seen.contains(&Key::Platform) {
        errs.at(
            anchor,
            format!(
                "#[fp8_kernel] needs `platform = {}`",
                Platform::expected().replace(", ", " | ")
            ),
        );
    }
    if !seen.contains(&Key::Priority) {
        errs.at(
            anchor,
            "#[fp8_kernel] needs `priority = N` (its default position in a table; 1 is tried first)",
        );
    }
    if let Some(p) = &platform {
        if p.value == Platform::Cuda && !seen.contains(&Key::Arch) {
            errs.at(
                p.span,
                "Cuda kernels must declare `arch = ...`, the compute capabilities their code runs on \
                 (e.g. `arch = sm89..`, `arch = sm90a`, `arch = sm75..sm89`)",
            );
        }
    }
    errs.finish()?;

    // No errors: every required value is present (a key with an invalid value records an
    // error), and the item is a struct or enum.
    let (Some(name), Some(platform), Some(priority)) = (name, platform, priority) else {
        return Err(syn::Error::new(
            Span::call_site(),
            "internal error: fp8_kernel validated without a name, platform or priority",
        ));
    };
    let backend = backend.unwrap_or_else(|| match platform.value {
        Platform::Cpu => "cpu".to_string(),
        _ => "native".to_string(),
    });
    Ok(KernelSpec {
        name,
        platform,
        priority,
        arch: arch.unwrap_or(Arch::Any),
        force_arch,
        params,
        numerics,
        backend,
        krate: krate.unwrap_or_else(|| syn::parse_quote!(::fp8_linear)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{ast::RawArgs, attr};
    use quote::quote;

    fn check(
        args: proc_macro2::TokenStream,
        item: proc_macro2::TokenStream,
    ) -> Result<KernelSpec, Vec<String>> {
        let raw: RawArgs = syn::parse2(args).unwrap();
        let item: syn::Item = syn::parse2(item).unwrap();
        let mut errs = Errors::default();
        let attrs = attr::interpret(&raw, &mut errs);
        validate(&attrs, &item, errs).map_err(|e| e.into_iter().map(|e| e.to_string()).collect())
    }

    fn errors(args: proc_macro2::TokenStream) -> Vec<String> {
        match check(
            args,
            quote!(
                pub struct K;
            ),
        ) {
            Ok(_) => Vec::new(),
            Err(e) => e,
        }
    }

    #[test]
    fn a_full_spec() {
        let s = check(
            quote!(
                platform = Cuda,
                priority = 4,
                arch = sm80..sm89,
                force_arch = sm80..,
                params = [weight, weight_scale],
                backend = marlin,
                numerics = W8A16
            ),
            quote!(
                pub struct MarlinFp8 {
                    x: u8,
                }
            ),
        )
        .ok()
        .unwrap();
        assert_eq!(s.name, "MarlinFp8");
        assert_eq!(s.platform.value, Platform::Cuda);
        assert_eq!(s.priority, 4);
        assert_eq!(s.arch, Arch::Range((8, 0), (8, 9)));
        assert_eq!(s.force_arch, Some(Arch::AtLeast((8, 0))));
        assert_eq!(s.params.unwrap().value.len(), 2);
        assert_eq!(s.numerics.unwrap().value, Numerics::W8A16);
        assert_eq!(s.backend, "marlin");
    }

    #[test]
    fn defaults() {
        let s = check(
            quote!(platform = Cpu, priority = 1),
            quote!(
                enum K {
                    A,
                }
            ),
        )
        .ok()
        .unwrap();
        assert_eq!(s.arch, Arch::Any);
        assert_eq!(s.backend, "cpu");
        assert!(s.params.is_none() && s.numerics.is_none() && s.force_arch.is_none());
        let s = check(
            quote!(platform = Rocm, priority = 1),
            quote!(
                struct K;
            ),
        )
        .ok()
        .unwrap();
        assert_eq!(s.backend, "native");
    }

    #[test]
    fn required_keys() {
        assert_eq!(
            errors(quote!(platform = Cpu)),
            ["#[fp8_kernel] needs `priority = N` (its default position in a table; 1 is tried first)"]
        );
        assert_eq!(
            errors(quote!(priority = 1)),
            ["#[fp8_kernel] needs `platform = Cuda | Rocm | Cpu | Xpu | Tpu`"]
        );
        // An invalid value is reported once, not also as missing.
        assert_eq!(
            errors(quote!(platform = Cpu, priority = "high")),
            ["`priority` expects an integer (1 is tried first), found a string"]
        );
    }

    #[test]
    fn cuda_needs_arch() {
        let e = errors(quote!(platform = Cuda, priority = 5));
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("Cuda kernels must declare `arch = ...`"));
        // An invalid arch is its own error, not a missing one.
        let e = errors(quote!(platform = Cuda, priority = 5, arch = a::sm90));
        assert_eq!(e.len(), 1);
        assert!(e[0].ends_with("found a path; write the capability alone"));
        assert!(errors(quote!(platform = Cpu, priority = 5)).is_empty());
    }

    #[test]
    fn duplicates() {
        assert_eq!(
            errors(quote!(platform = Cpu, priority = 1, priority = 2)),
            ["`priority` set more than once"]
        );
        assert_eq!(
            errors(quote!(platform = Cpu, priority = 1, arch = any, arch = any)),
            ["`arch` set more than once"]
        );
    }

    #[test]
    fn items() {
        let e = check(
            quote!(platform = Cpu, priority = 1),
            quote!(
                pub struct K<T>(T);
            ),
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            ["#[fp8_kernel] types cannot be generic: a table entry names one concrete kernel"]
        );
        let e = check(
            quote!(platform = Cpu, priority = 1),
            quote!(
                fn k() {}
            ),
        )
        .err()
        .unwrap();
        assert_eq!(
            e,
            ["#[fp8_kernel] goes on a struct or enum that implements Fp8Kernel"]
        );
    }

    #[test]
    fn every_error_at_once() {
        let e = errors(quote!(
            platform = Cuda,
            priority = "first",
            arch = sm9,
            colour = red
        ));
        assert_eq!(e.len(), 3, "{e:?}");
    }
}
