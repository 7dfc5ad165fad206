//! Parse: `#[attrs] pub NAME: Platform, Family = [Kernel, Kernel => 4, ...];` and
//! `... = base::TABLE + [...];`, several per invocation.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{bracketed, Attribute, Ident, LitInt, Token, Type, Visibility};

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

/// One table declaration.
pub struct RawTable {
    /// Doc comments and other attributes.
    pub attrs: Vec<Attribute>,
    /// Visibility of the generated constant.
    pub vis: Visibility,
    /// The constant's name.
    pub name: Ident,
    /// Platform variant.
    pub platform: Ident,
    /// Family variant.
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
        input.parse::<Token![;]>()?;
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

/// Every table of one invocation, plus an optional leading `crate = path;`.
pub struct RawTables {
    /// Path of the crate that re-exports `__private`.
    pub krate: Option<syn::Path>,
    /// The tables.
    pub tables: Vec<RawTable>,
}

impl Parse for RawTables {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let krate = if input.peek(Token![crate]) && input.peek2(Token![=]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            let p = input.parse()?;
            input.parse::<Token![;]>()?;
            Some(p)
        } else {
            None
        };
        let mut tables = Vec::new();
        while !input.is_empty() {
            tables.push(input.parse()?);
        }
        Ok(RawTables { krate, tables })
    }
}
