//! trybuild UI tests: every compile error the macros can emit, pinned with its message
//! (`tests/ui/*.rs` + `.stderr`), and the cases that must compile and run
//! (`tests/ui-pass/*.rs`). Regenerate with `TRYBUILD=overwrite cargo test --test compiletest`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
    t.pass("ui-pass/*.rs");
}
