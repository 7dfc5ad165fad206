//! Parse: `#[attrs] pub NAME: Platform, Family = [Kernel, Kernel => 4, ...];` and
//! `... = base::TABLE + [...];`, several per invocation, optionally after `crate = path;`.
//!
//! Each declaration is parsed on its own (the input is split at the top-level `;`), so a
//! broken declaration is reported without losing the others, and its header (the name, and
//! the platform and family when they parsed) is kept: the macro still defines a placeholder
//! constant of that name, so uses of the table do not add "cannot find value" errors.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{bracketed, Attribute, Ident, LitInt, Token, Type, Visibility};

use crate::errors::Errors;

/// One kernel in a table: a type and an optional priority override.
pub struct RawItem {
    /// The kernel type.
    pub ty: Type,
    /// `=> N`, overriding the declared priority in this table.
    pub priority: Option<LitInt>,
}

impl Parse for RawItem {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let ty = input.parse()?;
        let priority = if input.peek(Token![=>]) {
            input.parse::<Token![=>]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(RawItem { ty, priority })
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
    /// A table this one extends.
    pub base: Option<syn::Path>,
    /// Kernels listed here.
    pub items: Vec<RawItem>,
}

impl Parse for RawTable {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let name = input.parse()?;
        input.parse::<Token![:]>()?;
        let platform = input.parse()?;
        input.parse::<Token![,]>()?;
        let family = input.parse()?;
        input.parse::<Token![=]>()?;
        let base = if input.peek(syn::token::Bracket) {
            None
        } else {
            let p = input.parse()?;
            input.parse::<Token![+]>()?;
            Some(p)
        };
        let content;
        bracketed!(content in input);
        let items = Punctuated::<RawItem, Token![,]>::parse_terminated(&content)?
            .into_iter()
            .collect();
        Ok(RawTable {
            attrs,
            vis,
            name,
            platform,
            family,
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
}

impl Header {
    /// Reads `#[attrs] vis NAME [: Platform [, Family]]` and skips whatever follows.
    fn parse_lenient(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let name = input.parse()?;
        let mut platform = None;
        let mut family = None;
        if input.parse::<Option<Token![:]>>()?.is_some() {
            platform = input.parse::<Ident>().ok();
            if platform.is_some() && input.parse::<Option<Token![,]>>()?.is_some() {
                family = input.parse::<Ident>().ok();
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
    input.parse()
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
        if i == 0 && starts_with_crate(&chunk) {
            match krate.parse2(chunk) {
                Ok(p) => raw.krate = Some(p),
                Err(e) => errs.push(e),
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
                    errs.at(last_span, "expected `;` after the table declaration");
                    raw.decls.push(Decl::Broken(Header {
                        attrs: t.attrs,
                        vis: t.vis,
                        name: t.name,
                        platform: Some(t.platform),
                        family: Some(t.family),
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
        assert_eq!(msgs, ["expected `;` after the table declaration"]);
        assert_eq!(names(&raw), ["broken A"]);
    }

    #[test]
    fn nothing_nameable() {
        let (raw, msgs) = run(quote!(= [X];));
        assert_eq!(msgs.len(), 1);
        assert!(raw.decls.is_empty());
    }
}
