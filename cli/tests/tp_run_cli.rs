//! `run DIR --devices LIST`: every layer split into one shard per listed device (here the
//! host CPU twice, so it runs anywhere; a GPU host runs the same with `0,1`), the shards'
//! outputs put together and checked against the gathered f64 references of the shards, the
//! time per rank; layers that do not divide, and bad lists, named.

mod common;

use common::{assert_code, assert_json_error, bin, json, stdout, Dir};

fn gen(dir: &Dir) {
    let g = bin(&["gen-checkpoint", dir.s(), "--preset", "tiny"]);
    assert_code(&g, 0, "gen-checkpoint");
}

/// The tiny preset (hidden 256, intermediate 688, k/v N = 64) over 2 ranks: shards padded
/// along N (688 / 2 = 344 starts inside a 128-row block) and along K (344 inside a 128-wide
/// group), every layer checked, both ranks holding one shard of each of the 14 layers.
#[test]
fn two_ranks_run_every_layer_and_agree_with_the_references() {
    let dir = Dir::new("tp-run");
    gen(&dir);
    let args = [
        "--json",
        "run",
        dir.s(),
        "--devices",
        "cpu,cpu",
        "-m",
        "3",
        "--iters",
        "1",
        "--check",
        "14",
    ];
    let o = bin(&args);
    assert_code(&o, 0, "run --devices cpu,cpu");
    let v = json(&o);
    assert_eq!(v["tp"], 2);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 14);
    let mut padded = (false, false);
    for l in layers {
        let name = l["name"].as_str().unwrap();
        assert_eq!(l["ok"], true, "{l}");
        let err = l["rel_error"]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} unchecked"));
        assert!(err < l["tolerance"].as_f64().unwrap(), "{l}");
        let want = if name.ends_with("down_proj") || name.ends_with("o_proj") {
            "row"
        } else {
            "column"
        };
        assert_eq!(l["split"], want, "{name}");
        let shards = l["shards"].as_array().unwrap();
        assert_eq!(shards.len(), 2, "{name}");
        for s in shards {
            assert_eq!(s["kernel"], "CpuFp8Gemm", "{s}");
            for n in s["notes"].as_array().unwrap() {
                let n = n.as_str().unwrap();
                padded.0 |= n.contains("zero rows in front");
                padded.1 |= n.contains("zero columns in front");
            }
        }
    }
    assert!(padded.0 && padded.1, "padded shards along N and K");
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for r in ranks {
        assert_eq!(r["shards"], 14, "{r}");
        assert!(r["seconds_per_forward"].as_f64().unwrap() > 0.0, "{r}");
    }
    // The text form says the same.
    let o = bin(&[
        "run",
        dir.s(),
        "--devices",
        "cpu,cpu",
        "-m",
        "2",
        "--iters",
        "1",
        "--check",
        "2",
    ]);
    let t = assert_code(&o, 0, "run --devices text");
    assert!(t.contains("rank 1 (cpu"), "{t}");
    assert!(
        t.contains("row-parallel") && t.contains("column-parallel"),
        "{t}"
    );
    assert!(stdout(&o).contains("result: ok"), "{t}");
}

#[test]
fn layers_that_do_not_divide_and_bad_lists_are_named() {
    let dir = Dir::new("tp-run-bad");
    gen(&dir);
    // 688 and 64 do not divide by 3: those layers are named, the run exits 3.
    let o = bin(&[
        "--json",
        "run",
        dir.s(),
        "--devices",
        "cpu,cpu,cpu",
        "-m",
        "2",
        "--iters",
        "1",
    ]);
    assert_code(&o, 3, "run --devices x3");
    let v = json(&o);
    let k = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            l["name"]
                .as_str()
                .unwrap()
                .ends_with("layers.0.self_attn.k_proj")
        })
        .unwrap();
    assert!(
        k["error"]
            .as_str()
            .unwrap()
            .contains("does not divide into 3 equal shards"),
        "{k}"
    );
    // Bad lists are argument errors (exit 2), a GPU that cannot be opened a device error.
    for bad in ["0", "0,x", "cpu"] {
        let o = bin(&["run", dir.s(), "--devices", bad]);
        assert_code(&o, 2, bad);
    }
    let o = bin(&["run", dir.s(), "--devices", "0,1", "--gpu", "0"]);
    assert_code(&o, 2, "--devices with --gpu");
    let o = bin(&["--json", "run", dir.s(), "--devices", "cpu,4096", "-m", "1"]);
    assert_json_error(&o, 4, "runtime", "GPU 4096");
}
