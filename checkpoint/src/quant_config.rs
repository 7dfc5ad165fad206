//! `config.json`: the `quantization_config` of a Hugging Face FP8 checkpoint and the
//! activation dtype, parsed into typed values with errors that name the field.

use std::path::Path;

use fp8_linear_core::DType;
use serde_json::{Map, Value};

use crate::error::CheckpointError;

/// How the checkpoint stores its scales.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScaleFormat {
    /// Plain float scales (f32, or bf16/f16 widened to f32).
    F32,
    /// Power-of-two scales (`scale_fmt: "ue8m0"`, DeepSeek-V3.1 style); activation scales
    /// are rounded up to powers of two as well.
    Ue8m0,
}

/// The parsed `quantization_config` plus the model's activation dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantConfig {
    /// `weight_block_size` as `[rows along N, cols along K]`; None for per-tensor scales.
    pub block: Option<[u32; 2]>,
    /// `activation_scheme: "static"` (an `input_scale` per layer) rather than `"dynamic"`.
    pub static_activations: bool,
    /// `scale_fmt`.
    pub scale_format: ScaleFormat,
    /// `modules_to_not_convert` and `ignored_layers`, merged.
    pub ignored: Vec<String>,
    /// The activation (and output) dtype, from `torch_dtype` / `dtype` (bf16 when absent).
    pub dtype: DType,
}

fn invalid(path: &Path, field: &str, detail: impl Into<String>) -> CheckpointError {
    CheckpointError::InvalidField {
        path: path.to_path_buf(),
        field: field.to_string(),
        detail: detail.into(),
    }
}

/// A short rendering of a JSON value for error messages (at most ~60 characters).
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}

fn string_list(
    path: &Path,
    field: &str,
    v: Option<&Value>,
) -> Result<Vec<String>, CheckpointError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, it)| match it {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                other => Err(invalid(
                    path,
                    &format!("{field}[{i}]"),
                    format!("must be a non-empty module name, got {}", show(other)),
                )),
            })
            .collect(),
        Some(other) => Err(invalid(
            path,
            field,
            format!("must be a list of module names, got {}", show(other)),
        )),
    }
}

fn block_size(path: &Path, v: Option<&Value>) -> Result<Option<[u32; 2]>, CheckpointError> {
    const FIELD: &str = "quantization_config.weight_block_size";
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(invalid(
                path,
                FIELD,
                format!(
                    "must be [rows, cols] (e.g. [128, 128]) or absent, got {}",
                    show(other)
                ),
            ))
        }
    };
    if items.len() != 2 {
        return Err(invalid(
            path,
            FIELD,
            format!("must have 2 entries [rows, cols], got {}", items.len()),
        ));
    }
    let mut out = [0u32; 2];
    for (o, it) in out.iter_mut().zip(items) {
        *o = it
            .as_u64()
            .filter(|&b| (1..=65536).contains(&b))
            .ok_or_else(|| {
                invalid(
                    path,
                    FIELD,
                    format!(
                        "entries must be integers in 1..=65536, got {}",
                        show(&Value::Array(items.clone()))
                    ),
                )
            })? as u32;
    }
    Ok(Some(out))
}

fn str_field<'v>(
    path: &Path,
    field: &str,
    v: Option<&'v Value>,
) -> Result<Option<&'v str>, CheckpointError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(invalid(
            path,
            field,
            format!("must be a string, got {}", show(other)),
        )),
    }
}

impl QuantConfig {
    /// Reads and parses `<dir>/config.json`.
    pub fn read(dir: &Path) -> Result<Self, CheckpointError> {
        let path = dir.join("config.json");
        let bytes = std::fs::read(&path).map_err(|e| CheckpointError::io("read", &path, e))?;
        Self::parse(&bytes, &path)
    }

    /// Parses the bytes of a `config.json`; `path` is only used in error messages.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let root: Value =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::json(path, &e))?;
        let Value::Object(root) = root else {
            return Err(invalid(path, "(top level)", "must be a JSON object"));
        };
        let q = match root.get("quantization_config") {
            Some(Value::Object(q)) => q,
            None | Some(Value::Null) => {
                return Err(CheckpointError::MissingField {
                    path: path.to_path_buf(),
                    field: "quantization_config".into(),
                    detail: "an FP8 checkpoint describes its quantization there".into(),
                })
            }
            Some(other) => {
                return Err(invalid(
                    path,
                    "quantization_config",
                    format!("must be an object, got {}", show(other)),
                ))
            }
        };
        Self::parse_quant(&root, q, path)
    }

    fn parse_quant(
        root: &Map<String, Value>,
        q: &Map<String, Value>,
        path: &Path,
    ) -> Result<Self, CheckpointError> {
        let method = str_field(
            path,
            "quantization_config.quant_method",
            q.get("quant_method"),
        )?
        .ok_or_else(|| CheckpointError::MissingField {
            path: path.to_path_buf(),
            field: "quantization_config.quant_method".into(),
            detail: "it says which quantization the checkpoint uses (`fp8`)".into(),
        })?;
        if !method.trim().eq_ignore_ascii_case("fp8") {
            return Err(CheckpointError::UnknownQuantMethod {
                path: path.to_path_buf(),
                method: method.to_string(),
            });
        }
        if let Some(fmt) = str_field(path, "quantization_config.fmt", q.get("fmt"))? {
            if !fmt.eq_ignore_ascii_case("e4m3") {
                return Err(invalid(
                    path,
                    "quantization_config.fmt",
                    format!("is `{fmt}`; only e4m3 weights are supported"),
                ));
            }
        }
        let block = block_size(path, q.get("weight_block_size"))?;
        let static_activations = match str_field(
            path,
            "quantization_config.activation_scheme",
            q.get("activation_scheme"),
        )? {
            None => false,
            Some(s) if s.eq_ignore_ascii_case("dynamic") => false,
            Some(s) if s.eq_ignore_ascii_case("static") => true,
            Some(s) => {
                return Err(invalid(
                    path,
                    "quantization_config.activation_scheme",
                    format!("is `{s}`; expected `dynamic` or `static`"),
                ))
            }
        };
        if static_activations && block.is_some() {
            return Err(invalid(
                path,
                "quantization_config.activation_scheme",
                "is `static`, but block-quantized checkpoints (weight_block_size set) only \
                 support dynamic per-token-group activation quantization",
            ));
        }
        let scale_format =
            match str_field(path, "quantization_config.scale_fmt", q.get("scale_fmt"))? {
                None => ScaleFormat::F32,
                Some(s) if s.eq_ignore_ascii_case("ue8m0") => ScaleFormat::Ue8m0,
                Some(s)
                    if ["f32", "fp32", "float32", "float"]
                        .iter()
                        .any(|f| s.eq_ignore_ascii_case(f)) =>
                {
                    ScaleFormat::F32
                }
                Some(s) => {
                    return Err(invalid(
                        path,
                        "quantization_config.scale_fmt",
                        format!("is `{s}`; expected `ue8m0` or `float32`"),
                    ))
                }
            };
        let mut ignored = string_list(
            path,
            "quantization_config.modules_to_not_convert",
            q.get("modules_to_not_convert"),
        )?;
        ignored.extend(string_list(
            path,
            "quantization_config.ignored_layers",
            q.get("ignored_layers"),
        )?);
        let dtype_field = if root.contains_key("torch_dtype") {
            "torch_dtype"
        } else {
            "dtype"
        };
        let dtype = match str_field(path, dtype_field, root.get(dtype_field))? {
            None => DType::Bf16,
            Some(s) => match DType::parse(s) {
                Some(d @ (DType::Bf16 | DType::F16 | DType::F32)) => d,
                _ => {
                    return Err(invalid(
                        path,
                        dtype_field,
                        format!("is `{s}`; expected bfloat16, float16 or float32"),
                    ))
                }
            },
        };
        Ok(QuantConfig {
            block,
            static_activations,
            scale_format,
            ignored,
            dtype,
        })
    }

    /// The quantization of a safetensors file that comes without a `config.json`, judged from
    /// its tensor names:
    /// - any `*weight_scale_inv` tensor: 128x128 weight blocks with dynamic 1x128 activation
    ///   groups, the Hugging Face block format (each `weight_scale_inv` must then be
    ///   `[ceil(N/128), ceil(K/128)]`, or opening fails with
    ///   [`CheckpointError::ScaleShape`]);
    /// - otherwise `weight_scale` tensors, per tensor (`[]`, `[1]`) or per channel (`[N]`,
    ///   `[N, 1]`) as their shapes say, with static activations when `input_scale` tensors
    ///   are present and dynamic ones when not.
    ///
    /// Scales are plain floats, nothing is listed as not converted, and activations are bf16
    /// (change that with [`Checkpoint::with_dtype`](crate::Checkpoint::with_dtype)).
    pub fn infer<'n>(tensor_names: impl IntoIterator<Item = &'n str>) -> Self {
        let (mut block, mut input_scales) = (false, false);
        for name in tensor_names {
            block |= crate::discover::module_of(name, "weight_scale_inv").is_some();
            input_scales |= crate::discover::module_of(name, "input_scale").is_some();
        }
        QuantConfig {
            block: block.then_some([128, 128]),
            static_activations: input_scales && !block,
            scale_format: ScaleFormat::F32,
            ignored: Vec::new(),
            dtype: DType::Bf16,
        }
    }

    /// The `modules_to_not_convert` / `ignored_layers` entry that covers a module, if any.
    /// An entry covers a module when it is a dot-separated run of the module's name
    /// (`lm_head` covers `lm_head`; `mlp.gate` covers `model.layers.0.mlp.gate` but not
    /// `model.layers.0.mlp.gate_proj`).
    pub fn ignored_entry(&self, module: &str) -> Option<&str> {
        self.ignored
            .iter()
            .find(|e| {
                let e = e.trim_matches('.');
                !e.is_empty() && format!(".{module}.").contains(&format!(".{e}."))
            })
            .map(String::as_str)
    }

    /// A one-line description (`fp8, 128x128 blocks, dynamic activations, bf16`).
    pub fn describe(&self) -> String {
        format!(
            "fp8, {}, {} activations, {} scales, {}",
            match self.block {
                Some([r, c]) => format!("{r}x{c} block scales"),
                None => "per-tensor scales".into(),
            },
            if self.static_activations {
                "static"
            } else {
                "dynamic"
            },
            match self.scale_format {
                ScaleFormat::F32 => "f32",
                ScaleFormat::Ue8m0 => "ue8m0",
            },
            self.dtype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<QuantConfig, CheckpointError> {
        QuantConfig::parse(s.as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn block_and_per_tensor() {
        let c = parse(r#"{"torch_dtype":"float16","quantization_config":{"quant_method":"fp8","weight_block_size":[128,64],"activation_scheme":"dynamic","modules_to_not_convert":["lm_head"]}}"#).unwrap();
        assert_eq!(c.block, Some([128, 64]));
        assert_eq!(c.dtype, DType::F16);
        assert_eq!(c.ignored_entry("lm_head"), Some("lm_head"));
        assert_eq!(c.ignored_entry("model.lm_head_x"), None);
        let t = parse(r#"{"quantization_config":{"quant_method":"fp8","activation_scheme":"static","ignored_layers":["model.layers.0.mlp.gate"]}}"#).unwrap();
        assert!(t.static_activations && t.block.is_none());
        assert_eq!(t.dtype, DType::Bf16);
        assert!(t.ignored_entry("model.layers.0.mlp.gate").is_some());
        assert!(t.ignored_entry("model.layers.0.mlp.gate_proj").is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse(r#"{"quantization_config":{"quant_method":"gptq"}}"#).unwrap_err();
        assert!(
            matches!(e, CheckpointError::UnknownQuantMethod { ref method, .. } if method == "gptq")
        );
        let e =
            parse(r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}"#)
                .unwrap_err();
        assert!(e.to_string().contains("weight_block_size"), "{e}");
        let e = parse(r#"{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"activation_scheme":"static"}}"#).unwrap_err();
        assert!(e.to_string().contains("activation_scheme"), "{e}");
        let e = parse(r#"{"model_type":"llama"}"#).unwrap_err();
        assert!(
            matches!(e, CheckpointError::MissingField { ref field, .. } if field == "quantization_config")
        );
        let e = parse("{\"quantization_config\": {").unwrap_err();
        assert!(matches!(e, CheckpointError::Json { line: 1, .. }), "{e}");
    }
}
