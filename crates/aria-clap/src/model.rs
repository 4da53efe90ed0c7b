//! The whole model: a checkpoint folder loaded as released, audio and text to unit vectors in
//! one space, and their similarity.

use std::path::{Path, PathBuf};

use aria_core::{Tensor, WeightLoader};

use crate::audio::AudioTower;
use crate::features::{FeatureConfig, FeatureExtractor, SeededDraws, Truncation};
use crate::projection::{l2_normalize_rows, logits, Projection};
use crate::text::TextTower;
use crate::tokenizer::{RobertaTokenizer, CLAP_MAX_LENGTH};
use crate::{ClapConfig, ClapError, Precision, Result};

/// Clips the audio tower runs at once (a 10 s clip's first stage holds 4 096 tokens).
const AUDIO_BATCH: usize = 4;
/// Texts the text tower runs at once.
const TEXT_BATCH: usize = 64;

/// A CLAP model: feature extractor, both towers, both projections, the logit scales and
/// (when its files are in the folder) the tokenizer.
///
/// ```no_run
/// # fn main() -> aria_clap::Result<()> {
/// let clap = aria_clap::Clap::load("clap-htsat-unfused")?;
/// let text = clap.embed_texts(&["a dog barking in the rain"])?;
/// let audio = clap.embed_audio(&vec![0.0f32; 44_100 * 2], 1, 44_100)?;
/// let score = aria_clap::measure::clap_score(&text[0], &audio)?;
/// # let _ = score; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Clap {
    cfg: ClapConfig,
    dir: PathBuf,
    features: FeatureExtractor,
    audio: AudioTower,
    text: TextTower,
    audio_proj: Projection,
    text_proj: Projection,
    logit_scale_a: f32,
    logit_scale_t: f32,
    tokenizer: Option<RobertaTokenizer>,
    max_tokens: usize,
    precision: Precision,
}

fn read_scalar(vb: &WeightLoader, name: &str) -> Result<f32> {
    let t = vb.get_any(name)?;
    let v = t.to_vec_f32()?;
    match v.as_slice() {
        [x] if x.is_finite() => Ok(*x),
        _ => Err(ClapError::Shape {
            what: format!("{name} (one finite number)"),
            expected: vec![],
            got: t.shape().to_vec(),
        }),
    }
}

impl Clap {
    /// Load a checkpoint folder as released: `config.json`, `model.safetensors` (or a sharded
    /// `model.safetensors.index.json`), `preprocessor_config.json` (absent: the reference's
    /// defaults, `fusion` for a fused model and `rand_trunc` otherwise) and the tokenizer files
    /// (`tokenizer.json`, or `vocab.json` + `merges.txt`; absent: text embedding is refused
    /// until [`Clap::with_tokenizer`] gives one).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(ClapError::config(
                dir.display().to_string(),
                "not a folder (a CLAP checkpoint folder holds config.json, model.safetensors, \
                 preprocessor_config.json and the tokenizer files)",
            ));
        }
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(ClapError::config(
                dir.display().to_string(),
                "no config.json (a CLAP checkpoint folder holds config.json, model.safetensors, \
                 preprocessor_config.json and the tokenizer files)",
            ));
        }
        let cfg = ClapConfig::from_file(&config)?;
        let weights = ["model.safetensors", "model.safetensors.index.json"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file());
        let Some(weights) = weights else {
            let reason = if dir.join("pytorch_model.bin").is_file() {
                "only pytorch_model.bin is present; the weights are read from safetensors \
                 (convert it, or download model.safetensors of the same release)"
            } else {
                "no model.safetensors (or model.safetensors.index.json)"
            };
            return Err(ClapError::config(dir.display().to_string(), reason));
        };
        let vb = WeightLoader::open_checkpoint(&weights)?;
        let features = Self::feature_config(dir, &cfg)?;
        Self::from_parts(cfg, &vb, features, dir)
    }

    fn feature_config(dir: &Path, cfg: &ClapConfig) -> Result<FeatureConfig> {
        let p = dir.join("preprocessor_config.json");
        if p.is_file() {
            return FeatureConfig::from_file(&p);
        }
        Ok(FeatureConfig {
            truncation: if cfg.audio_config.enable_fusion {
                Truncation::Fusion
            } else {
                Truncation::RandTrunc
            },
            ..FeatureConfig::default()
        })
    }

    /// [`Clap::load`], then [`Clap::set_precision`].
    pub fn load_with(dir: impl AsRef<Path>, precision: Precision) -> Result<Self> {
        let mut c = Self::load(dir)?;
        c.set_precision(precision)?;
        Ok(c)
    }

    /// Set the arithmetic of the matrix products ([`Precision::Fast`] is resolved for the CPU).
    /// Packing to bf16 replaces the f32 weights: going back to f32 needs a new load, which
    /// this refuses with an error rather than pretending.
    pub fn set_precision(&mut self, precision: Precision) -> Result<()> {
        let p = precision.resolve();
        match (self.precision, p) {
            (a, b) if a == b => Ok(()),
            (Precision::F32, Precision::Bf16Dot) => {
                self.audio.pack_bf16()?;
                self.text.pack_bf16()?;
                self.audio_proj.pack_bf16()?;
                self.text_proj.pack_bf16()?;
                self.precision = Precision::Bf16Dot;
                Ok(())
            }
            (a, b) => Err(ClapError::invalid(
                "precision",
                format!(
                    "the weights are packed as {}; {} needs a new load",
                    a.name(),
                    b.name()
                ),
            )),
        }
    }

    /// The arithmetic of the matrix products (never [`Precision::Fast`]: resolved).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Build from a parsed configuration, a weight loader rooted at the checkpoint (names
    /// `audio_model.*`, `text_model.*`, `audio_projection.*`, `text_projection.*`,
    /// `logit_scale_a`, `logit_scale_t`) and a feature configuration. The tokenizer is read
    /// from `dir` when its files are there.
    pub fn from_parts(
        cfg: ClapConfig,
        vb: &WeightLoader,
        features: FeatureConfig,
        dir: &Path,
    ) -> Result<Self> {
        let a = &cfg.audio_config;
        if features.feature_size != a.num_mel_bins {
            return Err(ClapError::config(
                "preprocessor_config.json",
                format!(
                    "feature_size {} differs from the model's audio_config.num_mel_bins {}",
                    features.feature_size, a.num_mel_bins
                ),
            ));
        }
        let fused_features = features.truncation == Truncation::Fusion;
        if fused_features != a.enable_fusion {
            return Err(ClapError::config(
                "preprocessor_config.json",
                format!(
                    "truncation {:?} does not fit a model with enable_fusion {} (fused models \
                     take \"fusion\" features, unfused ones \"rand_trunc\")",
                    features.truncation.name(),
                    a.enable_fusion
                ),
            ));
        }
        let audio = AudioTower::load(&vb.pp("audio_model"), a)?;
        let text = TextTower::load(&vb.pp("text_model"), &cfg.text_config)?;
        let audio_proj = Projection::load(
            &vb.pp("audio_projection"),
            a.hidden_size,
            cfg.projection_dim,
        )?;
        let text_proj = Projection::load(
            &vb.pp("text_projection"),
            cfg.text_config.hidden_size,
            cfg.projection_dim,
        )?;
        let has_tokenizer =
            dir.join("tokenizer.json").is_file() || dir.join("vocab.json").is_file();
        let tokenizer = if has_tokenizer {
            Some(RobertaTokenizer::from_dir(dir)?)
        } else {
            None
        };
        let max_tokens = CLAP_MAX_LENGTH.min(text.max_tokens());
        Ok(Clap {
            logit_scale_a: read_scalar(vb, "logit_scale_a")?,
            logit_scale_t: read_scalar(vb, "logit_scale_t")?,
            features: FeatureExtractor::new(features)?,
            audio,
            text,
            audio_proj,
            text_proj,
            tokenizer,
            max_tokens,
            precision: Precision::F32,
            dir: dir.to_path_buf(),
            cfg,
        })
    }

    /// Use `tokenizer` for text (replacing the one read from the folder, if any).
    pub fn with_tokenizer(mut self, tokenizer: RobertaTokenizer) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// Truncate texts to `n` tokens, special tokens included (default 77, what LAION's CLAP
    /// pipeline uses; at most the text tower's positions).
    pub fn set_max_tokens(&mut self, n: usize) -> Result<()> {
        if n < 2 || n > self.text.max_tokens() {
            return Err(ClapError::invalid(
                "max tokens",
                format!("{n} is outside 2..={}", self.text.max_tokens()),
            ));
        }
        self.max_tokens = n;
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &ClapConfig {
        &self.cfg
    }

    /// The folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The width of the shared space.
    pub fn dim(&self) -> usize {
        self.cfg.projection_dim
    }

    /// The feature extractor.
    pub fn feature_extractor(&self) -> &FeatureExtractor {
        &self.features
    }

    /// The tokenizer, when one was found or given.
    pub fn tokenizer(&self) -> Option<&RobertaTokenizer> {
        self.tokenizer.as_ref()
    }

    /// The audio tower.
    pub fn audio_tower(&self) -> &AudioTower {
        &self.audio
    }

    /// The text tower.
    pub fn text_tower(&self) -> &TextTower {
        &self.text
    }

    /// `exp(logit_scale_t)`: the reference's multiplier of `logits_per_text`.
    pub fn text_logit_scale(&self) -> f32 {
        self.logit_scale_t.exp()
    }

    /// `exp(logit_scale_a)`: the reference's multiplier of `logits_per_audio`.
    pub fn audio_logit_scale(&self) -> f32 {
        self.logit_scale_a.exp()
    }

    /// Unit vectors of features `[B, C, T, F]` (the extractor's output) with their `is_longer`
    /// flags: the audio tower, the projection, the L2 normalization.
    pub fn embed_features(&self, features: &Tensor, is_longer: &[bool]) -> Result<Vec<Vec<f32>>> {
        let out = self.audio.forward(features, is_longer)?;
        let p = self.audio_proj.forward(&out.pooler)?;
        l2_normalize_rows(&p)
    }

    /// The unprojected pooled audio state and the projection (not normalized), for parity
    /// checks: `(pooler [B, hidden], projection [B, dim])`.
    pub fn audio_projection_of(
        &self,
        features: &Tensor,
        is_longer: &[bool],
    ) -> Result<(Tensor, Tensor)> {
        let out = self.audio.forward(features, is_longer)?;
        let p = self.audio_proj.forward(&out.pooler)?;
        Ok((out.pooler, p))
    }

    /// One unit vector for a clip of interleaved samples (`channels` channels at `sample_rate`
    /// Hz): mixed to mono, resampled to 48 kHz, cut to features as the checkpoint's
    /// `preprocessor_config.json` says, embedded.
    ///
    /// The reference draws random numbers for clips longer than 10 s (the crop of `rand_trunc`,
    /// the three local crops of `fusion`). Here the draws are seeded, the same for every call,
    /// so a clip always gets the same vector. Each clip is its own batch of one, as when the
    /// reference's extractor is called clip by clip: a short clip in `fusion` mode is then
    /// flagged as longer (the reference's rule for a batch without a longer clip).
    pub fn embed_audio(
        &self,
        samples: &[f32],
        channels: usize,
        sample_rate: u32,
    ) -> Result<Vec<f32>> {
        let mono = self.features.prepare(samples, channels, sample_rate)?;
        let mut v = self.embed_mono_48k(&[&mono])?;
        v.pop()
            .ok_or_else(|| ClapError::invalid("audio", "no embedding produced"))
    }

    /// Unit vectors for clips already mono at the extractor's rate (48 kHz), batched through
    /// the tower; each clip's features are extracted as in [`Clap::embed_audio`], so a vector
    /// does not depend on the batch it ran in.
    pub fn embed_mono_48k(&self, clips: &[&[f32]]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(clips.len());
        for group in clips.chunks(AUDIO_BATCH) {
            let mut feats = Vec::with_capacity(group.len());
            let mut flags = Vec::with_capacity(group.len());
            for clip in group {
                let mut draws = SeededDraws::new(0);
                let (t, longer) = self.features.extract_batch(&[clip], &mut draws)?;
                feats.push(t);
                flags.extend(longer);
            }
            let batch = if feats.len() == 1 {
                feats
                    .pop()
                    .ok_or_else(|| ClapError::invalid("audio", "empty batch"))?
            } else {
                Tensor::cat(&feats.iter().collect::<Vec<_>>(), 0)?
            };
            out.extend(self.embed_features(&batch, &flags)?);
        }
        Ok(out)
    }

    /// One unit vector per text: tokenized (truncated to [`Clap::set_max_tokens`], 77 by
    /// default), the text tower in batches, the projection, the L2 normalization.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let tok = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| ClapError::Tokenizer {
                file: self.dir.display().to_string(),
                reason: "no tokenizer.json or vocab.json + merges.txt in the checkpoint folder \
                     (put the release's tokenizer files there)"
                    .into(),
            })?;
        // Texts of similar length run together (less padding); the vectors come back in the
        // callers' order. Padded keys are excluded, so a text's vector does not depend on its
        // batch.
        let rows = texts
            .iter()
            .map(|t| tok.encode_truncated(t, self.max_tokens))
            .collect::<Result<Vec<_>>>()?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| rows[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for group in order.chunks(TEXT_BATCH) {
            let n = group.iter().map(|&i| rows[i].len()).max().unwrap_or(0);
            let mut ids = Vec::with_capacity(group.len() * n);
            let mut mask = Vec::with_capacity(group.len() * n);
            for &i in group {
                let r = &rows[i];
                ids.extend_from_slice(r);
                ids.resize(ids.len() + n - r.len(), tok.pad_id());
                mask.resize(mask.len() + r.len(), 1u8);
                mask.resize(mask.len() + n - r.len(), 0u8);
            }
            let e = self.embed_token_ids(&ids, &mask, group.len(), n)?;
            for (&i, v) in group.iter().zip(e) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Unit vectors of token ids `[B, N]` (right-padded) with their mask.
    pub fn embed_token_ids(
        &self,
        ids: &[u32],
        mask: &[u8],
        b: usize,
        n: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let out = self.text.forward(ids, mask, b, n)?;
        let p = self.text_proj.forward(&out.pooler)?;
        l2_normalize_rows(&p)
    }

    /// The reference's `logits_per_text`: `exp(logit_scale_t) · ⟨text_i, audio_j⟩`.
    pub fn logits_per_text(&self, text: &[Vec<f32>], audio: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        logits(text, audio, self.text_logit_scale())
    }

    /// The reference's `logits_per_audio`: `exp(logit_scale_a) · ⟨audio_i, text_j⟩`.
    pub fn logits_per_audio(&self, audio: &[Vec<f32>], text: &[Vec<f32>]) -> Result<Vec<Vec<f32>>> {
        logits(audio, text, self.audio_logit_scale())
    }
}

// Shared across threads by the cache and the server.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Clap>();
};
