//! Every checkpoint layout end to end through the binary, on the tiny preset (N and K
//! ragged against every block: intermediate 688, k/v N = 64): `gen-checkpoint --block RxC
//! [--ue8m0]` -> `plan --device cpu --strict` (the CPU kernel named for every layer, the
//! layout and scale format in the config) -> `run DIR --cpu` (every layer run and checked
//! against the f64 reference, exit 0). Plus the `--block` values that are refused, with the
//! problem named.

mod common;

use common::{assert_code, assert_json_error, bin, json, stderr, Dir};

/// The layouts: `[rows, cols]`, with and without ue8m0 scales.
const LAYOUTS: [(u32, u32); 3] = [(32, 32), (64, 64), (128, 64)];

#[test]
fn gen_plan_run_every_layout_on_the_cpu() {
    for (r, c) in LAYOUTS {
        for ue8m0 in [false, true] {
            let tag = format!("layout-{r}x{c}-{}", if ue8m0 { "ue8m0" } else { "f32" });
            let what = tag.as_str();
            let dir = Dir::new(what);
            let block = format!("{r}x{c}");
            let mut args = vec!["--json", "gen-checkpoint", dir.s(), "--block", &block];
            args.extend(["--layers", "1"]);
            if ue8m0 {
                args.push("--ue8m0");
            }
            let g = bin(&args);
            assert_code(&g, 0, what);
            let v = json(&g);
            assert_eq!(v["block"], serde_json::json!([r, c]), "{what}: {v:#}");
            assert_eq!(v["ue8m0"], ue8m0, "{what}");
            assert_eq!(v["quantized_layers"], 7, "{what}");

            // config.json says the layout.
            let cfg: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.0.join("config.json")).unwrap()).unwrap();
            let q = &cfg["quantization_config"];
            assert_eq!(q["weight_block_size"], serde_json::json!([r, c]), "{what}");
            assert_eq!(q["scale_fmt"].as_str() == Some("ue8m0"), ue8m0, "{what}");

            // plan: every layer served by the CPU kernel, the layout in its config.
            let p = bin(&["--json", "plan", dir.s(), "--device", "cpu", "--strict"]);
            assert_code(&p, 0, what);
            let v = json(&p);
            assert_eq!(
                v["checkpoint"]["block"],
                serde_json::json!([r, c]),
                "{what}"
            );
            assert_eq!(
                v["totals"]["cpu"]["kernels"]["CpuFp8Gemm"]["layers"], 7,
                "{what}"
            );
            for grp in v["groups"].as_array().unwrap() {
                assert_eq!(
                    grp["kernels"]["cpu"]["kernel"], "CpuFp8Gemm",
                    "{what}: {grp}"
                );
                let config = grp["config"].as_str().unwrap();
                assert!(
                    config.contains(&format!("{r}x{c} blocks")),
                    "{what}: {config}"
                );
                assert!(
                    config.contains(&format!("1x{c} groups")),
                    "{what}: {config}"
                );
                assert_eq!(config.contains("ue8m0"), ue8m0, "{what}: {config}");
            }
            let text = String::from_utf8_lossy(&bin(&["plan", dir.s(), "--device", "cpu"]).stdout)
                .into_owned();
            assert!(text.contains("-> CpuFp8Gemm"), "{what}: {text}");

            // run on the CPU: M = 30 takes the SGEMM path, M = 3 the decode path; every
            // layer checked against the f64 reference.
            for m in ["3", "30"] {
                let o = bin(&[
                    "--json",
                    "run",
                    dir.s(),
                    "--cpu",
                    "-m",
                    m,
                    "--iters",
                    "1",
                    "--check",
                    "7",
                ]);
                assert_code(&o, 0, what);
                let v = json(&o);
                assert_eq!(v["ok"], true, "{what} M={m}: {v:#}");
                let layers = v["layers"].as_array().unwrap();
                assert_eq!(layers.len(), 7, "{what}");
                for l in layers {
                    assert_eq!(l["kernel"], "CpuFp8Gemm", "{what}: {l}");
                    let (e, tol) = (l["rel_error"].as_f64(), l["tolerance"].as_f64());
                    let (e, tol) = (
                        e.unwrap_or_else(|| panic!("{what}: unchecked {l}")),
                        tol.unwrap(),
                    );
                    assert!(e < tol, "{what} M={m}: {l}");
                    assert_eq!(l["nan_outputs"], 0, "{what}: {l}");
                }
            }
            // The text report too.
            let o = bin(&["run", dir.s(), "--cpu", "-m", "2", "--iters", "1"]);
            let both = assert_code(&o, 0, what);
            assert!(both.contains("result: ok"), "{what}: {both}");
        }
    }
}

#[test]
fn bad_block_values_are_refused_with_the_problem_named() {
    let dir = Dir::new("layout-bad");
    let cases: [(&[&str], &str); 6] = [
        (&["--block", "128"], "--block must be ROWSxCOLS"),
        (&["--block", "0x32"], "rows must be at least 1"),
        (&["--block", "32x0"], "cols must be at least 1"),
        (&["--block", "70000x64"], "rows must be at most 65536"),
        (&["--block", "32xq"], "cols `q` is not a positive integer"),
        (&["--block", "64x64", "--per-tensor"], "--per-tensor"),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["gen-checkpoint", dir.s()];
        args.extend_from_slice(flags);
        let o = bin(&args);
        let both = assert_code(&o, 2, needle);
        assert!(stderr(&o).contains(needle), "{needle}: {both}");
        let mut args = vec!["--json", "gen-checkpoint", dir.s()];
        args.extend_from_slice(flags);
        assert_json_error(&bin(&args), 2, "bad_input", needle);
    }
    let written = std::fs::read_dir(&dir.0).map(|d| d.count()).unwrap_or(0);
    assert_eq!(written, 0, "a refused checkpoint must not be written");
}
