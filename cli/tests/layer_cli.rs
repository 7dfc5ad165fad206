//! The layer commands end to end through the binary: explain (text and JSON), run on the
//! current device against the f64 reference, autotune writing winners that run then uses,
//! bench, and plain errors for bad arguments.

use std::process::{Command, Output};

fn bin(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8-linear"));
    c.args(args)
        .env_remove("FP8_LINEAR_FORCE")
        .env_remove("FP8_LINEAR_DISABLE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run fp8-linear")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            text(o),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[cfg(feature = "cuda")]
#[test]
fn explain_a100_block_layer_gives_every_candidate_a_verdict() {
    let o = bin(
        &["explain", "--device", "a100", "-n", "7748", "-k", "3884"],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&bin(
        &[
            "explain", "--device", "a100", "-n", "7748", "-k", "3884", "--json",
        ],
        &[],
    ));
    assert_eq!(v["table"], "CUDA_BLOCK");
    assert_eq!(v["chosen"], "MarlinFp8");
    let cands = v["candidates"].as_array().unwrap();
    assert!(cands.len() >= 3, "{v:#}");
    for c in cands {
        let verdict = c["verdict"].as_str().unwrap();
        assert!(!verdict.is_empty());
        if c["kernel"] != "MarlinFp8" && c["runnable"] == false {
            assert!(
                verdict.contains("requires compute capability"),
                "{}: {verdict}",
                c["kernel"]
            );
        }
    }
    let t = text(&o);
    assert!(t.contains("-> "), "{t}");
    assert!(t.contains("chosen: MarlinFp8"), "{t}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn explain_a100_without_cuda_says_there_is_no_cuda_table() {
    let o = bin(&["explain", "--device", "a100"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no block-scaled kernel table for platform cuda"),
        "{e}"
    );
}

#[test]
fn explain_cpu_picks_the_fast_cpu_kernel() {
    let v = json(&bin(&["explain", "--device", "cpu", "--json"], &[]));
    assert_eq!(v["chosen"], "CpuFp8Gemm");
}

#[test]
fn explain_with_everything_disabled_exits_1_and_lists_reasons() {
    let o = bin(
        &[
            "explain",
            "--device",
            "cpu",
            "--disable",
            "CpuFp8Gemm,CpuReference",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    let t = text(&o);
    assert!(t.contains("is disabled by override"), "{t}");
    assert!(t.contains("no kernel"), "{t}");
}

#[test]
fn run_checks_against_the_reference() {
    let v = json(&bin(
        &[
            "run", "-m", "3", "-n", "130", "-k", "260", "--iters", "1", "--json",
        ],
        &[],
    ));
    assert_eq!(v["ok"], true, "{v:#}");
    assert!(v["rel_error"].as_f64().unwrap() < 1e-2);
    assert_eq!(v["rows_checked"], 3);
    // Whatever ran, it was checked against the reference of the numerics it implements.
    let want = if v["kernel"] == "MarlinFp8" {
        "w8a16"
    } else {
        "w8a8"
    };
    assert_eq!(v["reference"], want, "{v:#}");
}

#[test]
fn autotune_winners_are_used_by_run() {
    let file = std::env::temp_dir().join(format!("fp8-cli-tune-{}.tsv", std::process::id()));
    let f = file.to_str().unwrap();
    let o = bin(
        &[
            "autotune", "--cpu", "--ms", "2", "-n", "96", "-k", "200", "--iters", "1", "--file", f,
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let winner = v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["winner"] == true)
        .unwrap()["kernel"]
        .as_str()
        .unwrap()
        .to_string();
    for m in v["measurements"].as_array().unwrap() {
        assert_eq!(m["reference"], "w8a8", "{m}");
        assert_eq!(m["ok"], true, "{m}");
    }
    // Whatever won is what `run` picks for this shape and M bucket, through the file.
    let r = json(&bin(
        &[
            "run", "--cpu", "-m", "2", "-n", "96", "-k", "200", "--iters", "1", "--json",
        ],
        &[("FP8_LINEAR_TUNING", f)],
    ));
    assert_eq!(r["kernel"], winner.as_str(), "{r:#}");
    // A file naming the non-default kernel as the winner moves `run` off the static order.
    let text = std::fs::read_to_string(&file).unwrap();
    let line = text.lines().find(|l| !l.starts_with('#')).unwrap();
    let mut fields: Vec<&str> = line.split('\t').collect();
    fields[5] = "CpuReference";
    std::fs::write(&file, fields.join("\t") + "\n").unwrap();
    let r = json(&bin(
        &[
            "run", "--cpu", "-m", "2", "-n", "96", "-k", "200", "--iters", "1", "--json",
        ],
        &[("FP8_LINEAR_TUNING", f)],
    ));
    assert_eq!(r["kernel"], "CpuReference", "{r:#}");
    let r = json(&bin(
        &[
            "run", "--cpu", "-m", "2", "-n", "96", "-k", "200", "--iters", "1", "--json",
        ],
        &[("FP8_LINEAR_TUNING", "/nonexistent/autotune.tsv")],
    ));
    assert_eq!(r["kernel"], "CpuFp8Gemm", "{r:#}");
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn bench_compares_with_the_selected_kernel() {
    let o = bin(
        &[
            "bench", "--cpu", "--ms", "1", "-n", "64", "-k", "128", "--iters", "1",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = text(&o);
    assert!(t.contains("vs CpuFp8Gemm"), "{t}");
    assert!(t.contains("1.00x"), "{t}");
    // Every timed kernel was checked, against the reference of its own numerics.
    assert!(t.contains("checked against the w8a8 reference: ok"), "{t}");
    assert!(!t.contains("FAILED"), "{t}");
}

#[test]
fn bad_arguments_are_plain_errors() {
    let o = bin(&["explain", "--device", "a200"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("unknown device profile `a200`"), "{e}");
    let o = bin(&["run", "-m", "0"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("M must be at least 1"));
}
