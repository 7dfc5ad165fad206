//! The closed vocabularies both macros accept (platforms, families, numerics), each defined
//! once as an enum whose variant names are the identifiers users write, and [`Spanned`], a
//! typed value with the span of the user's tokens it came from.

use proc_macro2::{Ident, Span};

/// A typed value and the span of the tokens it was read from (errors and generated code
/// point there).
#[derive(Clone, Debug)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where the user wrote it.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// Pairs a value with its span.
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

/// Defines a closed vocabulary: an enum whose variants are written as identifiers, with
/// `ALL`, `name()`, `from_ident()`, `expected()` and `ident()`.
macro_rules! vocabulary {
    ($(#[$doc:meta])* $enum:ident { $($variant:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        pub enum $enum {
            $(
                #[doc = concat!("`", stringify!($variant), "`")]
                $variant,
            )*
        }

        impl $enum {
            /// Every value, in the order users read them in messages.
            pub const ALL: &'static [$enum] = &[$($enum::$variant),*];

            /// The identifier as written (also the variant's name in `fp8_linear_core`).
            pub fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => stringify!($variant),)*
                }
            }

            /// The value an identifier names, if any.
            pub fn from_ident(id: &Ident) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| id == v.name())
            }

            /// Every name, comma-separated, for "expected one of" messages.
            #[allow(dead_code)] // not every vocabulary's message lists its names
            pub fn expected() -> String {
                Self::ALL
                    .iter()
                    .map(|v| v.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            }

            /// The variant's identifier at `span`, for generated paths
            /// (`Platform::#ident`), so errors in them point at the user's token.
            pub fn ident(self, span: Span) -> Ident {
                Ident::new(self.name(), span)
            }
        }
    };
}

vocabulary! {
    /// A platform (`fp8_linear_core::Platform`).
    Platform { Cuda, Rocm, Cpu, Xpu, Tpu }
}

vocabulary! {
    /// A layer family (`fp8_linear_core::Family`).
    Family { BlockScaled, Scaled, WeightOnly }
}

vocabulary! {
    /// The arithmetic a kernel implements (`fp8_linear_core::Numerics`).
    Numerics { Layer, W8A16 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Platform::ALL {
            let id = p.ident(Span::call_site());
            assert_eq!(Platform::from_ident(&id), Some(*p));
        }
        assert_eq!(Platform::expected(), "Cuda, Rocm, Cpu, Xpu, Tpu");
        assert_eq!(Family::expected(), "BlockScaled, Scaled, WeightOnly");
        assert_eq!(Numerics::expected(), "Layer, W8A16");
    }

    #[test]
    fn names_are_case_sensitive() {
        let id = Ident::new("cuda", Span::call_site());
        assert_eq!(Platform::from_ident(&id), None);
        let id = Ident::new("w8a16", Span::call_site());
        assert_eq!(Numerics::from_ident(&id), None);
    }
}
