//! Parse: the attribute's `key = value` pairs into a raw model. Keys are matched by peeking
//! the keywords of [`crate::kw`]; values are kept as expressions and interpreted, with their
//! spans, by [`super::attr`].

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, Token};

use crate::kw;

/// Defines [`Key`] and the keyword peek that recognizes it from one list, so each key's name
/// is written once (as its keyword).
macro_rules! keys {
    ($($kw:ident => $key:ident),* $(,)?) => {
        /// A key `#[fp8_kernel(...)]` accepts.
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum Key {
            $(
                #[doc = concat!("`", stringify!($kw), " = ...`")]
                $key,
            )*
            /// `crate = path`
            Crate,
        }

        impl Key {
            /// Every key, in the order the "unsupported argument" message lists them.
            pub const ALL: &'static [Key] = &[$(Key::$key,)* Key::Crate];

            /// The key as written.
            pub fn name(self) -> &'static str {
                match self {
                    $(Key::$key => stringify!($kw),)*
                    Key::Crate => "crate",
                }
            }
        }

        /// The known key at the cursor, consumed, with its span; None (nothing consumed)
        /// when the next token is not one.
        fn peek_key(input: ParseStream) -> syn::Result<Option<(Key, Span)>> {
            $(
                if input.peek(kw::$kw) {
                    let k = input.parse::<kw::$kw>()?;
                    return Ok(Some((Key::$key, k.span)));
                }
            )*
            if input.peek(Token![crate]) {
                let k = input.parse::<Token![crate]>()?;
                return Ok(Some((Key::Crate, k.span)));
            }
            Ok(None)
        }
    };
}

keys! {
    platform => Platform,
    priority => Priority,
    arch => Arch,
    params => Params,
    numerics => Numerics,
    backend => Backend,
    force_arch => ForceArch,
    rows => Rows,
    kind => Kind,
}

impl Key {
    /// Every key's name, comma-separated.
    pub fn expected() -> String {
        Key::ALL
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The key of one argument as written.
#[derive(Clone, Debug)]
pub enum RawKey {
    /// A key the attribute knows, at its span.
    Known(Key, Span),
    /// Any other identifier (reported by `attr`, with every other error).
    Unknown(Ident),
}

/// One `key = value` argument.
pub struct RawArg {
    /// The key.
    pub key: RawKey,
    /// The value expression: a path (`Cuda`), an integer, a range (`sm75..sm89`), an array
    /// (`[weight, weight_scale]`), a string.
    pub value: Expr,
}

/// The next token as written (for "found ..." messages) and its span (nothing, at the call
/// site, at the end of the input).
fn next_token(input: ParseStream) -> (String, Span) {
    input
        .cursor()
        .token_tree()
        .map(|(tt, _)| (tt.to_string(), tt.span()))
        .unwrap_or_else(|| (String::new(), Span::call_site()))
}

impl Parse for RawArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = match peek_key(input)? {
            Some((k, span)) => RawKey::Known(k, span),
            // An unknown key: reported by `attr` with every other error.
            None if input.peek(Ident::peek_any) && input.peek2(Token![=]) => {
                RawKey::Unknown(Ident::parse_any(input)?)
            }
            None => {
                let (found, span) = next_token(input);
                return Err(syn::Error::new(
                    span,
                    format!(
                        "expected a `key = value` argument, found `{found}`; the keys are: {}",
                        Key::expected()
                    ),
                ));
            }
        };
        if !input.peek(Token![=]) {
            let RawKey::Known(k, span) = key else {
                unreachable!("an unknown key is taken only before `=`")
            };
            return Err(syn::Error::new(
                span,
                format!(
                    "expected `{} = ...`: every fp8_kernel argument is a `key = value` pair",
                    k.name()
                ),
            ));
        }
        let eq = input.parse::<Token![=]>()?;
        if input.is_empty() || input.peek(Token![,]) {
            let written = match &key {
                RawKey::Known(k, _) => k.name().to_string(),
                RawKey::Unknown(id) => id.to_string(),
            };
            return Err(syn::Error::new(
                eq.span,
                format!("expected a value after `{written} =`"),
            ));
        }
        let value = input.parse()?;
        Ok(RawArg { key, value })
    }
}

/// All arguments of one attribute, in source order.
pub struct RawArgs {
    /// The arguments.
    pub args: Vec<RawArg>,
}

impl Parse for RawArgs {
    /// A comma-separated list (trailing comma allowed).
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Vec::new();
        while !input.is_empty() {
            args.push(input.parse::<RawArg>()?);
            if input.is_empty() {
                break;
            }
            if !input.peek(Token![,]) {
                let (found, span) = next_token(input);
                return Err(syn::Error::new(
                    span,
                    format!("expected `,` between fp8_kernel arguments, found `{found}`"),
                ));
            }
            input.parse::<Token![,]>()?;
        }
        Ok(RawArgs { args })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<RawArgs> {
        syn::parse2(tokens)
    }

    fn keys(args: &RawArgs) -> Vec<String> {
        args.args
            .iter()
            .map(|a| match &a.key {
                RawKey::Known(k, _) => k.name().to_string(),
                RawKey::Unknown(id) => format!("?{id}"),
            })
            .collect()
    }

    #[test]
    fn every_key_is_recognized_by_its_keyword() {
        let args = parse(quote!(
            platform = Cuda,
            priority = 4,
            arch = sm80..sm89,
            params = [weight],
            numerics = W8A16,
            backend = marlin,
            force_arch = sm80..,
            rows = 1..=16,
            kind = Linear,
            crate = fp8_linear,
        ))
        .unwrap();
        assert_eq!(
            keys(&args),
            [
                "platform",
                "priority",
                "arch",
                "params",
                "numerics",
                "backend",
                "force_arch",
                "rows",
                "kind",
                "crate"
            ]
        );
        assert_eq!(
            Key::expected(),
            "platform, priority, arch, params, numerics, backend, force_arch, rows, kind, crate"
        );
    }

    #[test]
    fn unknown_keys_are_kept_for_attr_to_report() {
        let args = parse(quote!(colour = red, priority = 1)).unwrap();
        assert_eq!(keys(&args), ["?colour", "priority"]);
    }

    #[test]
    fn a_key_without_a_value_is_a_parse_error_at_the_key() {
        let err = parse(quote!(platform = Cpu, priority)).err().unwrap();
        assert_eq!(
            err.to_string(),
            "expected `priority = ...`: every fp8_kernel argument is a `key = value` pair"
        );
    }

    #[test]
    fn arguments_that_are_not_key_value_pairs() {
        let msg = |t| parse(t).err().unwrap().to_string();
        assert_eq!(
            msg(quote!(Cpu, priority = 1)),
            "expected a `key = value` argument, found `Cpu`; the keys are: platform, priority, \
             arch, params, numerics, backend, force_arch, rows, kind, crate"
        );
        assert!(msg(quote!(platform = Cpu, 1))
            .starts_with("expected a `key = value` argument, found `1`"));
        assert_eq!(
            msg(quote!(platform = Cpu priority = 1)),
            "expected `,` between fp8_kernel arguments, found `priority`"
        );
        assert_eq!(
            msg(quote!(platform = , priority = 1)),
            "expected a value after `platform =`"
        );
        assert_eq!(msg(quote!(colour =)), "expected a value after `colour =`");
    }

    #[test]
    fn empty_attribute_parses() {
        assert!(parse(quote!()).unwrap().args.is_empty());
    }
}
