//! Where the README is, for its doctests (`ReadmeDoctests` in src/lib.rs, compiled only under
//! `cfg(doctest)`). In the repository it is the workspace's README.md, two folders above
//! src/; in the published package cargo has put it (the manifest's `readme`) at the package's
//! root, beside Cargo.toml, and `cfg(readme_in_package)` says so.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(readme_in_package)");
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    if Path::new(&dir).join("README.md").is_file() {
        println!("cargo::rustc-cfg=readme_in_package");
    }
}
