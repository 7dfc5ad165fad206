//! The closed vocabularies both macros accept (platforms, families, numerics, layer kinds), each defined
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

/// The number of single-character edits (insert, delete, replace, swap two neighbours)
/// from `a` to `b` (optimal string alignment distance).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: the distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate a misspelled name most likely meant: the same name in another case, or a
/// name one edit (a swap of two neighbours counts as one) away (two for names of six characters or more); None when nothing is that
/// close (a list of every accepted name is then the better help).
pub fn did_you_mean<'a>(
    written: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = if written.chars().count() >= 6 { 2 } else { 1 };
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = if c.eq_ignore_ascii_case(written) {
            0
        } else {
            edit_distance(written, c)
        };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// ` (did you mean `x`?)` when [`did_you_mean`] finds a candidate, else nothing: for the
/// middle of "unknown ... `{written}`{hint}; expected one of: ..." messages.
pub fn hint<'a>(written: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(written, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// A closed vocabulary, for code that reads any of them (the attribute's identifier values).
pub trait Vocabulary: Copy + 'static {
    /// Every value.
    const VALUES: &'static [Self];
    /// The identifier as written.
    fn word(self) -> &'static str;
    /// The value an identifier names, if any.
    fn of(id: &Ident) -> Option<Self>;
}

/// Defines a closed vocabulary: an enum whose variants are written as identifiers, with
/// `ALL`, `name()`, `from_ident()`, `expected()`, `unknown()` and `ident()`, and its
/// [`Vocabulary`] impl.
macro_rules! vocabulary {
    ($(#[$doc:meta])* $enum:ident ($what:literal) { $($variant:ident),* $(,)? }) => {
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

            /// The message for an identifier that names no value: every accepted name, and
            /// the one it was probably meant to be.
            #[allow(dead_code)] // not every vocabulary's message lists its names
            pub fn unknown(id: &Ident) -> String {
                let written = id.to_string();
                format!(
                    concat!("unknown ", $what, " `{}`{}; expected one of: {}"),
                    written,
                    hint(&written, Self::ALL.iter().map(|v| v.name())),
                    Self::expected()
                )
            }

            /// The variant's identifier at `span`, for generated paths
            /// (`Platform::#ident`), so errors in them point at the user's token.
            pub fn ident(self, span: Span) -> Ident {
                Ident::new(self.name(), span)
            }
        }

        impl Vocabulary for $enum {
            const VALUES: &'static [Self] = Self::ALL;
            fn word(self) -> &'static str {
                self.name()
            }
            fn of(id: &Ident) -> Option<Self> {
                Self::from_ident(id)
            }
        }
    };
}

vocabulary! {
    /// A platform (`fp8_linear_core::Platform`).
    Platform ("platform") { Cuda, Rocm, Cpu, Xpu, Tpu }
}

vocabulary! {
    /// A layer family (`fp8_linear_core::Family`).
    Family ("family") { BlockScaled, Scaled, WeightOnly }
}

vocabulary! {
    /// The arithmetic a kernel implements (`fp8_linear_core::Numerics`).
    Numerics ("numerics") { Layer, W8A16 }
}

vocabulary! {
    /// The kind of layer a kernel computes (`fp8_linear_core::LayerKind`).
    LayerKind ("layer kind") { Linear, Grouped }
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
        assert_eq!(LayerKind::expected(), "Linear, Grouped");
    }

    #[test]
    fn unknown_names_suggest_the_closest() {
        let id = |s: &str| Ident::new(s, Span::call_site());
        assert_eq!(
            Platform::unknown(&id("Metal")),
            "unknown platform `Metal`; expected one of: Cuda, Rocm, Cpu, Xpu, Tpu"
        );
        assert_eq!(
            Platform::unknown(&id("cuda")),
            "unknown platform `cuda` (did you mean `Cuda`?); expected one of: Cuda, Rocm, Cpu, Xpu, Tpu"
        );
        assert!(Family::unknown(&id("Blockscaled")).contains("did you mean `BlockScaled`?"));
        assert!(Family::unknown(&id("BlockScald")).contains("did you mean `BlockScaled`?"));
        // Short names get one edit at most: W8A8 is another scheme, not a typo of W8A16.
        assert_eq!(did_you_mean("W8A8", ["Layer", "W8A16"]), None);
        assert_eq!(
            did_you_mean("priorty", ["platform", "priority"]),
            Some("priority")
        );
        assert_eq!(
            did_you_mean("forcearch", ["arch", "force_arch"]),
            Some("force_arch")
        );
        assert_eq!(did_you_mean("speed", ["platform", "priority"]), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("acrh", "arch"), 1);
    }

    #[test]
    fn names_are_case_sensitive() {
        let id = Ident::new("cuda", Span::call_site());
        assert_eq!(Platform::from_ident(&id), None);
        let id = Ident::new("w8a16", Span::call_site());
        assert_eq!(Numerics::from_ident(&id), None);
    }
}
