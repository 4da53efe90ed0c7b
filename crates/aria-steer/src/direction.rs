//! Direction files: safetensors holding, per site and block, a unit direction and the baseline
//! mean norm, with JSON metadata under the `aria.steer` key of the safetensors header.
//!
//! Tensors (f32):
//! * `residual.block{k}.direction` `[E]` and `residual.block{k}.mean_norm` `[1]`;
//! * `latent.direction` `[C]` and `latent.mean_norm` `[1]`;
//! * `text.direction` `[Dc]` and `text.mean_norm` `[1]`.
//!
//! Metadata ([`DirectionMeta`]): format version, the entries (site, block), the model identity
//! ([`ModelIdentity`]), the extraction method, the contrast sets (names and counts), the
//! strength convention and the per-block probe accuracies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use aria_core::{save_safetensors, DType, SafeTensorsFile, Tensor};

use crate::identity::{ModelDims, ModelIdentity};
use crate::{Result, SteerError};

/// The metadata key of the safetensors header.
pub const META_KEY: &str = "aria.steer";
/// The direction-file format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// How far a stored direction's norm may be from 1.
const UNIT_TOL: f64 = 1e-3;

/// Where a direction acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "site", content = "block", rename_all = "lowercase")]
pub enum Site {
    /// The DiT residual stream after block `k` (every token, memory tokens included).
    Residual(usize),
    /// The sampler state after each step (direction over latent channels).
    Latent,
    /// The cross-attention conditioning before the DiT projects it.
    Text,
}

impl Site {
    /// The tensor-name stem (`residual.block3`, `latent`, `text`).
    pub fn stem(self) -> String {
        match self {
            Site::Residual(k) => format!("residual.block{k}"),
            Site::Latent => "latent".into(),
            Site::Text => "text".into(),
        }
    }

    /// The hook site this corresponds to.
    pub fn hook_site(self) -> aria_core::hooks::HookSite {
        use aria_core::hooks::HookSite;
        match self {
            Site::Residual(k) => HookSite::Residual(k),
            Site::Latent => HookSite::Latent,
            Site::Text => HookSite::TextConditioning,
        }
    }

    /// The width a direction at this site must have on a model.
    pub fn width(self, dims: &ModelDims) -> usize {
        match self {
            Site::Residual(_) => dims.embed_dim,
            Site::Latent => dims.io_channels,
            Site::Text => dims.cond_token_dim,
        }
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Residual(k) => write!(f, "residual block {k}"),
            Site::Latent => f.write_str("latent"),
            Site::Text => f.write_str("text"),
        }
    }
}

/// What a unit of strength means for an `add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StrengthConvention {
    /// `h += α·n̄·d`: strength in units of the stored baseline mean norm `n̄`.
    #[default]
    MeanNorm,
    /// `h += α·d`: strength in the activation's own units.
    Raw,
}

/// Which token vectors the stored mean norm averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum NormScope {
    /// Latent tokens that are not padding, conditional batch rows, every step (aria's default).
    #[default]
    ValidLatentTokens,
    /// Every token (memory and latent, padded positions included), every batch row and step
    /// (the reference intervention's convention).
    AllTokens,
}

/// One contrast set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContrastSet {
    /// A name (file name or label).
    pub name: String,
    /// How many examples (captions or clips) it holds.
    pub count: usize,
}

/// The metadata of a direction file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionMeta {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The entries, in file order.
    pub entries: Vec<Site>,
    /// The model the directions were extracted from.
    pub model: ModelIdentity,
    /// The extraction method (`difference-in-means`, `synthetic`, …).
    pub method: String,
    /// Positive contrast set.
    pub positive: Option<ContrastSet>,
    /// Negative contrast set.
    pub negative: Option<ContrastSet>,
    /// What a unit of strength means.
    pub strength_convention: StrengthConvention,
    /// Which tokens the mean norms average.
    pub norm_scope: NormScope,
    /// Cross-validated logistic-probe accuracy of positive vs negative per residual block.
    #[serde(default)]
    pub probe_accuracy: Vec<(usize, f32)>,
    /// The block the separability report chose (highest probe accuracy), if any.
    #[serde(default)]
    pub best_block: Option<usize>,
    /// Strength used when a spec gives none.
    #[serde(default)]
    pub default_strength: Option<f32>,
    /// How the extraction ran (generation settings of the contrast runs), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<ExtractSettings>,
}

/// The generation settings of an extraction's contrast runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractSettings {
    /// Duration of each run (seconds; audio-side runs use the clip's, capped at the model's
    /// maximum).
    pub seconds: f64,
    /// Headroom added to the duration when sizing the latents (seconds).
    pub duration_padding: f64,
    /// Sampler steps.
    pub steps: usize,
    /// Classifier-free guidance scale.
    pub cfg_scale: f32,
    /// Seed of example `i` is `seed + i` (pairs share a seed).
    pub seed: u64,
    /// The seed generator (`torch` or `aria`).
    pub rng: String,
    /// Audio-to-audio noise level of audio-side sets.
    #[serde(default)]
    pub audio_noise_level: Option<f32>,
    /// The prompt of audio-side runs.
    #[serde(default)]
    pub audio_prompt: Option<String>,
    /// Cross-validation folds of the probe.
    pub folds: usize,
}

/// One stored direction.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionEntry {
    /// Where it acts.
    pub site: Site,
    /// Unit direction.
    pub direction: Vec<f32>,
    /// Baseline mean norm of the activation at that site.
    pub mean_norm: f32,
}

/// A direction file in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionFile {
    /// Metadata.
    pub meta: DirectionMeta,
    /// Directions, one per entry of `meta.entries`.
    pub entries: Vec<DirectionEntry>,
}

fn file_err(path: &Path, reason: impl Into<String>) -> SteerError {
    SteerError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Normalize `v` to unit length (f64 accumulation); an all-zero or non-finite vector is an
/// error naming `what`.
pub fn normalize(v: &[f32], what: &str) -> Result<(Vec<f32>, f64)> {
    let n = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    if !(n.is_finite() && n > 0.0) {
        return Err(SteerError::Invalid(format!(
            "{what}: cannot normalize a vector of norm {n}"
        )));
    }
    Ok((v.iter().map(|x| (*x as f64 / n) as f32).collect(), n))
}

impl DirectionFile {
    /// The entry for `site`.
    pub fn entry(&self, site: Site) -> Option<&DirectionEntry> {
        self.entries.iter().find(|e| e.site == site)
    }

    /// Check internal consistency (entries match the metadata, unit directions, finite norms).
    pub fn validate(&self, path: &Path) -> Result<()> {
        if self.meta.format_version != FORMAT_VERSION {
            return Err(file_err(
                path,
                format!(
                    "format version {} is not supported (this aria reads version {FORMAT_VERSION})",
                    self.meta.format_version
                ),
            ));
        }
        if self.entries.is_empty() {
            return Err(file_err(path, "holds no direction"));
        }
        let sites: Vec<Site> = self.entries.iter().map(|e| e.site).collect();
        if sites != self.meta.entries {
            return Err(file_err(
                path,
                format!(
                    "metadata lists entries {:?} but the file holds {sites:?}",
                    self.meta.entries
                ),
            ));
        }
        for (i, e) in self.entries.iter().enumerate() {
            if self.entries[..i].iter().any(|o| o.site == e.site) {
                return Err(file_err(path, format!("{} appears twice", e.site)));
            }
            if e.direction.iter().any(|x| !x.is_finite()) {
                return Err(file_err(
                    path,
                    format!("{} direction holds non-finite values", e.site),
                ));
            }
            let n = e
                .direction
                .iter()
                .map(|x| (*x as f64) * (*x as f64))
                .sum::<f64>()
                .sqrt();
            if (n - 1.0).abs() > UNIT_TOL {
                return Err(file_err(
                    path,
                    format!(
                        "{} direction has norm {n:.6}, expected a unit vector",
                        e.site
                    ),
                ));
            }
            if !(e.mean_norm.is_finite() && e.mean_norm >= 0.0) {
                return Err(file_err(
                    path,
                    format!("{} mean norm is {}", e.site, e.mean_norm),
                ));
            }
        }
        Ok(())
    }

    /// Write the file (validated first).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.validate(path)?;
        let mut owned: Vec<(String, Tensor)> = Vec::new();
        for e in &self.entries {
            let stem = e.site.stem();
            owned.push((
                format!("{stem}.direction"),
                Tensor::from_vec(e.direction.clone(), &[e.direction.len()])?,
            ));
            owned.push((
                format!("{stem}.mean_norm"),
                Tensor::from_vec(vec![e.mean_norm], &[1])?,
            ));
        }
        let refs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let json = serde_json::to_string(&self.meta)
            .map_err(|e| SteerError::Invalid(format!("direction metadata: {e}")))?;
        let meta = HashMap::from([(META_KEY.to_string(), json)]);
        save_safetensors(path, &refs, Some(&meta))?;
        Ok(())
    }

    /// Read and validate a direction file (no model check; see [`DirectionFile::load_for`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let st = SafeTensorsFile::open(path)?;
        Self::from_safetensors(path, &st)
    }

    /// Parse an opened safetensors file.
    pub fn from_safetensors(path: &Path, st: &SafeTensorsFile) -> Result<Self> {
        let json = st.metadata().get(META_KEY).ok_or_else(|| {
            file_err(
                path,
                format!(
                    "no `{META_KEY}` metadata: not an aria direction file (a bare array needs \
                     its model, site and norm stated; re-extract or convert it)"
                ),
            )
        })?;
        let meta: DirectionMeta = serde_json::from_str(json)
            .map_err(|e| file_err(path, format!("`{META_KEY}` metadata is malformed: {e}")))?;
        let mut entries = Vec::with_capacity(meta.entries.len());
        for &site in &meta.entries {
            let stem = site.stem();
            let get = |suffix: &str| -> Result<Vec<f32>> {
                let name = format!("{stem}.{suffix}");
                let info = st.tensors().get(&name).ok_or_else(|| {
                    file_err(
                        path,
                        format!("metadata lists {site} but tensor `{name}` is missing"),
                    )
                })?;
                if info.dtype != DType::F32 || info.shape.len() != 1 {
                    return Err(file_err(
                        path,
                        format!(
                            "tensor `{name}` is {} {:?}, expected a 1-D f32 vector",
                            info.dtype, info.shape
                        ),
                    ));
                }
                Ok(st.tensor(&name)?.to_vec_f32()?)
            };
            let direction = get("direction")?;
            let norm = get("mean_norm")?;
            let [mean_norm] = norm[..] else {
                return Err(file_err(
                    path,
                    format!("`{stem}.mean_norm` has {} elements, expected 1", norm.len()),
                ));
            };
            entries.push(DirectionEntry {
                site,
                direction,
                mean_norm,
            });
        }
        let f = DirectionFile { meta, entries };
        f.validate(path)?;
        Ok(f)
    }

    /// Check the file against a model: every direction's width must fit its site and every
    /// residual block must exist (always an error); the model identity must match unless
    /// `force` is set.
    pub fn check_model(&self, path: &Path, model: &ModelIdentity, force: bool) -> Result<()> {
        for e in &self.entries {
            let want = e.site.width(&model.dims);
            if e.direction.len() != want {
                return Err(SteerError::Dimension {
                    path: path.to_path_buf(),
                    what: e.site.to_string(),
                    expected: want,
                    found: e.direction.len(),
                });
            }
            if let Site::Residual(k) = e.site {
                if k >= model.dims.depth {
                    return Err(file_err(
                        path,
                        format!(
                            "{} does not exist: the model has {} blocks",
                            e.site, model.dims.depth
                        ),
                    ));
                }
            }
        }
        if force {
            return Ok(());
        }
        let mine = &self.meta.model;
        let reason = if mine.dims != model.dims {
            Some(format!(
                "model widths {:?}, this model {:?}",
                mine.dims, model.dims
            ))
        } else if mine.signature != model.signature {
            Some(format!(
                "config/tensor signature {} differs from this model's {}",
                mine.signature, model.signature
            ))
        } else if mine.weight_checksum != model.weight_checksum {
            Some(format!(
                "weight checksum {} differs from this model's {}",
                mine.weight_checksum, model.weight_checksum
            ))
        } else {
            None
        };
        match reason {
            Some(reason) => Err(SteerError::ModelMismatch {
                path: path.to_path_buf(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// [`DirectionFile::load`] then [`DirectionFile::check_model`].
    pub fn load_for(path: impl AsRef<Path>, model: &ModelIdentity, force: bool) -> Result<Self> {
        let path: PathBuf = path.as_ref().to_path_buf();
        let f = Self::load(&path)?;
        f.check_model(&path, model, force)?;
        Ok(f)
    }
}
