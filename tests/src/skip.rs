//! Skips that show: a test that cannot run here (no GPU, or a GPU of another architecture)
//! writes `SKIPPED <test>: <reason>` straight to the process's stderr with
//! `std::io::Write`, which libtest does not capture (it captures only the `print!` /
//! `eprint!` macros), so the line appears in a plain `cargo test` next to the test's "ok".
//! Each line carries the count of skips so far in the test binary; with `FP8_SKIP_LOG=<file>`
//! the lines are also appended to that file (one per skip, to count over many binaries).
//!
//! Policy, read from the environment:
//!
//! - `FP8_REQUIRE_CUDA=1`: a test that needs a GPU fails instead of skipping, and so does a
//!   test that cannot run on the present GPU's architecture ([`arch_skip`]) ...
//! - ... unless `FP8_ALLOW_ARCH_SKIPS` allows that: `1` (or `all`) allows every
//!   architecture skip; otherwise a comma-separated list of test names (the test function's
//!   name, or its full path) allows those.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

static SKIPS: AtomicUsize = AtomicUsize::new(0);

/// Whether the run demands a GPU (`FP8_REQUIRE_CUDA=1`).
pub fn cuda_required() -> bool {
    std::env::var("FP8_REQUIRE_CUDA").is_ok_and(|v| v.trim() == "1")
}

/// The name of the running test: libtest names each test's thread after it; `label` when
/// the thread has no name (or is the main thread).
pub fn test_name(label: &str) -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => label.to_string(),
    }
}

/// Whether `FP8_ALLOW_ARCH_SKIPS` allows an architecture skip of `test`.
pub fn arch_skip_allowed(test: &str) -> bool {
    let Ok(v) = std::env::var("FP8_ALLOW_ARCH_SKIPS") else {
        return false;
    };
    let v = v.trim();
    if v == "1" || v.eq_ignore_ascii_case("all") {
        return true;
    }
    list_allows(v, test)
}

/// Whether the comma-separated list `list` names `test` (its full path or its last part).
fn list_allows(list: &str, test: &str) -> bool {
    let short = test.rsplit("::").next().unwrap_or(test);
    list.split(',')
        .map(str::trim)
        .any(|a| !a.is_empty() && (a == test || a == short))
}

/// How many tests (or parts of tests) skipped so far in this test binary.
pub fn skipped() -> usize {
    SKIPS.load(Ordering::SeqCst)
}

/// Reports a skip where it shows (see the module docs): `SKIPPED <test>: <reason>`.
pub fn skip(test: &str, reason: &str) {
    let n = SKIPS.fetch_add(1, Ordering::SeqCst) + 1;
    let line = format!(
        "SKIPPED {}: {reason} [skip {n} of this test binary]\n",
        test_name(test)
    );
    // Not eprint!: libtest captures that; a write to the stderr handle goes out.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Ok(path) = std::env::var("FP8_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// A skip because no GPU can run the test; under `FP8_REQUIRE_CUDA=1` a panic instead.
pub fn no_gpu_skip(test: &str, reason: &str) {
    if cuda_required() {
        panic!("{}: FP8_REQUIRE_CUDA=1 but {reason}", test_name(test));
    }
    skip(test, reason);
}

/// An architecture skip (the GPU is there but the test cannot run on its capability):
/// `Err` with the message when `FP8_REQUIRE_CUDA=1` and `FP8_ALLOW_ARCH_SKIPS` does not
/// allow it (the caller fails the test), otherwise reported as a skip.
pub fn try_arch_skip(test: &str, reason: &str) -> Result<(), String> {
    let name = test_name(test);
    if cuda_required() && !arch_skip_allowed(&name) {
        return Err(format!(
            "{name}: cannot run on this GPU ({reason}); FP8_REQUIRE_CUDA=1 makes that a \
             failure (FP8_ALLOW_ARCH_SKIPS=1, or a list naming this test, allows it)"
        ));
    }
    skip(test, reason);
    Ok(())
}

/// [`try_arch_skip`], panicking when the skip is not allowed.
pub fn arch_skip(test: &str, reason: &str) {
    if let Err(e) = try_arch_skip(test, reason) {
        panic!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_match_the_short_or_full_name() {
        assert!(list_allows("a, block_scale_layouts", "block_scale_layouts"));
        assert!(list_allows("gpu::x", "gpu::x"));
        assert!(list_allows("x", "gpu::x"));
        assert!(!list_allows("", "x"));
        assert!(!list_allows("y,z", "x"));
    }
}
