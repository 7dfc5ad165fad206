//! Every kind of bad checkpoint gives a typed error that names the tensor, field or file.

mod common;

use common::*;
use fp8_linear_checkpoint::{generate, Checkpoint, CheckpointError, GenOptions, Preset};
use safetensors::Dtype;

fn mem(config: &str, tensors: &[T]) -> Result<Checkpoint, CheckpointError> {
    Checkpoint::from_memory(
        config.as_bytes(),
        vec![("model.safetensors".into(), st(tensors))],
        None,
    )
}

fn err(r: Result<Checkpoint, CheckpointError>) -> CheckpointError {
    match r {
        Ok(ck) => panic!("expected an error, got {} layers", ck.layers().len()),
        Err(e) => e,
    }
}

#[test]
fn missing_block_scale_names_the_tensor() {
    let mut t = block_layer("m.q_proj", 256, 256);
    t.extend(block_layer("m.k_proj", 64, 256));
    t.retain(|t| t.name != "m.k_proj.weight_scale_inv");
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::MissingScale { layer, expected, .. }
            if layer == "m.k_proj" && expected == "m.k_proj.weight_scale_inv"),
        "{e}"
    );
    assert!(e.to_string().contains("128x128"), "{e}");
}

#[test]
fn missing_input_scale_for_static_activations() {
    let mut t = tensor_layer("m.o_proj", 64, 64);
    t.retain(|t| !t.name.ends_with("input_scale"));
    let e = err(mem(TENSOR_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::MissingScale { expected, .. } if expected == "m.o_proj.input_scale"),
        "{e}"
    );
}

#[test]
fn block_scale_shape_uses_ceil_division() {
    // N = 300, K = 200 needs [3, 2]; floor division would give [2, 1].
    let t = vec![
        fp8("m.w.weight", 300, 200),
        f32s("m.w.weight_scale_inv", &[2, 1], |_| 0.01),
    ];
    let e = err(mem(BLOCK_CONFIG, &t));
    match &e {
        CheckpointError::ScaleShape {
            tensor,
            got,
            expected,
            n,
            k,
        } => {
            assert_eq!(tensor, "m.w.weight_scale_inv");
            assert_eq!(got, &[2, 1]);
            assert!(expected.contains("[3, 2]"), "{expected}");
            assert_eq!((*n, *k), (300, 200));
        }
        other => panic!("wrong error: {other}"),
    }
    // The right shape loads.
    let ok = vec![
        fp8("m.w.weight", 300, 200),
        f32s("m.w.weight_scale_inv", &[3, 2], |_| 0.01),
    ];
    assert_eq!(
        mem(BLOCK_CONFIG, &ok).unwrap().layers()[0].scale_shape,
        [3, 2]
    );
}

#[test]
fn per_tensor_scale_shape() {
    let mut t = tensor_layer("m.w", 64, 32);
    t[1] = f32s("m.w.weight_scale", &[2, 2], |_| 0.01);
    let e = err(mem(TENSOR_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::ScaleShape { tensor, .. } if tensor == "m.w.weight_scale"),
        "{e}"
    );
}

#[test]
fn wrong_dtypes_name_the_tensor() {
    // FP8 e5m2 weights are not e4m3.
    let mut t = block_layer("m.w", 128, 128);
    t[0].dtype = Dtype::F8_E5M2;
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::DType { tensor, got, .. } if tensor == "m.w.weight" && got == "F8_E5M2"),
        "{e}"
    );
    // Integer scales.
    let mut t = block_layer("m.w", 128, 128);
    t[1] = T {
        name: "m.w.weight_scale_inv".into(),
        dtype: Dtype::I32,
        shape: vec![1, 1],
        data: vec![0; 4],
    };
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::DType { tensor, got, .. } if tensor == "m.w.weight_scale_inv" && got == "I32"),
        "{e}"
    );
    // A bf16 weight with a scale beside it.
    let mut t = block_layer("m.w", 128, 128);
    t[0] = T {
        name: "m.w.weight".into(),
        dtype: Dtype::BF16,
        shape: vec![128, 128],
        data: vec![0; 128 * 128 * 2],
    };
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::DType { tensor, .. } if tensor == "m.w.weight"),
        "{e}"
    );
}

#[test]
fn truncated_files_name_the_file_and_tensor() {
    let dir = TempDir::new("trunc");
    let mut opts = GenOptions::new(Preset::Tiny);
    opts.shards = 2;
    let summary = generate(dir.path(), &opts).unwrap();
    let shard = summary
        .files
        .iter()
        .find(|p| p.to_string_lossy().ends_with("00002-of-00002.safetensors"))
        .unwrap();
    let len = std::fs::metadata(shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(shard)
        .unwrap()
        .set_len(len - 1000)
        .unwrap();
    let e = Checkpoint::open(dir.path()).unwrap_err();
    match &e {
        CheckpointError::Truncated { file, detail } => {
            assert_eq!(file, shard);
            assert!(detail.contains("tensor `"), "{detail}");
        }
        other => panic!("wrong error: {other}"),
    }
    // Cut inside the header, and shorter than the length prefix.
    std::fs::OpenOptions::new()
        .write(true)
        .open(shard)
        .unwrap()
        .set_len(100)
        .unwrap();
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(e, CheckpointError::Truncated { .. }), "{e}");
    std::fs::write(shard, [1u8, 2, 3]).unwrap();
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(e, CheckpointError::Truncated { .. }), "{e}");
}

#[test]
fn malformed_headers() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not json", raw("{\"a\": ", &[])),
        ("bad utf-8", {
            let mut v = 4u64.to_le_bytes().to_vec();
            v.extend([b'{', 0xff, 0xfe, b'}']);
            v
        }),
        (
            "unknown dtype",
            raw(
                r#"{"w":{"dtype":"F9","shape":[1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
        ),
        (
            "offsets do not match the shape",
            raw(
                r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
        (
            "overlapping offsets",
            raw(
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
                &[0; 6],
            ),
        ),
        (
            "trailing bytes",
            raw(
                r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                &[0; 9],
            ),
        ),
        (
            "shape overflow",
            raw(
                r#"{"w":{"dtype":"F32","shape":[18446744073709551615,4],"data_offsets":[0,4]}}"#,
                &[0; 4],
            ),
        ),
    ];
    for (what, bytes) in cases {
        let e = Checkpoint::from_memory(
            BLOCK_CONFIG.as_bytes(),
            vec![("model.safetensors".into(), bytes)],
            None,
        )
        .unwrap_err();
        assert!(
            matches!(&e, CheckpointError::Header { file, .. } if file.ends_with("model.safetensors")),
            "{what}: {e}"
        );
    }
}

#[test]
fn malformed_json() {
    let t = st(&block_layer("m.w", 128, 128));
    let e = Checkpoint::from_memory(
        b"{\"quantization_config\": {\n  \"quant_method\": fp8}}",
        vec![("a.safetensors".into(), t.clone())],
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Json { line: 2, path, .. } if path.ends_with("config.json")),
        "{e}"
    );
    let e = Checkpoint::from_memory(
        BLOCK_CONFIG.as_bytes(),
        vec![("a.safetensors".into(), t)],
        Some(b"{\"weight_map\": [}"),
    )
    .unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Json { path, .. } if path.ends_with("model.safetensors.index.json")),
        "{e}"
    );
    // A config that is JSON but not an object, and a field of the wrong type.
    let e = Checkpoint::from_memory(b"[1, 2]", vec![], None).unwrap_err();
    assert!(matches!(e, CheckpointError::InvalidField { .. }), "{e}");
    let e = Checkpoint::from_memory(
        br#"{"quantization_config":{"quant_method":"fp8","modules_to_not_convert":"lm_head"}}"#,
        vec![],
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&e, CheckpointError::InvalidField { field, .. } if field == "quantization_config.modules_to_not_convert"),
        "{e}"
    );
}

#[test]
fn unknown_quant_method() {
    let e = err(mem(
        r#"{"quantization_config":{"quant_method":"compressed-tensors"}}"#,
        &block_layer("m.w", 128, 128),
    ));
    assert!(
        matches!(&e, CheckpointError::UnknownQuantMethod { method, .. } if method == "compressed-tensors"),
        "{e}"
    );
    let e = err(mem(r#"{"quantization_config":{}}"#, &[]));
    assert!(
        matches!(&e, CheckpointError::MissingField { field, .. } if field == "quantization_config.quant_method"),
        "{e}"
    );
}

#[test]
fn shards_that_disagree() {
    // The same tensor with different shapes in two shards.
    let a = st(&block_layer("m.w", 256, 128));
    let mut other = block_layer("m.w", 128, 128);
    other.push(fp8("m.x.weight", 1, 1));
    let b = st(&other);
    let e = Checkpoint::from_memory(
        BLOCK_CONFIG.as_bytes(),
        vec![
            ("a.safetensors".into(), a.clone()),
            ("b.safetensors".into(), b),
        ],
        None,
    )
    .unwrap_err();
    match &e {
        CheckpointError::ShardConflict {
            tensor,
            first,
            second,
        } => {
            assert!(tensor.starts_with("m.w."), "{tensor}");
            assert!(
                first.file.ends_with("a.safetensors") && second.file.ends_with("b.safetensors")
            );
            assert_ne!(first.shape, second.shape);
        }
        other => panic!("wrong error: {other}"),
    }
    // A weight in one shard and a scale for a different N in the other.
    let w = st(&[fp8("m.w.weight", 512, 128)]);
    let s = st(&[f32s("m.w.weight_scale_inv", &[2, 1], |_| 0.1)]);
    let index = br#"{"weight_map":{"m.w.weight":"model-1.safetensors","m.w.weight_scale_inv":"model-2.safetensors"}}"#;
    let e = Checkpoint::from_memory(
        BLOCK_CONFIG.as_bytes(),
        vec![
            ("model-1.safetensors".into(), w.clone()),
            ("model-2.safetensors".into(), s),
        ],
        Some(index),
    )
    .unwrap_err();
    assert!(
        matches!(&e, CheckpointError::ScaleShape { tensor, n: 512, .. } if tensor == "m.w.weight_scale_inv"),
        "{e}"
    );
    // The index maps a tensor to a shard that does not hold it.
    let index = br#"{"weight_map":{"m.w.weight":"model-2.safetensors","m.w.weight_scale_inv":"model-1.safetensors"}}"#;
    let e = Checkpoint::from_memory(
        BLOCK_CONFIG.as_bytes(),
        vec![
            (
                "model-1.safetensors".into(),
                st(&block_layer("m.w", 128, 128)),
            ),
            ("model-2.safetensors".into(), st(&[fp8("z.weight", 1, 1)])),
        ],
        Some(index),
    )
    .unwrap_err();
    assert!(
        matches!(&e, CheckpointError::IndexMismatch { tensor, .. } if tensor == "m.w.weight"),
        "{e}"
    );
}

#[test]
fn index_naming_a_missing_shard() {
    let dir = TempDir::new("missing-shard");
    dir.write("config.json", BLOCK_CONFIG.as_bytes());
    dir.write("model-1.safetensors", &st(&block_layer("m.w", 128, 128)));
    dir.write(
        "model.safetensors.index.json",
        br#"{"weight_map":{"m.w.weight":"model-1.safetensors","m.w.weight_scale_inv":"model-2.safetensors"}}"#,
    );
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Io { path, .. } if path.ends_with("model-2.safetensors")),
        "{e}"
    );
    // An index that points outside the directory is refused.
    dir.write(
        "model.safetensors.index.json",
        br#"{"weight_map":{"m.w.weight":"../x.safetensors"}}"#,
    );
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(e, CheckpointError::InvalidField { .. }), "{e}");
}

#[test]
fn bad_scale_values() {
    let mut t = block_layer("m.w", 256, 256);
    t[1] = f32s("m.w.weight_scale_inv", &[2, 2], |i| {
        if i == 3 {
            f32::NAN
        } else {
            0.01
        }
    });
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::BadScale { tensor, index: 3, .. } if tensor == "m.w.weight_scale_inv"),
        "{e}"
    );
    let mut t = tensor_layer("m.w", 8, 8);
    t[2] = f32s("m.w.input_scale", &[], |_| -1.0);
    let e = err(mem(TENSOR_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::BadScale { tensor, .. } if tensor == "m.w.input_scale"),
        "{e}"
    );
    let ue8m0 = r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"scale_fmt":"ue8m0"}}"#;
    let mut t = block_layer("m.w", 128, 128);
    t[1] = f32s("m.w.weight_scale_inv", &[1, 1], |_| 0.3);
    let e = err(mem(ue8m0, &t));
    assert!(matches!(e, CheckpointError::NotPowerOfTwo { .. }), "{e}");
}

#[test]
fn structural_errors() {
    // A scale with no weight.
    let t = vec![f32s("m.w.weight_scale_inv", &[1, 1], |_| 0.1)];
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::OrphanScale { weight, .. } if weight == "m.w.weight"),
        "{e}"
    );
    // A 1-D FP8 weight.
    let mut t = block_layer("m.w", 128, 128);
    t[0].shape = vec![128 * 128];
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(&e, CheckpointError::Rank { tensor, .. } if tensor == "m.w.weight"),
        "{e}"
    );
    // An FP8 module that the config says is not converted.
    let e = err(mem(BLOCK_CONFIG, &block_layer("lm_head", 128, 128)));
    assert!(
        matches!(&e, CheckpointError::IgnoredButQuantized { tensor, entry } if tensor == "lm_head.weight" && entry == "lm_head"),
        "{e}"
    );
    // Nothing quantized at all.
    let t = vec![T {
        name: "embed.weight".into(),
        dtype: Dtype::BF16,
        shape: vec![4, 4],
        data: vec![0; 32],
    }];
    let e = err(mem(BLOCK_CONFIG, &t));
    assert!(
        matches!(e, CheckpointError::NoQuantizedLayers { tensors: 1, .. }),
        "{e}"
    );
    // No weights in the directory.
    let dir = TempDir::new("empty");
    dir.write("config.json", BLOCK_CONFIG.as_bytes());
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(matches!(e, CheckpointError::NoWeights { .. }), "{e}");
    // No config.json.
    let dir = TempDir::new("noconfig");
    let e = Checkpoint::open(dir.path()).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Io { path, .. } if path.ends_with("config.json")),
        "{e}"
    );
    // Static activations with block scales (upstream rejects this combination too).
    let e = err(mem(
        r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"activation_scheme":"static"}}"#,
        &block_layer("m.w", 128, 128),
    ));
    assert!(
        matches!(&e, CheckpointError::InvalidField { field, .. } if field == "quantization_config.activation_scheme"),
        "{e}"
    );
}
