//! Kernel and backend names given on the command line or in the environment: each must name
//! something in the built-in registry, and an unknown one is an error that names the
//! closest known names (edit distance), never silently ignored.

use fp8_linear::{OverrideSource, Overrides, Registry};

use crate::error::CliError;

/// Levenshtein distance between two strings, case-insensitive.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The names of `known` closest to `name`, closest first (ties in the given order): up to
/// three within a third of the name's length (at least 2 edits), else the single closest.
pub fn closest<'a>(name: &str, known: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<(usize, usize, &str)> = known
        .iter()
        .enumerate()
        .map(|(i, k)| (edit_distance(name, k), i, *k))
        .collect();
    v.sort();
    let near = (name.chars().count() / 3).max(2);
    let close: Vec<&str> = v
        .iter()
        .filter(|(d, _, _)| *d <= near)
        .take(3)
        .map(|(_, _, k)| *k)
        .collect();
    if close.is_empty() {
        v.into_iter().take(1).map(|(_, _, k)| k).collect()
    } else {
        close
    }
}

/// Every kernel name of the registry, each once, in table order.
pub fn kernel_names(registry: &Registry) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for e in registry.tables().iter().flat_map(|t| t.entries) {
        if !v.contains(&e.name) {
            v.push(e.name);
        }
    }
    v
}

/// Every backend family of the registry, each once, in table order.
pub fn backend_names(registry: &Registry) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for e in registry.tables().iter().flat_map(|t| t.entries) {
        if !v.contains(&e.backend) {
            v.push(e.backend);
        }
    }
    v
}

fn build_note() -> &'static str {
    if cfg!(feature = "cuda") {
        ""
    } else {
        " (this build has no CUDA kernels: feature `cuda` off)"
    }
}

fn unknown(what: &str, name: &str, source: &str, known: &[&str]) -> CliError {
    let close = closest(name, known);
    CliError::bad_input(format!(
        "unknown {what} `{name}` in {source}; did you mean {}? ({what}s of this build{}: {})",
        close.join(", "),
        build_note(),
        known.join(", ")
    ))
}

/// Checks that `name` (from `source`, e.g. `--baseline`) is a kernel of the registry;
/// returns its canonical spelling.
pub fn kernel(registry: &Registry, name: &str, source: &str) -> Result<&'static str, CliError> {
    registry
        .entry(name)
        .map(|e| e.name)
        .ok_or_else(|| unknown("kernel", name, source, &kernel_names(registry)))
}

fn source_name(src: OverrideSource, flag: &'static str, env: &'static str) -> &'static str {
    match src {
        OverrideSource::Api => flag,
        OverrideSource::Env => env,
    }
}

/// Checks every name in the overrides (forced and disabled kernels, the backend family)
/// against the registry, naming where a bad one came from (flag or environment variable).
pub fn check_overrides(registry: &Registry, ov: &Overrides) -> Result<(), CliError> {
    if let Some((name, src)) = &ov.force {
        kernel(
            registry,
            name,
            source_name(*src, "--force", fp8_linear::options::ENV_FORCE),
        )?;
    }
    for (name, src) in &ov.disabled {
        kernel(
            registry,
            name,
            source_name(*src, "--disable", fp8_linear::options::ENV_DISABLE),
        )?;
    }
    if let Some((name, src)) = &ov.backend {
        let known = backend_names(registry);
        if !known.iter().any(|b| b.eq_ignore_ascii_case(name)) {
            let source = source_name(*src, "--backend", fp8_linear::options::ENV_BACKEND);
            return Err(unknown("backend", name, source, &known));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_linear::tables::BUILTIN;

    #[test]
    fn closest_names() {
        let known = ["CpuFp8Gemm", "CpuReference", "MarlinFp8"];
        assert_eq!(closest("CpuFp8Gem", &known), ["CpuFp8Gemm"]);
        assert_eq!(closest("marlinfp8", &known), ["MarlinFp8"]);
        assert_eq!(closest("zzz", &known), ["MarlinFp8"]);
        assert_eq!(closest("x", &[]), Vec::<&str>::new());
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("CpuFp8Gem", "cpufp8gemm"), 1);
    }

    #[test]
    fn unknown_names_are_errors_with_the_closest_names() {
        let e = kernel(&BUILTIN, "CpuFp8Gem", "--force").unwrap_err();
        assert_eq!(e.kind, crate::error::Kind::BadInput);
        assert!(
            e.message
                .contains("unknown kernel `CpuFp8Gem` in --force; did you mean CpuFp8Gemm?"),
            "{e}"
        );
        assert_eq!(kernel(&BUILTIN, "cpufp8gemm", "--force"), Ok("CpuFp8Gemm"));
        let ov = Overrides::none().disable("CpuReference").backend("cpu");
        assert!(check_overrides(&BUILTIN, &ov).is_ok());
        let ov = Overrides::none().backend("cpux");
        let e = check_overrides(&BUILTIN, &ov).unwrap_err();
        assert!(
            e.message.contains("unknown backend `cpux` in --backend"),
            "{e}"
        );
    }
}
