//! `plan DIR --tp N`: every layer sharded as engines shard it, per-shard configs and kernels,
//! per-GPU totals; ragged shards and shards that cut a scale block named with what happens.

mod common;

use common::{assert_code, bin, json, stdout, Dir};
use serde_json::Value;
fn gen(dir: &Dir, preset: &str) {
    let g = bin(&["gen-checkpoint", dir.s(), "--preset", preset]);
    assert_code(&g, 0, "gen-checkpoint");
}

fn layer<'a>(v: &'a Value, suffix: &str) -> &'a Value {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no layer {suffix}"))
}

/// The tiny preset (hidden 256, intermediate 688, k/v N = 64) shards raggedly: 688 / 2 = 344
/// cuts a 128-row block (column split) and a 128-wide scale group (row split); both are
/// served padded back to the block boundary.
#[test]
fn ragged_shards_are_named_with_what_happens() {
    let dir = Dir::new("tiny");
    gen(&dir, "tiny");
    for tp in [2usize, 4, 8] {
        let tps = tp.to_string();
        let o = bin(&[
            "--json",
            "plan",
            dir.s(),
            "--tp",
            &tps,
            "--device",
            "cpu,h200,a100",
        ]);
        assert_code(&o, 0, "plan --tp");
        let v = json(&o);
        assert_eq!(v["tp"], tp);
        let layers = v["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 14);
        for l in layers {
            let shards = l["shards"].as_array().unwrap();
            assert_eq!(shards.len(), tp, "{}", l["name"]);
            let split = l["split"].as_str().unwrap();
            let name = l["name"].as_str().unwrap();
            let want = if name.ends_with("o_proj") || name.ends_with("down_proj") {
                "row"
            } else {
                "column"
            };
            assert_eq!(split, want, "{name}");
            // Shards tile the unsharded layer exactly.
            let (n, k) = (l["n"].as_u64().unwrap(), l["k"].as_u64().unwrap());
            let covered: u64 = shards
                .iter()
                .map(|s| {
                    let r = s["rows"].as_array().unwrap();
                    let c = s["cols"].as_array().unwrap();
                    (r[1].as_u64().unwrap() - r[0].as_u64().unwrap())
                        * (c[1].as_u64().unwrap() - c[0].as_u64().unwrap())
                })
                .sum();
            assert_eq!(covered, n * k, "{name}");
            for s in shards {
                // The CPU serves every shard.
                assert_eq!(s["kernels"]["cpu"]["kernel"], "CpuFp8Gemm", "{name}");
            }
        }
        let down = layer(&v, "layers.0.mlp.down_proj");
        let gate = layer(&v, "layers.0.mlp.gate_proj");
        // K = 688 over tp: rank 1 starts at 688/tp, inside a 128-wide group (for tp 2, 4, 8).
        let r1 = &down["shards"][1];
        let pad = (688 / tp) % 128;
        assert_eq!(r1["lead_pad"], pad);
        assert_eq!(r1["k"], 688 / tp + pad);
        assert!(r1["notes"][1].as_str().unwrap().contains("padded"), "{r1}");
        // The padded shard keeps 128x128 blocks: the block kernels take it.
        if cfg!(feature = "cuda") {
            let h200 = &r1["kernels"]["h200"];
            assert_eq!(h200["kernel"], "CublasLtBlockFp8", "{r1}");
            assert_eq!(h200["plan"][0]["kernel"], "HopperBlockFp8", "{r1}");
        }
        // N = 688 over tp: rank 0 starts on a block (ragged only), rank 1 inside one.
        let g0 = &gate["shards"][0];
        let g1 = &gate["shards"][1];
        assert_eq!(g0["weight_group"], "128x128 blocks");
        assert!(g0["notes"][0].as_str().unwrap().contains("ragged"));
        // Rank 1 is padded back to its block boundary and keeps 128x128 blocks.
        let lead = (688 / tp) % 128;
        assert_eq!(g1["weight_group"], "128x128 blocks");
        assert_eq!(g1["lead_rows"], lead);
        assert_eq!(g1["n"], 688 / tp + lead);
        assert!(
            g1["notes"].as_array().unwrap().iter().any(|n| n
                .as_str()
                .unwrap()
                .contains("starts inside a 128-row scale block")),
            "{g1}"
        );
        if cfg!(feature = "cuda") {
            // The padded shard is a block layer: the block kernels take it, and Marlin on
            // an A100.
            let h200 = g1["kernels"]["h200"]["kernel"].as_str().unwrap_or("none");
            assert!(
                ["DecodeBlockFp8", "CublasLtBlockFp8", "HopperBlockFp8"].contains(&h200),
                "{g1}"
            );
            assert_eq!(g1["kernels"]["a100"]["kernel"], "MarlinFp8");
        }
        // Bias (none here) aside, every rank holds one shard of each of the 14 layers.
        let cpu = v["per_gpu"]["cpu"].as_array().unwrap();
        assert_eq!(cpu.len(), tp);
        for r in cpu {
            assert_eq!(r["kernels"]["CpuFp8Gemm"]["shards"], 14);
        }
    }
    // The text form says the same.
    let o = bin(&["plan", dir.s(), "--tp", "2", "--device", "cpu"]);
    assert_code(&o, 0, "plan --tp text");
    let t = stdout(&o);
    assert!(
        t.contains("row-parallel") && t.contains("column-parallel"),
        "{t}"
    );
    assert!(t.contains("zero columns in front"), "{t}");
    assert!(t.contains("zero rows in front"), "{t}");
    assert!(t.contains("GPU 1:"), "{t}");
}

/// Sizes that do not divide: named per layer, `--strict` fails with the no-kernel status;
/// `--tp 0` is refused as an argument.
#[test]
fn undividable_layers_and_bad_tp() {
    let dir = Dir::new("tiny3");
    gen(&dir, "tiny");
    let o = bin(&["--json", "plan", dir.s(), "--tp", "3", "--device", "cpu"]);
    assert_code(&o, 0, "plan --tp 3");
    let v = json(&o);
    let k = layer(&v, "layers.0.self_attn.k_proj");
    assert!(k["error"]
        .as_str()
        .unwrap()
        .contains("does not divide into 3 equal shards"));
    assert_eq!(v["all_served"], false);
    let strict = bin(&["plan", dir.s(), "--tp", "3", "--device", "cpu", "--strict"]);
    assert_code(&strict, 3, "plan --tp 3 --strict");
    let zero = bin(&["plan", dir.s(), "--tp", "0"]);
    assert_code(&zero, 2, "plan --tp 0");
}
