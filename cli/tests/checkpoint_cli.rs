//! The checkpoint commands end to end through the binary: gen-checkpoint, plan and run on a
//! tiny synthetic checkpoint, and a broken checkpoint's error.

mod common;

use common::{bin, json, Dir};

use std::path::Path;
#[test]
fn gen_plan_run_on_a_tiny_sharded_checkpoint() {
    let dir = Dir::new("tiny");
    let g = bin(&[
        "--json",
        "gen-checkpoint",
        dir.s(),
        "--preset",
        "tiny",
        "--shards",
        "2",
    ]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    assert_eq!(json(&g)["quantized_layers"], 14);
    assert!(Path::new(dir.s())
        .join("model.safetensors.index.json")
        .is_file());

    let p = bin(&["--json", "plan", dir.s(), "--device", "cpu,h200"]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let v = json(&p);
    assert_eq!(v["checkpoint"]["quantized_layers"], 14);
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(
        groups.len(),
        4,
        "q/o, k/v, gate/up and down have distinct shapes"
    );
    let layers: usize = groups
        .iter()
        .map(|g| g["layers"].as_array().unwrap().len())
        .sum();
    assert_eq!(layers, 14);
    assert_eq!(v["totals"]["cpu"]["kernels"]["CpuFp8Gemm"]["layers"], 14);
    for g in groups {
        assert_eq!(g["kernels"]["cpu"]["kernel"], "CpuFp8Gemm");
        let h200 = &g["kernels"]["h200"];
        if cfg!(feature = "cuda") {
            assert!(
                h200["kernel"].is_string() || h200["error"].as_str().unwrap().contains("Reasons")
            );
        } else {
            // A build without CUDA has no CUDA tables: the plan says so for the GPU.
            let err = h200["error"].as_str().unwrap();
            assert!(err.contains("no block-scaled kernel table"), "{err}");
        }
    }

    let r = bin(&[
        "--json",
        "run",
        dir.s(),
        "--cpu",
        "-m",
        "3",
        "--iters",
        "1",
        "--check",
        "3",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stdout));
    let v = json(&r);
    assert_eq!(v["ok"], true);
    assert_eq!(v["layers"].as_array().unwrap().len(), 14);
    let checked: Vec<f64> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["rel_error"].as_f64())
        .collect();
    assert_eq!(checked.len(), 3);
    assert!(checked.iter().all(|e| *e < 1e-2), "{checked:?}");
    assert!(v["model_seconds_per_token"].as_f64().unwrap() > 0.0);
}

#[test]
fn per_tensor_plan_text_and_a_broken_checkpoint() {
    let dir = Dir::new("pt");
    assert!(
        bin(&["gen-checkpoint", dir.s(), "--per-tensor", "--layers", "1"])
            .status
            .success()
    );
    let p = bin(&["plan", dir.s(), "--device", "cpu"]);
    let text = String::from_utf8_lossy(&p.stdout);
    assert!(p.status.success(), "{text}");
    assert!(
        text.contains("per-tensor static") && text.contains("-> CpuFp8Gemm"),
        "{text}"
    );
    assert!(text.contains("totals (7 layers"), "{text}");

    // Remove one layer's scale from the index-less checkpoint by corrupting the header:
    // rename the tensor so the weight has no scale beside it.
    let f = Path::new(dir.s()).join("model.safetensors");
    let mut bytes = std::fs::read(&f).unwrap();
    let needle = b"model.layers.0.mlp.up_proj.weight_scale";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at + needle.len() - 5] = b'X'; // weight_scale -> weight_Xcale
    std::fs::write(&f, bytes).unwrap();
    let p = bin(&["plan", dir.s(), "--device", "cpu"]);
    assert_eq!(p.status.code(), Some(2));
    let err = String::from_utf8_lossy(&p.stderr);
    assert!(
        err.contains("model.layers.0.mlp.up_proj.weight_scale"),
        "{err}"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn block_checkpoint_is_served_on_a100_and_h200() {
    // The seed bug: on an A100 a 128x128 block checkpoint must be served (by Marlin, the
    // only block kernel that runs on sm_80), not fail at load; an H200 gets a CUDA kernel.
    let dir = Dir::new("a100");
    assert!(bin(&["gen-checkpoint", dir.s(), "--layers", "1"])
        .status
        .success());
    let p = bin(&[
        "--json",
        "plan",
        dir.s(),
        "--device",
        "a100,h200",
        "--strict",
    ]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stdout));
    let v = json(&p);
    assert_eq!(v["all_served"], true);
    for g in v["groups"].as_array().unwrap() {
        assert_eq!(g["kernels"]["a100"]["kernel"], "MarlinFp8", "{g}");
        let h = g["kernels"]["h200"]["kernel"].as_str().unwrap();
        assert!(!h.starts_with("Cpu") && h != "MarlinFp8", "h200 picked {h}");
    }
    assert_eq!(v["totals"]["a100"]["unserved_layers"], 0);
    // A device with no block kernel at all: the plan lists the reasons and --strict fails
    // with the no-kernel exit code.
    let p = bin(&["--json", "plan", dir.s(), "--device", "v100", "--strict"]);
    assert_eq!(p.status.code(), Some(3), "no kernel: exit 3");
    let v = json(&p);
    assert_eq!(v["all_served"], false);
    let err = v["groups"][0]["kernels"]["v100"]["error"].as_str().unwrap();
    assert!(err.contains("MarlinFp8"), "{err}");
}
