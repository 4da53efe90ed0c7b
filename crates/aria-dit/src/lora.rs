//! LoRA adapters in the official file format (spec §9): safetensors with fp16 tensors
//! `<module>.parametrizations.weight.<i>.lora_A` `[r, in·k]`, `lora_B` `[out, r]` (and
//! `magnitude` for DoRA, `magnitude_r`/`magnitude_c` for BoRA), metadata `lora_config` = JSON
//! `{rank, alpha, adapter_type, dropout, include, exclude}`. DiT modules are named
//! `model.<path>`, the duration embedder `conditioners.seconds_total.embedder.embedding.1`.
//!
//! Merging (scaling `s = alpha/rank`, runtime `strength`), composed in stack order:
//! * `lora`: `W' = W + s·strength·(B·A)`;
//! * `dora-rows` (`dora`): `V = W + s·strength·B·A`, `W' = m ⊙ V / (‖V‖_row + 1e−12)`;
//! * `dora-cols`: the same with column norms and `m [in]`;
//! * `bora`: row-normalise × `m_r`, then column-normalise × `m_c`.
//!
//! DoRA/BoRA with strength 0 leave `W` unchanged. The LoRA-XS variants (which need an SVD of the
//! base weight) are not supported and are reported as such.
//!
//! Every adapted module of a file is one [`LoraAdapter`], an [`aria_core::nn::Adapter`] that a
//! layer applies at a strength ([`Linear::set_adapters`]). Applying a [`LoraStack`] to a [`Dit`]
//! sets the adapters of every layer; the checkpoint weights stay as loaded (the layer keeps the
//! adapted matrix beside them), so changing a strength or removing a file is one more
//! [`LoraStack::apply`], never a reload. [`LoraStack::apply_to_linear`] does the same for a
//! layer outside the DiT (the duration embedder's Linear); [`Dit::clear_loras`] drops them all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aria_core::nn::{Adapter, Linear, LowRank};
use aria_core::{CoreError, DType, Tensor, WeightLoader};

use crate::dit::Dit;
use crate::{DitError, Result};

/// Adapter types supported for merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterKind {
    /// Standard low-rank update.
    Lora,
    /// DoRA with per-row (output) magnitudes.
    DoraRows,
    /// DoRA with per-column (input) magnitudes.
    DoraCols,
    /// Row then column normalisation with two magnitude vectors.
    Bora,
}

/// The `lora_config` metadata.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `alpha` (scaling = alpha / rank).
    pub alpha: f64,
    /// `lora`, `dora`, `dora-rows`, `dora-cols`, `bora` (`*-xs` variants unsupported).
    #[serde(default = "default_adapter")]
    pub adapter_type: String,
    /// Module-name substrings the adapter was trained on (informational).
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// Module-name substrings excluded in training (informational).
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
}

fn default_adapter() -> String {
    "lora".into()
}

/// The tensors of one adapted module (f32).
#[derive(Debug, Clone)]
pub struct LoraTarget {
    /// `[r, in·k]`.
    pub a: Tensor,
    /// `[out, r]`.
    pub b: Tensor,
    /// DoRA magnitude (`[out]` rows, `[in]` cols) or BoRA row magnitude.
    pub magnitude: Option<Tensor>,
    /// BoRA column magnitude `[in]`.
    pub magnitude_c: Option<Tensor>,
}

/// One adapted module of a LoRA file: the layer adapter that merges it (see the module docs for
/// the rules).
#[derive(Debug)]
pub struct LoraAdapter {
    path: PathBuf,
    adapter_type: String,
    kind: AdapterKind,
    scaling: f64,
    module: String,
    target: LoraTarget,
}

/// A LoRA file.
#[derive(Debug, Clone)]
pub struct LoraFile {
    path: PathBuf,
    config: LoraConfig,
    kind: AdapterKind,
    targets: BTreeMap<String, Arc<LoraAdapter>>,
}

fn lora_err(path: &Path, reason: impl Into<String>) -> DitError {
    DitError::Input {
        what: format!("LoRA file {}", path.display()),
        reason: reason.into(),
    }
}

impl LoraFile {
    /// Read a LoRA safetensors file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let w = WeightLoader::open(&[path])?;
        let names = w.names();
        let first = names.first().ok_or_else(|| lora_err(path, "no tensors"))?;
        let meta = w.file_metadata(first)?;
        let cfg_text = meta
            .get("lora_config")
            .ok_or_else(|| lora_err(path, "metadata key `lora_config` missing"))?;
        let config: LoraConfig = serde_json::from_str(cfg_text)
            .map_err(|e| lora_err(path, format!("`lora_config`: {e}")))?;
        if config.rank == 0 {
            return Err(lora_err(path, "`lora_config.rank` is 0"));
        }
        let kind = match config.adapter_type.as_str() {
            "lora" => AdapterKind::Lora,
            "dora" | "dora-rows" => AdapterKind::DoraRows,
            "dora-cols" => AdapterKind::DoraCols,
            "bora" => AdapterKind::Bora,
            other => {
                return Err(lora_err(
                    path,
                    format!(
                    "adapter_type `{other}` is not supported (lora, dora-rows, dora-cols, bora)"
                ),
                ))
            }
        };
        // Group tensors by module: `<module>.parametrizations.weight.<i>.<param>`.
        let mut parts: BTreeMap<String, BTreeMap<String, Tensor>> = BTreeMap::new();
        for n in &names {
            let (module, rest) = n
                .split_once(".parametrizations.weight.")
                .ok_or_else(|| lora_err(path, format!("unexpected tensor name `{n}`")))?;
            let (idx, param) = rest
                .split_once('.')
                .ok_or_else(|| lora_err(path, format!("unexpected tensor name `{n}`")))?;
            if idx.parse::<usize>().is_err() {
                return Err(lora_err(path, format!("unexpected tensor name `{n}`")));
            }
            let t = w.get_any(n)?.to_dtype(DType::F32)?;
            if parts
                .entry(module.to_string())
                .or_default()
                .insert(param.to_string(), t)
                .is_some()
            {
                return Err(lora_err(
                    path,
                    format!("module `{module}` has two adapters"),
                ));
            }
        }
        let mut targets = BTreeMap::new();
        for (module, mut p) in parts {
            let mut take = |k: &str| p.remove(k);
            let a = take("lora_A")
                .ok_or_else(|| lora_err(path, format!("`{module}`: lora_A missing")))?;
            let b = take("lora_B")
                .ok_or_else(|| lora_err(path, format!("`{module}`: lora_B missing")))?;
            let (magnitude, magnitude_c) = match kind {
                AdapterKind::Lora => (None, None),
                AdapterKind::DoraRows | AdapterKind::DoraCols => (take("magnitude"), None),
                AdapterKind::Bora => (take("magnitude_r"), take("magnitude_c")),
            };
            if a.rank() != 2 || b.rank() != 2 || a.shape()[0] != b.shape()[1] {
                return Err(lora_err(
                    path,
                    format!(
                        "`{module}`: lora_A {:?} and lora_B {:?} do not chain",
                        a.shape(),
                        b.shape()
                    ),
                ));
            }
            if kind != AdapterKind::Lora && magnitude.is_none() {
                return Err(lora_err(
                    path,
                    format!("`{module}`: magnitude missing for {}", config.adapter_type),
                ));
            }
            if kind == AdapterKind::Bora && magnitude_c.is_none() {
                return Err(lora_err(path, format!("`{module}`: magnitude_c missing")));
            }
            let adapter = LoraAdapter {
                path: path.to_path_buf(),
                adapter_type: config.adapter_type.clone(),
                kind,
                scaling: config.alpha / config.rank as f64,
                module: module.clone(),
                target: LoraTarget {
                    a,
                    b,
                    magnitude,
                    magnitude_c,
                },
            };
            targets.insert(module, Arc::new(adapter));
        }
        Ok(LoraFile {
            path: path.to_path_buf(),
            config,
            kind,
            targets,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `lora_config` metadata.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The adapter type.
    pub fn kind(&self) -> AdapterKind {
        self.kind
    }

    /// `alpha / rank`.
    pub fn scaling(&self) -> f64 {
        self.config.alpha / self.config.rank as f64
    }

    /// Adapted module names (`model.<DiT path>` or `conditioners.<…>`).
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.targets.keys().map(String::as_str)
    }

    /// The tensors for `module`, if adapted.
    pub fn target(&self, module: &str) -> Option<&LoraTarget> {
        self.targets.get(module).map(|a| &a.target)
    }

    /// The layer adapter of `module`, if adapted.
    pub fn adapter(&self, module: &str) -> Option<Arc<LoraAdapter>> {
        self.targets.get(module).cloned()
    }

    /// Apply this adapter to the weight `w` (`[out, in·k]`, any float dtype) of `module` with
    /// `strength`: `Ok(None)` when the module is not adapted.
    pub fn merge(&self, module: &str, w: &Tensor, strength: f32) -> Result<Option<Tensor>> {
        self.targets
            .get(module)
            .map(|a| a.merged(w, strength))
            .transpose()
    }
}

impl LoraAdapter {
    /// The module it adapts (`model.<DiT path>` or `conditioners.<…>`).
    pub fn module(&self) -> &str {
        &self.module
    }

    /// The adapter type.
    pub fn kind(&self) -> AdapterKind {
        self.kind
    }

    /// The module's tensors.
    pub fn target(&self) -> &LoraTarget {
        &self.target
    }

    /// The adapted weight of `w` (`[out, in·k]`, any float dtype) at `strength`, in f32.
    pub fn merged(&self, w: &Tensor, strength: f32) -> Result<Tensor> {
        let t = &self.target;
        let module = self.module.as_str();
        let shape = w.shape().to_vec();
        let out = shape.first().copied().unwrap_or(0);
        let inn = w.elem_count() / out.max(1);
        let (ash, bsh) = (t.a.shape(), t.b.shape());
        if bsh[0] != out || ash[1] != inn {
            return Err(lora_err(
                &self.path,
                format!("`{module}`: A {ash:?} / B {bsh:?} do not fit weight {shape:?}"),
            ));
        }
        if self.kind != AdapterKind::Lora && strength == 0.0 {
            return w.to_dtype(DType::F32)?.reshape(&shape).map_err(Into::into);
        }
        let r = ash[0];
        let av = t.a.to_vec_f32()?;
        let bv = t.b.to_vec_f32()?;
        let c = (self.scaling * strength as f64) as f32;
        let mut v = w.to_vec_f32()?;
        for o in 0..out {
            let brow = &bv[o * r..(o + 1) * r];
            let row = &mut v[o * inn..(o + 1) * inn];
            for (i, x) in row.iter_mut().enumerate() {
                let mut d = 0f32;
                for k in 0..r {
                    d += brow[k] * av[k * inn + i];
                }
                *x += c * d;
            }
        }
        let row_norms = |v: &[f32]| -> Vec<f32> {
            v.chunks(inn.max(1))
                .map(|r| r.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt() as f32)
                .collect()
        };
        let col_norms = |v: &[f32]| -> Vec<f32> {
            let mut s = vec![0f64; inn];
            for r in v.chunks(inn.max(1)) {
                for (a, x) in s.iter_mut().zip(r) {
                    *a += (*x as f64).powi(2);
                }
            }
            s.into_iter().map(|x| x.sqrt() as f32).collect()
        };
        let mag = |m: &Option<Tensor>, n: usize| -> Result<Vec<f32>> {
            let m = m
                .as_ref()
                .ok_or_else(|| lora_err(&self.path, format!("`{module}`: magnitude missing")))?;
            if m.elem_count() != n {
                return Err(lora_err(
                    &self.path,
                    format!("`{module}`: magnitude {:?}, expected {n}", m.shape()),
                ));
            }
            Ok(m.to_vec_f32()?)
        };
        match self.kind {
            AdapterKind::Lora => {}
            AdapterKind::DoraRows | AdapterKind::Bora => {
                let m = mag(&t.magnitude, out)?;
                let nr = row_norms(&v);
                for (o, row) in v.chunks_mut(inn.max(1)).enumerate() {
                    let d = nr[o] + 1e-12;
                    row.iter_mut().for_each(|x| *x = *x / d * m[o]);
                }
                if self.kind == AdapterKind::Bora {
                    let mc = mag(&t.magnitude_c, inn)?;
                    let nc = col_norms(&v);
                    for row in v.chunks_mut(inn.max(1)) {
                        for (i, x) in row.iter_mut().enumerate() {
                            *x = *x / (nc[i] + 1e-12) * mc[i];
                        }
                    }
                }
            }
            AdapterKind::DoraCols => {
                let m = mag(&t.magnitude, inn)?;
                let nc = col_norms(&v);
                for row in v.chunks_mut(inn.max(1)) {
                    for (i, x) in row.iter_mut().enumerate() {
                        *x = *x / (nc[i] + 1e-12) * m[i];
                    }
                }
            }
        }
        Ok(Tensor::from_vec(v, &shape)?)
    }
}

impl Adapter for LoraAdapter {
    fn describe(&self) -> String {
        format!(
            "{} `{}` of {}",
            self.adapter_type,
            self.module,
            self.path.display()
        )
    }

    /// The merge is computed on the host (once per strength change, never per forward) and the
    /// result is put where `w` lives.
    fn merge(&self, w: &Tensor, strength: f32) -> aria_core::Result<Tensor> {
        let m = self.merged(w, strength).map_err(|e| match e {
            DitError::Core(c) => c,
            other => CoreError::Invalid(other.to_string()),
        })?;
        crate::dit::on_device(&m, &w.device()).map_err(|e| match e {
            DitError::Core(c) => c,
            other => CoreError::Invalid(other.to_string()),
        })
    }

    fn low_rank(&self) -> Option<LowRank> {
        (self.kind == AdapterKind::Lora).then(|| LowRank {
            a: self.target.a.clone(),
            b: self.target.b.clone(),
            scale: self.scaling as f32,
        })
    }
}

/// An ordered set of adapters with strengths.
#[derive(Debug, Clone, Default)]
pub struct LoraStack {
    entries: Vec<(Arc<LoraFile>, f32)>,
}

impl LoraStack {
    /// An empty stack.
    pub fn new() -> Self {
        LoraStack::default()
    }

    /// Append an adapter (applied after those already present).
    pub fn push(&mut self, file: Arc<LoraFile>, strength: f32) {
        self.entries.push((file, strength));
    }

    /// Remove the adapter at `index`.
    pub fn remove(&mut self, index: usize) -> Result<Arc<LoraFile>> {
        if index >= self.entries.len() {
            return Err(DitError::Input {
                what: "LoRA stack".into(),
                reason: format!("no entry {index}"),
            });
        }
        Ok(self.entries.remove(index).0)
    }

    /// Change the strength of the adapter at `index`.
    pub fn set_strength(&mut self, index: usize, strength: f32) -> Result<()> {
        let e = self.entries.get_mut(index).ok_or_else(|| DitError::Input {
            what: "LoRA stack".into(),
            reason: format!("no entry {index}"),
        })?;
        e.1 = strength;
        Ok(())
    }

    /// Entries in application order.
    pub fn entries(&self) -> &[(Arc<LoraFile>, f32)] {
        &self.entries
    }

    /// Whether the stack is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The adapters of the stack that target `module`, in order, with their strengths.
    pub fn adapters_for(&self, module: &str) -> Vec<(Arc<dyn Adapter>, f32)> {
        self.entries
            .iter()
            .filter_map(|(f, s)| f.adapter(module).map(|a| (a as Arc<dyn Adapter>, *s)))
            .collect()
    }

    /// Set the adapters of one layer named `module` in the files (e.g.
    /// `conditioners.seconds_total.embedder.embedding.1`) from the stack: the layer recomputes
    /// its weight from the checkpoint weight (none targets it: the checkpoint weight again).
    /// Returns whether any adapter targets it.
    pub fn apply_to_linear(&self, layer: &mut Linear, module: &str) -> Result<bool> {
        let adapters = self.adapters_for(module);
        let any = !adapters.is_empty();
        layer.set_adapters(adapters)?;
        Ok(any)
    }

    /// The merged weight of `module` (from its base weight `w`), or `None` if no adapter
    /// targets it (what [`LoraStack::apply_to_linear`] makes a layer compute with).
    pub fn merged_weight(&self, module: &str, w: &Tensor) -> Result<Option<Tensor>> {
        let mut cur: Option<Tensor> = None;
        for (f, s) in &self.entries {
            if let Some(m) = f.merge(module, cur.as_ref().unwrap_or(w), *s)? {
                cur = Some(m);
            }
        }
        Ok(cur)
    }

    /// Set every DiT layer's adapters from the stack (an empty stack removes them all): each
    /// adapted weight is recomputed from the checkpoint weight. Returns the number of adapted
    /// layers. Every `model.*` module of every file must exist in the DiT.
    pub fn apply(&self, dit: &mut Dit) -> Result<usize> {
        let paths: Vec<String> = dit
            .linears()
            .into_iter()
            .map(|l| format!("model.{}", dit.module_path(l)))
            .collect();
        for (f, _) in &self.entries {
            if let Some(m) = f
                .modules()
                .filter(|m| m.starts_with("model."))
                .find(|m| !paths.iter().any(|p| p == m))
            {
                return Err(lora_err(
                    f.path(),
                    format!("module `{m}` is not a DiT linear layer"),
                ));
            }
        }
        let mut n = 0;
        for (lin, path) in dit.linears_mut().into_iter().zip(&paths) {
            n += usize::from(self.apply_to_linear(lin, path)?);
        }
        dit.mark_weights_changed();
        Ok(n)
    }
}

impl Dit {
    /// Remove every adapter: the model computes with its checkpoint weights again.
    pub fn clear_loras(&mut self) -> Result<()> {
        for lin in self.linears_mut() {
            lin.set_adapters(Vec::new())?;
        }
        self.mark_weights_changed();
        Ok(())
    }
}
