//! Errors end to end through the binary: the exit code of each outcome is the same in every
//! subcommand (documented in `--help`); under `--json` every error is a JSON object on
//! stdout; unknown kernel and backend names (flags and environment) are errors naming the
//! closest names; out-of-range counts, `run DIR` with layer-shape flags, bad device
//! profiles, and checkpoints `plan` / `run` would refuse are rejected up front.

mod common;

use common::*;

/// Both CPU kernels: disabling them leaves no kernel for any layer on the CPU.
const ALL_CPU: &str = "CpuFp8Gemm,CpuReference";
/// A small random layer, one timed call.
const SMALL: [&str; 6] = ["-n", "64", "-k", "128", "--iters", "1"];

fn with<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    [a, b].concat()
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["bench", "--help"],
        &["explain", "--help"],
        &["gen-checkpoint", "--help"],
    ] {
        let o = bin(args);
        assert_code(&o, 0, &args.join(" "));
        let t = stdout(&o);
        for line in [
            "Exit codes (the same in every subcommand):",
            "0  success",
            "1  a check failed",
            "2  bad arguments or input",
            "3  no kernel can run a layer on the device",
            "4  device or runtime error",
            "{\"error\": {\"kind\": \"bad_input\", \"code\": 2, \"message\": \"...\"}}",
        ] {
            assert!(t.contains(line), "{args:?}: `{line}` missing:\n{t}");
        }
    }
}

#[test]
fn no_kernel_is_exit_3_in_every_subcommand() {
    let dir = tiny_checkpoint("err-nokernel");
    // explain prints the decision table (text or JSON) and exits 3.
    let o = bin(&["explain", "--device", "cpu", "--disable", ALL_CPU]);
    assert_code(&o, 3, "explain");
    assert!(stdout(&o).contains("no kernel"), "{}", stdout(&o));
    let o = bin(&["--json", "explain", "--device", "cpu", "--disable", ALL_CPU]);
    assert_code(&o, 3, "explain --json");
    assert_eq!(json(&o)["chosen"], serde_json::Value::Null);
    // A GPU older than every CUDA kernel (a T4): the note says what it would need.
    let o = bin(&["explain", "--device", "t4"]);
    assert_code(&o, 3, "explain t4");
    assert!(
        stdout(&o).contains("note: no built-in kernel runs below sm_80"),
        "{}",
        stdout(&o)
    );
    let o = bin(&[
        "--json",
        "explain",
        "--device",
        "t4",
        "--layer",
        "weight-only",
    ]);
    assert_code(&o, 3, "explain t4 --json");
    assert!(
        json(&o)["note"].as_str().unwrap().contains("Turing"),
        "{}",
        stdout(&o)
    );

    // A random layer: the selection error as a JSON error object.
    let o = bin(&with(
        &["--json", "run", "--cpu", "-m", "2", "--disable", ALL_CPU],
        &SMALL,
    ));
    assert_json_error(&o, 3, "no_kernel", "Failed to find a kernel");
    let file = dir.0.join("tune.tsv");
    for cmd in [
        vec!["bench"],
        vec!["autotune", "--file", file.to_str().unwrap()],
    ] {
        let args = with(
            &with(&cmd, &["--cpu", "--ms", "1", "--disable", ALL_CPU]),
            &SMALL,
        );
        let o = bin(&with(&["--json"], &args));
        assert_json_error(&o, 3, "no_kernel", "is disabled by override");
        // And in text: the message on stderr, nothing on stdout.
        let o = bin(&args);
        assert_code(&o, 3, cmd[0]);
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        assert!(
            stderr(&o).contains("Failed to find a kernel"),
            "{}",
            stderr(&o)
        );
    }

    // plan --strict: the plan (JSON), exit 3.
    let o = bin(&[
        "--json",
        "plan",
        dir.s(),
        "--device",
        "cpu",
        "--strict",
        "--disable",
        ALL_CPU,
    ]);
    assert_code(&o, 3, "plan --strict");
    assert_eq!(json(&o)["all_served"], false);
    // Without --strict the plan is a success that lists the unserved layers.
    let o = bin(&["plan", dir.s(), "--device", "cpu", "--disable", ALL_CPU]);
    assert_code(&o, 0, "plan");
    assert!(
        stdout(&o).contains("CANNOT SERVE 7 layers"),
        "{}",
        stdout(&o)
    );

    // run DIR: the report, every layer without a kernel, exit 3.
    let o = bin(&[
        "--json",
        "run",
        dir.s(),
        "--cpu",
        "-m",
        "2",
        "--iters",
        "1",
        "--disable",
        ALL_CPU,
    ]);
    assert_code(&o, 3, "run DIR");
    let v = json(&o);
    assert_eq!(v["ok"], false);
    for l in v["layers"].as_array().unwrap() {
        assert_eq!(l["kernel"], serde_json::Value::Null, "{l}");
    }
}

#[test]
fn bad_input_is_exit_2_with_a_json_error_in_every_subcommand() {
    let dir = tiny_checkpoint("err-bad");
    let absent = Dir::new("err-bad-absent");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["explain", "--device", "a200"],
            "unknown device profile `a200`",
        ),
        (
            vec!["explain", "--device", "cpu", "--force", "CpuFp8Gem"],
            "unknown kernel `CpuFp8Gem` in --force",
        ),
        (
            vec!["run", "--cpu", "--iters", "0"],
            "--iters must be at least 1",
        ),
        (vec!["run", "-m", "0"], "M must be at least 1"),
        (vec!["run", dir.s(), "-n", "5"], "cannot be used with"),
        (
            vec!["run", "/nonexistent/ckpt"],
            "cannot read /nonexistent/ckpt/config.json",
        ),
        (
            vec!["plan", "/nonexistent/ckpt"],
            "cannot read /nonexistent/ckpt/config.json",
        ),
        (
            vec!["plan", dir.s(), "--device", "sm999"],
            "unknown device profile `sm999`",
        ),
        (
            vec!["gen-checkpoint", absent.s(), "--layers", "0"],
            "--layers 0 writes a checkpoint with no quantized linear layer",
        ),
        (
            vec!["bench", "--cpu", "--baseline", "MarlinFp9"],
            "unknown kernel `MarlinFp9` in --baseline",
        ),
        (
            vec!["autotune", "--cpu", "--iters", "0"],
            "--iters must be at least 1",
        ),
        (vec!["bench", "--ms", "1,0"], "M must be at least 1"),
        (vec!["list", "--bogus"], "--bogus"),
        (vec![], "Usage"),
    ];
    for (args, needle) in cases {
        let o = bin(&args);
        let both = assert_code(&o, 2, &args.join(" "));
        assert!(stderr(&o).contains(needle), "{args:?}: {both}");
        assert!(stdout(&o).is_empty(), "{args:?}: {both}");
        let o = bin(&with(&["--json"], &args));
        assert_json_error(&o, 2, "bad_input", needle);
    }
    assert!(
        !absent.0.exists(),
        "a refused checkpoint must not be written"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn runtime_errors_are_exit_4() {
    // No machine has GPU 4000000000 (and a CPU-only build has none at all).
    let o = bin(&with(
        &["--json", "run", "--gpu", "4000000000", "-m", "1"],
        &SMALL,
    ));
    assert_json_error(&o, 4, "runtime", "--gpu 4000000000");
    // An autotune file that cannot be written (its directory cannot be made in /proc):
    // measured, then the save fails.
    let file = format!("/proc/fp8-cli-no-such-dir-{}/tune.tsv", std::process::id());
    let o = bin(&with(
        &["--json", "autotune", "--cpu", "--ms", "1", "--file", &file],
        &SMALL,
    ));
    assert_json_error(&o, 4, "runtime", &file);
}

#[test]
fn unknown_kernel_and_backend_names_are_errors_naming_the_closest() {
    let dir = tiny_checkpoint("err-names");
    let run = with(&["run", "--cpu", "-m", "1"], &SMALL);
    /// Arguments, environment, the message expected.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            with(&run, &["--force", "CpuFp8Gem"]),
            vec![],
            "unknown kernel `CpuFp8Gem` in --force; did you mean CpuFp8Gemm?",
        ),
        (
            run.clone(),
            vec![("FP8_LINEAR_FORCE", "cpufp8gem")],
            "unknown kernel `cpufp8gem` in FP8_LINEAR_FORCE; did you mean CpuFp8Gemm?",
        ),
        (
            with(&run, &["--disable", "CpuFp8Gemm,CpuRefrence"]),
            vec![],
            "unknown kernel `CpuRefrence` in --disable; did you mean CpuReference?",
        ),
        (
            vec!["explain", "--device", "cpu"],
            vec![("FP8_LINEAR_DISABLE", "CpuRefernce")],
            "unknown kernel `CpuRefernce` in FP8_LINEAR_DISABLE; did you mean CpuReference?",
        ),
        (
            vec!["bench", "--cpu", "--ms", "1", "--baseline", "CpuFp8Gemmm"],
            vec![],
            "unknown kernel `CpuFp8Gemmm` in --baseline; did you mean CpuFp8Gemm?",
        ),
        (
            vec!["explain", "--device", "cpu", "--backend", "cpux"],
            vec![],
            "unknown backend `cpux` in --backend; did you mean cpu?",
        ),
        (
            vec!["plan", dir.s(), "--device", "cpu"],
            vec![("FP8_LINEAR_BACKEND", "cpux")],
            "unknown backend `cpux` in FP8_LINEAR_BACKEND; did you mean cpu?",
        ),
        (
            vec!["run", dir.s(), "--cpu", "--force", "CpuFp8Gem"],
            vec![],
            "unknown kernel `CpuFp8Gem` in --force; did you mean CpuFp8Gemm?",
        ),
    ];
    for (args, env, needle) in cases {
        let o = bin_env(&args, &env);
        let both = assert_code(&o, 2, needle);
        assert!(stderr(&o).contains(needle), "{both}");
        // The list of every kernel (or backend) of this build follows.
        assert!(stderr(&o).contains("of this build"), "{both}");
    }
    // A known name that cannot run here is no error: the forced kernel falls back, with a
    // note; a known baseline that is not measured here is one.
    let o = bin(&with(&run, &["--force", "CpuReference", "--json"]));
    assert_code(&o, 0, "force CpuReference");
    assert_eq!(json(&o)["kernel"], "CpuReference");
    if cfg!(feature = "cuda") {
        let o = bin(&["bench", "--cpu", "--ms", "1", "--baseline", "MarlinFp8"]);
        let both = assert_code(&o, 2, "baseline MarlinFp8");
        assert!(
            stderr(&o).contains("--baseline MarlinFp8: not among the kernels measured"),
            "{both}"
        );
    }
}

#[test]
fn run_dir_refuses_layer_shape_flags_and_filters_layers_with_only() {
    let dir = tiny_checkpoint("err-dir");
    for flag in [
        &["-n", "64"][..],
        &["-k", "64"],
        &["--layer", "per-tensor"],
        &["--input", "f32"],
        &["--output", "f16"],
    ] {
        let o = bin(&with(&["run", dir.s(), "--cpu"], flag));
        let both = assert_code(&o, 2, &flag.join(" "));
        assert!(
            stderr(&o).contains("the argument '[DIR]' cannot be used with"),
            "{both}"
        );
    }
    // --only picks the layers by name.
    let o = bin(&[
        "--json",
        "run",
        dir.s(),
        "--cpu",
        "-m",
        "2",
        "--iters",
        "1",
        "--only",
        "mlp.down_proj",
    ]);
    assert_code(&o, 0, "--only");
    let v = json(&o);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{v:#}");
    assert_eq!(layers[0]["name"], "model.layers.0.mlp.down_proj");
    assert_eq!(layers[0]["ok"], true);
    let o = bin(&["--json", "run", dir.s(), "--cpu", "--only", "no_such_layer"]);
    assert_json_error(&o, 2, "bad_input", "--only no_such_layer: no layer of");
    // --only needs DIR.
    let o = bin(&["run", "--cpu", "--only", "mlp"]);
    assert_code(&o, 2, "--only without DIR");
}

#[test]
fn device_profiles_sm999_and_sm00_are_rejected_and_sm90a_is_sm_90a() {
    for bad in ["sm999", "sm00"] {
        for args in [
            vec!["explain", "--device", bad],
            vec!["--json", "explain", "--device", bad],
        ] {
            let o = bin(&args);
            let want = format!("unknown device profile `{bad}`");
            if args[0] == "--json" {
                assert_json_error(&o, 2, "bad_input", &want);
            } else {
                let both = assert_code(&o, 2, bad);
                assert!(stderr(&o).contains(&want), "{both}");
            }
        }
    }
    let o = bin(&["--json", "explain", "--device", "sm90a"]);
    if cfg!(feature = "cuda") {
        assert_code(&o, 0, "sm90a");
        let v = json(&o);
        assert!(v["device"].as_str().unwrap().contains("sm_90a"), "{v:#}");
        let t = stdout(&bin(&["explain", "--device", "sm90a"]));
        assert!(t.starts_with("device: sm_90a"), "{t}");
    } else {
        // No CUDA tables in this build: no kernel, and the error names the device.
        assert_json_error(&o, 3, "no_kernel", "sm_90a");
    }
}

#[test]
fn gen_checkpoint_refuses_what_plan_and_run_would_refuse() {
    let dir = Dir::new("err-gen");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--layers", "0"],
            "--layers 0 writes a checkpoint with no quantized linear layer, which `plan` and `run` refuse",
        ),
        (&["--layers", "1025"], "at most 1024 decoder layers"),
        (&["--block", "0x32"], "--block 0x32: rows must be at least 1"),
        (&["--shards", "0"], "--shards must be at least 1"),
        (&["--shards", "1000"], "1000 shards requested"),
    ];
    for (flags, needle) in cases {
        let o = bin(&with(&["gen-checkpoint", dir.s()], flags));
        let both = assert_code(&o, 2, needle);
        assert!(stderr(&o).contains(needle), "{both}");
        let o = bin(&with(&["--json", "gen-checkpoint", dir.s()], flags));
        assert_json_error(&o, 2, "bad_input", needle);
    }
    // Nothing was written for any of them.
    let written = std::fs::read_dir(&dir.0).map(|d| d.count()).unwrap_or(0);
    assert_eq!(written, 0, "a refused checkpoint must not be written");

    // What gen-checkpoint accepts, plan and run serve.
    let o = bin(&["gen-checkpoint", dir.s(), "--layers", "1"]);
    assert_code(&o, 0, "gen");
    assert_code(
        &bin(&["plan", dir.s(), "--device", "cpu", "--strict"]),
        0,
        "plan",
    );
    let o = bin(&["run", dir.s(), "--cpu", "-m", "1", "--iters", "1"]);
    assert_code(&o, 0, "run");
}
