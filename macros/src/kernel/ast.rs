//! Parse: `key = value` pairs into a raw model. Values are kept as expressions here and
//! interpreted (with their spans) by `valid`.

use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token};

/// One `key = value` argument.
pub struct RawArg {
    /// The key as written (`crate` included, hence `parse_any`).
    pub key: Ident,
    /// The value expression: a path (`Cuda`), an integer, a range (`sm75..sm89`), an array
    /// (`[weight, weight_scale]`).
    pub value: Expr,
}

impl Parse for RawArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = Ident::parse_any(input)?;
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!(
                    "expected `{key} = ...`: every fp8_kernel argument is a `key = value` pair"
                ),
            ));
        }
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(RawArg { key, value })
    }
}

/// All arguments of one attribute.
pub struct RawArgs {
    /// Arguments in source order.
    pub args: Vec<RawArg>,
}

impl RawArgs {
    /// Parses a comma-separated list (trailing comma allowed).
    pub fn parse_terminated(input: ParseStream) -> syn::Result<Self> {
        let list = Punctuated::<RawArg, Token![,]>::parse_terminated(input)?;
        Ok(RawArgs {
            args: list.into_iter().collect(),
        })
    }
}
