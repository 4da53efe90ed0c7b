//! The model configuration, read from the checkpoint's `config.json` (the `transformers`
//! `ClapConfig` layout). Every value comes from the file; absent keys take the defaults of the
//! reference's configuration classes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{ClapError, Result};

/// The audio tower (HTSAT, a Swin transformer over the log-mel image).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct AudioConfig {
    /// Attention window (tokens per side).
    pub window_size: usize,
    /// Mel bins of the input features.
    pub num_mel_bins: usize,
    /// Side of the square spectrogram image the model reshapes its input to.
    pub spec_size: usize,
    /// Activation of the MLPs (`gelu`).
    pub hidden_act: String,
    /// Patch side.
    pub patch_size: usize,
    /// Patch stride (time, frequency).
    pub patch_stride: Vec<usize>,
    /// Width after the last stage.
    pub hidden_size: usize,
    /// Blocks per stage.
    pub depths: Vec<usize>,
    /// Heads per stage.
    pub num_attention_heads: Vec<usize>,
    /// Whether the fused (global + three local crops) input path is built.
    pub enable_fusion: bool,
    /// Fusion type (`aff_2d` is the released one).
    pub fusion_type: Option<String>,
    /// Input channels of the patch embedding.
    pub patch_embed_input_channels: usize,
    /// Whether patch embeddings are flattened to tokens.
    pub flatten_patch_embeds: bool,
    /// Width of the first stage.
    pub patch_embeds_hidden_size: usize,
    /// Whether the patch embedding ends with a LayerNorm.
    pub enable_patch_layer_norm: bool,
    /// Whether q/k/v projections have biases.
    pub qkv_bias: bool,
    /// MLP width over block width.
    pub mlp_ratio: f64,
    /// Channel reduction of the attentional feature fusion.
    pub aff_block_r: usize,
    /// Activation between the two projection layers (`relu`).
    pub projection_hidden_act: String,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
}

impl Default for AudioConfig {
    fn default() -> Self {
        AudioConfig {
            window_size: 8,
            num_mel_bins: 64,
            spec_size: 256,
            hidden_act: "gelu".into(),
            patch_size: 4,
            patch_stride: vec![4, 4],
            hidden_size: 768,
            depths: vec![2, 2, 6, 2],
            num_attention_heads: vec![4, 8, 16, 32],
            enable_fusion: false,
            fusion_type: None,
            patch_embed_input_channels: 1,
            flatten_patch_embeds: true,
            patch_embeds_hidden_size: 96,
            enable_patch_layer_norm: true,
            qkv_bias: true,
            mlp_ratio: 4.0,
            aff_block_r: 4,
            projection_hidden_act: "relu".into(),
            layer_norm_eps: 1e-5,
        }
    }
}

/// The text tower (RoBERTa).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct TextConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden width.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Activation of the feed-forward (`gelu`).
    pub hidden_act: String,
    /// Learned positions (RoBERTa: 514, of which the first `pad_token_id + 1` are never used).
    pub max_position_embeddings: usize,
    /// Token types.
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// The padding token (also the position offset).
    pub pad_token_id: usize,
    /// The start token.
    pub bos_token_id: usize,
    /// The end token.
    pub eos_token_id: usize,
    /// Activation between the two projection layers (`relu`).
    pub projection_hidden_act: String,
}

impl Default for TextConfig {
    fn default() -> Self {
        TextConfig {
            vocab_size: 50_265,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            max_position_embeddings: 514,
            type_vocab_size: 1,
            layer_norm_eps: 1e-12,
            pad_token_id: 1,
            bos_token_id: 0,
            eos_token_id: 2,
            projection_hidden_act: "relu".into(),
        }
    }
}

/// The whole model's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct ClapConfig {
    /// The audio tower.
    pub audio_config: AudioConfig,
    /// The text tower.
    pub text_config: TextConfig,
    /// Width of the shared embedding space.
    pub projection_dim: usize,
    /// Activation between the two projection layers (`relu`).
    pub projection_hidden_act: String,
}

impl Default for ClapConfig {
    fn default() -> Self {
        ClapConfig {
            audio_config: AudioConfig::default(),
            text_config: TextConfig::default(),
            projection_dim: 512,
            projection_hidden_act: "relu".into(),
        }
    }
}

impl ClapConfig {
    /// Parse a `config.json` text; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Self> {
        let mut c: ClapConfig = serde_json::from_str(text)
            .map_err(|e| ClapError::config(file, format!("not a CLAP config.json: {e}")))?;
        // The reference copies the top-level projection settings into both towers.
        c.audio_config.projection_hidden_act = c.projection_hidden_act.clone();
        c.text_config.projection_hidden_act = c.projection_hidden_act.clone();
        c.validate(file)?;
        Ok(c)
    }

    /// Read and parse a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_json(&crate::error::read_text(path)?, &path.display().to_string())
    }

    /// Check the values this implementation relies on.
    pub fn validate(&self, file: &str) -> Result<()> {
        let bad = |r: String| Err(ClapError::config(file, r));
        let a = &self.audio_config;
        let t = &self.text_config;
        if a.depths.is_empty() || a.depths.len() != a.num_attention_heads.len() {
            return bad(format!(
                "audio_config.depths {:?} and num_attention_heads {:?} must be non-empty and of equal length",
                a.depths, a.num_attention_heads
            ));
        }
        if a.patch_size == 0 || a.window_size == 0 || a.num_mel_bins == 0 || a.spec_size == 0 {
            return bad("audio_config: patch_size, window_size, num_mel_bins and spec_size must be positive".into());
        }
        if a.patch_stride.len() != 2 || a.patch_stride.contains(&0) {
            return bad(format!(
                "audio_config.patch_stride must be two positive numbers, got {:?}",
                a.patch_stride
            ));
        }
        if !a.spec_size.is_multiple_of(a.num_mel_bins) {
            return bad(format!(
                "audio_config.spec_size {} is not a multiple of num_mel_bins {}",
                a.spec_size, a.num_mel_bins
            ));
        }
        let stages = a.depths.len() as u32;
        let last = a.patch_embeds_hidden_size << (stages - 1);
        if last != a.hidden_size {
            return bad(format!(
                "audio_config.hidden_size {} must equal patch_embeds_hidden_size {} × 2^(stages − 1) = {last}",
                a.hidden_size, a.patch_embeds_hidden_size
            ));
        }
        for (i, &h) in a.num_attention_heads.iter().enumerate() {
            let dim = a.patch_embeds_hidden_size << i;
            if h == 0 || !dim.is_multiple_of(h) {
                return bad(format!(
                    "audio_config: stage {i} width {dim} is not a multiple of its {h} heads"
                ));
            }
        }
        if a.enable_fusion {
            match a.fusion_type.as_deref() {
                Some("aff_2d") | None => {}
                Some(other) => {
                    return bad(format!(
                        "audio_config.fusion_type {other:?} is not supported (only \"aff_2d\", the released fused models' type)"
                    ))
                }
            }
        }
        if t.num_attention_heads == 0 || !t.hidden_size.is_multiple_of(t.num_attention_heads) {
            return bad(format!(
                "text_config.hidden_size {} is not a multiple of num_attention_heads {}",
                t.hidden_size, t.num_attention_heads
            ));
        }
        if t.max_position_embeddings <= t.pad_token_id + 1 {
            return bad(format!(
                "text_config.max_position_embeddings {} leaves no positions after the padding offset {}",
                t.max_position_embeddings,
                t.pad_token_id + 1
            ));
        }
        for (name, act) in [
            ("audio_config.hidden_act", &a.hidden_act),
            ("text_config.hidden_act", &t.hidden_act),
        ] {
            if act != "gelu" {
                return bad(format!("{name} {act:?} is not supported (only \"gelu\")"));
            }
        }
        if self.projection_hidden_act != "relu" {
            return bad(format!(
                "projection_hidden_act {:?} is not supported (only \"relu\")",
                self.projection_hidden_act
            ));
        }
        if self.projection_dim == 0 {
            return bad("projection_dim must be positive".into());
        }
        Ok(())
    }
}
