//! Validate what can be checked before const evaluation: platform and family names,
//! priority literals, a type listed twice, a table declared twice. What needs the kernels'
//! entries (their platforms and declared priorities, the base table's kernels) is checked
//! by the generated per-entry `const` items (see `fp8_linear_core::table::build`).

use quote::ToTokens;
use syn::{Attribute, Ident, Visibility};

use super::ast::{Decl, Header, RawItem, RawTable, RawTables};
use crate::errors::Errors;
use crate::kernel::attr::rows;
use crate::vocab::{Family, LayerKind, Platform};

/// A checked table declaration.
pub struct Table<'a> {
    /// The declaration.
    pub raw: &'a RawTable,
    /// Its platform.
    pub platform: Platform,
    /// Its family.
    pub family: Family,
    /// Its kind (linear unless written).
    pub kind: LayerKind,
    /// Each listed kernel's row window (`Kernel { rows = A..=B }`: first row, last row or
    /// None), None for a kernel listed for all its rows; parallel to [`Table::items`].
    pub rows: Vec<Option<Window>>,
}

/// A listing's rows: the first and the last (None: no upper bound).
pub type Window = (u64, Option<u64>);

impl Table<'_> {
    /// The kernels listed in the declaration.
    pub fn items(&self) -> &[RawItem] {
        &self.raw.items
    }
}

/// The constant of a declaration with errors: same name, visibility and docs, no kernels.
pub struct Placeholder<'a> {
    /// Attributes (docs) of the declaration.
    pub attrs: &'a [Attribute],
    /// Visibility.
    pub vis: &'a Visibility,
    /// The constant's name.
    pub name: &'a Ident,
    /// The platform, when it was valid.
    pub platform: Option<Platform>,
    /// The family, when it was valid.
    pub family: Option<Family>,
    /// The kind, when it was valid (linear when not written).
    pub kind: Option<LayerKind>,
}

/// What to generate: the valid tables and a placeholder for each other one.
pub struct Checked<'a> {
    /// Valid declarations.
    pub tables: Vec<Table<'a>>,
    /// Declarations with errors.
    pub placeholders: Vec<Placeholder<'a>>,
}

fn platform(id: &Ident, errs: &mut Errors) -> Option<Platform> {
    let p = Platform::from_ident(id);
    if p.is_none() {
        errs.spanned(id, Platform::unknown(id));
    }
    p
}

/// The kind written (linear when none is).
fn kind(id: Option<&Ident>, errs: &mut Errors) -> Option<LayerKind> {
    let Some(id) = id else {
        return Some(LayerKind::Linear);
    };
    let k = LayerKind::from_ident(id);
    if k.is_none() {
        errs.spanned(id, LayerKind::unknown(id));
    }
    k
}

fn family(id: &Ident, errs: &mut Errors) -> Option<Family> {
    let f = Family::from_ident(id);
    if f.is_none() {
        errs.spanned(id, Family::unknown(id));
    }
    f
}

/// A type as users write it (`fp8_linear::cpu::CpuReference`, without the spaces of
/// `TokenStream`'s rendering).
pub fn type_name(ty: &syn::Type) -> String {
    ty.to_token_stream()
        .to_string()
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" < ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
}

/// Checks every declaration, recording all errors in `errs`.
pub fn validate<'a>(raw: &'a RawTables, errs: &mut Errors) -> Checked<'a> {
    let mut out = Checked {
        tables: Vec::new(),
        placeholders: Vec::new(),
    };
    let mut names: Vec<String> = Vec::new();
    for decl in &raw.decls {
        let name = match decl {
            Decl::Table(t) => &t.name,
            Decl::Broken(h) => &h.name,
        };
        let n = name.to_string();
        if names.contains(&n) {
            // The first declaration of the name defines the constant.
            errs.spanned(name, format!("table `{n}` declared twice"));
            continue;
        }
        names.push(n);
        match decl {
            Decl::Broken(Header {
                attrs,
                vis,
                name,
                platform: p,
                family: f,
                kind: k,
            }) => {
                // The parse error is recorded; the names are checked only for the placeholder.
                let mut quiet = Errors::default();
                out.placeholders.push(Placeholder {
                    attrs,
                    vis,
                    name,
                    platform: p.as_ref().and_then(|p| platform(p, &mut quiet)),
                    family: f.as_ref().and_then(|f| family(f, &mut quiet)),
                    kind: kind(k.as_ref(), &mut quiet),
                });
            }
            Decl::Table(t) => {
                let mut local = Errors::default();
                let p = platform(&t.platform, &mut local);
                let f = family(&t.family, &mut local);
                let k = kind(t.kind.as_ref(), &mut local);
                let rows = items(t, &mut local);
                match (local.finish(), p, f, k) {
                    (Ok(()), Some(platform), Some(family), Some(kind)) => out.tables.push(Table {
                        raw: t,
                        platform,
                        family,
                        kind,
                        rows,
                    }),
                    (result, platform, family, kind) => {
                        if let Err(e) = result {
                            errs.push(e);
                        }
                        out.placeholders.push(Placeholder {
                            attrs: &t.attrs,
                            vis: &t.vis,
                            name: &t.name,
                            platform,
                            family,
                            kind,
                        });
                    }
                }
            }
        }
    }
    out
}

/// A type listed twice, a priority override of 0 or above u16.
/// The listed kernels' priorities and row windows (returned, parallel to the items); a
/// kernel listed twice for the same rows (twice without a window, say) is an error.
fn items(t: &RawTable, errs: &mut Errors) -> Vec<Option<Window>> {
    let mut seen: Vec<(String, Option<Window>)> = Vec::new();
    let mut windows = Vec::new();
    for item in &t.items {
        let key = type_name(&item.ty);
        let window = item.rows.as_ref().and_then(|r| rows(&r.value, errs));
        if item.rows.is_some() && window.is_none() {
            // Reported by `rows`; no duplicate check against a window that did not parse.
            windows.push(None);
            continue;
        }
        if seen.contains(&(key.clone(), window)) {
            let again = match window {
                None => format!("list it again only for other rows (`{key} {{ rows = 2..=64 }}`)"),
                Some(_) => "a kernel is listed again only for other rows".to_string(),
            };
            errs.spanned(
                &item.ty,
                format!(
                    "kernel `{key}` is listed twice in `{}` for the same rows; {again}",
                    t.name
                ),
            );
        }
        seen.push((key, window));
        windows.push(window);
        if let Some(p) = &item.priority {
            match p.base10_parse::<u16>() {
                Ok(0) => errs.spanned(p, "priorities start at 1 (1 is tried first)"),
                Ok(_) => {}
                Err(_) => errs.spanned(p, "priority must fit in a u16 (1..=65535)"),
            }
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::ast;
    use quote::quote;

    /// (valid table names, placeholder names, error messages)
    fn run(input: proc_macro2::TokenStream) -> (Vec<String>, Vec<String>, Vec<String>) {
        let mut errs = Errors::default();
        let raw = ast::parse(input, &mut errs);
        let checked = validate(&raw, &mut errs);
        let msgs = match errs.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        (
            checked
                .tables
                .iter()
                .map(|t| t.raw.name.to_string())
                .collect(),
            checked
                .placeholders
                .iter()
                .map(|p| p.name.to_string())
                .collect(),
            msgs,
        )
    }

    #[test]
    fn valid_tables() {
        let (ok, ph, msgs) = run(quote! {
            pub A: Cpu, BlockScaled = [X, Y => 2];
            pub B: Cuda, WeightOnly = base::T + [Z];
        });
        assert_eq!(ok, ["A", "B"]);
        assert!(ph.is_empty() && msgs.is_empty());
    }

    #[test]
    fn each_invalid_table_becomes_a_placeholder() {
        let (ok, ph, msgs) = run(quote! {
            pub A: Cpu, Blocky = [X];
            pub B: Metal, Scaled = [X];
            pub C: Cpu, Scaled = [a::X, a::X => 2];
            pub D: Cpu, Scaled = [X => 0];
            pub E: Cpu, Scaled = [X => 70000];
            pub F: Cpu, Scaled = [X];
        });
        assert_eq!(ok, ["F"]);
        assert_eq!(ph, ["A", "B", "C", "D", "E"]);
        assert_eq!(
            msgs,
            [
                "unknown family `Blocky`; expected one of: BlockScaled, Scaled, WeightOnly",
                "unknown platform `Metal`; expected one of: Cuda, Rocm, Cpu, Xpu, Tpu",
                "kernel `a::X` is listed twice in `C` for the same rows; list it again only for \
                 other rows (`a::X { rows = 2..=64 }`)",
                "priorities start at 1 (1 is tried first)",
                "priority must fit in a u16 (1..=65535)",
            ]
        );
    }

    #[test]
    fn a_kernel_is_listed_again_only_for_other_rows() {
        let (ok, ph, msgs) = run(quote! {
            pub A: Cuda, BlockScaled = [H { rows = 2..=64 } => 2, L => 3, H => 4];
            pub B: Cuda, BlockScaled = [H { rows = 2..=64 } => 2, H { rows = 2..65 } => 4];
            pub C: Cuda, BlockScaled = [H { rows = 0..=4 } => 2, H => 4];
        });
        assert_eq!(ok, ["A"]);
        assert_eq!(ph, ["B", "C"]);
        assert_eq!(
            msgs,
            [
                "kernel `H` is listed twice in `B` for the same rows; a kernel is listed again \
                 only for other rows",
                "`rows` starts at 1: a call has at least one row",
            ]
        );
        let mut errs = Errors::default();
        let raw = ast::parse(
            quote!(pub A: Cuda, BlockScaled = [H { rows = 2..=64 }, L, H { rows = 65.. }];),
            &mut errs,
        );
        let checked = validate(&raw, &mut errs);
        assert!(errs.finish().is_ok());
        assert_eq!(
            checked.tables[0].rows,
            [Some((2, Some(64))), None, Some((65, None))]
        );
    }

    #[test]
    fn a_placeholder_keeps_the_valid_half_of_its_header() {
        let mut errs = Errors::default();
        let raw = ast::parse(quote!(pub A: Cuda, Blocky = [X];), &mut errs);
        let checked = validate(&raw, &mut errs);
        assert_eq!(checked.placeholders[0].platform, Some(Platform::Cuda));
        assert_eq!(checked.placeholders[0].family, None);
    }

    #[test]
    fn a_name_declared_twice_is_defined_once() {
        let (ok, ph, msgs) = run(quote! {
            pub A: Cpu, Scaled = [X];
            pub A: Cpu, Scaled = [Y];
            pub B: Cpu = [X];
            pub B: Cpu, Scaled = [Y];
        });
        assert_eq!(ok, ["A"]);
        assert_eq!(ph, ["B"]);
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert_eq!(msgs[1], "table `A` declared twice");
        assert_eq!(msgs[2], "table `B` declared twice");
    }
}
