//! Mixture-of-experts checkpoints: experts found by name and grouped per projection (Qwen3-MoE
//! and DeepSeek-V3 naming, shared experts dense), loaded as one grouped layer; experts that
//! do not form a group are a typed error naming the group.

mod common;

use common::{block_layer, st, TempDir, T};
use fp8_linear::{DType, Options, Routing, Target, Tensor, TensorMut};
use fp8_linear_checkpoint::{generate, Checkpoint, CheckpointError, GenOptions, Preset};

const CONFIG: &[u8] = br#"{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}, "torch_dtype": "float32"}"#;

fn open(tensors: &[T]) -> Result<Checkpoint, CheckpointError> {
    Checkpoint::from_memory(
        CONFIG,
        vec![("model.safetensors".into(), st(tensors))],
        None,
    )
}

#[test]
fn tiny_moe_experts_are_grouped_per_projection_and_load_as_one_layer() {
    let dir = TempDir::new("moe");
    let summary = generate(dir.path(), &GenOptions::new(Preset::TinyMoe)).unwrap();
    assert_eq!(summary.layers, 2 * (4 + 3 * 4));
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(
        ck.layers().len(),
        8,
        "attention only: the experts are grouped"
    );
    let names: Vec<&str> = ck.expert_groups().iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "model.layers.0.mlp.experts.down_proj",
            "model.layers.0.mlp.experts.gate_proj",
            "model.layers.0.mlp.experts.up_proj",
            "model.layers.1.mlp.experts.down_proj",
            "model.layers.1.mlp.experts.gate_proj",
            "model.layers.1.mlp.experts.up_proj",
        ]
    );
    let down = ck
        .expert_group("model.layers.0.mlp.experts.down_proj")
        .unwrap();
    assert_eq!(down.experts.len(), 4);
    assert_eq!((down.config.n, down.config.k), (256, 320));
    assert_eq!(
        down.experts[3].name,
        "model.layers.0.mlp.experts.3.down_proj"
    );

    let ck = ck.with_dtype(DType::F32);
    let mut layer = ck
        .grouped(
            &Target::cpu(),
            "model.layers.0.mlp.experts.down_proj",
            &Options::none(),
        )
        .unwrap();
    assert_eq!(layer.experts(), 4);
    let x = vec![0.25f32; 3 * 320];
    let mut y = vec![f32::NAN; 3 * 256];
    layer
        .forward(
            &Tensor::f32(&x, [3, 320]),
            &Routing::Masked(&[1, 0, 0, 0]),
            None,
            &mut TensorMut::f32(&mut y[..], [3, 256]),
        )
        .unwrap_err();
    let mut y = vec![f32::NAN; 4 * 256];
    let x = vec![0.25f32; 4 * 320];
    layer
        .forward(
            &Tensor::f32(&x, [4, 320]),
            &Routing::Masked(&[1, 0, 0, 1]),
            None,
            &mut TensorMut::f32(&mut y, [4, 256]),
        )
        .unwrap();
    assert!(y[..256].iter().all(|v| v.is_finite()));
    assert!(
        y[256..3 * 256].iter().all(|v| v.is_nan()),
        "rows past a count stay"
    );
    let e = ck
        .grouped(
            &Target::cpu(),
            "model.layers.0.mlp.experts.gate",
            &Options::none(),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("model.layers.0.mlp.experts.down_proj"),
        "{e}"
    );
}

#[test]
fn deepseek_naming_keeps_shared_experts_dense() {
    let mut t = block_layer("model.layers.3.mlp.shared_experts.gate_proj", 64, 128);
    for e in 0..3 {
        t.extend(block_layer(
            &format!("model.layers.3.mlp.experts.{e}.gate_proj"),
            64,
            128,
        ));
    }
    let ck = open(&t).unwrap();
    assert_eq!(ck.layers().len(), 1);
    assert_eq!(
        ck.layers()[0].name,
        "model.layers.3.mlp.shared_experts.gate_proj"
    );
    assert_eq!(ck.expert_groups().len(), 1);
    assert_eq!(
        ck.expert_groups()[0].name,
        "model.layers.3.mlp.experts.gate_proj"
    );
    let tensors = ck.grouped_tensors(&ck.expert_groups()[0]).unwrap();
    assert_eq!(tensors.shape, [3 * 64, 128]);
    assert_eq!(tensors.scale_shape, [3, 1]);
}

#[test]
fn experts_that_do_not_form_a_group_are_named() {
    let mut gap = block_layer("m.mlp.experts.0.up_proj", 64, 128);
    gap.extend(block_layer("m.mlp.experts.2.up_proj", 64, 128));
    let e = open(&gap).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Experts { group, .. } if group == "m.mlp.experts.up_proj"),
        "{e}"
    );
    assert!(e.to_string().contains("expert 1 is missing"), "{e}");

    let mut shapes = block_layer("m.mlp.experts.0.up_proj", 64, 128);
    shapes.extend(block_layer("m.mlp.experts.1.up_proj", 64, 256));
    let e = open(&shapes).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("experts `m.mlp.experts.up_proj`: expert 1 is N=64 K=256"),
        "{e}"
    );
}
