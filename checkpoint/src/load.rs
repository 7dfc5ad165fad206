//! From a checkpoint layer to a ready [`Linear`] in one call: find the layer, borrow its
//! tensors from the mapped file, select the kernel for the target and build it there.

use std::path::Path;

use fp8_linear::{GroupedLinear, GroupedLinearError, Linear, LinearError, Options, Target};

use crate::checkpoint::Checkpoint;
use crate::discover::{module_of, tensor_name};
use crate::error::CheckpointError;
use crate::experts::ExpertGroup;
use crate::layer::QuantLayer;

/// Why a layer could not be loaded into a [`Linear`]: the checkpoint (a missing or
/// misshapen tensor, a wrong dtype, an unknown layer name), or the kernel (nothing fits the
/// layer on the target, or the chosen kernel refused the weights).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The checkpoint could not be read, or has no such layer.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The layer was read, but no kernel could be built for it on the target.
    #[error("layer `{layer}`: {source}")]
    Linear {
        /// The layer (module name).
        layer: String,
        /// Selection's reasons (every candidate's), or the chosen kernel's error.
        #[source]
        source: LinearError,
    },
    /// The experts were read, but no grouped kernel could be built for them on the target.
    #[error("experts `{layer}`: {source}")]
    Grouped {
        /// The expert group.
        layer: String,
        /// Selection's reasons (every candidate's), or the chosen kernel's error.
        #[source]
        source: GroupedLinearError,
    },
}

impl Checkpoint {
    /// The quantized layer `name` (`model.layers.0.mlp.down_proj`; a trailing `.weight` is
    /// accepted too), or the typed error that says why there is none:
    /// [`CheckpointError::NotQuantized`] when `<name>.weight` exists but is not FP8,
    /// [`CheckpointError::UnknownLayer`] (listing the layers there are) otherwise.
    pub fn find_layer(&self, name: &str) -> Result<&QuantLayer, CheckpointError> {
        let module = self
            .layer(name)
            .map(|l| l.name.as_str())
            .or_else(|| module_of(name, "weight"))
            .unwrap_or(name);
        if let Some(l) = self.layer(module) {
            return Ok(l);
        }
        let weight = tensor_name(module, "weight");
        if let Some(t) = self.tensors().get(&weight) {
            return Err(CheckpointError::NotQuantized {
                layer: module.to_string(),
                weight,
                got: t.info.dtype.to_string(),
            });
        }
        Err(CheckpointError::UnknownLayer {
            layer: module.to_string(),
            dir: self.dir().to_path_buf(),
            known: self.layers().iter().map(|l| l.name.clone()).collect(),
        })
    }

    /// The layer `name` as a ready [`Linear`] on `target`: the kernel is selected from the
    /// built-in tables for the target's device (with `options`' overrides), built there, and
    /// handed the layer's weights (the FP8 codes straight from the mapped file; a GPU kernel
    /// uploads them to the target's context). The `Linear` owns what it needs: the
    /// checkpoint can be dropped afterwards.
    ///
    /// ```no_run
    /// use fp8_linear::{Options, Target};
    /// use fp8_linear_checkpoint::Checkpoint;
    ///
    /// let target = Target::best_available(); // GPU 0 if usable, else the CPU
    /// let ck = Checkpoint::open("path/to/checkpoint")?;
    /// let down = ck.linear(&target, "model.layers.0.mlp.down_proj", &Options::from_env()?)?;
    /// println!("{} runs {}", down.config(), down.plan());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn linear(
        &self,
        target: &Target,
        name: &str,
        options: &Options,
    ) -> Result<Linear, LoadError> {
        let layer = self.find_layer(name)?;
        let tensors = self.layer_tensors(layer)?;
        Linear::new(target, &layer.config, &tensors.view(), options).map_err(|source| {
            LoadError::Linear {
                layer: layer.name.clone(),
                source,
            }
        })
    }
}

impl Checkpoint {
    /// The expert group `name` (`model.layers.0.mlp.experts.gate_proj`), or
    /// [`CheckpointError::UnknownLayer`] listing the groups there are.
    pub fn find_expert_group(&self, name: &str) -> Result<&ExpertGroup, CheckpointError> {
        self.expert_group(name)
            .ok_or_else(|| CheckpointError::UnknownLayer {
                layer: name.to_string(),
                dir: self.dir().to_path_buf(),
                known: self
                    .expert_groups()
                    .iter()
                    .map(|g| g.name.clone())
                    .collect(),
            })
    }

    /// The experts of the group `name` as one ready [`GroupedLinear`] on `target`: the
    /// grouped kernel is selected from the built-in grouped tables for the target's device
    /// (with `options`' overrides), built there and handed every expert's weights, stacked.
    pub fn grouped(
        &self,
        target: &Target,
        name: &str,
        options: &Options,
    ) -> Result<GroupedLinear, LoadError> {
        let group = self.find_expert_group(name)?;
        let tensors = self.grouped_tensors(group)?;
        GroupedLinear::new(target, &group.config, &tensors.view(), options).map_err(|source| {
            LoadError::Grouped {
                layer: group.name.clone(),
                source,
            }
        })
    }
}

/// Opens `path` (a checkpoint directory, or one `.safetensors` file, with or without a
/// `config.json` beside it: see [`Checkpoint::open_file`]) and returns its layer `name` as
/// a ready [`Linear`] on `target` ([`Checkpoint::linear`]). For a file holding one layer
/// as bare `weight` + `weight_scale_inv` tensors, `name` is `""`.
///
/// To load several layers, open the checkpoint once and call [`Checkpoint::linear`] for
/// each: this opens (and checks) the whole checkpoint every time.
pub fn load_linear(
    path: impl AsRef<Path>,
    name: &str,
    target: &Target,
    options: &Options,
) -> Result<Linear, LoadError> {
    Checkpoint::open(path)?.linear(target, name, options)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use fp8_linear::cpu::CpuReference;
    use fp8_linear::fp8::f32_to_e4m3;
    use fp8_linear::{
        bf16, DType, Fp8Kernel, GroupShape, Options, SelectError, Target, Tensor, TensorMut,
    };
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;

    use super::*;
    use crate::generate::{generate, GenOptions};
    use crate::presets::Preset;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "fp8-linear-checkpoint-{tag}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A tensor for [`write_file`]: name, dtype, shape, little-endian bytes.
    type T = (&'static str, Dtype, Vec<usize>, Vec<u8>);

    fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
        v.into_iter().flat_map(f32::to_le_bytes).collect()
    }

    /// FP8 codes `[n, k]` of small varied values.
    fn codes(n: usize, k: usize) -> Vec<u8> {
        (0..n * k)
            .map(|i| f32_to_e4m3(((i * 7 % 17) as f32 - 8.0) / 4.0))
            .collect()
    }

    fn write_file(path: &Path, tensors: &[T]) {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None::<HashMap<String, String>>, path).unwrap();
    }

    fn bf16_input(m: usize, k: usize) -> Vec<bf16> {
        (0..m * k)
            .map(|i| bf16::from_f32(((i * 5 % 13) as f32 - 6.0) / 8.0))
            .collect()
    }

    /// Runs `linear` on `m` rows of bf16 activations and the f64 oracle on the same layer
    /// and weights; the relative Frobenius error must stay under bf16's 1e-2.
    fn check_against_reference(ck: &Checkpoint, name: &str, linear: &mut Linear, m: usize) {
        let layer = ck.find_layer(name).unwrap();
        let (n, k) = (layer.config.n, layer.config.k);
        let x = bf16_input(m, k);
        let mut y = vec![bf16::ZERO; m * n];
        linear
            .forward(
                &Tensor::bf16(&x, [m, k]),
                &mut TensorMut::bf16(&mut y, [m, n]),
            )
            .unwrap();
        let mut oracle = CpuReference::for_layer(&layer.config);
        oracle
            .process_weights(&ck.layer_tensors(layer).unwrap().view())
            .unwrap();
        let mut want = vec![bf16::ZERO; m * n];
        oracle
            .apply(
                &Tensor::bf16(&x, [m, k]),
                &mut TensorMut::bf16(&mut want, [m, n]),
            )
            .unwrap();
        let (mut num, mut den, mut amax) = (0f64, 0f64, 0f32);
        for (g, w) in y.iter().zip(&want) {
            let (g, w) = (g.to_f32() as f64, w.to_f32() as f64);
            num += (g - w) * (g - w);
            den += w * w;
            amax = amax.max(w.abs() as f32);
        }
        let err = (num / den.max(1e-30)).sqrt();
        assert!(amax > 0.0, "{name}: a degenerate layer (all outputs zero)");
        assert!(err < 1e-2, "{name}: rel err {err:e} against the reference");
    }

    #[test]
    fn generated_checkpoint_layer_to_linear_in_one_call() {
        let dir = TempDir::new("gen");
        generate(dir.path(), &GenOptions::new(Preset::Tiny)).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        let target = Target::cpu();
        let name = "model.layers.0.mlp.down_proj";
        let mut down = ck.linear(&target, name, &Options::none()).unwrap();
        assert_eq!(down.plan().to_string(), "M = 1..: CpuFp8Gemm");
        assert_eq!((down.config().n, down.config().k), (256, 688));
        assert_eq!(down.config().input_dtype, DType::Bf16);
        check_against_reference(&ck, name, &mut down, 3);

        // A trailing `.weight` names the same layer; load_linear does it all from the path.
        let mut again = load_linear(
            dir.path(),
            "model.layers.1.self_attn.k_proj.weight",
            &target,
            &Options::none(),
        )
        .unwrap();
        assert_eq!(again.config().n, 64);
        check_against_reference(&ck, "model.layers.1.self_attn.k_proj", &mut again, 2);

        // Every layer of the checkpoint loads.
        for l in ck.layers() {
            ck.linear(&target, &l.name, &Options::none()).unwrap();
        }
    }

    #[test]
    fn lone_file_without_config_means_128x128_blocks() {
        let dir = TempDir::new("lone");
        generate(dir.path(), &GenOptions::new(Preset::Tiny)).unwrap();
        let with_config = Checkpoint::open(dir.path()).unwrap();
        // The same shard, alone in a directory without config.json.
        let alone = TempDir::new("lone-copy");
        let file = alone.path().join("layer.safetensors");
        std::fs::copy(dir.path().join("model.safetensors"), &file).unwrap();
        let ck = Checkpoint::open(&file).unwrap();
        assert_eq!(ck.dir(), file.as_path());
        assert_eq!(ck.quant().block, Some([128, 128]));
        assert_eq!(ck.layers(), with_config.layers());

        // The shard opened where it lies uses the config.json beside it.
        let beside = Checkpoint::open_file(dir.path().join("model.safetensors")).unwrap();
        assert_eq!(beside.quant(), with_config.quant());

        let name = "model.layers.0.self_attn.q_proj";
        let mut q = load_linear(&file, name, &Target::cpu(), &Options::none()).unwrap();
        check_against_reference(&ck, name, &mut q, 4);
    }

    #[test]
    fn single_layer_file_with_bare_tensor_names() {
        let dir = TempDir::new("bare");
        let (n, k) = (200, 300); // ragged: scales [2, 3]
        let file = dir.path().join("w.safetensors");
        write_file(
            &file,
            &[
                ("weight", Dtype::F8_E4M3, vec![n, k], codes(n, k)),
                (
                    "weight_scale_inv",
                    Dtype::F32,
                    vec![2, 3],
                    f32s([0.5, 0.25, 0.125, 1.0, 2.0, 0.75]),
                ),
            ],
        );
        let ck = Checkpoint::open(&file).unwrap();
        assert_eq!(ck.layers().len(), 1);
        let l = &ck.layers()[0];
        assert_eq!(l.name, "");
        assert_eq!(l.scale_shape, [2, 3]);
        assert_eq!(
            l.config.weight.group,
            GroupShape::Block {
                rows: 128,
                cols: 128
            }
        );
        let mut lin = load_linear(&file, "", &Target::cpu(), &Options::none()).unwrap();
        check_against_reference(&ck, "", &mut lin, 5);

        // With f32 activations instead of the default bf16.
        let ck = ck.with_dtype(DType::F32);
        let mut lin = ck.linear(&Target::cpu(), "", &Options::none()).unwrap();
        assert_eq!(lin.config().input_dtype, DType::F32);
        let x = vec![0.5f32; k];
        let mut y = vec![0f32; n];
        lin.forward(
            &Tensor::f32(&x, [1, k]),
            &mut TensorMut::f32(&mut y, [1, n]),
        )
        .unwrap();
        assert!(y.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn lone_file_per_channel_and_per_tensor_scales() {
        let dir = TempDir::new("scaled");
        let (n, k) = (64, 96);
        let file = dir.path().join("scaled.safetensors");
        write_file(
            &file,
            &[
                ("chan.weight", Dtype::F8_E4M3, vec![n, k], codes(n, k)),
                (
                    "chan.weight_scale",
                    Dtype::F32,
                    vec![n],
                    f32s((0..n).map(|j| 0.01 + j as f32 * 1e-3)),
                ),
                ("tens.weight", Dtype::F8_E4M3, vec![n, k], codes(n, k)),
                ("tens.weight_scale", Dtype::F32, vec![], f32s([0.02])),
            ],
        );
        let ck = Checkpoint::open(&file).unwrap();
        let chan = ck.find_layer("chan").unwrap();
        assert_eq!(chan.config.weight.group, GroupShape::PerChannel);
        assert_eq!(chan.scale_shape, [n, 1]);
        let tens = ck.find_layer("tens").unwrap();
        assert_eq!(tens.config.weight.group, GroupShape::PerTensor);
        for name in ["chan", "tens"] {
            let mut lin = ck.linear(&Target::cpu(), name, &Options::none()).unwrap();
            check_against_reference(&ck, name, &mut lin, 3);
        }

        // With an input_scale the activations are static, per tensor.
        let file = dir.path().join("static.safetensors");
        write_file(
            &file,
            &[
                ("s.weight", Dtype::F8_E4M3, vec![n, k], codes(n, k)),
                ("s.weight_scale", Dtype::F32, vec![], f32s([0.02])),
                ("s.input_scale", Dtype::F32, vec![1], f32s([0.01])),
            ],
        );
        let ck = Checkpoint::open(&file).unwrap();
        assert!(ck.quant().static_activations);
        let act = ck.find_layer("s").unwrap().config.activation.unwrap();
        assert!(!act.dynamic);
        let mut lin = ck.linear(&Target::cpu(), "s", &Options::none()).unwrap();
        check_against_reference(&ck, "s", &mut lin, 2);
    }

    #[test]
    fn every_problem_is_a_typed_error() {
        let dir = TempDir::new("errors");
        generate(dir.path(), &GenOptions::new(Preset::Tiny)).unwrap();
        let ck = Checkpoint::open(dir.path()).unwrap();
        let target = Target::cpu();
        let none = Options::none();

        // A layer name the checkpoint lacks: the error lists what it has.
        let e = ck.linear(&target, "model.layers.9.mlp.up_proj", &none);
        match e {
            Err(LoadError::Checkpoint(CheckpointError::UnknownLayer { layer, known, .. })) => {
                assert_eq!(layer, "model.layers.9.mlp.up_proj");
                assert_eq!(known.len(), ck.layers().len());
            }
            other => panic!("expected UnknownLayer, got {other:?}"),
        }
        let msg = ck.find_layer("nope").unwrap_err().to_string();
        assert!(
            msg.contains("`nope`") && msg.contains("model.layers.0"),
            "{msg}"
        );

        // A tensor that exists but is not FP8: the unquantized lm_head.
        let e = ck.linear(&target, "lm_head", &none).unwrap_err();
        assert!(
            matches!(&e, LoadError::Checkpoint(CheckpointError::NotQuantized { weight, got, .. })
                if weight == "lm_head.weight" && got == "BF16"),
            "{e}"
        );

        // No kernel for the layer on the target: selection's reasons, under the layer's name.
        let forced = Options::none()
            .with_overrides(fp8_linear::Overrides::none().backend("no-such-backend"));
        let e = ck
            .linear(&target, "model.layers.0.mlp.down_proj", &forced)
            .unwrap_err();
        assert!(
            matches!(&e, LoadError::Linear { layer, source: LinearError::Select(SelectError::NoSuchBackend { .. }) }
                if layer == "model.layers.0.mlp.down_proj"),
            "{e}"
        );
        // A profile target selects, but building there is refused, typed.
        let a100 = Target::profile("a100").unwrap();
        let e = ck
            .linear(&a100, "model.layers.0.mlp.down_proj", &none)
            .unwrap_err();
        assert!(matches!(e, LoadError::Linear { .. }), "{e}");

        // Lone files: a missing scale, a wrong scale shape, a wrong dtype.
        // (In a directory of their own: next to the generated config.json they would be
        // read as block-quantized, as that config says.)
        let (n, k) = (256, 256);
        let lone = TempDir::new("errors-lone");
        let bad = |tag: &str, tensors: &[T]| {
            let f = lone.path().join(format!("{tag}.safetensors"));
            write_file(&f, tensors);
            match load_linear(&f, "m", &target, &none) {
                Err(LoadError::Checkpoint(e)) => e,
                Err(e) => panic!("{tag}: expected a checkpoint error, got {e}"),
                Ok(_) => panic!("{tag}: expected an error"),
            }
        };
        let w = || ("m.weight", Dtype::F8_E4M3, vec![n, k], codes(n, k));
        let e = bad("no-scale", &[w()]);
        assert!(
            matches!(&e, CheckpointError::MissingScale { layer, expected, .. }
                if layer == "m" && expected == "m.weight_scale"),
            "{e}"
        );
        let e = bad(
            "bad-shape",
            &[
                w(),
                ("m.weight_scale_inv", Dtype::F32, vec![2, 3], f32s([1.0; 6])),
            ],
        );
        assert!(
            matches!(&e, CheckpointError::ScaleShape { tensor, got, .. }
                if tensor == "m.weight_scale_inv" && got == &[2, 3]),
            "{e}"
        );
        assert!(e.to_string().contains("[2, 2]"), "{e}");
        let e = bad(
            "bad-scale-dtype",
            &[
                w(),
                ("m.weight_scale_inv", Dtype::I32, vec![2, 2], vec![0; 16]),
            ],
        );
        assert!(
            matches!(&e, CheckpointError::DType { tensor, got, .. }
                if tensor == "m.weight_scale_inv" && got == "I32"),
            "{e}"
        );
        let e = bad(
            "bad-weight-dtype",
            &[
                ("m.weight", Dtype::F8_E5M2, vec![n, k], codes(n, k)),
                ("m.weight_scale_inv", Dtype::F32, vec![2, 2], f32s([1.0; 4])),
            ],
        );
        assert!(
            matches!(&e, CheckpointError::DType { tensor, got, .. }
                if tensor == "m.weight" && got == "F8_E5M2"),
            "{e}"
        );
        let e = bad(
            "bad-scale-value",
            &[
                w(),
                (
                    "m.weight_scale_inv",
                    Dtype::F32,
                    vec![2, 2],
                    f32s([1.0, f32::NAN, 1.0, 1.0]),
                ),
            ],
        );
        assert!(
            matches!(&e, CheckpointError::BadScale { index: 1, .. }),
            "{e}"
        );
        // A missing file is an I/O error naming it.
        let e =
            load_linear(dir.path().join("absent.safetensors"), "m", &target, &none).unwrap_err();
        assert!(
            matches!(&e, LoadError::Checkpoint(CheckpointError::Io { .. })),
            "{e}"
        );
    }
}
