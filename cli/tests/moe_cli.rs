//! Mixture-of-experts checkpoints end to end through the binary: `gen-checkpoint --preset
//! tiny-moe`, `plan` (the expert groups planned from the grouped tables) and `run` (every
//! expert group checked against the grouped f64 reference in each call form).

mod common;

use common::{bin, json, Dir};

#[test]
fn gen_plan_run_on_a_tiny_moe_checkpoint() {
    let dir = Dir::new("moe");
    let g = bin(&["--json", "gen-checkpoint", dir.s(), "--preset", "tiny-moe"]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));

    let p = bin(&["--json", "plan", dir.s(), "--device", "cpu,h200"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let v = json(&p);
    let moe = v["moe_groups"].as_array().unwrap();
    assert_eq!(moe.len(), 2, "gate/up and down have distinct shapes");
    for g in moe {
        assert_eq!(g["experts"], 4);
        assert_eq!(g["kernels"]["cpu"]["kernel"], "CpuGroupedFp8Gemm");
        // On the H200 the Hopper grouped kernel, which stacks experts of whole weight
        // blocks: down (N = 256) is served, gate/up (N = 320) is an error saying why.
        let h200 = &g["kernels"]["h200"];
        if g["n"] == 256 {
            assert_eq!(h200["kernel"], "HopperGroupedFp8", "{h200}");
        } else {
            let err = h200["error"].as_str().unwrap();
            assert!(err.contains("multiple of the weight block's rows"), "{err}");
        }
    }
    let text =
        String::from_utf8_lossy(&bin(&["plan", dir.s(), "--device", "cpu"]).stdout).to_string();
    assert!(text.contains("4 experts of N=320 K=256"), "{text}");

    let r = bin(&["--json", "run", dir.s(), "--cpu", "-m", "5", "--iters", "1"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stdout));
    let v = json(&r);
    assert_eq!(v["ok"], true);
    let moe = v["moe_layers"].as_array().unwrap();
    assert_eq!(moe.len(), 6);
    for l in moe {
        let rows: u64 = l["rows_per_expert"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(rows, 10, "5 tokens, 2 experts each");
        let forms: Vec<&str> = l["forms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["form"].as_str().unwrap())
            .collect();
        assert_eq!(forms, ["offsets", "expert ids", "masked"]);
        assert!(l["forms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["rel_error"].as_f64().unwrap() < 1e-2));
    }
    let only = bin(&[
        "--json",
        "run",
        dir.s(),
        "--cpu",
        "-m",
        "2",
        "--iters",
        "1",
        "--only",
        "experts.down_proj",
    ]);
    assert!(
        only.status.success(),
        "{}",
        String::from_utf8_lossy(&only.stdout)
    );
    let v = json(&only);
    assert_eq!(v["layers"].as_array().unwrap().len(), 0);
    assert_eq!(v["moe_layers"].as_array().unwrap().len(), 2);
}
