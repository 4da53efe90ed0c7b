//! LoRA adapters in the official file format (spec §9): safetensors with fp16 tensors
//! `<module>.parametrizations.weight.<i>.<param>` and metadata `lora_config` = JSON
//! `{rank, alpha, adapter_type, dropout, include, exclude}`. DiT modules are named
//! `model.<path>`, the duration embedder `conditioners.seconds_total.embedder.embedding.1`.
//! The parameters per family: `lora_A [r, in·k]` and `lora_B [out, r]` (`lora`, `dora-rows`,
//! `dora-cols`, `bora`) or the core `M_xs [r, r]` (the `-xs` families), plus `magnitude`
//! (`[out]` for `dora-rows*`, `[in]` for `dora-cols*`) or `magnitude_r [out]` and
//! `magnitude_c [in]` (`bora*`).
//!
//! Merging (scaling `s = alpha/rank`, run-time `strength`), composed in stack order, with
//! `Δ = B·A`, or `Δ = U·M·Vᵀ` for the -xs families:
//! * `lora`, `lora-xs`: `W' = W + s·strength·Δ`;
//! * `dora-rows` (`dora`), `dora-rows-xs`: `V = W + s·strength·Δ`,
//!   `W' = m ⊙ V / (‖V‖_row + 1e−12)`;
//! * `dora-cols`, `dora-cols-xs`: the same with column norms and `m [in]`;
//! * `bora`, `bora-xs`: row-normalise × `m_r`, then column-normalise × `m_c`.
//!
//! The DoRA/BoRA families with strength 0 leave `W` unchanged. The -xs files do not store
//! their bases: `U [out, r]` and `V [in, r]` are the top-`r` singular vectors of the module's
//! **checkpoint** weight (even when other adapters sit before it in the stack), with the sign
//! of each `U` column chosen so that its largest-magnitude entry is positive (the matching `V`
//! column follows). They are computed once per adapter and module, when the stack is first
//! applied ([`svd::top_bases`]).
//!
//! The `include` / `exclude` filters of `lora_config` select the modules the official loader
//! puts an adapter on ([`filter`]); tensors of other modules in a file are ignored, as there.
//! A legacy `dora` file is `dora-cols` when its magnitudes are stored `[1, in]`, else
//! `dora-rows`.
//!
//! Every adapted module of a file is one [`LoraAdapter`], an [`aria_core::nn::Adapter`] that a
//! layer applies at a strength ([`Linear::set_adapters`]). Applying a [`LoraStack`] to a [`Dit`]
//! sets the adapters of every layer; the checkpoint weights stay as loaded (the layer keeps the
//! adapted matrix beside them), so changing a strength, adding or removing a file is one more
//! [`LoraStack::apply`], never a reload. Several files of any families blend this way, each at
//! its own strength. [`LoraStack::apply_to_linear`] does the same for a layer outside the DiT
//! (the duration embedder's Linear); [`Dit::clear_loras`] drops them all.

pub mod filter;
mod merge;
pub mod svd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aria_core::nn::{Adapter, Linear};
use aria_core::{DType, Tensor, WeightLoader};
use rayon::prelude::*;

use crate::dit::Dit;
use crate::{DitError, Result};

pub use merge::LoraAdapter;

/// The official adapter families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterKind {
    /// Standard low-rank update (`lora`).
    Lora,
    /// DoRA with per-row (output) magnitudes (`dora-rows`, legacy `dora`).
    DoraRows,
    /// DoRA with per-column (input) magnitudes (`dora-cols`).
    DoraCols,
    /// Row then column normalisation with two magnitude vectors (`bora`).
    Bora,
    /// Low-rank update `U·M·Vᵀ` on frozen SVD bases of the base weight (`lora-xs`).
    LoraXs,
    /// DoRA-rows on an -XS update (`dora-rows-xs`).
    DoraRowsXs,
    /// DoRA-cols on an -XS update (`dora-cols-xs`).
    DoraColsXs,
    /// BoRA on an -XS update (`bora-xs`).
    BoraXs,
}

impl AdapterKind {
    /// The kind of an `adapter_type` string (`dora` is resolved by the caller).
    pub fn from_name(name: &str) -> Option<AdapterKind> {
        Some(match name {
            "lora" => AdapterKind::Lora,
            "dora" | "dora-rows" => AdapterKind::DoraRows,
            "dora-cols" => AdapterKind::DoraCols,
            "bora" => AdapterKind::Bora,
            "lora-xs" => AdapterKind::LoraXs,
            "dora-rows-xs" => AdapterKind::DoraRowsXs,
            "dora-cols-xs" => AdapterKind::DoraColsXs,
            "bora-xs" => AdapterKind::BoraXs,
            _ => return None,
        })
    }

    /// The official `adapter_type` name.
    pub fn name(self) -> &'static str {
        match self {
            AdapterKind::Lora => "lora",
            AdapterKind::DoraRows => "dora-rows",
            AdapterKind::DoraCols => "dora-cols",
            AdapterKind::Bora => "bora",
            AdapterKind::LoraXs => "lora-xs",
            AdapterKind::DoraRowsXs => "dora-rows-xs",
            AdapterKind::DoraColsXs => "dora-cols-xs",
            AdapterKind::BoraXs => "bora-xs",
        }
    }

    /// Whether the update lives on SVD bases of the base weight (the file stores `M_xs`).
    pub fn is_xs(self) -> bool {
        matches!(
            self,
            AdapterKind::LoraXs
                | AdapterKind::DoraRowsXs
                | AdapterKind::DoraColsXs
                | AdapterKind::BoraXs
        )
    }

    /// The normalisation family: the kind with the -XS part dropped.
    pub fn family(self) -> AdapterKind {
        match self {
            AdapterKind::LoraXs => AdapterKind::Lora,
            AdapterKind::DoraRowsXs => AdapterKind::DoraRows,
            AdapterKind::DoraColsXs => AdapterKind::DoraCols,
            AdapterKind::BoraXs => AdapterKind::Bora,
            k => k,
        }
    }
}

/// The `lora_config` metadata.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct LoraConfig {
    /// Rank `r`.
    pub rank: usize,
    /// `alpha` (scaling = alpha / rank).
    pub alpha: f64,
    /// One of the eight families of [`AdapterKind`] (or the legacy `dora`).
    #[serde(default = "default_adapter")]
    pub adapter_type: String,
    /// Module-name substrings (with `[a-b]` ranges): when given, only matching modules are
    /// adapted.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// Module-name substrings (with `[a-b]` ranges) never adapted.
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
}

fn default_adapter() -> String {
    "lora".into()
}

/// The tensors of one adapted module (f32).
#[derive(Debug, Clone)]
pub struct LoraTarget {
    /// `lora_A [r, in·k]` (`None` for the -xs families).
    pub a: Option<Tensor>,
    /// `lora_B [out, r]` (`None` for the -xs families).
    pub b: Option<Tensor>,
    /// `M_xs [r, r]` of the -xs families.
    pub core: Option<Tensor>,
    /// DoRA magnitude (`[out]` rows, `[in]` cols) or BoRA row magnitude.
    pub magnitude: Option<Tensor>,
    /// BoRA column magnitude `[in]`.
    pub magnitude_c: Option<Tensor>,
}

/// A LoRA file.
#[derive(Debug, Clone)]
pub struct LoraFile {
    path: PathBuf,
    config: LoraConfig,
    kind: AdapterKind,
    targets: BTreeMap<String, Arc<LoraAdapter>>,
}

pub(crate) fn lora_err(path: &Path, reason: impl Into<String>) -> DitError {
    DitError::Input {
        what: format!("LoRA file {}", path.display()),
        reason: reason.into(),
    }
}

/// The family of a legacy `dora` file from its magnitude shapes, as the official loader
/// resolves it: `[1, in]` is `dora-cols`, anything else `dora-rows`.
fn resolve_dora(parts: &BTreeMap<String, BTreeMap<String, Tensor>>) -> AdapterKind {
    let first = parts.values().find_map(|p| p.get("magnitude"));
    match first.map(|m| m.shape().to_vec()) {
        Some(s) if s.len() == 2 && s[0] == 1 => AdapterKind::DoraCols,
        _ => AdapterKind::DoraRows,
    }
}

impl LoraFile {
    /// Read a LoRA safetensors file of any of the eight families. Modules outside the file's
    /// `include` / `exclude` filters are dropped.
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
        let named = AdapterKind::from_name(&config.adapter_type).ok_or_else(|| {
            lora_err(
                path,
                format!(
                    "adapter_type `{}` is not one of lora, dora-rows, dora-cols, bora, lora-xs, \
                     dora-rows-xs, dora-cols-xs, bora-xs",
                    config.adapter_type
                ),
            )
        })?;
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
            if !filter::selected(module, config.include.as_deref(), config.exclude.as_deref()) {
                continue;
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
        let kind = if config.adapter_type == "dora" {
            resolve_dora(&parts)
        } else {
            named
        };
        let mut targets = BTreeMap::new();
        for (module, mut p) in parts {
            let mut take = |k: &str| p.remove(k);
            let need = |t: Option<Tensor>, what: &str| {
                t.ok_or_else(|| {
                    lora_err(
                        path,
                        format!("`{module}`: {what} missing for {}", kind.name()),
                    )
                })
            };
            let (a, b, core) = if kind.is_xs() {
                (None, None, Some(need(take("M_xs"), "M_xs")?))
            } else {
                (
                    Some(need(take("lora_A"), "lora_A")?),
                    Some(need(take("lora_B"), "lora_B")?),
                    None,
                )
            };
            let (magnitude, magnitude_c) = match kind.family() {
                AdapterKind::Lora => (None, None),
                AdapterKind::DoraRows | AdapterKind::DoraCols => {
                    (Some(need(take("magnitude"), "magnitude")?), None)
                }
                _ => (
                    Some(need(take("magnitude_r"), "magnitude_r")?),
                    Some(need(take("magnitude_c"), "magnitude_c")?),
                ),
            };
            if let (Some(a), Some(b)) = (&a, &b) {
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
            }
            let adapter = LoraAdapter::new(
                path.to_path_buf(),
                kind.name().to_string(),
                kind,
                config.alpha / config.rank as f64,
                config.rank,
                module.clone(),
                LoraTarget {
                    a,
                    b,
                    core,
                    magnitude,
                    magnitude_c,
                },
            );
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

    /// Compute the SVD bases of the stack's -XS adapters of `module` from its checkpoint
    /// weight `base` (`[out, in·k]`), where not done yet.
    pub fn prepare_bases(&self, module: &str, base: &Tensor) -> Result<()> {
        for (f, _) in &self.entries {
            if let Some(a) = f.adapter(module) {
                a.prepare_bases(base)?;
            }
        }
        Ok(())
    }

    /// Set the adapters of one layer named `module` in the files (e.g.
    /// `conditioners.seconds_total.embedder.embedding.1`) from the stack: the layer recomputes
    /// its weight from the checkpoint weight (none targets it: the checkpoint weight again).
    /// The layer's weight must be its checkpoint weight (the -XS bases come from it). Returns
    /// whether any adapter targets it.
    pub fn apply_to_linear(&self, layer: &mut Linear, module: &str) -> Result<bool> {
        let adapters = self.adapters_for(module);
        let any = !adapters.is_empty();
        if self.needs_bases(module) {
            self.prepare_bases(module, &merge::dense_of(layer.weight())?)?;
        }
        layer.set_adapters(adapters)?;
        Ok(any)
    }

    fn needs_bases(&self, module: &str) -> bool {
        self.entries
            .iter()
            .any(|(f, _)| f.adapter(module).is_some_and(|a| a.needs_bases()))
    }

    /// The merged weight of `module` from its checkpoint weight `w`, or `None` if no adapter
    /// targets it (what [`LoraStack::apply_to_linear`] makes a layer compute with).
    pub fn merged_weight(&self, module: &str, w: &Tensor) -> Result<Option<Tensor>> {
        self.prepare_bases(module, w)?;
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
        // The -XS bases of every layer that still needs them, one SVD per layer and adapter,
        // layers in parallel.
        let jobs: Vec<(Arc<LoraAdapter>, Tensor)> = dit
            .linears()
            .into_iter()
            .zip(&paths)
            .filter(|(_, p)| self.needs_bases(p))
            .map(|(lin, p)| {
                let base = merge::dense_of(lin.weight())?;
                Ok(self
                    .entries
                    .iter()
                    .filter_map(|(f, _)| f.adapter(p))
                    .filter(|a| a.needs_bases())
                    .map(|a| (a, base.clone()))
                    .collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        jobs.par_iter()
            .try_for_each(|(a, base)| a.prepare_bases(base))?;
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
