//! Size arguments end to end through the binary: sizes whose products overflow, or whose
//! buffers exceed the machine's memory, are errors that name the sizes and the bytes
//! (exit 2), never a `capacity overflow` panic (exit 101) or an aborted allocation
//! (a signal); and a property test drawing many size arguments (0, 1, small, huge, near
//! and past usize::MAX, negative) for M, N, K, the Ms of a sweep, iterations, the layers
//! to check, decoder layers and shard counts, asserting the binary always answers with one
//! of the documented exit codes.

mod common;

use std::process::Output;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX: &str = "18446744073709551615";

#[track_caller]
fn assert_refused(o: &Output, needles: &[&str]) {
    let both = assert_code(o, 2, &needles.join(" "));
    for n in needles {
        assert!(stderr(o).contains(n), "`{n}` missing: {both}");
    }
}

#[test]
fn huge_sizes_are_errors_naming_the_sizes_and_bytes() {
    // Products that overflow: the sizes are named.
    let o = bin(&["run", "--cpu", "-m", MAX, "-n", "4", "-k", "4"]);
    assert_refused(&o, &["M=18446744073709551615", "overflows 64 bits"]);
    let o = bin(&["run", "--cpu", "-m", "4", "-n", MAX, "-k", "4"]);
    assert_refused(&o, &["N=18446744073709551615", "overflows 64 bits"]);
    let o = bin(&[
        "run",
        "--cpu",
        "-m",
        "4",
        "-n",
        "4294967296",
        "-k",
        "4294967296",
    ]);
    assert_refused(&o, &["N=4294967296 K=4294967296", "overflows 64 bits"]);
    for cmd in ["bench", "autotune"] {
        let o = bin(&[
            cmd,
            "--cpu",
            "--ms",
            &format!("1,{MAX}"),
            "-n",
            "8",
            "-k",
            "8",
        ]);
        assert_refused(&o, &[&format!("{cmd}: layer N=8 K=8 at M={MAX}")]);
    }
    // Products that fit in 64 bits but not in memory: the bytes are named.
    let o = bin(&["run", "--cpu", "-m", "1000000000"]);
    assert_refused(
        &o,
        &[
            "run: layer N=4096 K=7168 at M=1000000000 needs about",
            "bytes) of host memory",
            "available (MemAvailable in /proc/meminfo",
        ],
    );
    let o = bin(&["bench", "--cpu", "--ms", "1,1000000000"]);
    assert_refused(
        &o,
        &["bench: layer N=4096 K=7168 at M=1000000000 needs about"],
    );
    let o = bin(&[
        "--json",
        "autotune",
        "--cpu",
        "-n",
        "1000000000",
        "-k",
        "1000000",
    ]);
    assert_json_error(&o, 2, "bad_input", "bytes) of host memory");
    // A checkpoint run at a huge M: checked before any layer runs.
    let dir = tiny_checkpoint("sizes-dir");
    let o = bin(&["run", dir.s(), "--cpu", "-m", MAX]);
    assert_refused(&o, &["run: layer model.layers.0.", "overflows 64 bits"]);
    let o = bin(&["--json", "run", dir.s(), "--cpu", "-m", "100000000000"]);
    assert_json_error(&o, 2, "bad_input", "of host memory");
    // Counts past their caps.
    let o = bin(&["run", "--cpu", "--iters", MAX]);
    assert_refused(&o, &["--iters must be at most 100000"]);
    let o = bin(&["gen-checkpoint", dir.s(), "--layers", MAX]);
    assert_refused(&o, &["at most 1024 decoder layers"]);
    let o = bin(&["run", "--cpu", "-m", "18446744073709551616"]);
    assert_refused(&o, &["M must be an integer"]);
}

/// A size argument: mostly what breaks size arithmetic, sometimes something small that
/// runs in milliseconds.
fn draw(rng: &mut StdRng) -> String {
    match rng.random_range(0..12) {
        0 => "0".into(),
        1 => "1".into(),
        2 | 3 => rng.random_range(2..16u32).to_string(),
        4 => (1u64 << rng.random_range(40..64)).to_string(),
        5 => rng.random_range(1u64 << 40..u64::MAX).to_string(),
        6 => (u64::MAX - rng.random_range(0..1000)).to_string(),
        7 => MAX.into(),
        8 => "18446744073709551616".into(),
        9 => "-1".into(),
        10 => (usize::MAX / 2 + 1).to_string(),
        // Huge enough that no machine holds its buffers (a terabyte and more).
        _ => rng.random_range(1u64 << 40..1u64 << 50).to_string(),
    }
}

/// Whether a drawn size is small enough to run (so at least one other is huge when a run
/// goes ahead only because of it: the binary must refuse that).
fn small(s: &str) -> bool {
    s.parse::<u64>().is_ok_and(|v| v < 16)
}

#[test]
fn any_size_arguments_get_a_documented_exit_code_never_a_panic_or_abort() {
    let seed: u64 = std::env::var("FP8_CLI_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("seed {seed} (rerun with FP8_CLI_PROPTEST_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tiny_checkpoint("sizes-prop");
    let gen = Dir::new("sizes-prop-gen");
    let cases = std::env::var("FP8_CLI_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let mut ran = 0;
    for case in 0..cases {
        let (m, n, k, iters) = (
            draw(&mut rng),
            draw(&mut rng),
            draw(&mut rng),
            draw(&mut rng),
        );
        let ms = format!("{},{}", draw(&mut rng), draw(&mut rng));
        let json = rng.random_bool(0.5);
        let args: Vec<String> = match case % 6 {
            0 => vec![
                "run", "--cpu", "-m", &m, "-n", &n, "-k", &k, "--iters", &iters,
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            1 => [
                "bench", "--cpu", "--ms", &ms, "-n", &n, "-k", &k, "--iters", &iters,
            ]
            .map(String::from)
            .to_vec(),
            2 => {
                let file = gen.0.with_extension("tsv");
                [
                    "autotune",
                    "--cpu",
                    "--ms",
                    &ms,
                    "-n",
                    &n,
                    "-k",
                    &k,
                    "--iters",
                    &iters,
                    "--file",
                    file.to_str().unwrap(),
                ]
                .map(String::from)
                .to_vec()
            }
            3 => {
                let check = draw(&mut rng);
                [
                    "run",
                    dir.s(),
                    "--cpu",
                    "-m",
                    &m,
                    "--iters",
                    &iters,
                    "--check",
                    &check,
                ]
                .map(String::from)
                .to_vec()
            }
            4 => {
                let devices = ["cpu", "h200", "a100", "sm90a", "v100", "sm120"];
                let device = devices[rng.random_range(0..devices.len())];
                ["explain", "--device", device, "-n", &n, "-k", &k]
                    .map(String::from)
                    .to_vec()
            }
            _ => {
                let (layers, shards) = (draw(&mut rng), draw(&mut rng));
                [
                    "gen-checkpoint",
                    gen.s(),
                    "--layers",
                    &layers,
                    "--shards",
                    &shards,
                ]
                .map(String::from)
                .to_vec()
            }
        };
        let mut args = args;
        if json {
            args.insert(0, "--json".into());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = std::time::Instant::now();
        let o = bin(&argv);
        if t.elapsed().as_secs_f64() > 2.0 {
            println!("{:.2} s: {}", t.elapsed().as_secs_f64(), argv.join(" "));
        }
        let both = format!(
            "seed {seed}, case {case}: fp8-linear {}\nstdout:\n{}\nstderr:\n{}",
            argv.join(" "),
            stdout(&o),
            stderr(&o)
        );
        // Exited by itself (no abort signal), with a documented code (not 101, a panic).
        let code = o
            .status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {both}"));
        assert!((0..=4).contains(&code), "exit code {code}: {both}");
        assert!(!stderr(&o).contains("panicked"), "{both}");
        if json {
            // JSON on stdout whatever the outcome.
            let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {both}"));
            if code == 2 {
                assert_eq!(v["error"]["kind"], "bad_input", "{both}");
            }
        }
        // A size product that cannot fit is refused, never run.
        let sizes_small = match case % 6 {
            0 => [&m, &n, &k].iter().all(|s| small(s)),
            1 | 2 => [&n, &k].iter().all(|s| small(s)) && ms.split(',').all(small),
            3 => small(&m),
            _ => true,
        };
        let counts_ok = matches!(case % 6, 4 | 5)
            || iters
                .parse::<u64>()
                .is_ok_and(|v| (1..=100_000).contains(&v));
        if code == 0 && case % 6 != 4 && case % 6 != 5 {
            assert!(
                sizes_small && counts_ok,
                "ran with sizes it should refuse: {both}"
            );
            ran += 1;
        }
        let _ = std::fs::remove_dir_all(&gen.0);
    }
    println!("{cases} cases, {ran} ran a layer");
}
