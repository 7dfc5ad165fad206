//! A whole checkpoint: config, shards, the tensor table, and the quantized layers found in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;

use crate::discover::discover;
use crate::error::{CheckpointError, TensorSite};
use crate::experts::{group_experts, ExpertGroup};
use crate::index::{ShardIndex, INDEX_FILE};
use crate::layer::{LayerTensors, QuantLayer};
use crate::quant_config::QuantConfig;
use crate::scales;
use crate::shard::{Shard, TensorInfo};

/// Where a tensor lives: which shard, and its header entry there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRef {
    /// Index into [`Checkpoint::shards`].
    pub shard: usize,
    /// Dtype, shape and byte range.
    pub info: TensorInfo,
}

/// An FP8 checkpoint directory, opened: shards memory-mapped, headers parsed, every
/// quantized layer found and checked (shapes, dtypes, scale shapes and values).
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    quant: QuantConfig,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, TensorRef>,
    layers: Vec<QuantLayer>,
    groups: Vec<ExpertGroup>,
}

fn list_safetensors(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let rd = std::fs::read_dir(dir).map_err(|e| CheckpointError::io("list", dir, e))?;
    let mut files = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| CheckpointError::io("list", dir, e))?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "safetensors") && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

impl Checkpoint {
    /// Opens a checkpoint directory: `config.json`, then `model.safetensors.index.json` and
    /// the shards it names, or every `*.safetensors` file when there is no index. Files are
    /// memory-mapped; only headers and scales are read.
    ///
    /// A path to a file (or to a `*.safetensors` name) opens that one safetensors file
    /// ([`Checkpoint::open_file`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = path.as_ref();
        let file_name = !dir.is_dir() && dir.extension().is_some_and(|e| e == "safetensors");
        if dir.is_file() || file_name {
            return Self::open_file(dir);
        }
        let quant = QuantConfig::read(dir)?;
        let index_path = dir.join(INDEX_FILE);
        let (paths, index) = if index_path.is_file() {
            let bytes = std::fs::read(&index_path)
                .map_err(|e| CheckpointError::io("read", &index_path, e))?;
            let index = ShardIndex::parse(&bytes, &index_path)?;
            let paths = index.files().iter().map(|f| dir.join(f)).collect();
            (paths, Some((index_path, index)))
        } else {
            (list_safetensors(dir)?, None)
        };
        if paths.is_empty() {
            return Err(CheckpointError::NoWeights {
                dir: dir.to_path_buf(),
            });
        }
        let shards = paths
            .iter()
            .map(|p| Shard::open(p))
            .collect::<Result<Vec<_>, _>>()?;
        Self::assemble(dir.to_path_buf(), quant, shards, index)
    }

    /// Opens one safetensors file as a checkpoint of its own. With a `config.json` beside
    /// it, that config says how the file is quantized; without one, the tensors say
    /// ([`QuantConfig::infer`]): `weight_scale_inv` tensors mean 128x128 blocks (and must
    /// be `[ceil(N/128), ceil(K/128)]`), `weight_scale` tensors per-tensor or per-channel
    /// scales by their shape. Tensors may be named `<module>.weight`,
    /// `<module>.weight_scale_inv`, ... or, for a file holding a single layer, just
    /// `weight`, `weight_scale_inv`, ... (the layer's name is then `""`).
    ///
    /// [`Checkpoint::dir`] is then the file's path.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        let shard = Shard::open(path)?;
        let beside = path.parent().unwrap_or(Path::new("."));
        let quant = if beside.join("config.json").is_file() {
            QuantConfig::read(beside)?
        } else {
            QuantConfig::infer(shard.tensors().iter().map(|(n, _)| n.as_str()))
        };
        Self::assemble(path.to_path_buf(), quant, vec![shard], None)
    }

    /// Builds a checkpoint from bytes held in memory: the `config.json` text, the shards as
    /// `(file name, bytes)`, and optionally the index text. For tests and fuzzing; real
    /// checkpoints use [`Checkpoint::open`].
    pub fn from_memory(
        config_json: &[u8],
        shards: Vec<(String, Vec<u8>)>,
        index_json: Option<&[u8]>,
    ) -> Result<Self, CheckpointError> {
        let dir = PathBuf::from("<memory>");
        let quant = QuantConfig::parse(config_json, &dir.join("config.json"))?;
        let index = match index_json {
            Some(b) => {
                let p = dir.join(INDEX_FILE);
                let idx = ShardIndex::parse(b, &p)?;
                Some((p, idx))
            }
            None => None,
        };
        if shards.is_empty() {
            return Err(CheckpointError::NoWeights { dir });
        }
        let shards = shards
            .into_iter()
            .map(|(name, bytes)| Shard::from_bytes(dir.join(name), bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Self::assemble(dir, quant, shards, index)
    }

    fn assemble(
        dir: PathBuf,
        quant: QuantConfig,
        shards: Vec<Shard>,
        index: Option<(PathBuf, ShardIndex)>,
    ) -> Result<Self, CheckpointError> {
        let tensors = tensor_table(&shards, index.as_ref())?;
        let mut ck = Checkpoint {
            dir,
            quant,
            shards,
            tensors,
            layers: Vec::new(),
            groups: Vec::new(),
        };
        (ck.layers, ck.groups) = group_experts(discover(&ck)?)?;
        if ck.layers.is_empty() && ck.groups.is_empty() {
            return Err(CheckpointError::NoQuantizedLayers {
                dir: ck.dir.clone(),
                tensors: ck.tensors.len(),
            });
        }
        Ok(ck)
    }

    /// The checkpoint directory (the file, for one opened with [`Checkpoint::open_file`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed quantization config.
    pub fn quant(&self) -> &QuantConfig {
        &self.quant
    }

    /// The shards, in file-name order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Every tensor, by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorRef> {
        &self.tensors
    }

    /// The quantized linear layers, in natural name order (`layers.2` before `layers.10`);
    /// experts are in [`Checkpoint::expert_groups`] instead (shared experts are here).
    pub fn layers(&self) -> &[QuantLayer] {
        &self.layers
    }

    /// The mixture-of-experts layers: one group per projection of a decoder layer's
    /// experts (`model.layers.0.mlp.experts.gate_proj` holding every
    /// `model.layers.0.mlp.experts.E.gate_proj`), in natural name order.
    pub fn expert_groups(&self) -> &[ExpertGroup] {
        &self.groups
    }

    /// The expert group with this name (`model.layers.0.mlp.experts.down_proj`), if any.
    pub fn expert_group(&self, name: &str) -> Option<&ExpertGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The quantized layer with this module name (`model.layers.0.mlp.down_proj`; `""` for
    /// the unnamed layer of a single-layer file; one expert, `...mlp.experts.3.down_proj`,
    /// as a dense layer of its own), if the checkpoint has one.
    pub fn layer(&self, name: &str) -> Option<&QuantLayer> {
        self.layers
            .iter()
            .chain(self.groups.iter().flat_map(|g| &g.experts))
            .find(|l| l.name == name)
    }

    /// Sets the activation and output dtype of every layer (the dtype `Linear::forward`
    /// then takes and returns). `config.json` gives it as `torch_dtype`; a file opened
    /// without one has bf16 until told otherwise.
    pub fn with_dtype(mut self, dtype: fp8_linear_core::DType) -> Self {
        self.quant.dtype = dtype;
        let groups = self.groups.iter_mut().flat_map(|g| {
            g.config.input_dtype = dtype;
            g.config.output_dtype = dtype;
            g.experts.iter_mut()
        });
        for l in self.layers.iter_mut().chain(groups) {
            l.config.input_dtype = dtype;
            l.config.output_dtype = dtype;
        }
        self
    }

    /// Tensors that belong to no quantized layer (norms, embeddings, unquantized heads):
    /// left alone.
    pub fn unquantized(&self) -> Vec<(&str, &TensorRef)> {
        let used: std::collections::HashSet<&str> = self
            .layers
            .iter()
            .flat_map(|l| {
                [
                    Some(&l.weight),
                    Some(&l.weight_scale),
                    l.input_scale.as_ref(),
                    l.bias.as_ref(),
                ]
            })
            .flatten()
            .map(String::as_str)
            .collect();
        self.tensors
            .iter()
            .filter(|(n, _)| !used.contains(n.as_str()))
            .map(|(n, r)| (n.as_str(), r))
            .collect()
    }

    /// The bytes of a tensor (a view into the mapped shard).
    pub fn data(&self, t: &TensorRef) -> &[u8] {
        self.shards[t.shard].data(&t.info)
    }

    /// A tensor by name.
    pub(crate) fn get(&self, name: &str) -> Option<&TensorRef> {
        self.tensors.get(name)
    }

    /// Decodes a small float tensor (scale, bias) into owned f32.
    pub(crate) fn floats(&self, name: &str, allow_e8m0: bool) -> Result<Vec<f32>, CheckpointError> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| CheckpointError::UnknownTensor {
                tensor: name.to_string(),
            })?;
        scales::decode(name, t.info.dtype, self.data(t), allow_e8m0)
    }

    /// The tensors of one layer: the FP8 weight borrowed from the map (no copy), the scales
    /// and bias copied to f32.
    pub fn layer_tensors(&self, layer: &QuantLayer) -> Result<LayerTensors<'_>, CheckpointError> {
        let w = self
            .tensors
            .get(&layer.weight)
            .ok_or_else(|| CheckpointError::UnknownTensor {
                tensor: layer.weight.clone(),
            })?;
        if w.info.dtype != Dtype::F8_E4M3 {
            return Err(CheckpointError::DType {
                tensor: layer.weight.clone(),
                expected: "F8_E4M3".into(),
                got: w.info.dtype.to_string(),
            });
        }
        let input_scale = match &layer.input_scale {
            Some(n) => {
                let v = self.floats(n, false)?;
                Some([v.first().copied().unwrap_or(f32::NAN)])
            }
            None => None,
        };
        let bias = match &layer.bias {
            Some(n) => Some(self.floats(n, false)?),
            None => None,
        };
        Ok(LayerTensors {
            weight: self.data(w),
            shape: [layer.config.n, layer.config.k],
            scales: self.floats(&layer.weight_scale, true)?,
            scale_shape: layer.scale_shape,
            input_scale,
            bias,
        })
    }
}

/// Merges the shards' tensors into one table. A tensor in two shards must agree in dtype and
/// shape; with an index, every tensor it lists must be in the shard it names, and that
/// shard's copy is the one used.
fn tensor_table(
    shards: &[Shard],
    index: Option<&(PathBuf, ShardIndex)>,
) -> Result<BTreeMap<String, TensorRef>, CheckpointError> {
    let mut table: BTreeMap<String, TensorRef> = BTreeMap::new();
    for (si, shard) in shards.iter().enumerate() {
        for (name, info) in shard.tensors() {
            let new = TensorRef {
                shard: si,
                info: info.clone(),
            };
            match table.get(name) {
                None => {
                    table.insert(name.clone(), new);
                }
                Some(old) => {
                    if old.info.dtype != info.dtype || old.info.shape != info.shape {
                        return Err(CheckpointError::ShardConflict {
                            tensor: name.clone(),
                            first: Box::new(TensorSite {
                                file: shards[old.shard].path().to_path_buf(),
                                dtype: old.info.dtype.to_string(),
                                shape: old.info.shape.clone(),
                            }),
                            second: Box::new(TensorSite {
                                file: shard.path().to_path_buf(),
                                dtype: info.dtype.to_string(),
                                shape: info.shape.clone(),
                            }),
                        });
                    }
                    let designated = index.is_some_and(|(_, idx)| {
                        idx.weight_map.get(name).is_some_and(|f| {
                            shard.path().file_name().is_some_and(|n| n == f.as_str())
                        })
                    });
                    if designated {
                        table.insert(name.clone(), new);
                    }
                }
            }
        }
    }
    if let Some((index_path, idx)) = index {
        for (tensor, file) in &idx.weight_map {
            let held = shards
                .iter()
                .find(|s| s.path().file_name().is_some_and(|n| n == file.as_str()))
                .is_some_and(|s| {
                    s.tensors()
                        .binary_search_by(|(n, _)| n.as_str().cmp(tensor))
                        .is_ok()
                });
            if !held {
                return Err(CheckpointError::IndexMismatch {
                    index: index_path.clone(),
                    tensor: tensor.clone(),
                    file: index_path.with_file_name(file),
                });
            }
        }
    }
    Ok(table)
}
