//! Interpret: each argument's value into a typed [`Value`] (platform, priority, arch, params,
//! ...), with its span. Only per-value rules live here; rules across arguments (required
//! keys, duplicates, Cuda needs `arch`) are in [`super::valid`].

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, ExprPath, ExprRange, Ident, Lit, RangeLimits};

use super::ast::{Key, RawArg, RawArgs, RawKey};
use crate::errors::Errors;
use crate::vocab::{did_you_mean, hint, LayerKind, Numerics, Platform, Vocabulary};

/// A compute capability as (major, minor).
pub type Cap = (u8, u8);

/// A checked `arch` (or `force_arch`) value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `any`
    Any,
    /// `sm90` / `sm90a` (the bool: the `a` target, that capability only)
    Exact(Cap, bool),
    /// `sm89..`
    AtLeast(Cap),
    /// `sm75..sm89` (upper bound excluded)
    Range(Cap, Cap),
}

impl Arch {
    /// The capabilities as a half-open interval `[lo, hi)` of (major, minor) pairs (`hi`
    /// None: no upper bound). The `a` of an `sm90a` target is a feature set, not a wider or
    /// narrower set of devices.
    fn interval(self) -> (Cap, Option<Cap>) {
        match self {
            Arch::Any => ((0, 0), None),
            Arch::Exact((major, minor), _) => ((major, minor), Some((major, minor + 1))),
            Arch::AtLeast(lo) => (lo, None),
            Arch::Range(lo, hi) => (lo, Some(hi)),
        }
    }

    /// Whether every capability `inner` runs on is one `self` runs on.
    pub fn contains(self, inner: Arch) -> bool {
        let ((olo, ohi), (ilo, ihi)) = (self.interval(), inner.interval());
        olo <= ilo
            && match (ohi, ihi) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(o), Some(i)) => i <= o,
            }
    }
}

/// `smXY` as users write it.
fn sm_name((major, minor): Cap) -> String {
    format!("sm{major}{minor}")
}

impl std::fmt::Display for Arch {
    /// As written in the attribute: `any`, `sm90a`, `sm89..`, `sm75..sm89`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Arch::Any => f.write_str("any"),
            Arch::Exact(c, specific) => {
                write!(f, "{}{}", sm_name(c), if specific { "a" } else { "" })
            }
            Arch::AtLeast(c) => write!(f, "{}..", sm_name(c)),
            Arch::Range(lo, hi) => write!(f, "{}..{}", sm_name(lo), sm_name(hi)),
        }
    }
}

/// The typed value of one argument.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `platform = Cuda`
    Platform(Platform),
    /// `priority = 4` (>= 1)
    Priority(u16),
    /// `arch = ...` or `force_arch = ...`
    Arch(Arch),
    /// `params = [weight, ...]`: the names as written (each resolved by the compiler against
    /// core's closed set, at its own span), distinct, at least one.
    Params(Vec<Ident>),
    /// `numerics = W8A16`
    Numerics(Numerics),
    /// `kind = Grouped`
    Kind(LayerKind),
    /// `backend = marlin` or `backend = "marlin"`
    Backend(String),
    /// `rows = 1..=16`, `rows = 17..` or `rows = 1..17`: the rows (M) of a call the kernel
    /// serves, as (first, last) with `last` None for no upper bound; never empty, from 1.
    Rows(u64, Option<u64>),
    /// `crate = path` or `crate = "path"`
    Crate(syn::Path),
}

/// One interpreted argument.
pub struct Attr {
    /// The key.
    pub key: Key,
    /// Where the key was written (duplicates are reported there).
    pub key_span: Span,
    /// Where the value was written.
    pub span: Span,
    /// The value; None when it was invalid (its error is already recorded), so that the
    /// cross-field rules do not report the key as missing too.
    pub value: Option<Value>,
    /// The key was not written but guessed: an unknown key (already reported) close to
    /// this one, so that it is not reported as missing too.
    pub guessed: bool,
}

/// Interprets every argument, recording each invalid value and each unknown key in `errs`.
pub fn interpret(raw: &RawArgs, errs: &mut Errors) -> Vec<Attr> {
    raw.args
        .iter()
        .filter_map(|a| interpret_one(a, errs))
        .collect()
}

/// The `crate` path among the arguments, if one was given and valid.
pub fn krate(attrs: &[Attr]) -> Option<syn::Path> {
    attrs.iter().find_map(|a| match &a.value {
        Some(Value::Crate(p)) => Some(p.clone()),
        _ => None,
    })
}

fn interpret_one(arg: &RawArg, errs: &mut Errors) -> Option<Attr> {
    let (key, key_span) = match &arg.key {
        RawKey::Known(k, span) => (*k, *span),
        RawKey::Unknown(id) => {
            let written = id.to_string();
            errs.spanned(
                id,
                format!(
                    "unsupported fp8_kernel argument `{written}`{}; expected one of: {}",
                    hint(&written, Key::ALL.iter().map(|k| k.name())),
                    Key::expected()
                ),
            );
            let guess = did_you_mean(&written, Key::ALL.iter().map(|k| k.name()))?;
            let key = Key::ALL.iter().copied().find(|k| k.name() == guess)?;
            return Some(Attr {
                key,
                key_span: id.span(),
                span: id.span(),
                value: None,
                guessed: true,
            });
        }
    };
    let v = peel(&arg.value);
    let value = match key {
        Key::Platform => platform(v, errs).map(Value::Platform),
        Key::Priority => priority(v, errs).map(Value::Priority),
        Key::Arch | Key::ForceArch => arch(key, v, errs).map(Value::Arch),
        Key::Params => params(v, errs).map(Value::Params),
        Key::Numerics => numerics(v, errs).map(Value::Numerics),
        Key::Kind => kind(v, errs).map(Value::Kind),
        Key::Backend => backend(v, errs).map(Value::Backend),
        Key::Rows => rows(v, errs).map(|(lo, hi)| Value::Rows(lo, hi)),
        Key::Crate => krate_value(v, errs).map(Value::Crate),
    };
    Some(Attr {
        key,
        key_span,
        span: v.span(),
        value,
        guessed: false,
    })
}

/// The expression inside the invisible groups a `macro_rules!` fragment arrives in
/// (`#[fp8_kernel(priority = $p)]` with `$p:literal` or `$p:expr`).
fn peel(mut v: &Expr) -> &Expr {
    while let Expr::Group(g) = v {
        v = &g.expr;
    }
    v
}

fn path_ident(v: &Expr) -> Option<&Ident> {
    match peel(v) {
        Expr::Path(ExprPath {
            path, qself: None, ..
        }) => path.get_ident(),
        _ => None,
    }
}

/// What kind of expression the user wrote, for "found ..." messages.
fn describe(v: &Expr) -> &'static str {
    match peel(v) {
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
        Expr::Path(p) if p.path.get_ident().is_none() => "a path",
        Expr::Path(_) => "an identifier",
        Expr::Array(_) => "an array",
        Expr::Range(_) => "a range",
        Expr::Unary(_) => "a negative number",
        _ => "an expression",
    }
}

fn platform(v: &Expr, errs: &mut Errors) -> Option<Platform> {
    match path_ident(v) {
        Some(id) => {
            let p = Platform::from_ident(id);
            if p.is_none() {
                errs.spanned(id, Platform::unknown(id));
            }
            p
        }
        None => {
            errs.spanned(
                v,
                format!(
                    "`platform` expects one of {}, found {}",
                    Platform::expected(),
                    describe(v)
                ),
            );
            None
        }
    }
}

/// `rows = A..=B`, `A..B` or `A..`, integers: (A, the last row or None). Refused: not a
/// range, a bound that is not an integer, a missing lower bound, A = 0 (a call has at least
/// one row), and an empty or inverted range, each at the user's tokens.
pub(crate) fn rows(v: &Expr, errs: &mut Errors) -> Option<(u64, Option<u64>)> {
    const FORM: &str = "write `rows = 1..=16` (rows 1 to 16), `rows = 17..` (17 and more) or \
                        `rows = 1..17` (1 to 16)";
    let Expr::Range(ExprRange {
        start, limits, end, ..
    }) = v
    else {
        errs.spanned(
            v,
            format!(
                "`rows` expects a range of row counts (M), found {}; {FORM}",
                describe(v)
            ),
        );
        return None;
    };
    let bound = |e: &Expr, errs: &mut Errors| -> Option<u64> {
        match peel(e) {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) => match i.base10_parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    errs.spanned(i, "a `rows` bound must fit in a u64");
                    None
                }
            },
            other => {
                errs.spanned(
                    other,
                    format!(
                        "a `rows` bound is an integer row count, found {}",
                        describe(other)
                    ),
                );
                None
            }
        }
    };
    let Some(start) = start else {
        errs.spanned(
            v,
            format!("`rows` needs a lower bound (at least 1); {FORM}"),
        );
        return None;
    };
    let lo = bound(start, errs)?;
    if lo == 0 {
        errs.spanned(start, "`rows` starts at 1: a call has at least one row");
        return None;
    }
    let hi = match (end, limits) {
        (None, _) => None,
        (Some(e), RangeLimits::Closed(_)) => Some(bound(e, errs)?),
        (Some(e), RangeLimits::HalfOpen(_)) => Some(bound(e, errs)?.saturating_sub(1)),
    };
    if let Some(last) = hi {
        if last < lo {
            errs.spanned(
                v,
                format!(
                    "`rows = {}` is empty: no row count is in it (the first is {lo}, the last \
                     {last}); {FORM}",
                    quote::ToTokens::to_token_stream(v)
                        .to_string()
                        .replace(' ', "")
                ),
            );
            return None;
        }
    }
    Some((lo, hi))
}

fn priority(v: &Expr, errs: &mut Errors) -> Option<u16> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(i), ..
    }) = v
    else {
        errs.spanned(
            v,
            format!(
                "`priority` expects an integer (1 is tried first), found {}",
                describe(v)
            ),
        );
        return None;
    };
    match i.base10_parse::<u16>() {
        Ok(0) => errs.spanned(i, "`priority` starts at 1 (1 is tried first)"),
        Ok(p) => return Some(p),
        Err(_) => errs.spanned(i, "`priority` must fit in a u16 (1..=65535)"),
    }
    None
}

/// `sm90` -> ((9, 0), false), `sm90a` -> ((9, 0), true), `sm120` -> ((12, 0), false): the
/// one smXY parser of the macros (core's `arch::parse_sm` is the runtime one; both refuse a
/// major of 0 or above 20).
pub fn parse_sm(s: &str) -> Option<(Cap, bool)> {
    let rest = s.strip_prefix("sm")?;
    let (digits, specific) = match rest.strip_suffix('a') {
        Some(d) => (d, true),
        None => (rest, false),
    };
    if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (maj, min) = digits.split_at(digits.len() - 1);
    let (major, minor): Cap = (maj.parse().ok()?, min.parse().ok()?);
    if major == 0 || major > 20 {
        return None;
    }
    Some(((major, minor), specific))
}

/// [`parse_sm`] of an identifier, with the error at it.
fn sm(id: &Ident, errs: &mut Errors) -> Option<(Cap, bool)> {
    let parsed = parse_sm(&id.to_string());
    if parsed.is_none() {
        errs.spanned(
            id,
            format!(
                "`{id}` is not a compute capability; write smXY or smXYa (e.g. sm80, sm89, sm90a)"
            ),
        );
    }
    parsed
}

/// The error for an `a` target (`sm90a`) used as a range bound.
fn a_target_bound(key: Key, id: &Ident, errs: &mut Errors) {
    let written = id.to_string();
    let plain = written.trim_end_matches('a');
    errs.spanned(
        id,
        format!(
            "`{written}` is an `a` target, for exactly one capability: it cannot bound a range \
             (write `{plain}` in a range, or `{k} = {written}` alone)",
            k = key.name()
        ),
    );
}

/// A range bound: a plain capability (`sm80`).
fn range_bound(key: Key, bound: &Expr, errs: &mut Errors) -> Option<Cap> {
    let Some(id) = path_ident(bound) else {
        errs.spanned(
            bound,
            format!(
                "`{}` range bounds are compute capabilities such as `sm80`, found {}",
                key.name(),
                describe(bound)
            ),
        );
        return None;
    };
    let (cap, specific) = sm(id, errs)?;
    if specific {
        a_target_bound(key, id, errs);
        return None;
    }
    Some(cap)
}

fn arch(key: Key, v: &Expr, errs: &mut Errors) -> Option<Arch> {
    const SHAPES: &str =
        "`any`, `sm90a` (exactly), `sm89..` (or newer) or `sm75..sm89` (up to before)";
    let k = key.name();
    match v {
        Expr::Path(_) => {
            let Some(id) = path_ident(v) else {
                errs.spanned(
                    v,
                    format!("`{k}` expects {SHAPES}, found a path; write the capability alone"),
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
                errs.spanned(
                    t,
                    format!("`{k}` ranges exclude their upper bound: write `lo..hi`, not `..=`"),
                );
                return None;
            }
            let Some(start) = start.as_deref().map(peel) else {
                errs.spanned(
                    v,
                    format!("`{k}` range needs a lower bound; expected {SHAPES}"),
                );
                return None;
            };
            let lo = range_bound(key, start, errs);
            let hi = end.as_deref().map(|e| range_bound(key, peel(e), errs));
            let lo = lo?;
            let Some(hi) = hi else {
                return Some(Arch::AtLeast(lo));
            };
            let hi = hi?;
            if hi <= lo {
                errs.spanned(
                    v,
                    format!("empty `{k}` range: the upper bound must be above the lower bound"),
                );
                return None;
            }
            Some(Arch::Range(lo, hi))
        }
        _ => {
            errs.spanned(v, format!("`{k}` expects {SHAPES}, found {}", describe(v)));
            None
        }
    }
}

/// A value of a closed vocabulary written as an identifier (`numerics = W8A16`,
/// `kind = Grouped`): `key` and `what` name it in messages, `choices` lists its values.
fn named<V: Vocabulary>(
    v: &Expr,
    errs: &mut Errors,
    (key, what, choices): (&str, &str, &str),
) -> Option<V> {
    match path_ident(v) {
        Some(id) => {
            let found = V::of(id);
            if found.is_none() {
                let written = id.to_string();
                errs.spanned(
                    id,
                    format!(
                        "unknown {what} `{written}`{}; expected {choices}",
                        hint(&written, V::VALUES.iter().map(|x| x.word()))
                    ),
                );
            }
            found
        }
        None => {
            errs.spanned(
                v,
                format!("`{key}` expects {choices}, found {}", describe(v)),
            );
            None
        }
    }
}

fn numerics(v: &Expr, errs: &mut Errors) -> Option<Numerics> {
    const CHOICES: &str = "`Layer` (what the layer's quant keys say, the default) or `W8A16` \
                           (weight-only: activations stay 16-bit)";
    let words = ("numerics", "numerics", CHOICES);
    named(v, errs, words)
}

fn kind(v: &Expr, errs: &mut Errors) -> Option<LayerKind> {
    const CHOICES: &str = "`Linear` (one linear layer, `Fp8Kernel`, the default) or `Grouped` \
                           (E experts, `Fp8GroupedKernel`)";
    let words = ("kind", "layer kind", CHOICES);
    named(v, errs, words)
}

fn params(v: &Expr, errs: &mut Errors) -> Option<Vec<Ident>> {
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
    for el in arr.elems.iter().map(peel) {
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
    ok.then_some(names)
}

fn backend(v: &Expr, errs: &mut Errors) -> Option<String> {
    let name = match v {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s.value(),
        _ => match path_ident(v) {
            Some(id) => id.unraw().to_string(),
            None => {
                errs.spanned(
                    v,
                    format!(
                        "`backend` expects a name such as `marlin` or \"cublaslt\", found {}",
                        describe(v)
                    ),
                );
                return None;
            }
        },
    };
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if name.is_empty() || !name.bytes().all(word) {
        errs.spanned(
            v,
            format!(
                "invalid backend name {name:?}: the `--backend` / `FP8_LINEAR_BACKEND` filter \
                 matches it as one word, so it must be ASCII letters, digits, `_` or `-`"
            ),
        );
        return None;
    }
    Some(name)
}

fn krate_value(v: &Expr, errs: &mut Errors) -> Option<syn::Path> {
    match v {
        Expr::Path(ExprPath {
            path, qself: None, ..
        }) => Some(path.clone()),
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
            errs.spanned(v, format!("`crate` expects a path, found {}", describe(v)));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    /// Interprets `tokens` (an attribute's arguments): the values, and every error message.
    fn run(tokens: proc_macro2::TokenStream) -> (Vec<(Key, Option<Value>)>, Vec<String>) {
        let raw: RawArgs = syn::parse2(tokens).unwrap();
        let mut errs = Errors::default();
        let attrs = interpret(&raw, &mut errs);
        let msgs = match errs.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        let attrs = attrs.into_iter().filter(|a| !a.guessed);
        (attrs.map(|a| (a.key, a.value)).collect(), msgs)
    }

    fn one(tokens: proc_macro2::TokenStream) -> Result<Value, String> {
        let (mut vals, msgs) = run(tokens);
        match (vals.pop(), msgs.first()) {
            (Some((_, Some(v))), None) => Ok(v),
            (_, Some(m)) => Err(m.clone()),
            _ => panic!("no value and no error"),
        }
    }

    #[test]
    fn sm_parser() {
        assert_eq!(parse_sm("sm89"), Some(((8, 9), false)));
        assert_eq!(parse_sm("sm90a"), Some(((9, 0), true)));
        assert_eq!(parse_sm("sm120"), Some(((12, 0), false)));
        for bad in [
            "sm", "sm9", "sm00", "sm05", "sm999", "smxx", "gfx90a", "SM90", "sm_90",
        ] {
            assert_eq!(parse_sm(bad), None, "{bad}");
        }
    }

    #[test]
    fn rows_are_a_nonempty_range_from_one() {
        let rows = |t| match one(t) {
            Ok(Value::Rows(lo, hi)) => Ok((lo, hi)),
            Ok(v) => panic!("{v:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(rows(quote!(rows = 1..=16)), Ok((1, Some(16))));
        assert_eq!(rows(quote!(rows = 17..)), Ok((17, None)));
        assert_eq!(rows(quote!(rows = 1..17)), Ok((1, Some(16))));
        assert_eq!(rows(quote!(rows = 4..=4)), Ok((4, Some(4))));
        let e = rows(quote!(rows = 16..=1)).unwrap_err();
        assert!(e.starts_with("`rows = 16..=1` is empty"), "{e}");
        let e = rows(quote!(rows = 5..5)).unwrap_err();
        assert!(e.starts_with("`rows = 5..5` is empty"), "{e}");
        assert_eq!(
            rows(quote!(rows = 0..=16)).unwrap_err(),
            "`rows` starts at 1: a call has at least one row"
        );
        assert!(rows(quote!(rows = ..=16))
            .unwrap_err()
            .starts_with("`rows` needs a lower bound"));
        assert!(rows(quote!(rows = 16))
            .unwrap_err()
            .starts_with("`rows` expects a range of row counts (M), found an integer"));
        assert!(rows(quote!(rows = 1..=big))
            .unwrap_err()
            .starts_with("a `rows` bound is an integer row count"));
    }

    #[test]
    fn misspelled_keys_get_a_suggestion() {
        let (_, msgs) = run(quote!(priorty = 1));
        assert_eq!(
            msgs,
            ["unsupported fp8_kernel argument `priorty` (did you mean `priority`?); expected one \
              of: platform, priority, arch, params, numerics, backend, force_arch, rows, kind, crate"]
        );
        let (_, msgs) = run(quote!(numerics = w8a16));
        assert!(msgs[0].starts_with("unknown numerics `w8a16` (did you mean `W8A16`?);"));
    }

    #[test]
    fn arch_containment() {
        let a = |t| match one(t) {
            Ok(Value::Arch(a)) => a,
            other => panic!("{other:?}"),
        };
        let (any, sm80_on, sm80_89) = (
            a(quote!(arch = any)),
            a(quote!(arch = sm80..)),
            a(quote!(arch = sm80..sm89)),
        );
        let (sm86, sm90a, sm89_on) = (
            a(quote!(arch = sm86)),
            a(quote!(arch = sm90a)),
            a(quote!(arch = sm89..)),
        );
        assert!(any.contains(sm80_on) && !sm80_on.contains(any));
        assert!(sm80_on.contains(sm80_89) && !sm80_89.contains(sm80_on));
        assert!(sm80_89.contains(sm86) && !sm86.contains(sm80_89));
        assert!(sm80_on.contains(sm90a) && !sm80_89.contains(sm90a));
        assert!(!sm80_89.contains(sm89_on) && !sm89_on.contains(sm80_89));
        assert!(a(quote!(arch = sm90)).contains(sm90a) && sm90a.contains(a(quote!(arch = sm90))));
        assert!(sm80_89.contains(sm80_89));
        let shown: Vec<String> = [any, sm90a, sm80_on, sm80_89]
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(shown, ["any", "sm90a", "sm80..", "sm80..sm89"]);
    }

    #[test]
    fn arch_shapes() {
        assert_eq!(one(quote!(arch = any)), Ok(Value::Arch(Arch::Any)));
        assert_eq!(
            one(quote!(arch = sm90a)),
            Ok(Value::Arch(Arch::Exact((9, 0), true)))
        );
        assert_eq!(
            one(quote!(arch = sm89..)),
            Ok(Value::Arch(Arch::AtLeast((8, 9))))
        );
        assert_eq!(
            one(quote!(force_arch = sm75..sm89)),
            Ok(Value::Arch(Arch::Range((7, 5), (8, 9))))
        );
    }

    #[test]
    fn arch_errors() {
        assert_eq!(
            one(quote!(arch = a::sm90)).unwrap_err(),
            "`arch` expects `any`, `sm90a` (exactly), `sm89..` (or newer) or `sm75..sm89` \
             (up to before), found a path; write the capability alone"
        );
        assert!(one(quote!(force_arch = a::sm90))
            .unwrap_err()
            .starts_with("`force_arch` expects"));
        assert_eq!(
            one(quote!(arch = gfx90a)).unwrap_err(),
            "`gfx90a` is not a compute capability; write smXY or smXYa (e.g. sm80, sm89, sm90a)"
        );
        assert_eq!(
            one(quote!(arch = sm90..sm80)).unwrap_err(),
            "empty `arch` range: the upper bound must be above the lower bound"
        );
        assert_eq!(
            one(quote!(arch = sm80..=sm90)).unwrap_err(),
            "`arch` ranges exclude their upper bound: write `lo..hi`, not `..=`"
        );
        assert_eq!(
            one(quote!(arch = sm90a..)).unwrap_err(),
            "`sm90a` is an `a` target, for exactly one capability: it cannot bound a range \
             (write `sm90` in a range, or `arch = sm90a` alone)"
        );
        assert_eq!(
            one(quote!(force_arch = sm80..sm100a)).unwrap_err(),
            "`sm100a` is an `a` target, for exactly one capability: it cannot bound a range \
             (write `sm100` in a range, or `force_arch = sm100a` alone)"
        );
        assert_eq!(
            one(quote!(arch = 80..)).unwrap_err(),
            "`arch` range bounds are compute capabilities such as `sm80`, found an integer"
        );
        assert_eq!(
            one(quote!(arch = sm80.."sm90")).unwrap_err(),
            "`arch` range bounds are compute capabilities such as `sm80`, found a string"
        );
        // Both bounds are checked.
        assert_eq!(run(quote!(arch = sm8..sm9)).1.len(), 2);
        assert!(one(quote!(arch = ..sm90))
            .unwrap_err()
            .starts_with("`arch` range needs a lower bound"));
        assert!(one(quote!(arch = 90))
            .unwrap_err()
            .ends_with("found an integer"));
    }

    #[test]
    fn platform_priority_numerics() {
        assert_eq!(
            one(quote!(platform = Cuda)),
            Ok(Value::Platform(Platform::Cuda))
        );
        assert_eq!(
            one(quote!(platform = Metal)).unwrap_err(),
            "unknown platform `Metal`; expected one of: Cuda, Rocm, Cpu, Xpu, Tpu"
        );
        assert_eq!(one(quote!(priority = 7)), Ok(Value::Priority(7)));
        assert_eq!(
            one(quote!(priority = 0)).unwrap_err(),
            "`priority` starts at 1 (1 is tried first)"
        );
        assert_eq!(
            one(quote!(priority = 70000)).unwrap_err(),
            "`priority` must fit in a u16 (1..=65535)"
        );
        assert_eq!(
            one(quote!(priority = "high")).unwrap_err(),
            "`priority` expects an integer (1 is tried first), found a string"
        );
        assert_eq!(
            one(quote!(numerics = W8A16)),
            Ok(Value::Numerics(Numerics::W8A16))
        );
        assert!(one(quote!(numerics = W8A8))
            .unwrap_err()
            .starts_with("unknown numerics `W8A8`; expected `Layer`"));
        assert_eq!(
            one(quote!(kind = Grouped)),
            Ok(Value::Kind(LayerKind::Grouped))
        );
        assert!(one(quote!(kind = grouped)).unwrap_err().starts_with(
            "unknown layer kind `grouped` (did you mean `Grouped`?); expected `Linear`"
        ));
        assert!(one(quote!(kind = 2))
            .unwrap_err()
            .starts_with("`kind` expects `Linear`"));
        assert!(one(quote!(numerics = "W8A16"))
            .unwrap_err()
            .ends_with("found a string"));
    }

    #[test]
    fn params_values() {
        let Ok(Value::Params(names)) = one(quote!(params = [weight, weight_scale])) else {
            panic!("params not parsed");
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["weight", "weight_scale"]);
        // A misspelled name is not rejected here: the compiler resolves each name against
        // core's closed set, at the user's token.
        assert!(one(quote!(params = [wieght])).is_ok());
        assert_eq!(
            one(quote!(params = [weight, weight])).unwrap_err(),
            "layer parameter `weight` listed twice"
        );
        assert_eq!(
            one(quote!(params = [])).unwrap_err(),
            "`params = []` declares nothing; leave `params` out instead"
        );
        let (_, msgs) = run(quote!(params = ["weight", 3]));
        assert_eq!(msgs.len(), 2);
        assert!(msgs[1].ends_with("found an integer"));
    }

    #[test]
    fn macro_rules_fragments_are_unwrapped() {
        use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
        // What `macro_rules!` passes for `$p:literal` / `$a:expr`: an invisible group.
        let group = |t: TokenStream| TokenTree::Group(Group::new(Delimiter::None, t));
        let (p, a) = (group(quote!(7)), group(quote!(sm80..)));
        assert_eq!(one(quote!(priority = #p)), Ok(Value::Priority(7)));
        assert_eq!(
            one(quote!(arch = #a)),
            Ok(Value::Arch(Arch::AtLeast((8, 0))))
        );
        let w = group(quote!(weight));
        assert!(matches!(one(quote!(params = [#w])), Ok(Value::Params(v)) if v.len() == 1));
    }

    #[test]
    fn backend_and_crate() {
        assert_eq!(
            one(quote!(backend = marlin)),
            Ok(Value::Backend("marlin".into()))
        );
        assert_eq!(
            one(quote!(backend = "cublaslt")),
            Ok(Value::Backend("cublaslt".into()))
        );
        assert_eq!(
            one(quote!(crate = "my::path")),
            Ok(Value::Crate(syn::parse_quote!(my::path)))
        );
        assert!(one(quote!(crate = 3))
            .unwrap_err()
            .starts_with("`crate` expects a path"));
        assert_eq!(
            one(quote!(backend = r#type)),
            Ok(Value::Backend("type".into()))
        );
        assert_eq!(
            one(quote!(backend = "cu-blas_2")),
            Ok(Value::Backend("cu-blas_2".into()))
        );
        for bad in [quote!(backend = ""), quote!(backend = "cu blas")] {
            assert!(one(bad).unwrap_err().starts_with("invalid backend name \""));
        }
        assert!(one(quote!(backend = 3))
            .unwrap_err()
            .ends_with("found an integer"));
    }

    #[test]
    fn every_bad_value_and_unknown_key_is_reported_together() {
        let (vals, msgs) = run(quote!(
            platform = Cuda,
            priority = "first",
            arch = sm9,
            colour = red
        ));
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(msgs[2].starts_with("unsupported fp8_kernel argument `colour`; expected"));
        // The invalid values keep their keys (so valid does not call them missing); the
        // unknown key is dropped.
        let keys: Vec<Key> = vals.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [Key::Platform, Key::Priority, Key::Arch]);
        assert!(vals[1].1.is_none() && vals[2].1.is_none());
    }
}
