//! Expand: a constant `Table` per declaration, sorted in `const fn`, and a `const _` that
//! validates it at compile time.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::ast::{RawTable, RawTables};

/// Generates every table.
pub fn expand(raw: &RawTables) -> TokenStream {
    let krate = raw
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::fp8_linear));
    let p = quote!(#krate::__private);
    raw.tables.iter().map(|t| table(&p, t)).collect()
}

fn table(p: &TokenStream, t: &RawTable) -> TokenStream {
    let RawTable {
        attrs,
        vis,
        name,
        platform,
        family,
        base,
        items,
    } = t;
    let name_str = name.to_string();
    let entries = items.iter().map(|it| {
        let ty = &it.ty;
        let entry = quote_spanned!(ty.span()=> <#ty as #p::Registered>::ENTRY);
        match &it.priority {
            Some(pr) => quote!(#entry.with_priority(#pr)),
            None => entry,
        }
    });
    let base_entries = match base {
        Some(b) => quote!(#b.entries),
        None => quote!(&[]),
    };
    quote! {
        #(#attrs)*
        #vis const #name: #p::Table = {
            const BASE: &[#p::KernelEntry] = #base_entries;
            const EXTRA: &[#p::KernelEntry] = &[#(#entries),*];
            const N: usize = BASE.len() + EXTRA.len();
            const SORTED: [#p::KernelEntry; N] = #p::build::sort(#p::build::concat::<N>(BASE, EXTRA));
            #p::Table {
                name: #name_str,
                platform: #p::Platform::#platform,
                family: #p::Family::#family,
                entries: &SORTED,
            }
        };
        const _: () = #p::build::validate(&#name);
    }
}
