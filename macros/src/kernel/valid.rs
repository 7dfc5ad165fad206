//! Validate: the rules across arguments (each key at most once, `platform` and `priority`
//! required, Cuda kernels declare `arch`, other platforms' kernels no capabilities,
//! `force_arch` strictly wider than `arch`) and on the item (a struct or enum, not generic),
//! producing the checked [`KernelSpec`]. Every error is collected, spanned at the user's
//! tokens.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::Ident;

use super::ast::Key;
use super::attr::{Arch, Attr, Value};
use crate::errors::Errors;
use crate::vocab::{LayerKind, Numerics, Platform, Spanned};

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
    /// The kind of layer (default `Linear`), at the user's token (the type's name when not
    /// written): the trait the kernel implements is checked there.
    pub kind: Spanned<LayerKind>,
    /// Backend family name.
    pub backend: String,
    /// The rows (M) of a call the kernel serves: (first, last), last None for no bound.
    pub rows: (u64, Option<u64>),
    /// Path of the crate that re-exports `__private` (default `::fp8_linear`).
    pub krate: syn::Path,
}

/// The error for an attribute on anything but a struct or enum.
pub const NOT_A_TYPE: &str = "#[fp8_kernel] goes on a struct or enum that implements Fp8Kernel";

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
            errs.spanned(item, NOT_A_TYPE);
            None
        }
    };

    let mut seen: Vec<Key> = Vec::new();
    // Keys that a misspelled key was probably meant to be (the misspelling is reported).
    let mut guessed: Vec<Key> = Vec::new();
    let mut platform = None;
    let mut priority = None;
    let mut arch: Option<Spanned<Arch>> = None;
    let mut force_arch: Option<Spanned<Arch>> = None;
    let mut params = None;
    let mut numerics = None;
    let mut kind = None;
    let mut backend = None;
    let mut rows = None;
    let mut krate = None;
    for a in attrs {
        if a.guessed {
            guessed.push(a.key);
            continue;
        }
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
            Some(Value::Arch(x)) if a.key == Key::ForceArch => {
                force_arch = Some(Spanned::new(x, span))
            }
            Some(Value::Arch(x)) => arch = Some(Spanned::new(x, span)),
            Some(Value::Params(p)) => params = Some(Spanned::new(p, span)),
            Some(Value::Numerics(n)) => numerics = Some(Spanned::new(n, span)),
            Some(Value::Kind(k)) => kind = Some(Spanned::new(k, span)),
            Some(Value::Backend(b)) => backend = Some(b),
            Some(Value::Rows(lo, hi)) => rows = Some((lo, hi)),
            Some(Value::Crate(c)) => krate = Some(c),
        }
    }

    let anchor = name
        .as_ref()
        .map(Ident::span)
        .unwrap_or_else(|| item.span());
    let needs_platform = format!("`platform = {}`", Platform::expected().replace(", ", " | "));
    const NEEDS_PRIORITY: &str =
        "`priority = N` (its default position in a table; 1 is tried first)";
    let given = |k: Key| seen.contains(&k) || guessed.contains(&k);
    match (given(Key::Platform), given(Key::Priority)) {
        (true, true) => {}
        (false, true) => errs.at(anchor, format!("#[fp8_kernel] needs {needs_platform}")),
        (true, false) => errs.at(anchor, format!("#[fp8_kernel] needs {NEEDS_PRIORITY}")),
        // One error for an empty attribute.
        (false, false) => errs.at(
            anchor,
            format!("#[fp8_kernel] needs {needs_platform} and {NEEDS_PRIORITY}"),
        ),
    }
    if let Some(p) = &platform {
        arch_rules(
            p,
            given(Key::Arch),
            arch.as_ref(),
            force_arch.as_ref(),
            &mut errs,
        );
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
    let name_span = name.span();
    Ok(KernelSpec {
        name,
        platform,
        priority,
        arch: arch.map_or(Arch::Any, |a| a.value),
        force_arch: force_arch.map(|a| a.value),
        params,
        numerics,
        kind: kind.unwrap_or_else(|| Spanned::new(LayerKind::Linear, name_span)),
        backend,
        rows: rows.unwrap_or((1, None)),
        krate: krate.unwrap_or_else(|| syn::parse_quote!(::fp8_linear)),
    })
}

/// The rules on `arch` and `force_arch` given the platform: a Cuda kernel declares `arch`;
/// other platforms' devices have no compute capability, so an `arch` other than `any` (and
/// any `force_arch`) there would keep the kernel from ever being selected; `force_arch`
/// widens `arch`, so it must contain it and add to it. `arch_written` is whether the key
/// was written (its value may have been invalid, and already reported).
fn arch_rules(
    platform: &Spanned<Platform>,
    arch_written: bool,
    arch: Option<&Spanned<Arch>>,
    force_arch: Option<&Spanned<Arch>>,
    errs: &mut Errors,
) {
    let p = platform.value.name();
    if platform.value != Platform::Cuda {
        if let Some(a) = arch.filter(|a| a.value != Arch::Any) {
            errs.at(
                a.span,
                format!(
                    "`arch = {}` names CUDA compute capabilities, which {p} devices do not have: \
                     the kernel would never be selected; leave `arch` out (a {p} kernel runs on \
                     every {p} device)",
                    a.value
                ),
            );
        }
        if let Some(f) = force_arch {
            errs.at(
                f.span,
                format!(
                    "`force_arch` widens the CUDA compute capabilities of `arch` for a kernel \
                     forced by name; a {p} kernel runs on every {p} device, so leave it out"
                ),
            );
        }
        return;
    }
    if !arch_written {
        match force_arch {
            Some(f) => errs.at(
                f.span,
                "`force_arch` widens `arch`, which is missing: Cuda kernels must declare \
                 `arch = ...`, the compute capabilities their code runs on (and `force_arch` the \
                 wider range allowed when the kernel is forced by name)",
            ),
            None => errs.at(
                platform.span,
                "Cuda kernels must declare `arch = ...`, the compute capabilities their code runs on \
                 (e.g. `arch = sm89..`, `arch = sm90a`, `arch = sm75..sm89`)",
            ),
        }
        return;
    }
    let (Some(a), Some(f)) = (arch, force_arch) else {
        return;
    };
    if !f.value.contains(a.value) {
        errs.at(
            f.span,
            format!(
                "`force_arch = {}` does not include all of `arch = {}`: `force_arch` is the wider \
                 range a kernel forced by name may run on, so it must contain `arch`",
                f.value, a.value
            ),
        );
    } else if a.value.contains(f.value) {
        errs.at(
            f.span,
            format!(
                "`force_arch = {}` adds no capability to `arch = {}`: widen it (it is the range \
                 a kernel forced by name may run on), or leave it out",
                f.value, a.value
            ),
        );
    }
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
    fn an_empty_attribute_is_one_error() {
        assert_eq!(
            errors(quote!()),
            ["#[fp8_kernel] needs `platform = Cuda | Rocm | Cpu | Xpu | Tpu` and `priority = N` \
              (its default position in a table; 1 is tried first)"]
        );
        // An unknown key does not hide the missing ones...
        assert_eq!(errors(quote!(colour = red)).len(), 2);
        // ...but a misspelled one is not also reported missing.
        assert_eq!(
            errors(quote!(platform = Cpu, priorty = 1)),
            ["unsupported fp8_kernel argument `priorty` (did you mean `priority`?); expected one \
              of: platform, priority, arch, params, numerics, backend, force_arch, rows, kind, crate"]
        );
        assert_eq!(
            errors(quote!(platform = Cuda, priority = 1, acrh = sm80)).len(),
            1
        );
    }

    #[test]
    fn arch_on_other_platforms() {
        let e = errors(quote!(platform = Cpu, priority = 1, arch = sm80..));
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with(
            "`arch = sm80..` names CUDA compute capabilities, which Cpu devices do not have"
        ));
        assert!(errors(quote!(platform = Rocm, priority = 1, arch = any)).is_empty());
        let e = errors(quote!(platform = Cpu, priority = 1, force_arch = sm80..));
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("`force_arch` widens the CUDA compute capabilities"));
    }

    #[test]
    fn force_arch_rules() {
        let e = errors(quote!(platform = Cuda, priority = 1, force_arch = sm80..));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("`force_arch` widens `arch`, which is missing"));
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = sm80..,
            force_arch = sm86..
        ));
        assert_eq!(
            e,
            ["`force_arch = sm86..` does not include all of `arch = sm80..`: `force_arch` is the \
              wider range a kernel forced by name may run on, so it must contain `arch`"]
        );
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = sm80..sm89,
            force_arch = sm89..
        ));
        assert!(e[0].contains("does not include all of `arch = sm80..sm89`"));
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = sm80..sm89,
            force_arch = sm80..sm89
        ));
        assert_eq!(
            e,
            ["`force_arch = sm80..sm89` adds no capability to `arch = sm80..sm89`: widen it (it is \
              the range a kernel forced by name may run on), or leave it out"]
        );
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = any,
            force_arch = sm80..
        ));
        assert!(e[0].contains("`force_arch = sm80..` does not include all of `arch = any`"));
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = any,
            force_arch = any
        ));
        assert!(e[0].contains("adds no capability to `arch = any`"));
        for ok in [
            quote!(
                platform = Cuda,
                priority = 1,
                arch = sm80..sm89,
                force_arch = sm80..
            ),
            quote!(
                platform = Cuda,
                priority = 1,
                arch = sm90a,
                force_arch = sm89..
            ),
            quote!(platform = Cuda, priority = 1, arch = sm80, force_arch = any),
        ] {
            assert!(errors(ok.clone()).is_empty(), "{ok}");
        }
        // An invalid `arch` is reported once; `force_arch` is not judged against it.
        let e = errors(quote!(
            platform = Cuda,
            priority = 1,
            arch = sm9,
            force_arch = sm80..
        ));
        assert_eq!(e.len(), 1, "{e:?}");
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
