//! Validate: interpret the raw arguments into a checked [`KernelSpec`], collecting every
//! error at the user's tokens.

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, ExprRange, Ident, Lit, RangeLimits};

use super::ast::RawArgs;
use crate::errors::Errors;
use crate::kw::{KERNEL_KEYS, PLATFORMS};

/// A compute capability as (major, minor).
pub type Cap = (u8, u8);

/// A checked `arch` value.
#[derive(Clone, Copy)]
pub enum Arch {
    /// `any`
    Any,
    /// `sm90` / `sm90a`
    Exact(Cap, bool),
    /// `sm89..`
    AtLeast(Cap),
    /// `sm75..sm89`
    Range(Cap, Cap),
}

/// The checked attribute.
pub struct KernelSpec {
    /// The kernel type's name.
    pub name: Ident,
    /// Platform variant name (one of [`PLATFORMS`]), spanned at the user's token.
    pub platform: Ident,
    /// Priority, >= 1.
    pub priority: u16,
    /// Declared arch.
    pub arch: Arch,
    /// Arch allowed when forced.
    pub force_arch: Option<Arch>,
    /// Declared params (as written, spanned at the user's names), with the span of the
    /// `params` value.
    pub params: Option<(Span, Vec<Ident>)>,
    /// Declared numerics variant (`Layer` or `W8A16`), spanned at the user's token.
    pub numerics: Option<Ident>,
    /// Backend family name.
    pub backend: String,
    /// Path of the crate that re-exports `__private` (default `::fp8_linear`).
    pub krate: syn::Path,
}

/// Checks the arguments and the item; returns every problem at once.
pub fn validate(raw: RawArgs, item: &syn::Item) -> syn::Result<KernelSpec> {
    let mut errs = Errors::default();
    let name = match item {
        syn::Item::Struct(s) => {
            check_generics(&s.generics, &mut errs);
            Some(s.ident.clone())
        }
        syn::Item::Enum(e) => {
            check_generics(&e.generics, &mut errs);
            Some(e.ident.clone())
        }
        other => {
            errs.spanned(
                other,
                "#[fp8_kernel] goes on a struct or enum that implements Fp8Kernel",
            );
            None
        }
    };

    let mut seen: Vec<String> = Vec::new();
    let mut platform = None;
    let mut priority = None;
    let mut arch = None;
    let mut force_arch = None;
    let mut params = None;
    let mut backend = None;
    let mut numerics = None;
    let mut krate = None;
    for arg in &raw.args {
        let key = arg.key.to_string();
        if seen.contains(&key) {
            errs.spanned(&arg.key, format!("`{key}` set more than once"));
            continue;
        }
        seen.push(key.clone());
        let v = &arg.value;
        match key.as_str() {
            "platform" => platform = platform_value(v, &mut errs),
            "priority" => priority = priority_value(v, &mut errs),
            "arch" => arch = arch_value(v, &mut errs),
            "force_arch" => force_arch = arch_value(v, &mut errs),
            "params" => params = params_value(v, &mut errs),
            "backend" => backend = backend_value(v, &mut errs),
            "crate" => krate = crate_value(v, &mut errs),
            "numerics" => numerics = numerics_value(v, &mut errs),
            _ => errs.spanned(
                &arg.key,
                format!("unsupported fp8_kernel argument `{key}`; expected one of: {KERNEL_KEYS}"),
            ),
        }
    }

    let anchor = name
        .as_ref()
        .map(Ident::span)
        .unwrap_or_else(|| item.span());
    if platform.is_none() && !seen.iter().any(|k| k == "platform") {
        errs.at(
            anchor,
            "#[fp8_kernel] needs `platform = Cuda | Rocm | Cpu | Xpu | Tpu`",
        );
    }
    if priority.is_none() && !seen.iter().any(|k| k == "priority") {
        errs.at(
            anchor,
            "#[fp8_kernel] needs `priority = N` (its default position in a table; 1 is tried first)",
        );
    }
    if let Some(p) = &platform {
        if *p == "Cuda" && arch.is_none() && !seen.iter().any(|k| k == "arch") {
            errs.spanned(
                p,
                "Cuda kernels must declare `arch = ...`, the compute capabilities their code runs on \
                 (e.g. `arch = sm89..`, `arch = sm90a`, `arch = sm75..sm89`)",
            );
        }
    }
    errs.finish()?;

    let platform: Ident = platform.expect("checked above");
    let backend = backend.unwrap_or_else(|| {
        if platform == "Cpu" {
            "cpu".to_string()
        } else {
            "native".to_string()
        }
    });
    Ok(KernelSpec {
        name: name.expect("checked above"),
        platform,
        priority: priority.expect("checked above"),
        arch: arch.unwrap_or(Arch::Any),
        force_arch,
        params,
        numerics,
        backend,
        krate: krate.unwrap_or_else(|| syn::parse_quote!(::fp8_linear)),
    })
}

fn check_generics(g: &syn::Generics, errs: &mut Errors) {
    if !g.params.is_empty() {
        errs.spanned(
            g,
            "#[fp8_kernel] types cannot be generic: a table entry names one concrete kernel",
        );
    }
}

fn path_ident(v: &Expr) -> Option<&Ident> {
    match v {
        Expr::Path(ExprPath {
            path, qself: None, ..
        }) => path.get_ident(),
        _ => None,
    }
}

fn describe(v: &Expr) -> &'static str {
    match v {
        Expr::Lit(ExprLit {
            lit: Lit::Str(_), ..
        }) => "a string",
        Expr::Lit(ExprLit {
            lit: Lit::Int(_), ..
        }) => "an integer",
        Expr::Lit(ExprLit {
            lit: Lit::Float(_), ..
        }) => "a float",
        Expr::Lit(ExprLit {
            lit: Lit::Bool(_), ..
        }) => "a bool",
        Expr::Lit(_) => "a literal",
        Expr::Path(_) => "a path",
        Expr::Array(_) => "an array",
        Expr::Range(_) => "a range",
        Expr::Unary(_) => "a negative number",
        _ => "an expression",
    }
}

fn platform_value(v: &Expr, errs: &mut Errors) -> Option<Ident> {
    match path_ident(v) {
        Some(id) if PLATFORMS.iter().any(|p| id == p) => Some(id.clone()),
        Some(id) => {
            errs.spanned(
                id,
                format!(
                    "unknown platform `{id}`; expected one of: {}",
                    PLATFORMS.join(", ")
                ),
            );
            None
        }
        None => {
            errs.spanned(
                v,
                format!(
                    "`platform` expects one of {}, found {}",
                    PLATFORMS.join(", "),
                    describe(v)
                ),
            );
            None
        }
    }
}

fn priority_value(v: &Expr, errs: &mut Errors) -> Option<u16> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(i), ..
    }) = v
    {
        match i.base10_parse::<u16>() {
            Ok(0) => errs.spanned(i, "`priority` starts at 1 (1 is tried first)"),
            Ok(p) => return Some(p),
            Err(_) => errs.spanned(i, "`priority` must fit in a u16 (1..=65535)"),
        }
        return None;
    }
    errs.spanned(
        v,
        format!(
            "`priority` expects an integer (1 is tried first), found {}",
            describe(v)
        ),
    );
    None
}

/// `sm90`, `sm90a`, `sm120` -> ((9, 0), false), ((9, 0), true), ((12, 0), false)
fn sm(id: &Ident, errs: &mut Errors) -> Option<(Cap, bool)> {
    let s = id.to_string();
    let parsed = s.strip_prefix("sm").and_then(|rest| {
        let (digits, specific) = match rest.strip_suffix('a') {
            Some(d) => (d, true),
            None => (rest, false),
        };
        if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (maj, min) = digits.split_at(digits.len() - 1);
        Some(((maj.parse().ok()?, min.parse().ok()?), specific))
    });
    if parsed.is_none() {
        errs.spanned(
            id,
            format!(
                "`{s}` is not a compute capability; write smXY or smXYa (e.g. sm80, sm89, sm90a)"
            ),
        );
    }
    parsed
}

fn arch_value(v: &Expr, errs: &mut Errors) -> Option<Arch> {
    const SHAPES: &str =
        "`any`, `sm90a` (exactly), `sm89..` (or newer) or `sm75..sm89` (up to before)";
    match v {
        Expr::Path(_) => {
            let Some(id) = path_ident(v) else {
                errs.spanned(
                    v,
                    format!("`arch` expects {SHAPES}, found a path; write the capability alone"),
                );
                return None;
            };
            if id == "any" {
                return Some(Arch::Any);
            }
            let (cap, specific) = sm(id, errs)?;
            Some(Arch::Exact(cap, specific))
        }
        Expr::Range(ExprRange {
            start, limits, end, ..
        }) => {
            if let RangeLimits::Closed(t) = limits {
                errs.spanned(t, "use `lo..hi` (hi excluded), not `..=`");
                return None;
            }
            let lo = match start.as_deref().and_then(path_ident) {
                Some(id) => sm(id, errs),
                None => {
                    errs.spanned(
                        v,
                        format!("`arch` range needs a lower bound; expected {SHAPES}"),
                    );
                    return None;
                }
            }?;
            if lo.1 {
                errs.spanned(
                    start,
                    "an `a` target (sm90a) runs on one capability only; it cannot start a range",
                );
                return None;
            }
            match end.as_deref() {
                None => Some(Arch::AtLeast(lo.0)),
                Some(e) => {
                    let Some(id) = path_ident(e) else {
                        errs.spanned(e, format!("expected {SHAPES}"));
                        return None;
                    };
                    let (hi, specific) = sm(id, errs)?;
                    if specific {
                        errs.spanned(id, "a range bound cannot be an `a` target");
                        return None;
                    }
                    if hi <= lo.0 {
                        errs.spanned(
                            v,
                            "empty `arch` range: the upper bound must be above the lower bound",
                        );
                        return None;
                    }
                    Some(Arch::Range(lo.0, hi))
                }
            }
        }
        _ => {
            errs.spanned(v, format!("`arch` expects {SHAPES}, found {}", describe(v)));
            None
        }
    }
}

fn numerics_value(v: &Expr, errs: &mut Errors) -> Option<Ident> {
    match path_ident(v) {
        Some(id) if id == "Layer" || id == "W8A16" => Some(id.clone()),
        _ => {
            errs.spanned(
                v,
                "`numerics` expects `Layer` (what the layer's quant keys say, the default) or \
                 `W8A16` (weight-only: activations stay 16-bit)",
            );
            None
        }
    }
}

fn params_value(v: &Expr, errs: &mut Errors) -> Option<(Span, Vec<Ident>)> {
    let Expr::Array(arr) = v else {
        errs.spanned(
            v,
            format!(
                "`params` expects a list of layer parameter names, e.g. `[weight, weight_scale]`, found {}",
                describe(v)
            ),
        );
        return None;
    };
    let mut names: Vec<Ident> = Vec::new();
    let mut ok = true;
    for el in &arr.elems {
        match path_ident(el) {
            Some(id) => {
                if names.contains(id) {
                    errs.spanned(id, format!("layer parameter `{id}` listed twice"));
                    ok = false;
                }
                names.push(id.clone());
            }
            None => {
                errs.spanned(
                    el,
                    format!(
                        "`params` entries must be identifiers (layer parameter names such as `weight_scale`), found {}",
                        describe(el)
                    ),
                );
                ok = false;
            }
        }
    }
    if names.is_empty() && ok {
        errs.spanned(
            v,
            "`params = []` declares nothing; leave `params` out instead",
        );
        ok = false;
    }
    ok.then(|| (arr.span(), names))
}

fn backend_value(v: &Expr, errs: &mut Errors) -> Option<String> {
    match v {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.value()),
        _ => match path_ident(v) {
            Some(id) => Some(id.to_string()),
            None => {
                errs.spanned(
                    v,
                    format!("`backend` expects a name, found {}", describe(v)),
                );
                None
            }
        },
    }
}

fn crate_value(v: &Expr, errs: &mut Errors) -> Option<syn::Path> {
    match v {
        Expr::Path(p) => Some(p.path.clone()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => match s.parse::<syn::Path>() {
            Ok(p) => Some(p),
            Err(_) => {
                errs.spanned(s, "`crate` expects a path such as `fp8_linear`");
                None
            }
        },
        _ => {
            errs.spanned(
                v.to_token_stream(),
                format!("`crate` expects a path, found {}", describe(v)),
            );
            None
        }
    }
}
