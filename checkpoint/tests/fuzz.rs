//! Property tests (bounded fuzzing) of config and safetensors header parsing: arbitrary and
//! mutated inputs must give `Ok` or a typed error, never a panic; whatever loads must pass
//! the kernels' own weight checks. Each test prints how many inputs it ran (1024 each by
//! default; set FP8_CKPT_FUZZ_CASES for a longer run).

mod common;

use std::cell::Cell;
use std::path::Path;

use common::*;
use fp8_linear_checkpoint::{Checkpoint, QuantConfig};
use fp8_linear_core::validate::check_layer_weights;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

/// Runs `cases` inputs of `strategy` through `test`, prints the count, and fails with the
/// shrunk input on the first failure.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    // FP8_CKPT_FUZZ_CASES raises (or lowers) the bound for a longer local run.
    let cases = std::env::var("FP8_CKPT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let ran = Cell::new(0u32);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |v| {
        ran.set(ran.get() + 1);
        test(v)
    });
    eprintln!("fuzz {name}: {} inputs run", ran.get());
    if let Err(e) = result {
        panic!("fuzz {name} failed: {e}");
    }
}

/// Checks that whatever the loader accepts is consistent and acceptable to the kernels.
fn check_loaded(ck: &Checkpoint) -> Result<(), TestCaseError> {
    for l in ck.layers() {
        let t = ck
            .layer_tensors(l)
            .map_err(|e| TestCaseError::fail(format!("loaded layer failed to view: {e}")))?;
        check_layer_weights(&l.config, &t.view()).map_err(|e| {
            TestCaseError::fail(format!("loader accepted a layer the kernels reject: {e}"))
        })?;
    }
    Ok(())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|v| json!(v)),
        (0u64..300).prop_map(|v| json!(v)),
        any::<f64>().prop_map(|v| json!(v)),
        "[a-z0-9_]{0,8}".prop_map(Value::String),
        prop_oneof![
            Just("fp8"),
            Just("FP8"),
            Just("dynamic"),
            Just("static"),
            Just("ue8m0"),
            Just("e4m3"),
            Just("e5m2"),
            Just("lm_head"),
            Just("bfloat16"),
            Just("float16"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A config.json whose known fields take random (often plausible) values.
fn config_json() -> impl Strategy<Value = Value> {
    let field = |name: &'static str| prop::option::of(json_value()).prop_map(move |v| (name, v));
    (
        prop::option::of(Just(json!("fp8"))),
        field("quant_method"),
        field("weight_block_size"),
        prop::option::of((0u64..300, 0u64..300).prop_map(|(a, b)| json!([a, b]))),
        field("activation_scheme"),
        field("scale_fmt"),
        field("modules_to_not_convert"),
        field("ignored_layers"),
        field("fmt"),
        field("torch_dtype"),
    )
        .prop_map(|(fp8, method, wbs, wbs_num, act, fmt, mods, ign, f, dt)| {
            let mut q = serde_json::Map::new();
            if let Some(m) = fp8 {
                q.insert("quant_method".into(), m);
            }
            for (name, v) in [method, wbs, act, fmt, mods, ign, f] {
                if let Some(v) = v {
                    q.insert(name.into(), v);
                }
            }
            if let Some(v) = wbs_num {
                q.insert("weight_block_size".into(), v);
            }
            let mut root = serde_json::Map::new();
            root.insert("quantization_config".into(), Value::Object(q));
            if let (name, Some(v)) = dt {
                root.insert(name.into(), v);
            }
            Value::Object(root)
        })
}

#[test]
fn config_bytes_never_panic() {
    fuzz(
        "config bytes",
        1024,
        prop::collection::vec(any::<u8>(), 0..200),
        |bytes| {
            let _ = QuantConfig::parse(&bytes, Path::new("config.json"));
            Ok(())
        },
    );
}

#[test]
fn structured_configs_parse_or_name_a_field() {
    fuzz("structured config", 1024, config_json(), |v| {
        let text = serde_json::to_vec(&v).unwrap();
        match QuantConfig::parse(&text, Path::new("config.json")) {
            Ok(c) => {
                // Accepted configs are fp8 with a sane block size.
                let m = v["quantization_config"]["quant_method"]
                    .as_str()
                    .unwrap_or("");
                prop_assert!(m.eq_ignore_ascii_case("fp8"), "accepted method {m:?}");
                if let Some([r, c2]) = c.block {
                    prop_assert!(r >= 1 && c2 >= 1);
                }
                prop_assert!(!(c.static_activations && c.block.is_some()));
            }
            Err(e) => {
                let s = e.to_string();
                prop_assert!(s.contains("config.json"), "error without the file: {s}");
            }
        }
        Ok(())
    });
}

/// A valid two-layer shard to mutate.
fn base_shard() -> Vec<u8> {
    let mut t = block_layer("m.a", 130, 200);
    t.extend(block_layer("m.b", 64, 128));
    st(&t)
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    HeaderLen(u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (0usize..600, any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (0usize..100_000).prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
        1 => any::<u64>().prop_map(Mutation::HeaderLen),
    ]
}

#[test]
fn mutated_shards_never_panic() {
    let base = base_shard();
    let accepted = Cell::new(0u32);
    fuzz(
        "mutated shard",
        1024,
        prop::collection::vec(mutation(), 1..4),
        |muts| {
            let mut b = base.clone();
            for m in muts {
                match m {
                    Mutation::Flip(i, x) => {
                        // Mostly hit the header, sometimes the data.
                        let len = b.len().max(1);
                        if let Some(v) = b.get_mut(i % len) {
                            *v ^= x;
                        }
                    }
                    Mutation::Truncate(n) => b.truncate(n % (b.len() + 1)),
                    Mutation::Extend(x) => b.extend(x),
                    Mutation::HeaderLen(n) => {
                        if b.len() >= 8 {
                            b[..8].copy_from_slice(&n.to_le_bytes());
                        }
                    }
                }
            }
            if let Ok(ck) = Checkpoint::from_memory(
                BLOCK_CONFIG.as_bytes(),
                vec![("model.safetensors".into(), b)],
                None,
            ) {
                accepted.set(accepted.get() + 1);
                check_loaded(&ck)?;
            }
            Ok(())
        },
    );
    eprintln!("fuzz mutated shard: {} inputs loaded", accepted.get());
}

fn dtype_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("F8_E4M3"),
        Just("F8_E5M2"),
        Just("F8_E8M0"),
        Just("F32"),
        Just("BF16"),
        Just("F16"),
        Just("I32"),
        Just("U8"),
        Just("F4"),
        Just("X"),
    ]
}

fn tensor_name() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("m.a"), Just("m.b"), Just("lm_head"), Just("")],
        prop_oneof![
            Just(".weight"),
            Just(".weight_scale_inv"),
            Just(".weight_scale"),
            Just(".input_scale"),
            Just(".bias"),
            Just(""),
        ],
    )
        .prop_map(|(a, b)| format!("{a}{b}"))
}

/// A header of random tensors (names, dtypes, shapes; consistent offsets or not) followed
/// by random-length data.
fn random_header() -> impl Strategy<Value = (String, usize)> {
    let tensor = (
        tensor_name(),
        dtype_name(),
        prop::collection::vec(prop_oneof![Just(1usize), Just(2), 0usize..300], 0..3),
        any::<bool>(),
        (0usize..5000, 0usize..5000),
    );
    (
        prop::collection::vec(tensor, 0..6),
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(tensors, slack, exact)| {
            let mut map = serde_json::Map::new();
            let mut off = 0usize;
            for (name, dtype, shape, consistent, (s, e)) in tensors {
                let bits = match dtype {
                    "F32" | "I32" => 32,
                    "BF16" | "F16" => 16,
                    "F4" => 4,
                    _ => 8,
                };
                let n: usize = shape.iter().product();
                let (s, e) = if consistent {
                    let e = off + (n * bits).div_ceil(8);
                    (off, e)
                } else {
                    (s, e)
                };
                off = off.max(e);
                map.insert(
                    name,
                    json!({"dtype": dtype, "shape": shape, "data_offsets": [s, e]}),
                );
            }
            let data_len = if exact { off } else { off + slack };
            (Value::Object(map).to_string(), data_len)
        })
}

#[test]
fn random_headers_never_panic() {
    let configs = [BLOCK_CONFIG, TENSOR_CONFIG];
    let accepted = Cell::new(0u32);
    fuzz(
        "random header",
        1024,
        (random_header(), 0usize..2, any::<u8>()),
        |((header, data_len), cfg, fill)| {
            let bytes = raw(&header, &vec![fill; data_len]);
            if let Ok(ck) = Checkpoint::from_memory(
                configs[cfg].as_bytes(),
                vec![("model.safetensors".into(), bytes)],
                None,
            ) {
                accepted.set(accepted.get() + 1);
                check_loaded(&ck)?;
            }
            Ok(())
        },
    );
    eprintln!("fuzz random header: {} inputs loaded", accepted.get());
}

/// One plausible layer: `(name, dtype, shape)` of its weight, scale, and optional input
/// scale and bias, with dtypes and shapes mostly right and sometimes wrong.
fn plausible_layer() -> impl Strategy<Value = Vec<(String, &'static str, Vec<usize>)>> {
    let dim = prop_oneof![Just(1usize), Just(64), Just(128), Just(130), 1usize..300];
    let wdtype = prop_oneof![8 => Just("F8_E4M3"), 1 => Just("F8_E5M2"), 1 => Just("BF16")];
    let sdtype =
        prop_oneof![6 => Just("F32"), 1 => Just("BF16"), 1 => Just("F8_E8M0"), 1 => Just("I32")];
    (
        prop_oneof![Just("m.a"), Just("m.b"), Just("lm_head")],
        dim.clone(),
        dim,
        wdtype,
        sdtype,
        0u8..5,
        prop::collection::vec(0usize..4, 0..3),
        prop_oneof![Just(".weight_scale_inv"), Just(".weight_scale")],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(m, n, k, wd, sd, kind, rnd, sname, input, bias)| {
            let scale_shape = match kind {
                0 | 1 => vec![n.div_ceil(128), k.div_ceil(128)],
                2 => vec![],
                3 => vec![n, 1],
                _ => rnd,
            };
            let mut v = vec![
                (format!("{m}.weight"), wd, vec![n, k]),
                (format!("{m}{sname}"), sd, scale_shape),
            ];
            if input {
                v.push((format!("{m}.input_scale"), "F32", vec![1]));
            }
            if bias {
                v.push((format!("{m}.bias"), "BF16", vec![n]));
            }
            v
        })
}

#[test]
fn plausible_checkpoints_load_or_fail_cleanly() {
    let configs = [
        BLOCK_CONFIG,
        TENSOR_CONFIG,
        r#"{"quantization_config":{"quant_method":"fp8","scale_fmt":"ue8m0","weight_block_size":[128,128]}}"#,
        r#"{"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}}"#,
    ];
    let accepted = Cell::new(0u32);
    fuzz(
        "plausible checkpoint",
        1024,
        (
            prop::collection::vec(plausible_layer(), 1..3),
            0usize..4,
            prop_oneof![
                Just(0x3cu8),
                Just(0x40),
                Just(0x7f),
                Just(0xff),
                any::<u8>()
            ],
            any::<bool>(),
        ),
        |(layers, cfg, fill, skew)| {
            let mut map = serde_json::Map::new();
            let mut off = 0usize;
            for (name, dtype, shape) in layers.into_iter().flatten() {
                let bits = match dtype {
                    "F32" | "I32" => 32,
                    "BF16" | "F16" => 16,
                    _ => 8,
                };
                let len = shape.iter().product::<usize>() * bits / 8;
                map.insert(
                    name,
                    json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + len]}),
                );
                off += len;
            }
            // Sometimes cut the data short by one byte.
            let data_len = if skew { off.saturating_sub(1) } else { off };
            let bytes = raw(&Value::Object(map).to_string(), &vec![fill; data_len]);
            if let Ok(ck) = Checkpoint::from_memory(
                configs[cfg].as_bytes(),
                vec![("model.safetensors".into(), bytes)],
                None,
            ) {
                accepted.set(accepted.get() + 1);
                check_loaded(&ck)?;
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz plausible checkpoint: {} inputs loaded",
        accepted.get()
    );
}
