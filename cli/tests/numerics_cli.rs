//! Each kernel is checked against the numerics it implements, end to end through the binary:
//! a weight-only (W8A16) layer against the W8A16 reference on the CPU; a forced Marlin that
//! cannot run here, with the reason and the kernel that ran instead; and, on a GPU, Marlin
//! (weight-only arithmetic) forced onto a block W8A8 checkpoint and checked against the
//! W8A16 reference, every layer "ok". The GPU test skips with a printed reason when there is
//! no usable CUDA device, and fails instead under `FP8_REQUIRE_CUDA=1`.

mod common;

use common::{bin, json, stdout, Dir};

use std::process::Output;
/// What `list` says about this machine: the device `run` uses by default, and why it is
/// the CPU when it is.
fn this_machine() -> serde_json::Value {
    let o = bin(&["--json", "list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    json(&o)["current"].clone()
}

fn require_cuda() -> bool {
    std::env::var("FP8_REQUIRE_CUDA").is_ok_and(|v| v.trim() == "1")
}

#[test]
fn a_weight_only_layer_is_checked_against_the_w8a16_reference() {
    let args = [
        "run",
        "--cpu",
        "--layer",
        "weight-only",
        "-m",
        "5",
        "-n",
        "130",
        "-k",
        "384",
        "--iters",
        "1",
    ];
    let o = bin(&args);
    let t = stdout(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("checked against the w8a16 reference"), "{t}");
    assert!(t.contains("-> ok"), "{t}");
    let v = json(&bin(&[&args[..], &["--json"]].concat()));
    assert_eq!(v["reference"], "w8a16", "{v:#}");
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["force_rejected"], serde_json::Value::Null, "{v:#}");

    // The same shape as a block W8A8 layer is checked against the W8A8 reference.
    let v = json(&bin(&[
        "run", "--cpu", "--layer", "block", "-m", "5", "-n", "130", "-k", "384", "--iters", "1",
        "--json",
    ]));
    assert_eq!(v["reference"], "w8a8", "{v:#}");
    assert_eq!(v["ok"], true, "{v:#}");
}

/// The reason a forced Marlin cannot run on the CPU (in a build with CUDA kernels).
fn marlin_on_the_cpu() -> &'static str {
    "forced kernel MarlinFp8 is a cuda kernel; the device is a cpu device"
}

/// In a build without CUDA kernels, MarlinFp8 is no kernel of the build: forcing it is an
/// error (exit 2) that says so, not a silent fallback.
fn assert_marlin_unknown(o: &Output) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("unknown kernel `MarlinFp8` in --force"), "{e}");
    assert!(
        e.contains("this build has no CUDA kernels: feature `cuda` off"),
        "{e}"
    );
}

#[test]
fn forcing_marlin_on_the_cpu_says_why_it_cannot_and_what_ran() {
    let o = bin(&[
        "run",
        "--cpu",
        "--force",
        "MarlinFp8",
        "-m",
        "3",
        "-n",
        "130",
        "-k",
        "256",
        "--iters",
        "1",
    ]);
    if !cfg!(feature = "cuda") {
        assert_marlin_unknown(&o);
        return;
    }
    let t = stdout(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains(marlin_on_the_cpu()), "{t}");
    assert!(t.contains("(--cpu was given)"), "{t}");
    assert!(t.contains("fell back to CpuFp8Gemm"), "{t}");
    // What ran is checked against its own numerics (W8A8), and passes.
    assert!(t.contains("kernel:    CpuFp8Gemm"), "{t}");
    assert!(t.contains("checked against the w8a8 reference"), "{t}");
    assert!(t.contains("-> ok"), "{t}");

    // A checkpoint run says it once, before the layers.
    let dir = Dir::new("force-cpu");
    let g = bin(&["gen-checkpoint", dir.s(), "--layers", "1"]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let o = bin(&[
        "run",
        dir.s(),
        "--cpu",
        "--force",
        "MarlinFp8",
        "-m",
        "2",
        "--iters",
        "1",
    ]);
    let t = stdout(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("note: forced kernel MarlinFp8").count(), 1, "{t}");
    assert!(t.contains(marlin_on_the_cpu()), "{t}");
    assert!(t.contains("fell back to CpuFp8Gemm"), "{t}");
    assert!(t.contains("checked against the w8a8 reference"), "{t}");
    assert!(t.trim_end().ends_with("result: ok"), "{t}");
}

#[test]
fn forcing_marlin_on_a_machine_without_a_gpu_names_the_reason() {
    let here = this_machine();
    if here["platform"] != "cpu" {
        println!(
            "skipped: this machine has a GPU ({}), so a forced Marlin can run",
            here["device"]
        );
        return;
    }
    let no_gpu = here["no_gpu"].as_str().unwrap().to_string();
    assert!(no_gpu.starts_with("no GPU: "), "{no_gpu}");
    // No device option: the CLI looks for GPU 0, finds none, and uses the CPU.
    let o = bin(&[
        "run",
        "--force",
        "MarlinFp8",
        "-m",
        "3",
        "-n",
        "130",
        "-k",
        "256",
        "--iters",
        "1",
        "--json",
    ]);
    if !cfg!(feature = "cuda") {
        assert_marlin_unknown(&o);
        return;
    }
    let v = json(&o);
    let note = v["force_rejected"].as_str().unwrap();
    assert!(note.contains(marlin_on_the_cpu()), "{note}");
    assert!(note.contains(&format!("({no_gpu})")), "{note}");
    assert!(note.ends_with("fell back to CpuFp8Gemm"), "{note}");
    assert_eq!(v["kernel"], "CpuFp8Gemm", "{v:#}");
    assert_eq!(v["reference"], "w8a8", "{v:#}");
    assert_eq!(v["ok"], true, "{v:#}");
}

#[test]
fn marlin_on_a_gpu_is_checked_against_the_w8a16_reference() {
    let here = this_machine();
    if here["platform"] != "cuda" {
        let why = here["no_gpu"].as_str().unwrap_or("no CUDA device");
        assert!(
            !require_cuda(),
            "FP8_REQUIRE_CUDA=1 but the CLI finds no usable CUDA device: {why}"
        );
        println!("skipped: {why}");
        return;
    }
    // A block W8A8 checkpoint through Marlin (weight-only arithmetic: activations stay
    // bf16), which an A100 selects for it and any sm_80+ GPU runs when forced.
    let dir = Dir::new("marlin-gpu");
    let g = bin(&["gen-checkpoint", dir.s(), "--layers", "1"]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let args = [
        "run",
        dir.s(),
        "--gpu",
        "0",
        "--force",
        "MarlinFp8",
        "-m",
        "16",
        "--iters",
        "2",
        "--check",
        "100",
    ];
    let o = bin(&args);
    let t = stdout(&o);
    assert!(
        o.status.success(),
        "{t}\nstderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(t.contains("checked against the w8a16 reference"), "{t}");
    assert!(!t.contains("w8a8"), "{t}");
    assert!(!t.contains("FAILED"), "{t}");
    assert!(!t.contains("note: forced kernel"), "{t}");
    assert!(t.trim_end().ends_with("result: ok"), "{t}");

    let v = json(&bin(&[&args[..], &["--json"]].concat()));
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["references"], serde_json::json!(["w8a16"]), "{v:#}");
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 7, "{v:#}");
    for l in layers {
        assert_eq!(l["kernel"], "MarlinFp8", "{l}");
        assert_eq!(l["reference"], "w8a16", "{l}");
        assert_eq!(l["ok"], true, "{l}");
    }

    // A random block layer through Marlin on the GPU: the same W8A16 check.
    let v = json(&bin(&[
        "run",
        "--gpu",
        "0",
        "--force",
        "MarlinFp8",
        "-m",
        "16",
        "-n",
        "256",
        "-k",
        "512",
        "--iters",
        "1",
        "--json",
    ]));
    assert_eq!(v["kernel"], "MarlinFp8", "{v:#}");
    assert_eq!(v["reference"], "w8a16", "{v:#}");
    assert_eq!(v["ok"], true, "{v:#}");
}
