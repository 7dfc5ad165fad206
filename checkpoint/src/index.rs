//! `model.safetensors.index.json`: which shard holds which tensor.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::CheckpointError;

/// The index file name of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// A parsed shard index: tensor name -> shard file name (relative to the checkpoint).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name -> file name.
    pub weight_map: BTreeMap<String, String>,
}

impl ShardIndex {
    /// Parses the bytes of an index file; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let invalid = |field: &str, detail: String| CheckpointError::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            detail,
        };
        let root: Value =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::json(path, &e))?;
        let map = match root.get("weight_map") {
            Some(Value::Object(m)) => m,
            Some(_) => return Err(invalid("weight_map", "must be an object".into())),
            None => {
                return Err(CheckpointError::MissingField {
                    path: path.to_path_buf(),
                    field: "weight_map".into(),
                    detail: "it maps every tensor to its shard".into(),
                })
            }
        };
        let mut weight_map = BTreeMap::new();
        for (tensor, file) in map {
            let Value::String(file) = file else {
                return Err(invalid(
                    &format!("weight_map.{tensor}"),
                    "must be a file name".into(),
                ));
            };
            // Shards must sit in the checkpoint directory itself.
            let plain = Path::new(file)
                .file_name()
                .is_some_and(|f| f == file.as_str());
            if !plain || !file.ends_with(".safetensors") {
                return Err(invalid(
                    &format!("weight_map.{tensor}"),
                    format!(
                        "must name a *.safetensors file in the checkpoint directory, got `{file}`"
                    ),
                ));
            }
            weight_map.insert(tensor.clone(), file.clone());
        }
        Ok(ShardIndex { weight_map })
    }

    /// The distinct shard file names, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = self.weight_map.values().cloned().collect();
        v.sort();
        v.dedup();
        v
    }
}
