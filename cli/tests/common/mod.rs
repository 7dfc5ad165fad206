//! Helpers shared by the CLI's end-to-end tests: run the built binary with a clean
//! environment, read its JSON, temporary directories.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `fp8-linear` with `args` and the given environment variables (the selection and
/// tuning variables of the caller's environment are removed first).
pub fn bin_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8-linear"));
    c.args(args)
        .env_remove("FP8_LINEAR_FORCE")
        .env_remove("FP8_LINEAR_DISABLE")
        .env_remove("FP8_LINEAR_BACKEND")
        .env_remove("FP8_LINEAR_TUNING");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run fp8-linear")
}

/// Runs `fp8-linear` with `args`.
pub fn bin(args: &[&str]) -> Output {
    bin_env(args, &[])
}

/// Standard output.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as JSON (panics with both streams when it is not).
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(o), stderr(o)))
}

/// Asserts the process exited by itself (no signal: no abort), without a panic (101),
/// with `code`; returns both streams for messages.
#[track_caller]
pub fn assert_code(o: &Output, code: i32, what: &str) -> String {
    let both = format!("stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    assert_eq!(o.status.code(), Some(code), "{what}: {both}");
    assert!(!stderr(o).contains("panicked"), "{what}: {both}");
    both
}

/// Asserts a `--json` failure: exit `code`, and on stdout exactly one JSON error object
/// with that kind and code whose message contains `needle`.
#[track_caller]
pub fn assert_json_error(o: &Output, code: i32, kind: &str, needle: &str) -> String {
    assert_code(o, code, needle);
    let v = json(o);
    let e = &v["error"];
    assert_eq!(e["kind"], kind, "{v:#}");
    assert_eq!(e["code"], code, "{v:#}");
    let msg = e["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains(needle), "`{needle}` not in: {msg}");
    msg
}

/// A temporary directory removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    /// A fresh (absent) path under the system temp dir, unique to this process and `tag`.
    pub fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("fp8-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Dir(p)
    }
    /// The path as text.
    pub fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tiny synthetic checkpoint with one decoder layer (7 quantized layers).
pub fn tiny_checkpoint(tag: &str) -> Dir {
    let dir = Dir::new(tag);
    let g = bin(&["gen-checkpoint", dir.s(), "--layers", "1"]);
    assert!(g.status.success(), "{}", stderr(&g));
    dir
}
