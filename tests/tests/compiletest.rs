//! trybuild UI tests: every compile error the macros can emit, pinned with its message
//! (`tests/ui/*.rs` + `.stderr`), and the cases that must compile and run
//! (`tests/ui-pass/*.rs`). Regenerate with
//! `TRYBUILD=overwrite cargo test -p fp8-linear-tests --test compiletest`, then read every
//! changed `.stderr`: each file pins one error (`several-errors-reported-together.rs` pins
//! three, on purpose), and its message must be the intended one.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
    t.pass("ui-pass/*.rs");
}
