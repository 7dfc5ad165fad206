//! Property tests (bounded fuzzing) of config and safetensors header parsing: arbitrary and
//! mutated inputs must give `Ok` or a typed error, never a panic; whatever loads must pass
//! the kernels' own weight checks.
//!
//! A fuzz test that never gets past the first check proves nothing about the later ones, so
//! each test counts how far its inputs got (the config parsed as JSON, the safetensors
//! header parsed, the checkpoint loaded or refused by the layer checks), prints the counts,
//! and fails when a stage it claims to exercise was reached by too small a share of the
//! inputs. Inputs are mostly mutations of valid configs and shards, so that a meaningful
//! share of them reaches each stage. 1024 inputs each by default; set FP8_CKPT_FUZZ_CASES
//! for a longer run (the shares are checked from 256 inputs on).

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use fp8_linear_checkpoint::shard::Shard;
use fp8_linear_checkpoint::{Checkpoint, QuantConfig};
use fp8_linear_core::validate::check_layer_weights;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

/// How many inputs reached each stage of one fuzz test.
#[derive(Default)]
struct Reach {
    counts: RefCell<BTreeMap<&'static str, u32>>,
}

impl Reach {
    /// Counts one input as having reached `stage`.
    fn hit(&self, stage: &'static str) {
        *self.counts.borrow_mut().entry(stage).or_default() += 1;
    }

    fn count(&self, stage: &str) -> u32 {
        self.counts.borrow().get(stage).copied().unwrap_or(0)
    }
}

/// Runs `cases` inputs of `strategy` through `test` (which records in `reach` how far each
/// got), prints the counts, fails with the shrunk input on the first failure, and then
/// requires each `(stage, minimum share)` of `required` to have been reached by at least that
/// share of the inputs.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    required: &[(&str, f64)],
    test: impl Fn(S::Value, &Reach) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    // FP8_CKPT_FUZZ_CASES raises (or lowers) the bound for a longer local run.
    let cases = std::env::var("FP8_CKPT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let reach = Reach::default();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |v| {
        reach.hit("run");
        test(v, &reach)
    });
    let ran = reach.count("run");
    let line: Vec<String> = reach
        .counts
        .borrow()
        .iter()
        .filter(|(s, _)| **s != "run")
        .map(|(s, n)| format!("{s} {n} ({:.1}%)", 100.0 * *n as f64 / ran.max(1) as f64))
        .collect();
    eprintln!("fuzz {name}: {ran} inputs run; {}", line.join(", "));
    if let Err(e) = result {
        panic!("fuzz {name} failed: {e}");
    }
    if ran < 256 {
        eprintln!("fuzz {name}: too few inputs to check the shares");
        return;
    }
    for &(stage, min) in required {
        let share = reach.count(stage) as f64 / ran as f64;
        assert!(
            share >= min,
            "fuzz {name}: only {:.1}% of the inputs reached `{stage}` (at least {:.0}% required): \
             the generator no longer exercises that stage",
            100.0 * share,
            100.0 * min
        );
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

/// Loads one shard (with `config`) and records how far it got: `header parsed` when the
/// safetensors header is valid (checked on its own, with the shard reader), then `loaded` or
/// `refused by the layer checks`; a header that does not parse is `header refused`. What
/// loads must pass the kernels' checks.
fn load_shard(config: &str, bytes: Vec<u8>, reach: &Reach) -> Result<(), TestCaseError> {
    let header_ok = Shard::from_bytes("model.safetensors", bytes.clone()).is_ok();
    reach.hit(if header_ok {
        "header parsed"
    } else {
        "header refused"
    });
    match Checkpoint::from_memory(
        config.as_bytes(),
        vec![("model.safetensors".into(), bytes)],
        None,
    ) {
        Ok(ck) => {
            prop_assert!(
                header_ok,
                "loaded a shard whose header the shard reader refuses"
            );
            reach.hit("loaded");
            check_loaded(&ck)
        }
        Err(_) => {
            if header_ok {
                reach.hit("refused by the layer checks");
            }
            Ok(())
        }
    }
}

/// A byte-level change to a file.
#[derive(Debug, Clone)]
enum ByteEdit {
    /// XOR the byte at (index modulo length).
    Flip(usize, u8),
    /// Overwrite the byte with a printable ASCII character.
    Set(usize, u8),
    /// Insert a printable ASCII character.
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn byte_edit(range: usize) -> impl Strategy<Value = ByteEdit> {
    let printable = 0x20u8..0x7f;
    prop_oneof![
        2 => (0..range, any::<u8>()).prop_map(|(i, b)| ByteEdit::Flip(i, b)),
        3 => (0..range, printable.clone()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        1 => (0..range, printable).prop_map(|(i, b)| ByteEdit::Insert(i, b)),
        1 => (0..range).prop_map(ByteEdit::Delete),
        1 => (0..range).prop_map(ByteEdit::Truncate),
    ]
}

/// Applies an edit to bytes `lo..` of `b` (the index is taken modulo what is there).
fn apply(b: &mut Vec<u8>, lo: usize, e: &ByteEdit) {
    let span = b.len().saturating_sub(lo);
    if span == 0 {
        return;
    }
    let at = |i: usize| lo + i % span;
    match *e {
        ByteEdit::Flip(i, x) => b[at(i)] ^= x,
        ByteEdit::Set(i, x) => b[at(i)] = x,
        ByteEdit::Insert(i, x) => b.insert(at(i), x),
        ByteEdit::Delete(i) => {
            b.remove(at(i));
        }
        ByteEdit::Truncate(i) => b.truncate(at(i)),
    }
}

/// Valid configs, to mutate.
const CONFIGS: [&str; 4] = [
    BLOCK_CONFIG,
    TENSOR_CONFIG,
    r#"{"quantization_config":{"quant_method":"fp8","scale_fmt":"ue8m0","weight_block_size":[128,128]}}"#,
    r#"{"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic"}}"#,
];

#[test]
fn config_bytes_never_panic() {
    // A quarter random bytes; the rest valid configs with one to three byte edits, so that
    // many still parse as JSON and reach the field checks.
    let input = prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..200),
        3 => (0..CONFIGS.len(), prop::collection::vec(byte_edit(200), 1..3)).prop_map(
            |(c, edits)| {
                let mut b = CONFIGS[c].as_bytes().to_vec();
                for e in &edits {
                    apply(&mut b, 0, e);
                }
                b
            }
        ),
    ];
    fuzz(
        "config bytes",
        1024,
        input,
        &[
            ("JSON", 0.2),
            ("accepted", 0.05),
            ("JSON refused by the field checks", 0.1),
        ],
        |bytes, reach| {
            let json = serde_json::from_slice::<Value>(&bytes).is_ok();
            if json {
                reach.hit("JSON");
            }
            match QuantConfig::parse(&bytes, Path::new("config.json")) {
                Ok(_) => {
                    prop_assert!(json, "accepted a config that is not JSON");
                    reach.hit("accepted");
                }
                Err(e) => {
                    let s = e.to_string();
                    prop_assert!(s.contains("config.json"), "error without the file: {s}");
                    if json {
                        reach.hit("JSON refused by the field checks");
                    }
                }
            }
            Ok(())
        },
    );
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

/// A field of the quantization config: mostly absent or one of the plausible values, sometimes
/// any JSON value.
fn field(
    name: &'static str,
    plausible: Vec<Value>,
) -> impl Strategy<Value = (&'static str, Option<Value>)> {
    prop_oneof![
        3 => Just(None),
        4 => prop::sample::select(plausible).prop_map(Some),
        1 => json_value().prop_map(Some),
    ]
    .prop_map(move |v| (name, v))
}

/// A config.json whose known fields take random (often plausible) values.
fn config_json() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            6 => Just(Some(json!("fp8"))),
            1 => Just(Some(json!("FP8"))),
            1 => Just(None),
            1 => json_value().prop_map(Some),
        ],
        field(
            "weight_block_size",
            vec![json!([128, 128]), json!([64, 128])],
        ),
        prop::option::of((0u64..300, 0u64..300).prop_map(|(a, b)| json!([a, b]))),
        field("activation_scheme", vec![json!("dynamic"), json!("static")]),
        field("scale_fmt", vec![json!("ue8m0")]),
        field(
            "modules_to_not_convert",
            vec![json!(["lm_head"]), json!([])],
        ),
        field("ignored_layers", vec![json!(["lm_head"])]),
        field("fmt", vec![json!("e4m3")]),
        field("torch_dtype", vec![json!("bfloat16"), json!("float16")]),
    )
        .prop_map(|(method, wbs, wbs_num, act, fmt, mods, ign, f, dt)| {
            let mut q = serde_json::Map::new();
            if let Some(m) = method {
                q.insert("quant_method".into(), m);
            }
            for (name, v) in [wbs, act, fmt, mods, ign, f] {
                if let Some(v) = v {
                    q.insert(name.into(), v);
                }
            }
            // Sometimes any numbers for the block size.
            if let Some(v) = wbs_num.filter(|_| !q.contains_key("weight_block_size")) {
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
fn structured_configs_parse_or_name_a_field() {
    fuzz(
        "structured config",
        1024,
        config_json(),
        &[("accepted", 0.15), ("refused", 0.5)],
        |v, reach| {
            let text = serde_json::to_vec(&v).unwrap();
            match QuantConfig::parse(&text, Path::new("config.json")) {
                Ok(c) => {
                    reach.hit("accepted");
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
                    reach.hit("refused");
                    let s = e.to_string();
                    prop_assert!(s.contains("config.json"), "error without the file: {s}");
                }
            }
            Ok(())
        },
    );
}

/// The tensors of a valid two-layer shard: a ragged 130 x 200 block layer and a 64 x 128 one.
fn base_tensors() -> Vec<T> {
    let mut t = block_layer("m.a", 130, 200);
    t.extend(block_layer("m.b", 64, 128));
    t
}

/// The byte range (in the file) of every tensor of a serialized shard, read from its header.
fn tensor_ranges(file: &[u8]) -> Vec<std::ops::Range<usize>> {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&file[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .map(|(_, v)| {
            let o = &v["data_offsets"];
            8 + n + o[0].as_u64().unwrap() as usize..8 + n + o[1].as_u64().unwrap() as usize
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    /// A byte edit inside the header JSON.
    Header(ByteEdit),
    /// XOR one byte of one tensor's data (scales included: a quarter of the tensors).
    Data(usize, usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    HeaderLen(u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => byte_edit(1 << 16).prop_map(Mutation::Header),
        8 => (0usize..4, any::<usize>(), 1u8..).prop_map(|(t, i, x)| Mutation::Data(t, i, x)),
        1 => (0usize..100_000).prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
        1 => any::<u64>().prop_map(Mutation::HeaderLen),
    ]
}

#[test]
fn mutated_shards_never_panic() {
    let base = st(&base_tensors());
    let header_len = 8 + u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
    let ranges = tensor_ranges(&base);
    fuzz(
        "mutated shard",
        1024,
        prop::collection::vec(mutation(), 1..4),
        &[
            ("header parsed", 0.25),
            ("header refused", 0.4),
            ("loaded", 0.2),
            ("refused by the layer checks", 0.025),
        ],
        |muts, reach| {
            let mut b = base.clone();
            for m in muts {
                match m {
                    Mutation::Header(e) => {
                        // Within the JSON text as it was (edits may move its end; an earlier
                        // truncation may have cut into the length prefix itself).
                        let start = b.len().min(8);
                        let end = header_len.min(b.len()).max(start);
                        let mut head = b[start..end].to_vec();
                        apply(&mut head, 0, &e);
                        let tail = b.split_off(end);
                        b.truncate(start);
                        b.extend(head);
                        b.extend(tail);
                    }
                    Mutation::Data(t, i, x) => {
                        let r = &ranges[t % ranges.len()];
                        let at = r.start + i % r.len().max(1);
                        if let Some(v) = b.get_mut(at) {
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
            load_shard(BLOCK_CONFIG, b, reach)
        },
    );
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

fn bits(dtype: &str) -> usize {
    match dtype {
        "F32" | "I32" => 32,
        "BF16" | "F16" => 16,
        "F4" => 4,
        _ => 8,
    }
}

fn tensor_name() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("m.a"),
            Just("m.b"),
            Just("m.c"),
            Just("lm_head"),
            Just("")
        ],
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

/// One tensor of a header being built: name, dtype, shape, and its data offsets when they
/// are not the consistent ones.
#[derive(Debug, Clone)]
struct HeaderTensor {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    offsets: Option<(usize, usize)>,
}

/// A JSON-level change to a valid header.
#[derive(Debug, Clone)]
enum HeaderEdit {
    Dtype(usize, &'static str),
    Dim(usize, usize, usize),
    AddDim(usize, usize),
    DropDim(usize),
    Rename(usize, String),
    Remove(usize),
    Copy(usize, String),
    Offsets(usize, (usize, usize)),
    /// An unquantized tensor (a norm), which the loader leaves alone.
    Norm(String),
}

fn header_edit() -> impl Strategy<Value = HeaderEdit> {
    let dim = prop_oneof![
        Just(0usize),
        Just(1),
        Just(2),
        Just(64),
        Just(128),
        0usize..300
    ];
    let t = 0usize..8;
    prop_oneof![
        (t.clone(), dtype_name()).prop_map(|(t, d)| HeaderEdit::Dtype(t, d)),
        (t.clone(), 0usize..3, dim.clone()).prop_map(|(t, i, d)| HeaderEdit::Dim(t, i, d)),
        (t.clone(), dim).prop_map(|(t, d)| HeaderEdit::AddDim(t, d)),
        t.clone().prop_map(HeaderEdit::DropDim),
        (t.clone(), tensor_name()).prop_map(|(t, n)| HeaderEdit::Rename(t, n)),
        t.clone().prop_map(HeaderEdit::Remove),
        (t.clone(), tensor_name()).prop_map(|(t, n)| HeaderEdit::Copy(t, n)),
        (t, (0usize..40_000, 0usize..40_000)).prop_map(|(t, o)| HeaderEdit::Offsets(t, o)),
        prop_oneof![Just("model.norm.weight"), Just("m.a.norm")]
            .prop_map(|n| HeaderEdit::Norm(n.into())),
    ]
}

/// A valid header (two block layers and a per-channel one) after zero to three JSON-level
/// edits, with offsets laid out consistently unless an edit set them, followed by data of
/// the length the offsets imply (plus a little slack, sometimes). Scale tensors hold valid
/// scales, so that a header the edits left valid loads.
fn mutated_header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let edits = prop_oneof![
        1 => Just(Vec::new()),
        2 => prop::collection::vec(header_edit(), 1..4),
    ];
    (edits, prop_oneof![6 => Just(0usize), 1 => 1usize..9]).prop_map(|(edits, slack)| {
        let t = |name: &str, dtype: &str, shape: &[usize]| HeaderTensor {
            name: name.into(),
            dtype: dtype.into(),
            shape: shape.to_vec(),
            offsets: None,
        };
        let mut tensors = vec![
            t("m.a.weight", "F8_E4M3", &[130, 200]),
            t("m.a.weight_scale_inv", "F32", &[2, 2]),
            t("m.b.weight", "F8_E4M3", &[64, 128]),
            t("m.b.weight_scale_inv", "F32", &[1, 1]),
        ];
        for e in edits {
            let n = tensors.len();
            if n == 0 {
                break;
            }
            match e {
                HeaderEdit::Dtype(i, d) => tensors[i % n].dtype = d.into(),
                HeaderEdit::Dim(i, d, v) => {
                    let s = &mut tensors[i % n].shape;
                    if !s.is_empty() {
                        let l = s.len();
                        s[d % l] = v;
                    }
                }
                HeaderEdit::AddDim(i, v) => tensors[i % n].shape.push(v),
                HeaderEdit::DropDim(i) => {
                    tensors[i % n].shape.pop();
                }
                HeaderEdit::Rename(i, name) => tensors[i % n].name = name,
                HeaderEdit::Remove(i) => {
                    tensors.remove(i % n);
                }
                HeaderEdit::Copy(i, name) => {
                    let mut c = tensors[i % n].clone();
                    c.name = name;
                    tensors.push(c);
                }
                HeaderEdit::Offsets(i, o) => tensors[i % n].offsets = Some(o),
                HeaderEdit::Norm(name) => tensors.push(t(&name, "BF16", &[64])),
            }
        }
        let mut map = serde_json::Map::new();
        let mut data = Vec::new();
        for t in tensors {
            let len = (t.shape.iter().product::<usize>() * bits(&t.dtype)).div_ceil(8);
            let (s, e) = t.offsets.unwrap_or((data.len(), data.len() + len));
            // The bytes of a consistent tensor: scales 2^-7 (valid for ue8m0 too), anything
            // else varied.
            if t.offsets.is_none() {
                if t.dtype == "F32" {
                    data.extend((0..len / 4).flat_map(|_| 0.0078125f32.to_le_bytes()));
                } else {
                    data.extend((0..len).map(|i| (i * 37 % 126) as u8));
                }
            }
            map.insert(
                t.name,
                json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [s, e]}),
            );
        }
        data.resize(data.len() + slack, 0x11);
        (Value::Object(map).to_string(), data)
    })
}

#[test]
fn mutated_headers_never_panic() {
    fuzz(
        "mutated header",
        1024,
        // Mostly the block configs (the ones the valid header is for).
        (
            mutated_header(),
            prop_oneof![4 => Just(0usize), 2 => Just(2), 1 => Just(1), 1 => Just(3)],
        ),
        &[
            ("header parsed", 0.5),
            ("header refused", 0.15),
            ("loaded", 0.15),
            ("refused by the layer checks", 0.3),
        ],
        |((header, data), cfg), reach| load_shard(CONFIGS[cfg], raw(&header, &data), reach),
    );
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
    fuzz(
        "plausible checkpoint",
        1024,
        (
            prop::collection::vec(plausible_layer(), 1..3),
            0..CONFIGS.len(),
            prop_oneof![
                Just(0x3cu8),
                Just(0x40),
                Just(0x7f),
                Just(0xff),
                any::<u8>()
            ],
            prop::bool::weighted(0.1),
        ),
        &[
            ("header parsed", 0.6),
            ("loaded", 0.05),
            ("refused by the layer checks", 0.45),
        ],
        |(layers, cfg, fill, skew), reach| {
            let mut map = serde_json::Map::new();
            let mut off = 0usize;
            for (name, dtype, shape) in layers.into_iter().flatten() {
                let len = shape.iter().product::<usize>() * bits(dtype) / 8;
                map.insert(
                    name,
                    json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + len]}),
                );
                off += len;
            }
            // Sometimes cut the data short by one byte.
            let data_len = if skew { off.saturating_sub(1) } else { off };
            let bytes = raw(&Value::Object(map).to_string(), &vec![fill; data_len]);
            load_shard(CONFIGS[cfg], bytes, reach)
        },
    );
}
