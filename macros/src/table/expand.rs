//! Expand: a constant `Table` per valid declaration, sorted in `const fn`, with one
//! compile-time check per listed kernel (and one for the base table) spanned at its tokens;
//! an empty placeholder `Table` per declaration with errors.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;

use super::valid::{Checked, Placeholder, Table, Window};
use crate::vocab::{Family, LayerKind, Platform};

/// Generates every table and placeholder.
pub fn expand(krate: Option<&syn::Path>, checked: &Checked) -> TokenStream {
    let krate = krate
        .cloned()
        .unwrap_or_else(|| syn::parse_quote!(::fp8_linear));
    let p = quote!(#krate::__private);
    let tables = checked.tables.iter().map(|t| table(&p, t));
    let placeholders = checked.placeholders.iter().map(|ph| placeholder(&p, ph));
    quote!(#(#tables)* #(#placeholders)*)
}

/// The spans of the first and last tokens of `tokens` (call site when empty).
fn ends(tokens: &impl ToTokens) -> (Span, Span) {
    let mut it = tokens.to_token_stream().into_iter();
    let first = it.next().map(|t| t.span()).unwrap_or_else(Span::call_site);
    let last = it.last().map(|t| t.span()).unwrap_or(first);
    (first, last)
}

/// `const _: () = { let problem = #call; if problem.found() { panic!(..) } };` whose
/// `panic!` starts at `start` and ends at `end`: a failed check is reported over the user's
/// tokens between them (a span built from two tokens, since a proc macro cannot join spans
/// on stable).
fn check((start, end): (Span, Span), call: TokenStream) -> TokenStream {
    // At the call site, so it is one variable even when the two tokens come from different
    // `macro_rules!` fragments (each with its own hygiene).
    let problem = Ident::new("problem", Span::call_site());
    let mut args = Group::new(
        Delimiter::Parenthesis,
        quote_spanned!(end=> "{}", #problem.message()),
    );
    args.set_span(end);
    let panic = quote_spanned!(start=> ::core::panic!);
    quote_spanned! {start=>
        const _: () = {
            let #problem = #call;
            if #problem.found() {
                #panic #args
            }
        };
    }
}

fn table(p: &TokenStream, t: &Table) -> TokenStream {
    let raw = t.raw;
    let attrs = &raw.attrs;
    let vis = &raw.vis;
    let name = &raw.name;
    let name_str = name.to_string();
    let platform_id = t.platform.ident(raw.platform.span());
    let family_id = t.family.ident(raw.family.span());
    let platform = quote!(#p::Platform::#platform_id);
    let family = quote!(#p::Family::#family_id);
    let kind_span = raw.kind.as_ref().map_or_else(Span::call_site, Ident::span);
    let kind_id = t.kind.ident(kind_span);
    let kind = quote!(#p::LayerKind::#kind_id);

    // `Kernel { rows = A..=B }`: the listing's rows, as a `RowRange` expression.
    let window = |w: &Option<Window>| {
        w.map(|(first, last)| {
            let first = first as usize;
            let last = match last {
                Some(l) => quote!(#l as usize),
                None => quote!(usize::MAX),
            };
            quote!(#p::RowRange::new(#first, #last))
        })
    };
    let entries = t.items().iter().zip(&t.rows).map(|(it, w)| {
        let ty = &it.ty;
        let declared = quote_spanned!(ty.span()=> <#ty as #p::Registered>::ENTRY);
        let entry = match window(w) {
            Some(rows) => quote!(#declared.with_rows(#rows)),
            None => declared,
        };
        match &it.priority {
            // The value `valid` checked, unsuffixed (`K => 3u8` is 3 too), at the literal.
            Some(pr) => {
                let value = pr.base10_parse::<u16>().unwrap_or_default();
                let pr = syn::LitInt::new(&value.to_string(), pr.span());
                quote!(#entry.with_priority(#pr))
            }
            None => entry,
        }
    });
    let entry_checks = t.items().iter().enumerate().map(|(i, it)| {
        let (start, ty_end) = ends(&it.ty);
        let end = it.priority.as_ref().map_or(ty_end, |p| p.span());
        check(
            (start, end),
            quote!(#p::build::entry_problem(#name_str, (#platform, #kind), __FP8_BASE_NAME, __FP8_BASE, __FP8_EXTRA, #i)),
        )
    });
    // Each window inside the rows its kernel serves, checked at the window's braces.
    let rows_checks = t.items().iter().zip(&t.rows).filter_map(|(it, w)| {
        let (rows, braces) = (window(w)?, it.rows.as_ref()?.braces);
        let ty = &it.ty;
        Some(check(
            (braces, braces),
            quote!(#p::build::rows_problem(#name_str, &<#ty as #p::Registered>::ENTRY, #rows)),
        ))
    });
    let base = match &raw.base {
        Some(b) => {
            let base_check = check(
                ends(b),
                quote!(#p::build::base_problem(#name_str, (#platform, #kind), #family, __FP8_BASE_TABLE)),
            );
            quote! {
                const __FP8_BASE_TABLE: &#p::Table = &#b;
                #base_check
                #[allow(dead_code)] // unused when no kernel is listed
                const __FP8_BASE_NAME: &str = __FP8_BASE_TABLE.name;
                const __FP8_BASE: &[#p::KernelEntry] = __FP8_BASE_TABLE.entries;
            }
        }
        None => quote! {
            #[allow(dead_code)] // unused when no kernel is listed
            const __FP8_BASE_NAME: &str = "";
            const __FP8_BASE: &[#p::KernelEntry] = &[];
        },
    };
    quote! {
        #(#attrs)*
        #vis const #name: #p::Table = {
            #base
            const __FP8_EXTRA: &[#p::KernelEntry] = &[#(#entries),*];
            #(#entry_checks)*
            #(#rows_checks)*
            const __FP8_N: usize = __FP8_BASE.len() + __FP8_EXTRA.len();
            const __FP8_SORTED: [#p::KernelEntry; __FP8_N] = #p::build::sort(#p::build::concat::<__FP8_N>(__FP8_BASE, __FP8_EXTRA));
            #p::Table {
                name: #name_str,
                platform: #platform,
                family: #family,
                kind: #kind,
                entries: &__FP8_SORTED,
            }
        };
    }
}

/// The declared name as an empty table, so uses of it compile and the declaration's error
/// is the only one. An invalid platform or family becomes `Cpu` / `BlockScaled`.
fn placeholder(p: &TokenStream, ph: &Placeholder) -> TokenStream {
    let Placeholder {
        attrs,
        vis,
        name,
        platform,
        family,
        kind,
    } = ph;
    let name_str = name.to_string();
    let platform = platform.unwrap_or(Platform::Cpu).ident(Span::call_site());
    let family = family
        .unwrap_or(Family::BlockScaled)
        .ident(Span::call_site());
    let kind = kind.unwrap_or(LayerKind::Linear).ident(Span::call_site());
    quote! {
        #(#attrs)*
        #vis const #name: #p::Table = #p::Table {
            name: #name_str,
            platform: #p::Platform::#platform,
            family: #p::Family::#family,
            kind: #p::LayerKind::#kind,
            entries: &[],
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::Errors;
    use crate::table::{ast, valid};

    fn expand_str(input: TokenStream) -> String {
        let mut errs = Errors::default();
        let raw = ast::parse(input, &mut errs);
        let checked = valid::validate(&raw, &mut errs);
        let out = expand(raw.krate.as_ref(), &checked);
        syn::parse2::<syn::File>(out.clone()).unwrap_or_else(|e| panic!("{e}: {out}"));
        out.to_string()
    }

    #[test]
    fn one_check_per_entry() {
        let out = expand_str(quote!(pub T: Cpu, BlockScaled = [A, B => 2u8, C];));
        assert_eq!(out.matches("build :: entry_problem").count(), 3);
        assert!(out.contains(
            "build :: entry_problem (\"T\" , (:: fp8_linear :: __private :: Platform :: Cpu , :: fp8_linear :: __private :: LayerKind :: Linear) , __FP8_BASE_NAME , __FP8_BASE , __FP8_EXTRA , 1usize)"
        ));
        assert!(out.contains(
            "< B as :: fp8_linear :: __private :: Registered > :: ENTRY . with_priority (2)"
        ));
        assert!(!out.contains("base_problem"));
        let out = expand_str(quote!(pub G: Cpu, BlockScaled, Grouped = [A];));
        assert!(out.contains("kind : :: fp8_linear :: __private :: LayerKind :: Grouped"));
        assert!(out
            .contains("const __FP8_BASE : & [:: fp8_linear :: __private :: KernelEntry] = & [] ;"));
    }

    #[test]
    fn a_row_window_narrows_the_entry_and_is_checked() {
        let out =
            expand_str(quote!(pub T: Cuda, BlockScaled = [H { rows = 2..=64 } => 2, H => 4];));
        assert!(out.contains(
            "< H as :: fp8_linear :: __private :: Registered > :: ENTRY . with_rows (:: fp8_linear :: __private :: RowRange :: new (2usize , 64u64 as usize)) . with_priority (2)"
        ));
        assert_eq!(out.matches("build :: rows_problem").count(), 1);
        let out = expand_str(quote!(pub T: Cpu, BlockScaled = [H { rows = 17.. } => 1, H => 2];));
        assert!(
            out.contains("RowRange :: new (17usize , usize :: MAX)"),
            "{out}"
        );
    }

    #[test]
    fn a_base_is_checked_too() {
        let out = expand_str(quote!(crate = my; pub T: Cuda, Scaled = their::BASE + [A];));
        assert!(out.contains(
            "build :: base_problem (\"T\" , (my :: __private :: Platform :: Cuda , my :: __private :: LayerKind :: Linear) , my :: __private :: Family :: Scaled , __FP8_BASE_TABLE)"
        ));
        assert!(
            out.contains("const __FP8_BASE_TABLE : & my :: __private :: Table = & their :: BASE ;")
        );
    }

    #[test]
    fn placeholders_for_declarations_with_errors() {
        let out = expand_str(quote! {
            /// Docs stay.
            pub A: Cuda, Blocky = [X];
            pub(crate) B: Cpu, = [X];
        });
        assert!(out.contains(
            "pub const A : :: fp8_linear :: __private :: Table = :: fp8_linear :: __private :: Table { name : \"A\" , platform : :: fp8_linear :: __private :: Platform :: Cuda , family : :: fp8_linear :: __private :: Family :: BlockScaled , kind : :: fp8_linear :: __private :: LayerKind :: Linear , entries : & [] , } ;"
        ));
        assert!(out.contains("pub (crate) const B"));
        assert!(out.contains("Docs stay."));
        assert!(!out.contains("entry_problem"));
    }
}
