//! Typed SAME autoencoder configuration, parsed from `model_config.json`.
//!
//! A diffusion checkpoint's config holds the autoencoder under `model.pretransform`
//! (`{type, chunked, iterate_batch, config: {encoder, decoder, bottleneck, pretransform, ...}}`);
//! a standalone autoencoder config holds the same `{encoder, decoder, ...}` object under `model`.
//! Both are accepted by [`AutoencoderConfig::from_model_config`].

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{CodecError, Result};

/// How the transformer blocks of a SAME side attend, parsed once from `chunk_size`,
/// `chunk_midpoint_shift` and `sliding_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameAttention {
    /// Full attention within chunks of `chunk_size` patch tokens' latent cells (SAME-S: 32,
    /// i.e. 2 cells of 17 tokens). With `midpoint_shift` the second half of the blocks runs on
    /// chunks shifted by half a chunk, the sequence extended by copies of its first and last
    /// half chunk.
    Chunked {
        /// Chunk size in patch tokens (a multiple of the stride).
        chunk_size: usize,
        /// Shift the chunks of the second half of the blocks by half a chunk.
        midpoint_shift: bool,
    },
    /// Sliding-window attention: a token sees the tokens of `left` latent cells before and
    /// `right` after it (SAME-L: 1 and 1, a ±17-token band).
    Band {
        /// Latent cells seen before.
        left: usize,
        /// Latent cells seen after.
        right: usize,
    },
}

/// Configuration of one SAME side (encoder or decoder), the `config` object of
/// `encoder` / `decoder`. Defaults follow the official constructors.
#[derive(Debug, Clone, PartialEq)]
pub struct SameConfig {
    /// Patch features on the audio side (`in_channels` of the encoder, `out_channels` of the
    /// decoder): `2 · patch_size`.
    pub io_channels: usize,
    /// Base width; the transformer width is `channels · c_mults[0]`.
    pub channels: usize,
    /// Width multipliers (one resampling level is supported).
    pub c_mults: Vec<usize>,
    /// Patch tokens per latent (one level: `[16]`).
    pub strides: Vec<usize>,
    /// Latent channels.
    pub latent_dim: usize,
    /// Transformer blocks per level.
    pub transformer_depths: Vec<usize>,
    /// Head width (64).
    pub dim_heads: usize,
    /// Differential attention.
    pub differential: bool,
    /// One learned new token shared by every position (`true`) or one per position.
    pub variable_stride: bool,
    /// Chunked (SAME-S) or banded (SAME-L) attention.
    pub attention: SameAttention,
    /// Kernel-3 (`true`) or kernel-1 mapping convolution.
    pub conv_mapping: bool,
    /// Per level: block `j` uses a `sin(πx)` gate iff `depth − j < sinusoidal_blocks`.
    pub sinusoidal_blocks: Vec<usize>,
    /// Standard deviation of the Gaussian noise added to the new tokens at every forward.
    pub mask_noise: f32,
    /// Feed-forward inner width multiplier (3).
    pub ff_mult: f64,
    /// Whether the mapping convolution has a bias.
    pub mapping_bias: bool,
}

#[derive(Deserialize)]
struct RawSame {
    in_channels: Option<usize>,
    out_channels: Option<usize>,
    channels: Option<usize>,
    c_mults: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    latent_dim: Option<usize>,
    transformer_depths: Option<Vec<usize>>,
    dim_heads: Option<usize>,
    differential: Option<bool>,
    dyt: Option<bool>,
    variable_stride: Option<bool>,
    chunk_size: Option<usize>,
    chunk_midpoint_shift: Option<bool>,
    sliding_window: Option<Vec<usize>>,
    conv_mapping: Option<bool>,
    sinusoidal_blocks: Option<Vec<usize>>,
    mask_noise: Option<f32>,
    ff_mult: Option<f64>,
    mapping_bias: Option<bool>,
    conformer: Option<bool>,
    layer_scale: Option<bool>,
    feat_scale: Option<bool>,
    cross_attn: Option<bool>,
    causal: Option<bool>,
}

/// Largest width, stride, depth or patch size a configuration may declare.
const MAX_SIZE: usize = 1 << 16;

impl SameConfig {
    /// Transformer width `D = channels · c_mults[0]`.
    pub fn width(&self) -> usize {
        self.channels * self.c_mults[0]
    }
    /// Patch tokens per latent (`strides[0]`).
    pub fn stride(&self) -> usize {
        self.strides[0]
    }
    /// Number of transformer blocks.
    pub fn depth(&self) -> usize {
        self.transformer_depths[0]
    }
    /// Number of attention heads (`D / dim_heads`).
    pub fn heads(&self) -> usize {
        self.width() / self.dim_heads
    }
    /// Tokens per latent cell in the transformer (`stride + 1`).
    pub fn cell(&self) -> usize {
        self.stride() + 1
    }
    /// Whether block `j` uses the `sin(πx)` gate (decoder only; `depth − j < sinusoidal_blocks`).
    pub fn is_sinusoidal(&self, j: usize) -> bool {
        let s = self.sinusoidal_blocks.first().copied().unwrap_or(0);
        self.depth() - j < s
    }
    /// Latent cells per attention chunk (`None` with banded attention).
    pub fn cells_per_chunk(&self) -> Option<usize> {
        match self.attention {
            SameAttention::Chunked { chunk_size, .. } => Some(chunk_size / self.stride()),
            SameAttention::Band { .. } => None,
        }
    }
    /// The attention band `(left, right)` in tokens (`None` with chunked attention).
    pub fn band_tokens(&self) -> Option<(usize, usize)> {
        match self.attention {
            SameAttention::Band { left, right } => Some((left * self.cell(), right * self.cell())),
            SameAttention::Chunked { .. } => None,
        }
    }
    /// Mapping convolution kernel size.
    pub fn mapping_kernel(&self) -> usize {
        if self.conv_mapping {
            3
        } else {
            1
        }
    }

    fn parse(v: &Value, path: &Path, key: &str, decoder: bool) -> Result<Self> {
        let raw: RawSame = serde_json::from_value(v.clone()).map_err(|e| cfg_err(path, key, e))?;
        let k = |f: &str| format!("{key}.{f}");
        let need = |o: Option<usize>, f: &str| o.ok_or_else(|| cfg_err(path, &k(f), "missing"));
        for (flag, name) in [
            (raw.conformer, "conformer"),
            (raw.layer_scale, "layer_scale"),
            (raw.feat_scale, "feat_scale"),
            (raw.cross_attn, "cross_attn"),
            (raw.causal, "causal"),
        ] {
            if flag == Some(true) {
                return Err(cfg_err(
                    path,
                    &k(name),
                    "not supported (SAME-S / SAME-L never set it)",
                ));
            }
        }
        if raw.dyt == Some(false) {
            return Err(cfg_err(path, &k("dyt"), "only DyT norms are supported"));
        }
        let io_key = if decoder {
            "out_channels"
        } else {
            "in_channels"
        };
        let io = if decoder {
            raw.out_channels
        } else {
            raw.in_channels
        };
        let c = SameConfig {
            io_channels: need(io, io_key)?,
            channels: need(raw.channels, "channels")?,
            c_mults: raw
                .c_mults
                .ok_or_else(|| cfg_err(path, &k("c_mults"), "missing"))?,
            strides: raw
                .strides
                .ok_or_else(|| cfg_err(path, &k("strides"), "missing"))?,
            latent_dim: need(raw.latent_dim, "latent_dim")?,
            transformer_depths: raw
                .transformer_depths
                .ok_or_else(|| cfg_err(path, &k("transformer_depths"), "missing"))?,
            dim_heads: raw.dim_heads.unwrap_or(128),
            differential: raw.differential.unwrap_or(true),
            variable_stride: raw.variable_stride.unwrap_or(false),
            attention: match raw.sliding_window {
                None => SameAttention::Chunked {
                    chunk_size: raw.chunk_size.unwrap_or(128),
                    midpoint_shift: raw.chunk_midpoint_shift.unwrap_or(false),
                },
                Some(w) if w.len() == 2 => SameAttention::Band {
                    left: w[0],
                    right: w[1],
                },
                Some(w) => {
                    return Err(cfg_err(
                        path,
                        &k("sliding_window"),
                        format!("expected [left, right], got {w:?}"),
                    ))
                }
            },
            conv_mapping: raw.conv_mapping.unwrap_or(false),
            sinusoidal_blocks: raw.sinusoidal_blocks.unwrap_or_else(|| vec![0]),
            mask_noise: raw.mask_noise.unwrap_or(0.0),
            ff_mult: raw.ff_mult.unwrap_or(3.0),
            mapping_bias: raw.mapping_bias.unwrap_or(true),
        };
        if c.c_mults.len() != 1 || c.strides.len() != 1 || c.transformer_depths.len() != 1 {
            return Err(cfg_err(
                path,
                &k("c_mults"),
                "exactly one resampling level (c_mults, strides, transformer_depths of length 1) is supported",
            ));
        }
        // Sizes reach allocations and products: refuse absurd values before using them.
        for (name, v) in [
            ("channels", c.channels),
            ("c_mults", c.c_mults[0]),
            ("strides", c.stride()),
            ("transformer_depths", c.depth()),
            ("dim_heads", c.dim_heads),
            ("latent_dim", c.latent_dim),
            (io_key, c.io_channels),
        ] {
            if v > MAX_SIZE {
                return Err(cfg_err(path, &k(name), format!("{v} exceeds {MAX_SIZE}")));
            }
        }
        if c.stride() == 0 || c.dim_heads == 0 || !c.width().is_multiple_of(c.dim_heads) {
            return Err(cfg_err(
                path,
                &k("dim_heads"),
                "width must be a non-zero multiple of dim_heads",
            ));
        }
        if !c.dim_heads.is_multiple_of(4) {
            return Err(cfg_err(
                path,
                &k("dim_heads"),
                "must be a multiple of 4 (rotary embedding)",
            ));
        }
        if let SameAttention::Chunked {
            chunk_size,
            midpoint_shift,
        } = c.attention
        {
            if chunk_size % c.stride() != 0 || chunk_size == 0 {
                return Err(cfg_err(
                    path,
                    &k("chunk_size"),
                    "must be a non-zero multiple of the stride",
                ));
            }
            if midpoint_shift && !(chunk_size / c.stride()).is_multiple_of(2) {
                return Err(cfg_err(
                    path,
                    &k("chunk_size"),
                    "midpoint shift needs an even number of cells per chunk",
                ));
            }
        }
        if c.io_channels == c.width() {
            return Err(cfg_err(
                path,
                &k(io_key),
                "an identity mapping (io width = transformer width) is not supported",
            ));
        }
        Ok(c)
    }
}

/// The SoftNorm bottleneck configuration (`bottleneck.config`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BottleneckConfig {
    /// Latent channels.
    pub dim: usize,
    /// Add `ε·running_std·1e−3` to the latents at every decode.
    #[serde(default)]
    pub noise_regularize: bool,
    /// Whether `running_std` exists (divide / multiply by it).
    #[serde(default)]
    pub auto_scale: bool,
    /// Extra noise channels appended at decode (must be 0).
    #[serde(default)]
    pub noise_augment_dim: usize,
}

/// The whole autoencoder configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoencoderConfig {
    /// Encoder side.
    pub encoder: SameConfig,
    /// Decoder side.
    pub decoder: SameConfig,
    /// Apply `tanh` to the decoded audio.
    pub soft_clip: bool,
    /// Bottleneck.
    pub bottleneck: BottleneckConfig,
    /// Audio channels (2).
    pub audio_channels: usize,
    /// Samples per patch (256 for the released models).
    pub patch_size: usize,
    /// Latent channels.
    pub latent_dim: usize,
    /// Audio samples per latent (`patch_size · stride`).
    pub downsampling_ratio: usize,
    /// Whether the pretransform decodes (and encodes) in 128-latent chunks by default
    /// (`model.pretransform.chunked`).
    pub chunked: bool,
    /// Sample rate (top-level `sample_rate`, 44100 when absent).
    pub sample_rate: u32,
    /// Latents a generated length is a multiple of: `encoder.chunk_size / stride`, with the
    /// `chunk_size` default (32) the reference `generate()` assumes when the key is absent
    /// (2 for every released model, SAME-L included).
    pub latent_align: usize,
}

fn cfg_err(path: &Path, key: &str, reason: impl std::fmt::Display) -> CodecError {
    CodecError::Config {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

/// Check the string `type` under `v` (`default` when absent) against the allowed values; the
/// error names the key and every allowed value.
fn check_type(
    v: &Value,
    path: &Path,
    key: &str,
    default: Option<&str>,
    allowed: &[&str],
) -> Result<()> {
    let k = format!("{key}.type");
    let ty = match v.get("type") {
        None => default.ok_or_else(|| cfg_err(path, &k, "missing"))?,
        Some(t) => t
            .as_str()
            .ok_or_else(|| cfg_err(path, &k, "expected a string"))?,
    };
    if allowed.contains(&ty) {
        return Ok(());
    }
    let list: Vec<String> = allowed.iter().map(|a| format!("`{a}`")).collect();
    Err(cfg_err(
        path,
        &k,
        format!("`{ty}` is not supported (allowed: {})", list.join(", ")),
    ))
}

fn get<'a>(v: &'a Value, path: &Path, key: &str, field: &str) -> Result<&'a Value> {
    v.get(field)
        .ok_or_else(|| cfg_err(path, &format!("{key}.{field}"), "missing"))
}

impl AutoencoderConfig {
    /// Read `model_config.json` (a diffusion checkpoint's, using `model.pretransform`, or a
    /// standalone autoencoder's, using `model`).
    pub fn from_model_config(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| cfg_err(path, "", e))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| cfg_err(path, "", e))?;
        Self::from_json(&v, path)
    }

    /// Parse an already loaded `model_config.json` value; `path` only labels errors.
    pub fn from_json(v: &Value, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let sample_rate = match v.get("sample_rate") {
            None => 44100,
            Some(s) => s
                .as_u64()
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(|| cfg_err(path, "sample_rate", "expected a positive integer"))?,
        };
        let model = get(v, path, "", "model").map_err(|_| cfg_err(path, "model", "missing"))?;
        let (ae, key, chunked) = if let Some(p) = model.get("pretransform") {
            check_type(
                p,
                path,
                "model.pretransform",
                Some("autoencoder"),
                &["autoencoder"],
            )?;
            let chunked = match p.get("chunked") {
                None => false,
                Some(c) => c.as_bool().ok_or_else(|| {
                    cfg_err(path, "model.pretransform.chunked", "expected a boolean")
                })?,
            };
            (
                get(p, path, "model.pretransform", "config")?,
                "model.pretransform.config",
                chunked,
            )
        } else {
            (model, "model", true)
        };
        Self::from_ae_json(ae, path, key, chunked, sample_rate)
    }

    fn from_ae_json(
        ae: &Value,
        path: &Path,
        key: &str,
        chunked: bool,
        sample_rate: u32,
    ) -> Result<Self> {
        let side = |name: &str| -> Result<(&Value, String)> {
            let s = get(ae, path, key, name)?;
            let k = format!("{key}.{name}");
            check_type(s, path, &k, Some("same"), &["same"])?;
            Ok((get(s, path, &k, "config")?, format!("{k}.config")))
        };
        let (ev, ek) = side("encoder")?;
        let (dv, dk) = side("decoder")?;
        let encoder = SameConfig::parse(ev, path, &ek, false)?;
        let decoder = SameConfig::parse(dv, path, &dk, true)?;
        let dec = get(ae, path, key, "decoder")?;
        let soft_clip = dec
            .get("soft_clip")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let bk = format!("{key}.bottleneck");
        let b = get(ae, path, key, "bottleneck")?;
        check_type(b, path, &bk, None, &["softnorm"])?;
        let bottleneck: BottleneckConfig =
            serde_json::from_value(get(b, path, &bk, "config")?.clone())
                .map_err(|e| cfg_err(path, &format!("{bk}.config"), e))?;
        if bottleneck.noise_augment_dim != 0 {
            return Err(cfg_err(
                path,
                &format!("{bk}.config.noise_augment_dim"),
                "only 0 is supported",
            ));
        }
        let pk = format!("{key}.pretransform");
        let p = get(ae, path, key, "pretransform")?;
        check_type(p, path, &pk, None, &["patched"])?;
        let pc = get(p, path, &pk, "config")?;
        let num = |v: &Value, k: &str, f: &str| -> Result<usize> {
            get(v, path, k, f)?
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| {
                    cfg_err(path, &format!("{k}.{f}"), "expected a non-negative integer")
                })
        };
        let patch_size = num(pc, &format!("{pk}.config"), "patch_size")?;
        let audio_channels = num(pc, &format!("{pk}.config"), "channels")?;
        if let Some(o) = pc.get("oversampling").and_then(Value::as_u64) {
            if o > 1 {
                return Err(cfg_err(
                    path,
                    &format!("{pk}.config.oversampling"),
                    "only 1 is supported",
                ));
            }
        }
        if pc
            .get("postfilter_channels")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            > 0
        {
            return Err(cfg_err(
                path,
                &format!("{pk}.config.postfilter_channels"),
                "a postfilter is not supported",
            ));
        }
        let latent_dim = num(ae, key, "latent_dim")?;
        for (k, v) in [
            (format!("{pk}.config.patch_size"), patch_size),
            (format!("{pk}.config.channels"), audio_channels),
            (format!("{key}.latent_dim"), latent_dim),
        ] {
            if !(1..=MAX_SIZE).contains(&v) {
                return Err(cfg_err(path, &k, format!("{v} is not in 1..={MAX_SIZE}")));
            }
        }
        let align_chunk = ev
            .get("chunk_size")
            .and_then(Value::as_u64)
            .map_or(32, |c| c as usize);
        let latent_align = (align_chunk / encoder.stride().max(1)).max(1);
        let cfg = AutoencoderConfig {
            latent_align,
            downsampling_ratio: patch_size * encoder.stride(),
            encoder,
            decoder,
            soft_clip,
            bottleneck,
            audio_channels,
            patch_size,
            latent_dim,
            chunked,
            sample_rate,
        };
        let feats = audio_channels * patch_size;
        if cfg.encoder.io_channels != feats || cfg.decoder.io_channels != feats {
            return Err(cfg_err(
                path,
                &format!("{key}.encoder.config.in_channels"),
                format!(
                    "encoder in / decoder out channels must equal channels · patch_size = {feats}"
                ),
            ));
        }
        if cfg.encoder.latent_dim != latent_dim
            || cfg.decoder.latent_dim != latent_dim
            || cfg.bottleneck.dim != latent_dim
        {
            return Err(cfg_err(
                path,
                &format!("{key}.latent_dim"),
                "encoder, decoder and bottleneck latent dims differ",
            ));
        }
        if cfg.decoder.stride() != cfg.encoder.stride() {
            return Err(cfg_err(
                path,
                &format!("{key}.decoder.config.strides"),
                "encoder and decoder strides differ",
            ));
        }
        if let Some(d) = ae.get("downsampling_ratio").and_then(Value::as_u64) {
            if d as usize != cfg.downsampling_ratio {
                return Err(cfg_err(
                    path,
                    &format!("{key}.downsampling_ratio"),
                    format!(
                        "{d} differs from patch_size · stride = {}",
                        cfg.downsampling_ratio
                    ),
                ));
            }
        }
        Ok(cfg)
    }
}
