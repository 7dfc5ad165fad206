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

/// The H200 plan per M (`-m LIST`): our Hopper kernel at M = 1..=64 (its windowed
/// listing), cuBLASLt block-scaled above; with cuBLASLt disabled, no M runs it.
#[cfg(feature = "cuda")]
#[test]
fn explain_h200_prints_a_kernel_per_m_and_disable_acts_on_every_range() {
    let args = ["explain", "--device", "h200", "-m", "1,16,64,65,4096"];
    let o = bin(&args, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = text(&o);
    for line in [
        "M = 1: HopperBlockFp8",
        "M = 16: HopperBlockFp8",
        "M = 64: HopperBlockFp8",
        "M = 65: CublasLtBlockFp8",
        "M = 4096: CublasLtBlockFp8",
        "chosen: HopperBlockFp8 (M = 1..=64), CublasLtBlockFp8 (M = 65..)",
    ] {
        assert!(t.contains(line), "{line:?} missing:\n{t}");
    }
    let v = json(&bin(&[&args[..], &["--json"]].concat(), &[]));
    let per_m: Vec<(u64, &str)> = v["per_m"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["m"].as_u64().unwrap(), x["kernel"].as_str().unwrap()))
        .collect();
    assert_eq!(
        per_m,
        [
            (1, "HopperBlockFp8"),
            (16, "HopperBlockFp8"),
            (64, "HopperBlockFp8"),
            (65, "CublasLtBlockFp8"),
            (4096, "CublasLtBlockFp8")
        ]
    );
    assert_eq!(v["plan"][0]["last"], 64, "{v:#}");
    assert_eq!(v["plan"][1]["last"], serde_json::Value::Null, "{v:#}");
    let disabled = [&args[..], &["--disable", "CublasLtBlockFp8"]].concat();
    let t = text(&bin(&disabled, &[]));
    assert!(!t.contains("M = 16: CublasLtBlockFp8"), "{t}");
    assert!(t.contains("M = 16: HopperBlockFp8"), "{t}");
    assert!(t.contains("M = 4096: HopperBlockFp8"), "{t}");
    // The environment's disable list acts the same.
    let t = text(&bin(&args, &[("FP8_LINEAR_DISABLE", "CublasLtBlockFp8")]));
    assert!(!t.contains(": CublasLtBlockFp8"), "{t}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn explain_a100_without_cuda_says_there_is_no_cuda_table() {
    let o = bin(&["explain", "--device", "a100"], &[]);
    // No kernel for the layer on that device: exit 3, as in every subcommand.
    assert_eq!(o.status.code(), Some(3));
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
fn explain_with_everything_disabled_exits_3_and_lists_reasons() {
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
    assert_eq!(o.status.code(), Some(3));
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

/// The bench rows of one M, from `bench --json`.
fn rows(v: &serde_json::Value, m: u64) -> Vec<&serde_json::Value> {
    v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["m"] == m)
        .collect()
}

#[test]
fn bench_compares_with_the_selected_kernel() {
    let args = [
        "bench",
        "--cpu",
        "--ms",
        "1,20",
        "-n",
        "64",
        "-k",
        "128",
        "--iters",
        "2",
        "--with-reference",
    ];
    let o = bin(&[&args[..], &["--json"]].concat(), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    assert!(v["device"].as_str().unwrap().starts_with("cpu ["), "{v:#}");
    // The default baseline is the kernel `select` picks, and it is the row marked so.
    assert_eq!(v["baseline"], "CpuFp8Gemm", "{v:#}");
    assert_eq!(v["skipped"], serde_json::Value::Null, "{v:#}");
    for m in [1, 20] {
        let rows = rows(&v, m);
        let kernels: Vec<&str> = rows.iter().map(|x| x["kernel"].as_str().unwrap()).collect();
        assert_eq!(kernels, ["CpuFp8Gemm", "CpuReference"], "{v:#}");
        let base = rows.iter().find(|x| x["is_baseline"] == true).unwrap();
        assert_eq!(base["kernel"], "CpuFp8Gemm", "{v:#}");
        let base_s = base["seconds"].as_f64().unwrap();
        for x in &rows {
            // Every ratio is a positive finite number: the baseline's time over this one's.
            let ratio = x["ratio_to_baseline"].as_f64().unwrap();
            let secs = x["seconds"].as_f64().unwrap();
            assert!(ratio.is_finite() && ratio > 0.0, "{x}");
            assert!(secs.is_finite() && secs > 0.0, "{x}");
            assert!((ratio - base_s / secs).abs() <= 1e-9 * ratio, "{x}");
            assert!(x["gflops"].as_f64().unwrap() > 0.0, "{x}");
            // Every timed kernel was checked, against the reference of its own numerics,
            // and wrote every output element.
            assert_eq!(x["reference"], "w8a8", "{x}");
            assert_eq!(x["ok"], true, "{x}");
            assert_eq!(x["nan_outputs"], 0, "{x}");
        }
        assert_eq!(
            rows.iter().filter(|x| x["is_baseline"] == true).count(),
            1,
            "{v:#}"
        );
    }

    // Another baseline: its rows are the ones at 1.00x, the others relative to it.
    let o = bin(
        &[&args[..], &["--json", "--baseline", "cpureference"]].concat(),
        &[],
    );
    let v = json(&o);
    assert_eq!(v["baseline"], "CpuReference", "{v:#}");
    for x in v["measurements"].as_array().unwrap() {
        assert_eq!(x["is_baseline"], x["kernel"] == "CpuReference", "{x}");
    }

    // The text table names the baseline, and every row has a positive finite ratio.
    let o = bin(&args, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = text(&o);
    assert!(t.contains("vs CpuFp8Gemm"), "{t}");
    let table: Vec<&str> = t.lines().filter(|l| l.contains(" reference: ")).collect();
    assert_eq!(table.len(), 4, "{t}");
    for line in table {
        let ratio = line
            .split_whitespace()
            .find_map(|w| w.strip_suffix('x').and_then(|r| r.parse::<f64>().ok()))
            .unwrap_or_else(|| panic!("no ratio in `{line}`"));
        assert!(ratio.is_finite() && ratio > 0.0, "{line}");
        assert!(
            line.contains("checked against the w8a8 reference: ok"),
            "{line}"
        );
    }
}

#[test]
fn bench_prints_the_summary_columns_and_the_floor_up_to_m_64() {
    let args = [
        "bench", "--cpu", "--ms", "1,128", "-n", "64", "-k", "128", "--iters", "1",
    ];
    // With a weight-read rate: floor% at M <= 64 only, TFLOP/s everywhere.
    let v = json(&bin(
        &[&args[..], &["--read-tbs", "0.5", "--json"]].concat(),
        &[],
    ));
    assert_eq!(v["read_tbs"], 0.5, "{v:#}");
    let at = |m: u64| rows(&v, m)[0].clone();
    let want = 100.0 * (64.0 * 128.0 / 0.5e12) / at(1)["seconds"].as_f64().unwrap();
    let got = at(1)["floor_percent"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-9 * want, "{v:#}");
    assert_eq!(at(128)["floor_percent"], serde_json::Value::Null, "{v:#}");
    assert!(at(128)["tflops"].as_f64().unwrap() > 0.0, "{v:#}");
    // Without one, on the CPU: no floor, and the text says how to get it.
    let v = json(&bin(&[&args[..], &["--json"]].concat(), &[]));
    assert_eq!(v["read_tbs"], serde_json::Value::Null, "{v:#}");
    assert_eq!(
        rows(&v, 1)[0]["floor_percent"],
        serde_json::Value::Null,
        "{v:#}"
    );
    let t = text(&bin(&args, &[]));
    assert!(t.contains("TFLOP/s") && t.contains("floor%"), "{t}");
    assert!(t.contains("--read-tbs TB/s sets it"), "{t}");
}

#[test]
fn bench_defaults_on_the_cpu_skip_the_reference_kernel() {
    // The default Ms and calls on the CPU, on a small layer (the default layer is timed in
    // BENCHMARKS.md and docs/perf-log.md, in release).
    let o = bin(&["bench", "--cpu", "-n", "64", "-k", "128", "--json"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    assert_eq!(v["skipped"], "CpuReference", "{v:#}");
    assert_eq!(v["iters"], 3, "{v:#}");
    let ms: Vec<u64> = v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["m"].as_u64().unwrap())
        .collect();
    assert_eq!(ms, [1, 16, 128], "{v:#}");
    assert!(v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["kernel"] == "CpuFp8Gemm"));
    let t = text(&bin(&["bench", "--cpu", "-n", "64", "-k", "128"], &[]));
    assert!(
        t.contains(
            "CpuReference (the f64 reference kernel, slow) not timed; --with-reference times it"
        ),
        "{t}"
    );
    // Forcing it, or naming it the baseline, times it.
    let v = json(&bin(
        &[
            "bench",
            "--cpu",
            "--ms",
            "1",
            "-n",
            "64",
            "-k",
            "128",
            "--iters",
            "1",
            "--force",
            "CpuReference",
            "--json",
        ],
        &[],
    ));
    assert_eq!(v["skipped"], serde_json::Value::Null, "{v:#}");
    assert!(v["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["kernel"] == "CpuReference"));
}

#[test]
fn every_output_dtype_is_fully_written() {
    // Outputs are poisoned with NaN (0xffff for 16-bit) before every call: a kernel that
    // left an element unwritten would fail with nan_outputs > 0.
    for out in ["f32", "bf16", "f16"] {
        let v = json(&bin(
            &[
                "run", "--cpu", "-m", "33", "-n", "130", "-k", "260", "--output", out, "--iters",
                "2", "--json",
            ],
            &[],
        ));
        assert_eq!(v["nan_outputs"], 0, "{out}: {v:#}");
        assert_eq!(v["ok"], true, "{out}: {v:#}");
    }
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
