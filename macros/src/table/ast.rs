//! Parse: `#[attrs] pub NAME: Platform, Family = [Kernel, Kernel => 4, ...];` (grouped
//! tables: `pub NAME: Platform, Family, Grouped = [...]`) and `... = base::TABLE + [...];`,
//! several per invocation, optionally after `crate = path;`.
//!
//! Each declaration is parsed on its own (the input is split at the top-level `;`), so a
//! broken declaration is reported without losing the others, and its header (the name, and
//! the platform and family when they parsed) is kept: the macro still defines a placeholder
//! constant of that name, so uses of the table do not add "cannot find value" errors.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream, Parser};
use syn::{bracketed, Attribute, Ident, LitInt, Token, Type, Visibility};

use crate::errors::Errors;
use crate::vocab::{Family, LayerKind, Platform};

/// The shape of a declaration, for parse errors.
const SHAPE: &str = "`pub NAME: Platform, Family = [Kernel, Kernel => priority, ...];`";

/// The next token as written (for "found ..." messages) and its span (nothing, at the call
/// site, at the end of the input).
fn next_token(input: ParseStream) -> (String, Span) {
    input
        .cursor()
        .token_tree()
        .map(|(tt, _)| (tt.to_string(), tt.span()))
        .unwrap_or_else(|| (String::new(), Span::call_site()))
}

/// An error at the next token (at `prev`, the last token read, when there is none):
/// `expected` (what should come there), what was found, and the shape of a declaration.
fn expected(input: ParseStream, expected: &str, prev: Span) -> syn::Error {
    expected_in(input, expected, prev, SHAPE)
}

/// The shape of a grouped table's declaration, for errors at its kind.
const GROUPED_SHAPE: &str = "`pub NAME: Platform, Family, Grouped = [Kernel, ...];`";

/// [`expected`] with the shape `shape` in the message.
fn expected_in(input: ParseStream, expected: &str, prev: Span, shape: &str) -> syn::Error {
    let (found, span) = next_token(input);
    let (found, span) = if found.is_empty() {
        ("nothing after it".to_string(), prev)
    } else {
        (format!("`{found}`"), span)
    };
    syn::Error::new(
        span,
        format!("expected {expected}, found {found}; a table is declared as {shape}"),
    )
}

/// One kernel in a table: a type, an optional row window and an optional priority
/// override.
pub struct RawItem {
    /// The kernel type.
    pub ty: Type,
    /// `{ rows = A..=B }`: the rows this listing serves (inside the kernel's own).
    pub rows: Option<RawRows>,
    /// `=> N`, overriding the declared priority in this table.
    pub priority: Option<LitInt>,
}

/// `{ rows = A..=B }` after a kernel in a table.
pub struct RawRows {
    /// The braces (for errors about the whole window).
    pub braces: Span,
    /// The range, as written (checked by `valid`).
    pub value: syn::Expr,
}

/// The shape of a row window, for errors in it.
const ROWS_SHAPE: &str = "a kernel is listed for some rows as `Kernel { rows = 2..=64 }`";

impl Parse for RawRows {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let content;
        let braces = syn::braced!(content in input).span.join();
        let (found, span) = next_token(&content);
        let key: Ident = content.parse().map_err(|_| {
            let found = if found.is_empty() {
                "nothing".to_string()
            } else {
                format!("`{found}`")
            };
            let at = if found == "nothing" { braces } else { span };
            let what = "`rows =` and the rows this listing serves";
            syn::Error::new(at, format!("expected {what}, found {found}; {ROWS_SHAPE}"))
        })?;
        if key != "rows" {
            return Err(syn::Error::new(
                key.span(),
                format!(
                    "unknown option `{key}` for a kernel in a table; the only one is `rows` \
                     (the rows this listing serves): {ROWS_SHAPE}"
                ),
            ));
        }
        if !content.peek(Token![=]) {
            let (found, span) = next_token(&content);
            let (found, span) = if found.is_empty() {
                ("nothing".to_string(), key.span())
            } else {
                (format!("`{found}`"), span)
            };
            return Err(syn::Error::new(
                span,
                format!("expected `=` after `rows`, found {found}; {ROWS_SHAPE}"),
            ));
        }
        let eq = content.parse::<Token![=]>()?;
        if content.is_empty() {
            return Err(syn::Error::new(
                eq.span,
                format!("expected a range of rows after `rows =`; {ROWS_SHAPE}"),
            ));
        }
        let value: syn::Expr = content.parse()?;
        if !content.is_empty() {
            let (found, span) = next_token(&content);
            return Err(syn::Error::new(
                span,
                format!("expected `}}` after the rows, found `{found}`; {ROWS_SHAPE}"),
            ));
        }
        Ok(RawRows { braces, value })
    }
}

impl Parse for RawItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (found, span) = next_token(input);
        let ty = input.parse::<Type>().map_err(|_| {
            syn::Error::new(
                span,
                format!("expected a kernel type (a type with #[fp8_kernel]), found `{found}`"),
            )
        })?;
        let rows = if input.peek(syn::token::Brace) {
            Some(input.parse::<RawRows>()?)
        } else {
            None
        };
        let priority = if input.peek(Token![=>]) {
            input.parse::<Token![=>]>()?;
            if !input.peek(LitInt) {
                let (found, span) = next_token(input);
                return Err(syn::Error::new(
                    span,
                    format!(
                        "expected a priority after `=>`, an integer (1 is tried first), found `{found}`"
                    ),
                ));
            }
            Some(input.parse()?)
        } else {
            None
        };
        Ok(RawItem { ty, rows, priority })
    }
}

/// One table declaration (without its `;`).
pub struct RawTable {
    /// Doc comments and other attributes.
    pub attrs: Vec<Attribute>,
    /// Visibility of the generated constant.
    pub vis: Visibility,
    /// The constant's name.
    pub name: Ident,
    /// Platform, as written.
    pub platform: Ident,
    /// Family, as written.
    pub family: Ident,
    /// Kind (`Linear`, `Grouped`), as written; None for linear.
    pub kind: Option<Ident>,
    /// A table this one extends.
    pub base: Option<syn::Path>,
    /// Kernels listed here.
    pub items: Vec<RawItem>,
}

impl Parse for RawTable {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let start = input.span();
        let name: Ident = input
            .parse()
            .map_err(|_| expected(input, "the table's name", start))?;
        if !input.peek(Token![:]) {
            return Err(expected(input, &format!("`:` after `{name}`"), name.span()));
        }
        let colon = input.parse::<Token![:]>()?;
        let platform: Ident = input.parse().map_err(|_| {
            let what = format!("the platform ({})", Platform::expected());
            expected(input, &what, colon.span)
        })?;
        if !input.peek(Token![,]) {
            let what = format!("`,` and the family after the platform `{platform}`");
            return Err(expected(input, &what, platform.span()));
        }
        let comma = input.parse::<Token![,]>()?;
        let family: Ident = input.parse().map_err(|_| {
            let what = format!("the family ({})", Family::expected());
            expected(input, &what, comma.span)
        })?;
        let kind = if input.peek(Token![,]) {
            let comma = input.parse::<Token![,]>()?;
            let kind: Ident = input.parse().map_err(|_| {
                let what = format!("the layer kind ({})", LayerKind::expected());
                expected_in(input, &what, comma.span, GROUPED_SHAPE)
            })?;
            Some(kind)
        } else {
            None
        };
        if !input.peek(Token![=]) {
            return Err(match &kind {
                Some(k) => {
                    let what = format!("`=` and the kernel list after the kind `{k}`");
                    expected_in(input, &what, k.span(), GROUPED_SHAPE)
                }
                None => {
                    let what = format!("`=` and the kernel list after the family `{family}`");
                    expected(input, &what, family.span())
                }
            });
        }
        let mut prev = input.parse::<Token![=]>()?.span;
        let base = if input.peek(syn::token::Bracket) {
            None
        } else {
            let p: syn::Path = input.parse().map_err(|_| {
                let what = "the kernel list `[...]`, or a table to extend (`path::TABLE + [...]`)";
                expected(input, what, prev)
            })?;
            if !input.peek(Token![+]) {
                let written = p.to_token_stream().to_string().replace(' ', "");
                let what = format!(
                    "`+ [...]` after the table `{written}`: a table that extends another lists \
                     its own kernels (`+ []` for none)"
                );
                let last = p.segments.last().map_or(prev, |s| s.ident.span());
                return Err(expected(input, &what, last));
            }
            prev = input.parse::<Token![+]>()?.span;
            Some(p)
        };
        if !input.peek(syn::token::Bracket) {
            return Err(expected(input, "the kernel list `[...]`", prev));
        }
        let content;
        bracketed!(content in input);
        let mut items = Vec::new();
        while !content.is_empty() {
            items.push(content.parse::<RawItem>()?);
            if content.is_empty() {
                break;
            }
            if !content.peek(Token![,]) {
                let (found, span) = next_token(&content);
                return Err(syn::Error::new(
                    span,
                    format!("expected `,` between the kernels of `{name}`, found `{found}`"),
                ));
            }
            content.parse::<Token![,]>()?;
        }
        if !input.is_empty() {
            let (found, span) = next_token(input);
            return Err(syn::Error::new(
                span,
                format!("expected `;` after the declaration of `{name}`, found `{found}`"),
            ));
        }
        Ok(RawTable {
            attrs,
            vis,
            name,
            platform,
            family,
            kind,
            base,
            items,
        })
    }
}

/// What could be read of a declaration that did not parse.
pub struct Header {
    /// Doc comments and other attributes.
    pub attrs: Vec<Attribute>,
    /// Visibility.
    pub vis: Visibility,
    /// The constant's name.
    pub name: Ident,
    /// The platform, when it was written.
    pub platform: Option<Ident>,
    /// The family, when it was written.
    pub family: Option<Ident>,
    /// The kind, when it was written.
    pub kind: Option<Ident>,
}

impl Header {
    /// Reads `#[attrs] vis NAME [: Platform [, Family]]` and skips whatever follows.
    fn parse_lenient(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let name = input.parse()?;
        let mut platform = None;
        let mut family = None;
        let mut kind = None;
        if input.parse::<Option<Token![:]>>()?.is_some() {
            platform = input.parse::<Ident>().ok();
            if platform.is_some() && input.parse::<Option<Token![,]>>()?.is_some() {
                family = input.parse::<Ident>().ok();
                if family.is_some() && input.parse::<Option<Token![,]>>()?.is_some() {
                    kind = input.parse::<Ident>().ok();
                }
            }
        }
        input.step(|cursor| {
            let mut rest = *cursor;
            while let Some((_, next)) = rest.token_tree() {
                rest = next;
            }
            Ok(((), rest))
        })?;
        Ok(Header {
            attrs,
            vis,
            name,
            platform,
            family,
            kind,
        })
    }
}

/// One declaration of the invocation.
pub enum Decl {
    /// Parsed.
    Table(RawTable),
    /// Did not parse (its error is recorded); what could be read of it.
    Broken(Header),
}

/// Every declaration of one invocation.
pub struct RawTables {
    /// `crate = path;`: the crate that re-exports `__private`.
    pub krate: Option<syn::Path>,
    /// The declarations, in order (those whose name could not be read are left out).
    pub decls: Vec<Decl>,
}

/// Splits at the top-level `;`: each chunk with the span of its `;` (None for a last chunk
/// without one).
fn split(input: TokenStream) -> Vec<(TokenStream, Option<Span>)> {
    let mut out = Vec::new();
    let mut chunk = Vec::new();
    for tt in input {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ';' => {
                out.push((chunk.drain(..).collect(), Some(p.span())));
            }
            _ => chunk.push(tt),
        }
    }
    if !chunk.is_empty() {
        out.push((chunk.into_iter().collect(), None));
    }
    out
}

/// `crate = path` as a whole chunk.
fn krate(input: ParseStream) -> syn::Result<syn::Path> {
    input.parse::<Token![crate]>()?;
    input.parse::<Token![=]>()?;
    let path = input.parse()?;
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the path"));
    }
    Ok(path)
}

fn starts_with_crate(chunk: &TokenStream) -> bool {
    matches!(chunk.clone().into_iter().next(), Some(TokenTree::Ident(id)) if id == "crate")
}

/// Parses an invocation, recording every error in `errs` and keeping what parsed.
pub fn parse(input: TokenStream, errs: &mut Errors) -> RawTables {
    let mut raw = RawTables {
        krate: None,
        decls: Vec::new(),
    };
    for (i, (chunk, semi)) in split(input).into_iter().enumerate() {
        if chunk.is_empty() {
            // A stray `;`.
            continue;
        }
        if starts_with_crate(&chunk) {
            if i == 0 {
                match krate.parse2(chunk.clone()) {
                    Ok(p) => raw.krate = Some(p),
                    Err(_) => errs.spanned(
                        &chunk,
                        "expected `crate = path;`, the crate that re-exports fp8-linear's \
                         `__private` (e.g. `crate = fp8_linear_core;`)",
                    ),
                }
            } else {
                errs.spanned(
                    &chunk,
                    "`crate = path;` comes first in fp8_table!, before every declaration",
                );
            }
            continue;
        }
        let last_span = chunk
            .clone()
            .into_iter()
            .last()
            .map(|t| t.span())
            .unwrap_or_else(Span::call_site);
        match syn::parse2::<RawTable>(chunk.clone()) {
            Ok(t) => {
                if semi.is_none() {
                    errs.at(
                        last_span,
                        format!("expected `;` after the declaration of `{}`", t.name),
                    );
                    raw.decls.push(Decl::Broken(Header {
                        attrs: t.attrs,
                        vis: t.vis,
                        name: t.name,
                        platform: Some(t.platform),
                        family: Some(t.family),
                        kind: t.kind,
                    }));
                } else {
                    raw.decls.push(Decl::Table(t));
                }
            }
            Err(e) => {
                errs.push(e);
                if let Ok(h) = Header::parse_lenient.parse2(chunk) {
                    raw.decls.push(Decl::Broken(h));
                }
            }
        }
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn run(input: TokenStream) -> (RawTables, Vec<String>) {
        let mut errs = Errors::default();
        let raw = parse(input, &mut errs);
        let msgs = match errs.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        (raw, msgs)
    }

    fn names(raw: &RawTables) -> Vec<String> {
        raw.decls
            .iter()
            .map(|d| match d {
                Decl::Table(t) => t.name.to_string(),
                Decl::Broken(h) => format!("broken {}", h.name),
            })
            .collect()
    }

    #[test]
    fn tables_and_crate() {
        let (raw, msgs) = run(quote! {
            crate = fp8_linear_core;
            /// Docs.
            pub A: Cpu, BlockScaled = [X, Y => 3];
            B: Cuda, Scaled = base::T + [Z,];
        });
        assert!(msgs.is_empty(), "{msgs:?}");
        assert!(raw.krate.is_some());
        assert_eq!(names(&raw), ["A", "B"]);
        let Decl::Table(a) = &raw.decls[0] else {
            panic!()
        };
        assert_eq!(a.items.len(), 2);
        assert_eq!(a.attrs.len(), 1);
        assert!(a.items[1].priority.is_some());
        let Decl::Table(b) = &raw.decls[1] else {
            panic!()
        };
        assert!(b.base.is_some());
    }

    #[test]
    fn a_kernel_may_carry_a_row_window() {
        let (raw, msgs) = run(quote! {
            pub A: Cuda, BlockScaled = [H { rows = 2..=64 } => 2, L => 3, H => 4];
        });
        assert!(msgs.is_empty(), "{msgs:?}");
        let Decl::Table(a) = &raw.decls[0] else {
            panic!()
        };
        let windows: Vec<bool> = a.items.iter().map(|i| i.rows.is_some()).collect();
        assert_eq!(windows, [true, false, false]);
        let w = a.items[0].rows.as_ref().unwrap();
        assert_eq!(w.value.to_token_stream().to_string(), "2 ..= 64");
        assert!(a.items.iter().all(|i| i.priority.is_some()));
        let err = |t: TokenStream| {
            let (_, msgs) = run(t);
            assert_eq!(msgs.len(), 1, "{msgs:?}");
            msgs[0].clone()
        };
        let e = err(quote!(pub A: Cpu, Scaled = [H { tile = 2 }];));
        assert!(
            e.starts_with("unknown option `tile` for a kernel in a table"),
            "{e}"
        );
        let e = err(quote!(pub A: Cpu, Scaled = [H {}];));
        assert!(
            e.starts_with("expected `rows =` and the rows this listing serves, found nothing"),
            "{e}"
        );
        let e = err(quote!(pub A: Cpu, Scaled = [H { rows }];));
        assert!(
            e.starts_with("expected `=` after `rows`, found nothing"),
            "{e}"
        );
        let e = err(quote!(pub A: Cpu, Scaled = [H { rows = }];));
        assert!(
            e.starts_with("expected a range of rows after `rows =`"),
            "{e}"
        );
        let e = err(quote!(pub A: Cpu, Scaled = [H { rows = 1.., x }];));
        assert!(
            e.starts_with("expected `}` after the rows, found `,`"),
            "{e}"
        );
    }

    #[test]
    fn a_broken_declaration_keeps_its_name_and_the_others() {
        let (raw, msgs) = run(quote! {
            pub A: Cpu, BlockScaled = [X => high];
            pub B: Cpu = [X];
            pub C: Cpu, Scaled = [X];
        });
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(names(&raw), ["broken A", "broken B", "C"]);
        let Decl::Broken(a) = &raw.decls[0] else {
            panic!()
        };
        assert_eq!(a.platform.as_ref().unwrap(), "Cpu");
        assert_eq!(a.family.as_ref().unwrap(), "BlockScaled");
        let Decl::Broken(b) = &raw.decls[1] else {
            panic!()
        };
        assert!(b.family.is_none());
    }

    #[test]
    fn a_missing_semicolon_is_an_error_but_keeps_the_name() {
        let (raw, msgs) = run(quote!(pub A: Cpu, BlockScaled = [X]));
        assert_eq!(msgs, ["expected `;` after the declaration of `A`"]);
        assert_eq!(names(&raw), ["broken A"]);
    }

    #[test]
    fn parse_errors_say_what_was_expected() {
        let msg = |t: TokenStream| {
            let (_, msgs) = run(t);
            assert_eq!(msgs.len(), 1, "{msgs:?}");
            msgs[0].clone()
        };
        let tail = "; a table is declared as `pub NAME: Platform, Family = [Kernel, Kernel => priority, ...];`";
        assert_eq!(
            msg(quote!(pub A Cpu, Scaled = [X];)),
            format!("expected `:` after `A`, found `Cpu`{tail}")
        );
        assert_eq!(
            msg(quote!(pub A: Cpu = [X];)),
            format!("expected `,` and the family after the platform `Cpu`, found `=`{tail}")
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled [X];)),
            format!(
                "expected `=` and the kernel list after the family `Scaled`, found `[X]`{tail}"
            )
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled = base::T;)),
            format!(
                "expected `+ [...]` after the table `base::T`: a table that extends another lists \
                 its own kernels (`+ []` for none), found nothing after it{tail}"
            )
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled = [X Y];)),
            "expected `,` between the kernels of `A`, found `Y`"
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled = [X => 2.5];)),
            "expected a priority after `=>`, an integer (1 is tried first), found `2.5`"
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled = [3];)),
            "expected a kernel type (a type with #[fp8_kernel]), found `3`"
        );
        assert_eq!(
            msg(quote!(pub A: Cpu, Scaled = [X] pub B: Cpu, Scaled = [X];)),
            "expected `;` after the declaration of `A`, found `pub`"
        );
        assert!(msg(quote!(crate = ; pub A: Cpu, Scaled = [X];))
            .starts_with("expected `crate = path;`"));
        assert!(msg(quote!(pub A: Cpu, Scaled = [X]; crate = x;))
            .starts_with("`crate = path;` comes first"));
        // A stray `;` is no declaration.
        let (raw, msgs) = run(quote!(pub A: Cpu, Scaled = [X];;));
        assert!(msgs.is_empty());
        assert_eq!(names(&raw), ["A"]);
    }

    #[test]
    fn nothing_nameable() {
        let (raw, msgs) = run(quote!(= [X];));
        assert_eq!(msgs.len(), 1);
        assert!(raw.decls.is_empty());
    }
}
