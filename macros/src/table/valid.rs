//! Validate what can be checked before const evaluation: platform and family names,
//! priority literals, a type listed twice. Priorities declared on the kernels themselves
//! are only known to the compiler, so duplicates across them are rejected by the generated
//! `const` check (see `fp8_linear_core::table::build::validate`).

use quote::ToTokens;

use super::ast::RawTables;
use crate::errors::Errors;
use crate::kw::{FAMILIES, PLATFORMS};

/// Checks every table, collecting all errors.
pub fn validate(raw: &RawTables) -> syn::Result<()> {
    let mut errs = Errors::default();
    let mut names: Vec<String> = Vec::new();
    for t in &raw.tables {
        let n = t.name.to_string();
        if names.contains(&n) {
            errs.spanned(&t.name, format!("table `{n}` declared twice"));
        }
        names.push(n);
        if !PLATFORMS.iter().any(|p| t.platform == p) {
            errs.spanned(
                &t.platform,
                format!(
                    "unknown platform `{}`; expected one of: {}",
                    t.platform,
                    PLATFORMS.join(", ")
                ),
            );
        }
        if !FAMILIES.iter().any(|f| t.family == f) {
            errs.spanned(
                &t.family,
                format!(
                    "unknown family `{}`; expected one of: {}",
                    t.family,
                    FAMILIES.join(", ")
                ),
            );
        }
        let mut seen: Vec<String> = Vec::new();
        for item in &t.items {
            let key = item.ty.to_token_stream().to_string();
            if seen.contains(&key) {
                errs.spanned(
                    &item.ty,
                    format!("kernel `{key}` is listed twice in `{}`", t.name),
                );
            }
            seen.push(key);
            if let Some(p) = &item.priority {
                match p.base10_parse::<u16>() {
                    Ok(0) => errs.spanned(p, "priorities start at 1 (1 is tried first)"),
                    Ok(_) => {}
                    Err(_) => errs.spanned(p, "priority must fit in a u16 (1..=65535)"),
                }
            }
        }
    }
    errs.finish()
}
