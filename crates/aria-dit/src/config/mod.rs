//! Typed `model_config.json` of an SA3 checkpoint.
//!
//! The file is the source of truth; [`ModelConfig::from_file`] parses it and reports missing
//! keys, unknown keys and bad values with the file name and the key path (for example
//! `model.conditioning.configs[0].config.max_length`). Unknown keys are rejected in the sections
//! aria interprets, exactly where the official constructors would reject them:
//! `model.conditioning` (and every conditioner `config`), `model.diffusion` and
//! `model.diffusion.config` (the DiT constructor has no catch-all argument). The autoencoder
//! section (`model.pretransform`) is kept as raw JSON here and interpreted by `aria-codec`.
//!
//! [`ModelConfig::preset`] builds the configuration of a released model (`small-music`,
//! `small-sfx`, `medium` and their `-base` variants) from the values established for them; a
//! checkpoint's own file always wins.
//!
//! The text-encoder folder is resolved by [`ModelConfig::t5_folder`]: the prompt conditioner's
//! `model_path`, relative to the folder of `model_config.json` (or absolute), else its
//! `subfolder` (released checkpoints: `repo_id` + `subfolder` = `t5gemma-b-b-ul2`, the folder
//! beside `model_config.json`), else the last path component of `repo_id` / `model_name`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::sampler::Shift;
use crate::{DitError, Result};

mod kinds;
pub use kinds::{GlobalCondType, Objective, QkNorm};

/// The whole `model_config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    /// `"diffusion_cond"` for SA3 text-to-audio checkpoints.
    pub model_type: String,
    /// Maximum number of audio samples (a multiple of the downsampling ratio).
    pub sample_size: usize,
    /// Audio sample rate (44100).
    pub sample_rate: u32,
    /// Audio channels (2).
    #[serde(default = "default_channels")]
    pub audio_channels: usize,
    /// The `model` section.
    pub model: ModelSection,
    /// The folder the file was read from (relative paths in the config are resolved against it).
    #[serde(skip)]
    pub dir: PathBuf,
    /// The file this was read from (`<preset:NAME>` for presets); used in error messages.
    #[serde(skip)]
    pub path: PathBuf,
}

fn default_channels() -> usize {
    2
}

/// `model` section.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelSection {
    /// Latent channels of the diffusion model (256 for released models).
    pub io_channels: usize,
    /// The autoencoder (`pretransform`) section, interpreted by `aria-codec`.
    pub pretransform: serde_json::Value,
    /// Conditioners.
    pub conditioning: ConditioningConfig,
    /// Diffusion wrapper and DiT hyper-parameters.
    pub diffusion: DiffusionConfig,
}

/// `model.conditioning`.
#[derive(Debug, Clone, Deserialize)]
pub struct ConditioningConfig {
    /// Width of every conditioning token (768).
    pub cond_dim: usize,
    /// One entry per conditioner.
    pub configs: Vec<ConditionerEntry>,
    /// Fallback metadata keys per conditioner id (unused by SA3; empty).
    #[serde(default)]
    pub default_keys: serde_json::Map<String, Value>,
    /// Conditioner ids whose inputs arrive pre-encoded (unused by SA3; empty).
    #[serde(default)]
    pub pre_encoded_keys: Vec<String>,
}

/// One conditioner of `model.conditioning.configs`.
#[derive(Debug, Clone, Deserialize)]
pub struct ConditionerEntry {
    /// Conditioning id (`prompt`, `seconds_total`).
    pub id: String,
    /// Conditioner type (`t5gemma`, `number`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Type-specific settings (see [`ConditionerEntry::settings`] for the typed form).
    pub config: serde_json::Value,
}

/// How pad positions of a text conditioner's output are handled (`padding_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PaddingMode {
    /// Raw encoder output at pad positions.
    None,
    /// Pad positions set to zero (the class default).
    #[default]
    Zero,
    /// Pad positions replaced by the learned `padding_embedding` (SA3).
    Learned,
}

/// Typed `config` of a `t5gemma` conditioner (`T5GemmaConditioner` arguments).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct T5GemmaCondConfig {
    /// `google/t5gemma-b-b-ul2` (the only model the reference accepts).
    #[serde(default = "t5_name")]
    pub model_name: String,
    /// Padded prompt length (256 for released models; the class default is 128).
    #[serde(default = "d128")]
    pub max_length: usize,
    /// Pad handling (`learned` for SA3).
    #[serde(default)]
    pub padding_mode: PaddingMode,
    /// Force a `proj_out` Linear even when the encoder width equals `cond_dim`.
    #[serde(default)]
    pub project_out: bool,
    /// Training flag (ignored at inference).
    #[serde(default)]
    pub enable_grad: bool,
    /// Text-encoder folder, relative to the folder of `model_config.json` (or absolute).
    #[serde(default)]
    pub model_path: Option<String>,
    /// Hub repository that bundles the encoder (released checkpoints).
    #[serde(default)]
    pub repo_id: Option<String>,
    /// Folder of the encoder inside `repo_id` (`t5gemma-b-b-ul2`).
    #[serde(default)]
    pub subfolder: Option<String>,
}

fn t5_name() -> String {
    "google/t5gemma-b-b-ul2".into()
}
fn d128() -> usize {
    128
}

/// Fourier features of a number conditioner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FourierKind {
    /// Learned random frequencies (`TimePositionalEmbedding`; the class default).
    #[default]
    Learned,
    /// Fixed exponential frequencies ([`crate::conditioner::expo_fourier_features`]; SA3).
    Expo,
}

/// Typed `config` of a `number` conditioner (`NumberConditioner` arguments).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumberCondConfig {
    /// Lower clamp (0 for `seconds_total`).
    #[serde(default)]
    pub min_val: f32,
    /// Upper clamp (384 for `seconds_total`).
    #[serde(default = "one_f")]
    pub max_val: f32,
    /// Fourier features (`expo` for SA3).
    #[serde(default)]
    pub fourier_features_type: FourierKind,
}

fn one_f() -> f32 {
    1.0
}

/// The typed settings of one conditioner.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionerSettings {
    /// A T5Gemma text conditioner.
    T5Gemma(T5GemmaCondConfig),
    /// A number conditioner.
    Number(NumberCondConfig),
}

/// `model.diffusion`.
#[derive(Debug, Clone, Deserialize)]
pub struct DiffusionConfig {
    /// `rf_denoiser` (post-trained, ping-pong sampler) or `rectified_flow` (base, euler).
    pub diffusion_objective: Objective,
    /// Conditioning ids concatenated into the cross-attention context.
    #[serde(default)]
    pub cross_attention_cond_ids: Vec<String>,
    /// Conditioning ids forming the global condition.
    #[serde(default)]
    pub global_cond_ids: Vec<String>,
    /// Conditioning ids concatenated into the local-add condition.
    #[serde(default)]
    pub local_add_cond_ids: Vec<String>,
    /// Conditioning ids concatenated to the input channels (unused by SA3).
    #[serde(default)]
    pub input_concat_ids: Vec<String>,
    /// Conditioning ids prepended to the sequence (unused by SA3).
    #[serde(default)]
    pub prepend_cond_ids: Vec<String>,
    /// Inference schedule shift as written (absent in released files: LogSNR default); the
    /// parsed form is [`DiffusionConfig::sampling_shift`].
    #[serde(default)]
    pub sampling_distribution_shift_options: Option<serde_json::Value>,
    /// `sampling_distribution_shift_options` parsed at load ([`Shift::inference_default`] when
    /// absent).
    #[serde(skip)]
    pub sampling_shift: Shift,
    /// Training-time shift (not used at inference).
    #[serde(default)]
    pub distribution_shift_options: Option<serde_json::Value>,
    /// Stored flag; `generate()` always masks padding attention.
    #[serde(default)]
    pub mask_padding_attention: bool,
    /// Stored flag; `generate()` always uses the effective length for the schedule.
    #[serde(default)]
    pub use_effective_length_for_schedule: bool,
    /// DiT constructor arguments.
    pub config: DitConfig,
}

/// The DiT hyper-parameters (`model.diffusion.config`).
#[derive(Debug, Clone, Deserialize)]
pub struct DitConfig {
    /// Latent channels in and out.
    pub io_channels: usize,
    /// Patch size along time (1).
    #[serde(default = "one")]
    pub patch_size: usize,
    /// Transformer width E.
    pub embed_dim: usize,
    /// Number of blocks.
    pub depth: usize,
    /// Attention heads (head dim = E / heads).
    pub num_heads: usize,
    /// Width of cross-attention tokens.
    pub cond_token_dim: usize,
    /// Width of the global condition.
    pub global_cond_dim: usize,
    /// `adaLN` for SA3.
    #[serde(default)]
    pub global_cond_type: GlobalCondType,
    /// Fourier features dim of the timestep.
    #[serde(default = "d256")]
    pub timestep_features_dim: usize,
    /// Memory tokens prepended to the sequence.
    #[serde(default)]
    pub num_memory_tokens: usize,
    /// Channels of the local-add condition (io_channels + 1), 0 if absent.
    #[serde(default)]
    pub local_add_cond_dim: usize,
    /// Attention settings.
    #[serde(default)]
    pub attn_kwargs: AttnKwargs,
    /// Feed-forward settings.
    #[serde(default)]
    pub ff_kwargs: FfKwargs,
}

fn one() -> usize {
    1
}
fn d256() -> usize {
    256
}

/// `attn_kwargs` of the DiT.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AttnKwargs {
    /// QK norm type (`rms` for SA3).
    #[serde(default)]
    pub qk_norm: QkNorm,
    /// Differential attention (medium).
    #[serde(default)]
    pub differential: bool,
}

/// `ff_kwargs` of the DiT.
#[derive(Debug, Clone, Deserialize)]
pub struct FfKwargs {
    /// Inner width multiplier (4).
    #[serde(default = "four")]
    pub mult: usize,
}

impl Default for FfKwargs {
    fn default() -> Self {
        FfKwargs { mult: 4 }
    }
}

fn four() -> usize {
    4
}

impl DitConfig {
    /// Head dimension `E / heads`.
    pub fn head_dim(&self) -> usize {
        self.embed_dim / self.num_heads.max(1)
    }
}

/// Largest width (channels, embedding, conditioning, tokens) a configuration may declare.
const MAX_WIDTH: usize = 1 << 16;

/// Keys the official code reads (or accepts as constructor arguments) per section.
mod known {
    pub const CONDITIONING: &[&str] = &["cond_dim", "configs", "default_keys", "pre_encoded_keys"];
    pub const ENTRY: &[&str] = &["id", "type", "config"];
    pub const DIFFUSION: &[&str] = &[
        "type",
        "diffusion_objective",
        "cross_attention_cond_ids",
        "global_cond_ids",
        "local_add_cond_ids",
        "input_concat_ids",
        "prepend_cond_ids",
        "modular_local_cond_configs",
        "distribution_shift_options",
        "sampling_distribution_shift_options",
        "mask_padding_attention",
        "use_effective_length_for_schedule",
        "config",
    ];
    /// `DiffusionTransformer`, `ContinuousTransformer` and `TransformerBlock` keyword arguments
    /// that the configuration may set (the ones the wrappers pass themselves are excluded).
    pub const DIT: &[&str] = &[
        // DiffusionTransformer
        "io_channels",
        "patch_size",
        "embed_dim",
        "cond_token_dim",
        "project_cond_tokens",
        "global_cond_dim",
        "project_global_cond",
        "input_concat_dim",
        "prepend_cond_dim",
        "depth",
        "num_heads",
        "transformer_type",
        "global_cond_type",
        "timestep_cond_type",
        "timestep_embed_dim",
        "timestep_features_type",
        "timestep_features_dim",
        "timestep_features_logsnr",
        // ContinuousTransformer
        "final_cross_attn_ix",
        "local_add_cond_dim",
        "causal",
        "rotary_pos_emb",
        "cross_attn_rotary_pos_emb",
        "zero_init_branch_outputs",
        "conformer",
        "use_sinusoidal_emb",
        "use_abs_pos_emb",
        "abs_pos_emb_max_length",
        "num_memory_tokens",
        "sliding_window",
        // TransformerBlock
        "add_rope",
        "layer_scale",
        "norm_type",
        "attn_kwargs",
        "ff_kwargs",
        "norm_kwargs",
    ];
    pub const MODEL: &[&str] = &["io_channels", "pretransform", "conditioning", "diffusion"];
}

/// Check that the object at `path` (`what`) has only `allowed` keys and has every `required` key.
fn check_keys(
    file: &Path,
    what: &str,
    v: &Value,
    allowed: Option<&[&str]>,
    required: &[&str],
) -> Result<()> {
    let obj = v
        .as_object()
        .ok_or_else(|| cfg_err(file, format!("`{what}` must be an object")))?;
    if let Some(allowed) = allowed {
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(cfg_err(file, format!("unknown key `{what}.{k}`")));
        }
    }
    if let Some(k) = required.iter().find(|k| !obj.contains_key(**k)) {
        return Err(cfg_err(file, format!("missing key `{what}.{k}`")));
    }
    Ok(())
}

/// Check that the string at `key` (if present; `null` allowed with `nullable`) is one of
/// `allowed`, naming the key and the allowed values otherwise.
fn check_choice(
    file: &Path,
    key: &str,
    v: Option<&Value>,
    allowed: &[&str],
    nullable: bool,
) -> Result<()> {
    let list = allowed.join(", ");
    match v {
        None => Ok(()),
        Some(Value::Null) if nullable => Ok(()),
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(()),
        Some(Value::String(s)) => Err(cfg_err(
            file,
            format!("`{key}`: `{s}` is not supported (allowed: {list})"),
        )),
        Some(other) => Err(cfg_err(
            file,
            format!("`{key}`: {other} is not a string (allowed: {list})"),
        )),
    }
}

fn cfg_err(file: &Path, reason: String) -> DitError {
    DitError::Config {
        path: file.to_path_buf(),
        reason,
    }
}

/// Deserialize the value at key path `what`, naming it in errors.
fn typed<T: serde::de::DeserializeOwned>(file: &Path, what: &str, v: &Value) -> Result<T> {
    serde_json::from_value(v.clone()).map_err(|e| cfg_err(file, format!("`{what}`: {e}")))
}

impl ConditionerEntry {
    /// The typed settings of this conditioner (`file` and `index` only name it in errors).
    pub fn settings_at(&self, file: &Path, index: usize) -> Result<ConditionerSettings> {
        let what = format!("model.conditioning.configs[{index}].config");
        match self.kind.as_str() {
            "t5gemma" => {
                let c: T5GemmaCondConfig = typed(file, &what, &self.config)?;
                if c.model_name != "google/t5gemma-b-b-ul2" {
                    return Err(cfg_err(
                        file,
                        format!("`{what}.model_name`: unknown T5Gemma model `{}`", c.model_name),
                    ));
                }
                if !(1..=MAX_WIDTH).contains(&c.max_length) {
                    return Err(cfg_err(
                        file,
                        format!("`{what}.max_length` ({}) must be in 1..={MAX_WIDTH}", c.max_length),
                    ));
                }
                Ok(ConditionerSettings::T5Gemma(c))
            }
            "number" => {
                let c: NumberCondConfig = typed(file, &what, &self.config)?;
                if !(c.max_val - c.min_val).is_finite() {
                    return Err(cfg_err(
                        file,
                        format!("`{what}`: min_val {} and max_val {} must span a finite range", c.min_val, c.max_val),
                    ));
                }
                if c.max_val.partial_cmp(&c.min_val) != Some(std::cmp::Ordering::Greater) {
                    return Err(cfg_err(
                        file,
                        format!("`{what}`: max_val {} must exceed min_val {}", c.max_val, c.min_val),
                    ));
                }
                Ok(ConditionerSettings::Number(c))
            }
            other => Err(cfg_err(
                file,
                format!("`model.conditioning.configs[{index}].type`: unknown conditioner type `{other}`"),
            )),
        }
    }

    /// The typed settings of this conditioner.
    pub fn settings(&self) -> Result<ConditionerSettings> {
        self.settings_at(Path::new("model_config.json"), 0)
    }
}

impl ModelConfig {
    /// Parse and validate `model_config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| cfg_err(path, e.to_string()))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| cfg_err(path, e.to_string()))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::from_value(value, path, &dir)
    }

    /// Parse and validate a configuration given as JSON; `path` names it in errors and `dir` is
    /// the folder relative paths are resolved against.
    pub fn from_value(value: Value, path: &Path, dir: &Path) -> Result<Self> {
        check_keys(
            path,
            "(top level)",
            &value,
            None,
            &["model_type", "sample_size", "sample_rate", "model"],
        )?;
        let model = &value["model"];
        check_keys(path, "model", model, None, known::MODEL)?;
        let cond = &model["conditioning"];
        check_keys(
            path,
            "model.conditioning",
            cond,
            Some(known::CONDITIONING),
            &["cond_dim", "configs"],
        )?;
        let entries = cond["configs"]
            .as_array()
            .ok_or_else(|| cfg_err(path, "`model.conditioning.configs` must be a list".into()))?;
        for (i, e) in entries.iter().enumerate() {
            check_keys(
                path,
                &format!("model.conditioning.configs[{i}]"),
                e,
                Some(known::ENTRY),
                known::ENTRY,
            )?;
        }
        let diff = &model["diffusion"];
        check_keys(
            path,
            "model.diffusion",
            diff,
            Some(known::DIFFUSION),
            &["diffusion_objective", "config"],
        )?;
        check_keys(
            path,
            "model.diffusion.config",
            &diff["config"],
            Some(known::DIT),
            &[
                "io_channels",
                "embed_dim",
                "depth",
                "num_heads",
                "cond_token_dim",
                "global_cond_dim",
            ],
        )?;
        check_choice(
            path,
            "model.diffusion.diffusion_objective",
            diff.get("diffusion_objective"),
            Objective::ALLOWED,
            false,
        )?;
        check_choice(
            path,
            "model.diffusion.config.global_cond_type",
            diff["config"].get("global_cond_type"),
            GlobalCondType::ALLOWED,
            false,
        )?;
        check_choice(
            path,
            "model.diffusion.config.attn_kwargs.qk_norm",
            diff["config"]
                .get("attn_kwargs")
                .and_then(|a| a.get("qk_norm")),
            QkNorm::ALLOWED,
            true,
        )?;
        let key = "model.diffusion.sampling_distribution_shift_options";
        let shift = Shift::parse(diff.get("sampling_distribution_shift_options"))
            .map_err(|reason| cfg_err(path, format!("`{key}`: {reason}")))?;
        let mut cfg: ModelConfig = typed(path, "(top level)", &value)?;
        cfg.model.diffusion.sampling_shift = shift;
        cfg.dir = dir.to_path_buf();
        cfg.path = path.to_path_buf();
        cfg.validate()?;
        Ok(cfg)
    }

    /// Semantic checks across sections (every conditioner typed, ids resolvable, widths
    /// consistent).
    fn validate(&self) -> Result<()> {
        let p = &self.path;
        if self.model_type != "diffusion_cond" {
            return Err(cfg_err(
                p,
                format!(
                    "`model_type`: `{}` is not `diffusion_cond`",
                    self.model_type
                ),
            ));
        }
        let c = &self.model.conditioning;
        let mut ids = Vec::new();
        for (i, e) in c.configs.iter().enumerate() {
            e.settings_at(p, i)?;
            if ids.contains(&e.id.as_str()) {
                return Err(cfg_err(
                    p,
                    format!(
                        "`model.conditioning.configs[{i}].id`: duplicate id `{}`",
                        e.id
                    ),
                ));
            }
            ids.push(e.id.as_str());
        }
        let d = &self.model.diffusion;
        for (key, list) in [
            ("cross_attention_cond_ids", &d.cross_attention_cond_ids),
            ("global_cond_ids", &d.global_cond_ids),
        ] {
            if let Some(id) = list.iter().find(|id| !ids.contains(&id.as_str())) {
                return Err(cfg_err(
                    p,
                    format!("`model.diffusion.{key}`: no conditioner with id `{id}`"),
                ));
            }
        }
        let dc = &d.config;
        // Sizes reach allocations, products and divisions: refuse zero and absurd values.
        let (dit, w) = ("model.diffusion.config", MAX_WIDTH);
        let sizes = [
            ("", "sample_size", self.sample_size, 1, 1 << 30),
            ("", "sample_rate", self.sample_rate as usize, 1, 1 << 20),
            ("", "audio_channels", self.audio_channels, 1, 64),
            ("model.conditioning.", "cond_dim", c.cond_dim, 0, w),
            (dit, "io_channels", dc.io_channels, 1, w),
            (dit, "patch_size", dc.patch_size, 1, w),
            (dit, "embed_dim", dc.embed_dim, 1, w),
            (dit, "depth", dc.depth, 1, 4096),
            (dit, "num_heads", dc.num_heads, 1, w),
            (dit, "cond_token_dim", dc.cond_token_dim, 0, w),
            (dit, "global_cond_dim", dc.global_cond_dim, 0, w),
            (dit, "timestep_features_dim", dc.timestep_features_dim, 1, w),
            (dit, "num_memory_tokens", dc.num_memory_tokens, 0, w),
            (dit, "local_add_cond_dim", dc.local_add_cond_dim, 0, w),
            (dit, "ff_kwargs.mult", dc.ff_kwargs.mult, 1, 64),
        ];
        for (section, key, v, lo, hi) in sizes {
            if !(lo..=hi).contains(&v) {
                let sep = if section == dit { "." } else { "" };
                return Err(cfg_err(
                    p,
                    format!("`{section}{sep}{key}` ({v}) must be in {lo}..={hi}"),
                ));
            }
        }
        if !d.cross_attention_cond_ids.is_empty() && dc.cond_token_dim != c.cond_dim {
            return Err(cfg_err(
                p,
                format!(
                    "`model.diffusion.config.cond_token_dim` ({}) differs from `model.conditioning.cond_dim` ({})",
                    dc.cond_token_dim, c.cond_dim
                ),
            ));
        }
        if !d.global_cond_ids.is_empty()
            && dc.global_cond_dim != c.cond_dim * d.global_cond_ids.len()
        {
            return Err(cfg_err(
                p,
                format!(
                    "`model.diffusion.config.global_cond_dim` ({}) differs from cond_dim × global ids ({})",
                    dc.global_cond_dim,
                    c.cond_dim * d.global_cond_ids.len()
                ),
            ));
        }
        if dc.io_channels != self.model.io_channels {
            return Err(cfg_err(
                p,
                format!(
                    "`model.diffusion.config.io_channels` ({}) differs from `model.io_channels` ({})",
                    dc.io_channels, self.model.io_channels
                ),
            ));
        }
        if dc.num_heads == 0 || !dc.embed_dim.is_multiple_of(dc.num_heads) {
            return Err(cfg_err(
                p,
                format!(
                    "`model.diffusion.config.num_heads` ({}) must divide embed_dim ({})",
                    dc.num_heads, dc.embed_dim
                ),
            ));
        }
        Ok(())
    }

    /// The id and settings of the (first) T5Gemma prompt conditioner.
    pub fn prompt_conditioner(&self) -> Result<(&str, T5GemmaCondConfig)> {
        for (i, e) in self.model.conditioning.configs.iter().enumerate() {
            if let ConditionerSettings::T5Gemma(c) = e.settings_at(&self.path, i)? {
                return Ok((&e.id, c));
            }
        }
        Err(cfg_err(
            &self.path,
            "`model.conditioning.configs`: no `t5gemma` conditioner".into(),
        ))
    }

    /// The id and settings of every number conditioner, in file order.
    pub fn number_conditioners(&self) -> Result<Vec<(&str, NumberCondConfig)>> {
        let mut out = Vec::new();
        for (i, e) in self.model.conditioning.configs.iter().enumerate() {
            if let ConditionerSettings::Number(c) = e.settings_at(&self.path, i)? {
                out.push((e.id.as_str(), c));
            }
        }
        Ok(out)
    }

    /// The text-encoder folder (see the module documentation), checked to exist and to hold
    /// `config.json`, `model.safetensors` and `tokenizer.json`.
    pub fn t5_folder(&self) -> Result<PathBuf> {
        let (_, c) = self.prompt_conditioner()?;
        let idx = self
            .model
            .conditioning
            .configs
            .iter()
            .position(|e| e.kind == "t5gemma")
            .unwrap_or(0);
        let key = |k: &str| format!("model.conditioning.configs[{idx}].config.{k}");
        let (folder, from) = if let Some(mp) = &c.model_path {
            (self.dir.join(mp), key("model_path"))
        } else if let Some(sub) = &c.subfolder {
            (self.dir.join(sub), key("subfolder"))
        } else {
            let name = c.repo_id.as_deref().unwrap_or(&c.model_name);
            let last = name.rsplit('/').next().unwrap_or(name);
            (
                self.dir.join(last),
                key(if c.repo_id.is_some() {
                    "repo_id"
                } else {
                    "model_name"
                }),
            )
        };
        if !folder.is_dir() {
            return Err(cfg_err(
                &self.path,
                format!(
                    "`{from}`: text-encoder folder {} not found",
                    folder.display()
                ),
            ));
        }
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            if !folder.join(f).is_file() {
                return Err(cfg_err(
                    &self.path,
                    format!("`{from}`: {} is missing from {}", f, folder.display()),
                ));
            }
        }
        Ok(folder)
    }

    /// Names accepted by [`ModelConfig::preset`].
    pub const PRESETS: &'static [&'static str] = &[
        "small-music",
        "small-sfx",
        "medium",
        "small-music-base",
        "small-sfx-base",
        "medium-base",
    ];

    /// The `model_config.json` (as JSON) of a released model, by the names of
    /// [`ModelConfig::preset`]; `None` for an unknown name.
    pub fn preset_json(name: &str) -> Option<Value> {
        preset_json(name)
    }

    /// The configuration of a released model (`small-music`, `small-sfx`, `medium`, or a `-base`
    /// variant), with `dir` = the current folder. The values are those established for the
    /// released checkpoints (architecture, conditioners, SAME autoencoder); a checkpoint's own
    /// `model_config.json` is the source of truth and should be preferred when present.
    pub fn preset(name: &str) -> Result<Self> {
        let path = PathBuf::from(format!("<preset:{name}>"));
        let value = preset_json(name).ok_or_else(|| {
            cfg_err(
                &path,
                format!(
                    "unknown preset `{name}` (known: {})",
                    Self::PRESETS.join(", ")
                ),
            )
        })?;
        Self::from_value(value, &path, Path::new("."))
    }

    /// The same configuration with relative paths resolved against `dir` (e.g. a preset used
    /// with a checkpoint folder).
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }
}

/// The JSON of a released model's `model_config.json`.
fn preset_json(name: &str) -> Option<Value> {
    let (base, objective) = match name.strip_suffix("-base") {
        Some(b) => (b, "rectified_flow"),
        None => (name, "rf_denoiser"),
    };
    let medium = match base {
        "small-music" | "small-sfx" => false,
        "medium" => true,
        _ => return None,
    };
    let repo = format!("stabilityai/stable-audio-3-{name}");
    let (embed, depth, heads) = if medium {
        (1536, 24, 24)
    } else {
        (1024, 20, 16)
    };
    let mut attn = json!({ "qk_norm": "rms" });
    if medium {
        attn["differential"] = json!(true);
    }
    let same = |decoder: bool| {
        let mut c = json!({
            "channels": if medium { 256 } else { 128 },
            "c_mults": [6],
            "strides": [16],
            "latent_dim": 256,
            "transformer_depths": [if medium { 12 } else { 6 }],
            "checkpointing": false,
            "differential": true,
            "dyt": true,
            "dim_heads": 64,
            "variable_stride": true,
            "conv_mapping": decoder && !medium,
        });
        if decoder {
            c["out_channels"] = json!(512);
            c["sinusoidal_blocks"] = json!([if medium { 8 } else { 0 }]);
            c["mask_noise"] = json!(0.01);
        } else {
            c["in_channels"] = json!(512);
            c["mask_noise"] = json!(0.0);
        }
        if medium {
            c["sliding_window"] = json!([1, 1]);
        } else {
            c["chunk_size"] = json!(32);
            c["chunk_midpoint_shift"] = json!(true);
        }
        c
    };
    Some(json!({
        "model_type": "diffusion_cond",
        "sample_size": if medium { 16_777_216 } else { 5_292_032 },
        "sample_rate": 44100,
        "audio_channels": 2,
        "model": {
            "io_channels": 256,
            "pretransform": {
                "type": "autoencoder",
                "chunked": true,
                "iterate_batch": false,
                "config": {
                    "encoder": { "type": "same", "config": same(false) },
                    "decoder": { "type": "same", "config": same(true), "soft_clip": false },
                    "bottleneck": {
                        "type": "softnorm",
                        "config": {
                            "dim": 256,
                            "noise_augment_dim": 0,
                            "noise_regularize": true,
                            "auto_scale": true,
                            "freeze": true
                        }
                    },
                    "pretransform": { "type": "patched", "config": { "channels": 2, "patch_size": 256 } },
                    "latent_dim": 256,
                    "downsampling_ratio": 4096,
                    "io_channels": 2
                }
            },
            "conditioning": {
                "configs": [
                    {
                        "id": "prompt",
                        "type": "t5gemma",
                        "config": {
                            "model_name": "google/t5gemma-b-b-ul2",
                            "max_length": 256,
                            "padding_mode": "learned",
                            "repo_id": repo,
                            "subfolder": "t5gemma-b-b-ul2"
                        }
                    },
                    {
                        "id": "seconds_total",
                        "type": "number",
                        "config": { "min_val": 0, "max_val": 384, "fourier_features_type": "expo" }
                    }
                ],
                "cond_dim": 768
            },
            "diffusion": {
                "diffusion_objective": objective,
                "cross_attention_cond_ids": ["prompt", "seconds_total"],
                "global_cond_ids": ["seconds_total"],
                "local_add_cond_ids": ["inpaint_mask", "inpaint_masked_input"],
                "mask_padding_attention": true,
                "use_effective_length_for_schedule": true,
                "type": "dit",
                "config": {
                    "io_channels": 256,
                    "patch_size": 1,
                    "embed_dim": embed,
                    "depth": depth,
                    "num_heads": heads,
                    "cond_token_dim": 768,
                    "project_cond_tokens": true,
                    "global_cond_dim": 768,
                    "project_global_cond": true,
                    "transformer_type": "continuous_transformer",
                    "global_cond_type": "adaLN",
                    "timestep_features_type": "expo",
                    "timestep_features_dim": 256,
                    "timestep_features_logsnr": false,
                    "num_memory_tokens": 64,
                    "local_add_cond_dim": 257,
                    "norm_type": "rms_norm",
                    "norm_kwargs": { "force_fp32": true },
                    "attn_kwargs": attn,
                    "ff_kwargs": { "mult": 4 }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The small-music preset with one value replaced at a JSON pointer.
    fn with(pointer: &str, v: Value) -> Result<ModelConfig> {
        let mut j = preset_json("small-music").unwrap();
        *j.pointer_mut(pointer).unwrap() = v;
        ModelConfig::from_value(j, Path::new("m.json"), Path::new("."))
    }

    fn err(pointer: &str, v: Value) -> String {
        with(pointer, v).unwrap_err().to_string()
    }

    #[test]
    fn enums_are_parsed_at_load() {
        let c = ModelConfig::preset("small-music-base").unwrap();
        let d = &c.model.diffusion;
        assert_eq!(d.diffusion_objective, Objective::RectifiedFlow);
        assert_eq!(d.config.global_cond_type, GlobalCondType::AdaLn);
        assert_eq!(d.config.attn_kwargs.qk_norm, QkNorm::Rms);
        assert_eq!(d.sampling_shift, Shift::inference_default());
        let c = with("/model/diffusion/config/attn_kwargs/qk_norm", Value::Null).unwrap();
        assert_eq!(c.model.diffusion.config.attn_kwargs.qk_norm, QkNorm::None);
        let c = with(
            "/model/diffusion/use_effective_length_for_schedule",
            json!(true),
        )
        .unwrap();
        assert_eq!(c.model.diffusion.diffusion_objective, "rf_denoiser");
        let mut j = preset_json("small-music").unwrap();
        j["model"]["diffusion"]["sampling_distribution_shift_options"] = json!({"type": "none"});
        let c = ModelConfig::from_value(j, Path::new("m.json"), Path::new(".")).unwrap();
        assert_eq!(c.model.diffusion.sampling_shift, Shift::None);
    }

    #[test]
    fn bad_values_name_the_key_and_the_allowed_values() {
        let e = err("/model/diffusion/diffusion_objective", json!("v_diffusion"));
        assert!(e.contains("`model.diffusion.diffusion_objective`"), "{e}");
        assert!(
            e.contains("v_diffusion") && e.contains("rf_denoiser, rectified_flow"),
            "{e}"
        );
        let e = err("/model/diffusion/config/global_cond_type", json!("prepend"));
        assert!(
            e.contains("`model.diffusion.config.global_cond_type`"),
            "{e}"
        );
        assert!(e.contains("(allowed: adaLN)"), "{e}");
        let e = err("/model/diffusion/config/attn_kwargs/qk_norm", json!("l2"));
        assert!(
            e.contains("`model.diffusion.config.attn_kwargs.qk_norm`"),
            "{e}"
        );
        assert!(e.contains("rms, none"), "{e}");
        let e = err("/model/diffusion/config/global_cond_type", json!(3));
        assert!(e.contains("is not a string"), "{e}");
        let mut j = preset_json("small-music").unwrap();
        j["model"]["diffusion"]["sampling_distribution_shift_options"] = json!({"type": "cosine"});
        let e = ModelConfig::from_value(j, Path::new("m.json"), Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`model.diffusion.sampling_distribution_shift_options`"),
            "{e}"
        );
        assert!(e.contains("none, logsnr, full, flux"), "{e}");
    }
}
