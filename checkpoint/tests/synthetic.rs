//! Generated checkpoints load back with the configs and bytes they were written with, and
//! every layer's tensors pass the kernels' own weight checks.

mod common;

use common::*;
use fp8_linear_checkpoint::{generate, Checkpoint, GenOptions, Preset, ScaleFormat};
use fp8_linear_core::quant::{GroupShape, ScaleDtype};
use fp8_linear_core::validate::check_layer_weights;
use fp8_linear_core::{DType, Family, LayerConfig, QuantKey};
use safetensors::Dtype;

fn open_generated(opts: &GenOptions, tag: &str) -> (TempDir, Checkpoint) {
    let dir = TempDir::new(tag);
    generate(dir.path(), opts).unwrap();
    let ck = Checkpoint::open(dir.path()).unwrap();
    (dir, ck)
}

#[test]
fn tiny_block_checkpoint_round_trips() {
    let (_dir, ck) = open_generated(&GenOptions::new(Preset::Tiny), "tiny-block");
    let shape = Preset::Tiny.shape();
    assert_eq!(ck.layers().len(), 7 * shape.layers);
    assert_eq!(ck.quant().block, Some([128, 128]));
    // Natural order: layer 0's modules first, in name order.
    assert_eq!(ck.layers()[0].name, "model.layers.0.mlp.down_proj");
    for l in ck.layers() {
        assert_eq!(
            l.config,
            LayerConfig::block_128(l.config.n, l.config.k, DType::Bf16, DType::Bf16)
        );
        assert_eq!(l.config.family(), Family::BlockScaled);
        let t = ck.layer_tensors(l).unwrap();
        check_layer_weights(&l.config, &t.view()).unwrap();
        assert_eq!(t.weight.len(), l.config.n * l.config.k);
    }
    let k_proj = ck
        .layers()
        .iter()
        .find(|l| l.name == "model.layers.1.self_attn.k_proj")
        .unwrap();
    assert_eq!((k_proj.config.n, k_proj.config.k), (64, 256));
    assert_eq!(k_proj.scale_shape, [1, 2]);
    let down = ck
        .layers()
        .iter()
        .find(|l| l.name.ends_with("down_proj"))
        .unwrap();
    assert_eq!((down.config.n, down.config.k), (256, 688));
    assert_eq!(down.scale_shape, [2, 6]); // ceil(688 / 128) = 6
                                          // Norms, embeddings and the unquantized lm_head are left alone.
    let left: Vec<&str> = ck.unquantized().iter().map(|(n, _)| *n).collect();
    assert!(left.contains(&"lm_head.weight") && left.contains(&"model.norm.weight"));
    assert_eq!(left.len(), 3 + 2 * shape.layers);
}

#[test]
fn per_tensor_checkpoint_has_static_input_scales() {
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.per_tensor = true;
    let (_dir, ck) = open_generated(&opts, "tiny-tensor");
    assert!(ck.quant().static_activations);
    for l in ck.layers() {
        assert_eq!(
            l.config,
            LayerConfig::per_tensor_static(l.config.n, l.config.k, DType::Bf16, DType::Bf16)
        );
        assert_eq!(l.scale_shape, [1, 1]);
        let t = ck.layer_tensors(l).unwrap();
        let s = t.input_scale.unwrap()[0];
        assert!((0.002..0.004).contains(&s), "{s}");
        check_layer_weights(&l.config, &t.view()).unwrap();
    }
}

#[test]
fn sharded_checkpoint_holds_the_same_layers() {
    let (_d1, one) = open_generated(&GenOptions::new(Preset::Tiny), "one");
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.shards = 3;
    let (d3, three) = open_generated(&opts, "three");
    assert_eq!(three.shards().len(), 3);
    assert!(d3.path().join("model.safetensors.index.json").is_file());
    assert_eq!(one.layers(), three.layers());
    for (a, b) in one.layers().iter().zip(three.layers()) {
        let (ta, tb) = (
            one.layer_tensors(a).unwrap(),
            three.layer_tensors(b).unwrap(),
        );
        assert_eq!(ta.weight, tb.weight);
        assert_eq!(ta.scales, tb.scales);
    }
    // Regenerating into the same directory with one shard replaces the old shards.
    generate(d3.path(), &GenOptions::new(Preset::Tiny)).unwrap();
    let again = Checkpoint::open(d3.path()).unwrap();
    assert_eq!(again.shards().len(), 1);
    assert_eq!(again.layers(), one.layers());
}

#[test]
fn different_seeds_give_different_weights_and_ue8m0_scales_are_powers_of_two() {
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.seed = 1;
    opts.ue8m0 = true;
    opts.layers = Some(1);
    let (_d, ck) = open_generated(&opts, "ue8m0");
    let (_d0, base) = open_generated(&GenOptions::new(Preset::Tiny), "seed0");
    assert_eq!(ck.quant().scale_format, ScaleFormat::Ue8m0);
    let l = &ck.layers()[0];
    // f32-stored power-of-two weight scales stay an f32 weight key; activations are ue8m0.
    assert_eq!(l.config.weight.scale_dtype, ScaleDtype::F32);
    assert_eq!(l.config.activation.unwrap().scale_dtype, ScaleDtype::Ue8m0);
    let t = ck.layer_tensors(l).unwrap();
    assert!(t.scales.iter().all(|s| s.to_bits() & 0x007f_ffff == 0));
    let t0 = base.layer_tensors(&base.layers()[0]).unwrap();
    assert_ne!(t.weight, t0.weight);
}

#[test]
fn generator_refuses_foreign_directories() {
    let dir = TempDir::new("foreign");
    dir.write("config.json", b"{\"model_type\": \"llama\"}");
    let e = generate(dir.path(), &GenOptions::new(Preset::Tiny)).unwrap_err();
    assert!(e.to_string().contains("did not write"), "{e}");
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.shards = 0;
    assert!(generate(dir.path(), &opts).is_err());
}

#[test]
fn per_channel_bias_and_other_block_sizes() {
    // Per-channel weight scales [N, 1] with dynamic activations, a bf16 bias and bf16 scales.
    let config = r#"{"torch_dtype":"float16","quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}}"#;
    let bias = T {
        name: "m.w.bias".into(),
        dtype: Dtype::BF16,
        shape: vec![8],
        data: (0..8u16)
            .flat_map(|i| half::bf16::from_f32(i as f32).to_le_bytes())
            .collect(),
    };
    let scale = T {
        name: "m.w.weight_scale".into(),
        dtype: Dtype::BF16,
        shape: vec![8, 1],
        data: (0..8)
            .flat_map(|_| half::bf16::from_f32(0.5).to_le_bytes())
            .collect(),
    };
    let ck = Checkpoint::from_memory(
        config.as_bytes(),
        vec![(
            "m.safetensors".into(),
            st(&[fp8("m.w.weight", 8, 16), scale, bias]),
        )],
        None,
    )
    .unwrap();
    let l = &ck.layers()[0];
    assert_eq!(l.config.weight, QuantKey::WEIGHT_PER_CHANNEL);
    assert_eq!(l.config.activation, Some(QuantKey::ACT_PER_TOKEN_DYNAMIC));
    assert!(l.config.bias);
    assert_eq!(l.config.input_dtype, DType::F16);
    let t = ck.layer_tensors(l).unwrap();
    assert_eq!(t.bias.as_deref().unwrap()[7], 7.0);
    assert_eq!(t.scales, vec![0.5; 8]);
    check_layer_weights(&l.config, &t.view()).unwrap();

    // 64 x 128 blocks: activation groups follow the K block.
    let config = r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[64,128]}}"#;
    let ck = Checkpoint::from_memory(
        config.as_bytes(),
        vec![(
            "m.safetensors".into(),
            st(&[
                fp8("m.w.weight", 130, 129),
                f32s("m.w.weight_scale_inv", &[3, 2], |_| 0.01),
            ]),
        )],
        None,
    )
    .unwrap();
    let c = ck.layers()[0].config;
    assert_eq!(
        c.weight.group,
        GroupShape::Block {
            rows: 64,
            cols: 128
        }
    );
    assert_eq!(c.activation.unwrap().group, GroupShape::Group { cols: 128 });
    check_layer_weights(&c, &ck.layer_tensors(&ck.layers()[0]).unwrap().view()).unwrap();
}

#[test]
fn e8m0_stored_scales_make_a_ue8m0_weight_key() {
    let config = r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"scale_fmt":"ue8m0"}}"#;
    let scale = T {
        name: "m.w.weight_scale_inv".into(),
        dtype: Dtype::F8_E8M0,
        shape: vec![2, 1],
        data: vec![127 - 9, 127 - 10],
    };
    let ck = Checkpoint::from_memory(
        config.as_bytes(),
        vec![(
            "m.safetensors".into(),
            st(&[fp8("m.w.weight", 200, 100), scale]),
        )],
        None,
    )
    .unwrap();
    let l = &ck.layers()[0];
    assert_eq!(l.config.weight.scale_dtype, ScaleDtype::Ue8m0);
    let t = ck.layer_tensors(l).unwrap();
    assert_eq!(t.scales, vec![2f32.powi(-9), 2f32.powi(-10)]);
}
