//! SA3 conditioners: the duration (`seconds_total`) number embedder with exponential Fourier
//! features, the learned-padding prompt conditioner on top of the T5Gemma encoder, and the
//! assembly of the DiT conditioning inputs (cross-attention tokens, global condition,
//! local-add condition).
//!
//! ```text
//! prompts ─► tokenizer (L ids, right-padded, mask) ─► T5Gemma ─► [B,L,768] ─► pads ← padding_embedding
//! seconds ─► clamp[min,max] ─► (s−min)/(max−min) ─► expo Fourier (256) ─► Linear(256→768) ─► [B,1,768]
//! cross_attn_cond = [prompt ; seconds] (B, L+1, 768)   cross_attn_mask = [prompt mask ; 1]
//! global_cond     = seconds (B, 768)
//! local_add_cond  = [inpaint_mask (B,1,T) ; inpaint_masked_input (B,C,T)]   (zeros for text-to-audio)
//! ```
//!
//! The entry point is [`TextConditioner::load`]; [`TextConditioner::conditioning`] builds the
//! DiT inputs ([`Conditioning`]) for prompts and durations, [`TextConditioner::negative`] the
//! negative-prompt branch, and [`Conditioning::cfg_null_context`] the unconditional context the
//! DiT uses under classifier-free guidance.
//!
//! Every learned matrix is an [`aria_core::nn::Linear`] loaded under its checkpoint key and the
//! outputs are built with tensor ops, so the conditioner runs wherever its weights live
//! ([`TextConditioner::to_device`]); the prompts and durations are host inputs, uploaded once.

use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, FourierLayout};
use aria_core::{DType, Device, Tensor, WeightLoader};

use crate::config::{
    ConditionerSettings, FourierKind, ModelConfig, NumberCondConfig, PaddingMode, T5GemmaCondConfig,
};
use crate::t5gemma::T5GemmaEncoder;
use crate::tokenizer::{PromptTokenizer, TokenBatch};
use crate::{DitError, Result};

/// Lowest frequency of the expo Fourier features (`ExpoFourierFeatures.min_freq`).
pub const EXPO_MIN_FREQ: f64 = 0.5;
/// Highest frequency of the expo Fourier features (`ExpoFourierFeatures.max_freq`).
pub const EXPO_MAX_FREQ: f64 = 10000.0;

/// PyTorch `linspace(start, end, steps)` in f32 as its CPU kernel computes it: the first half is
/// `start + step·i`, the second half `end − step·(steps − 1 − i)`, where
/// `step = (end − start) / (steps − 1)` is rounded to f32 and each product-sum is a fused
/// multiply-add (one rounding; the compiled kernel contracts it). The second-half form matters:
/// `1 − step·k` rounded once differs from the twice-rounded value for some `k`.
pub fn linspace_f32(start: f32, end: f32, steps: usize) -> Vec<f32> {
    match steps {
        0 => Vec::new(),
        1 => vec![start],
        _ => {
            let step = (end - start) / (steps - 1) as f32;
            let half = steps / 2;
            (0..steps)
                .map(|i| {
                    if i < half {
                        step.mul_add(i as f32, start)
                    } else {
                        (-step).mul_add((steps - 1 - i) as f32, end)
                    }
                })
                .collect()
        }
    }
}

/// Frequencies of the standard expo features (`dim` 256, 0.5 … 10 000) that the reference
/// rounds to the other neighbour of the correctly rounded value: `(index, ulps)`. PyTorch's CPU
/// `exp` (a vendor vector library accurate to about half an ulp) lands on the other side of the
/// midpoint for these two inputs, whose exact results lie 0.489 and 0.499 ulp away from the
/// correctly rounded value (just inside the midpoint). A one-ulp change of a frequency near 10⁴ moves `2π·f` by 6·10⁻³, so they matter.
const EXPO_REFERENCE_ROUNDING: [(usize, i32); 2] = [(86, -1), (124, 1)];

/// The `dim / 2` frequencies of the expo Fourier features, in f32 as the reference computes them:
/// `exp(linspace(0, 1, dim/2) · (ln max − ln min) + ln min)` (a multiply then an add, each rounded
/// to f32), the exponential correctly rounded, except for two entries of the standard
/// configuration (`dim` 256, 0.5 … 10 000) that the reference rounds the other way.
pub fn expo_frequencies(half: usize, min_freq: f64, max_freq: f64) -> Vec<f32> {
    let log_min = min_freq.ln();
    let log_max = max_freq.ln();
    // Python floats become f32 scalars in the f32 tensor ops.
    let span = (log_max - log_min) as f32;
    let lmin = log_min as f32;
    let mut f: Vec<f32> = linspace_f32(0.0, 1.0, half)
        .into_iter()
        .map(|r| exp_f32(r * span + lmin))
        .collect();
    if half == 128 && min_freq == EXPO_MIN_FREQ && max_freq == EXPO_MAX_FREQ {
        for (i, d) in EXPO_REFERENCE_ROUNDING {
            f[i] = f32::from_bits(f[i].to_bits().wrapping_add_signed(d));
        }
    }
    f
}

/// f32 exp correctly rounded from an f64 evaluation.
fn exp_f32(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// Exponential Fourier features (`ExpoFourierFeatures`, frequencies `0.5 · 20000^(k/(dim/2−1))`)
/// of each value: row `i` of the `[values.len(), dim]` f32 result is
/// `[cos(a_0) … cos(a_{dim/2−1}), sin(a_0) … sin(a_{dim/2−1})]` with
/// `a_k = ((v_i · f_k) · 2) · π` evaluated in f32 in that order (cos block first).
///
/// This is shared by the duration embedder (`dim = 256`) and the DiT timestep embedding.
/// `dim` must be even and non-zero.
pub fn expo_fourier_features(values: &[f32], dim: usize) -> Result<Tensor> {
    expo_fourier_features_with(values, dim, EXPO_MIN_FREQ, EXPO_MAX_FREQ)
}

/// [`expo_fourier_features`] with explicit minimum and maximum frequencies.
pub fn expo_fourier_features_with(
    values: &[f32],
    dim: usize,
    min_freq: f64,
    max_freq: f64,
) -> Result<Tensor> {
    if dim == 0 || !dim.is_multiple_of(2) {
        return Err(DitError::Input {
            what: "expo Fourier features".into(),
            reason: format!("dimension {dim} must be even and non-zero"),
        });
    }
    if min_freq.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        || max_freq.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err(DitError::Input {
            what: "expo Fourier features".into(),
            reason: format!("frequencies must be positive (min {min_freq}, max {max_freq})"),
        });
    }
    let freqs = expo_frequencies(dim / 2, min_freq, max_freq);
    Ok(ops::fourier_features(
        &Tensor::from_slice(values, &[values.len()])?,
        &Tensor::from_vec(freqs, &[dim / 2])?,
        FourierLayout::CosSin,
    )?)
}

/// Prefix of the learned conditioner tensors in an SA3 checkpoint.
pub const CONDITIONER_PREFIX: &str = "conditioner.conditioners";

/// Width of the Fourier features of a number conditioner (`NumberEmbedder` default).
pub const NUMBER_FEATURES_DIM: usize = 256;

fn input_err(what: &str, reason: String) -> DitError {
    DitError::Input {
        what: what.into(),
        reason,
    }
}

/// A number conditioner (`NumberConditioner`): clamp, normalise to [0, 1], Fourier features,
/// Linear to the conditioning width. SA3 uses it for `seconds_total` (0…384 s, expo features).
///
/// The final Linear is an [`aria_core::nn::Linear`] (`<id>.embedder.embedding.1`): adapters
/// (LoRA) are set on it through [`Self::linear_mut`] and [`Linear::set_adapters`].
#[derive(Debug, Clone)]
pub struct NumberConditioner {
    id: String,
    cfg: NumberCondConfig,
    /// Fourier frequencies `[128]`: the fixed expo ones or the learned `embedding.0.weights`.
    freqs: Tensor,
    layout: FourierLayout,
    linear: Linear,
    out_dim: usize,
    device: Device,
}

impl NumberConditioner {
    /// Load conditioner `id` from `loader` positioned at [`CONDITIONER_PREFIX`]
    /// (`<id>.embedder.embedding.1.{weight,bias}`, plus `<id>.embedder.embedding.0.weights` for
    /// learned features).
    pub fn load(
        id: &str,
        cfg: &NumberCondConfig,
        out_dim: usize,
        loader: &WeightLoader,
    ) -> Result<Self> {
        let vb = loader.pp(id).pp("embedder").pp("embedding");
        let half = NUMBER_FEATURES_DIM / 2;
        let (freqs, layout) = match cfg.fourier_features_type {
            FourierKind::Expo => (
                Tensor::from_vec(
                    expo_frequencies(half, EXPO_MIN_FREQ, EXPO_MAX_FREQ),
                    &[half],
                )?,
                FourierLayout::CosSin,
            ),
            FourierKind::Learned => (
                vb.pp("0").get_as("weights", &[half], DType::F32)?,
                FourierLayout::ValueSinCos,
            ),
        };
        let in_dim = match layout {
            FourierLayout::CosSin => 2 * half,
            FourierLayout::ValueSinCos => 2 * half + 1,
        };
        let linear = Linear::load(&vb.pp("1"), in_dim, out_dim, Bias::Yes)?;
        Ok(NumberConditioner {
            id: id.to_string(),
            cfg: cfg.clone(),
            freqs,
            layout,
            linear,
            out_dim,
            device: Device::Cpu,
        })
    }

    /// The conditioning id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The settings.
    pub fn config(&self) -> &NumberCondConfig {
        &self.cfg
    }

    /// `(clamp(v, min, max) − min) / (max − min)` in f32 as the reference computes it.
    pub fn normalize(&self, v: f32) -> f32 {
        let (lo, hi) = (self.cfg.min_val, self.cfg.max_val);
        let span = (f64::from(hi) - f64::from(lo)) as f32;
        (v.max(lo).min(hi) - lo) / span
    }

    /// The final Linear (`<id>.embedder.embedding.1`, `[out_dim, in_dim]`).
    pub fn linear(&self) -> &Linear {
        &self.linear
    }

    /// The final Linear, mutable: set adapters (LoRA) with [`Linear::set_adapters`], or pack
    /// its weight.
    pub fn linear_mut(&mut self) -> &mut Linear {
        &mut self.linear
    }

    /// Move the Linear and the frequencies to `device` ([`Self::embed`] then uploads its
    /// normalised values there).
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.linear.to_device(device)?;
        self.freqs = device.put(&self.freqs)?;
        self.device = device.clone();
        Ok(())
    }

    /// Embeddings `[N, 1, out_dim]` of `values` (the conditioner's output; its mask is all ones),
    /// on the conditioner's device (the normalised values are its one upload).
    pub fn embed(&self, values: &[f32]) -> Result<Tensor> {
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(input_err(&self.id, format!("value {v} is not finite")));
        }
        let norm: Vec<f32> = values.iter().map(|&v| self.normalize(v)).collect();
        let norm = self.device.put(&Tensor::from_vec(norm, &[values.len()])?)?;
        let feats = ops::fourier_features(&norm, &self.freqs, self.layout)?;
        let y = self.linear.forward(&feats)?;
        Ok(y.reshape(&[values.len(), 1, self.out_dim])?)
    }
}

/// Positions the truncated encode rounds up to (see [`PromptConditioner::encode_tokens`]).
const ROW_BLOCK: usize = 32;

/// The T5Gemma prompt conditioner (`T5GemmaConditioner`): tokenizer, encoder, optional output
/// projection and pad handling (`learned` for SA3: pad rows replaced by `padding_embedding`).
#[derive(Debug, Clone)]
pub struct PromptConditioner {
    id: String,
    tokenizer: std::sync::Arc<PromptTokenizer>,
    encoder: T5GemmaEncoder,
    padding_mode: PaddingMode,
    padding_embedding: Option<Tensor>,
    proj_out: Option<Linear>,
    out_dim: usize,
}

impl PromptConditioner {
    /// Assemble the conditioner: `loader` is positioned at [`CONDITIONER_PREFIX`] (for
    /// `<id>.padding_embedding` and `<id>.proj_out.*`).
    pub fn new(
        id: &str,
        cfg: &T5GemmaCondConfig,
        out_dim: usize,
        tokenizer: PromptTokenizer,
        encoder: T5GemmaEncoder,
        loader: &WeightLoader,
    ) -> Result<Self> {
        let hidden = encoder.config().hidden_size;
        let vb = loader.pp(id);
        let proj_out = if hidden != out_dim || cfg.project_out {
            Some(Linear::load(
                &vb.pp("proj_out"),
                hidden,
                out_dim,
                Bias::Yes,
            )?)
        } else {
            None
        };
        let padding_embedding = match cfg.padding_mode {
            PaddingMode::Learned => Some(vb.get_as("padding_embedding", &[out_dim], DType::F32)?),
            _ => None,
        };
        Ok(PromptConditioner {
            id: id.to_string(),
            tokenizer: std::sync::Arc::new(tokenizer),
            encoder,
            padding_mode: cfg.padding_mode,
            padding_embedding,
            proj_out,
            out_dim,
        })
    }

    /// The conditioning id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &PromptTokenizer {
        &self.tokenizer
    }

    /// The text encoder.
    pub fn encoder(&self) -> &T5GemmaEncoder {
        &self.encoder
    }

    /// The text encoder, mutable (e.g. to choose the attention implementation).
    pub fn encoder_mut(&mut self) -> &mut T5GemmaEncoder {
        &mut self.encoder
    }

    /// The output projection (`<id>.proj_out`), if the conditioner has one.
    pub fn proj_out(&self) -> Option<&Linear> {
        self.proj_out.as_ref()
    }

    /// The output projection, mutable (adapters, packing).
    pub fn proj_out_mut(&mut self) -> Option<&mut Linear> {
        self.proj_out.as_mut()
    }

    /// Move the encoder, the projection and the padding embedding to `device`.
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.encoder.to_device(device)?;
        if let Some(p) = &mut self.proj_out {
            p.to_device(device)?;
        }
        if let Some(p) = &self.padding_embedding {
            self.padding_embedding = Some(device.put(p)?);
        }
        Ok(())
    }

    /// Tokenize prompts (`[B, max_length]` ids and mask).
    pub fn tokenize(&self, prompts: &[&str]) -> Result<TokenBatch> {
        self.tokenizer.encode_batch(prompts)
    }

    /// `(prompt_emb [B, L, out_dim] f32, mask [B, L] u8)` for prompts.
    pub fn encode_prompts(&self, prompts: &[&str]) -> Result<(Tensor, Tensor)> {
        self.encode_tokens(&self.tokenize(prompts)?)
    }

    /// `(prompt_emb, mask)` for already tokenized prompts (the ids and mask are uploaded to the
    /// encoder's device once; both results live there).
    ///
    /// Where the pad rows are replaced afterwards (`learned` with its embedding, or `zero`), the
    /// encoder runs only up to the last real token of the batch: keys past it are excluded from
    /// every query, so the rows before it come out with the same bits, and the rows after it
    /// would be replaced anyway (the official code computes all `max_length` and discards
    /// them). The replay of the reference's bf16 arithmetic always runs every position.
    pub fn encode_tokens(&self, tokens: &TokenBatch) -> Result<(Tensor, Tensor)> {
        let (ids, mask) = tokens.to_device(self.encoder.device())?;
        let used = self.rows_needed(tokens);
        let hidden = if used == tokens.len {
            self.encoder.forward(&ids, &mask)?
        } else {
            let (b, h) = (tokens.batch, self.encoder.config().hidden_size);
            let pad = Tensor::zeros(&[b, tokens.len - used, h], DType::F32);
            let pad = self.encoder.device().put(&pad)?;
            if used == 0 {
                pad
            } else {
                let short = tokens.prefix(used)?;
                let (ids, smask) = short.to_device(self.encoder.device())?;
                let hs = self.encoder.forward(&ids, &smask)?;
                Tensor::cat(&[&hs, &pad], 1)?
            }
        };
        Ok((self.finish(&hidden, &mask)?, mask))
    }

    /// The leading positions the encoder runs: every position, unless the pad rows are
    /// replaced, then up to the last real token of any prompt rounded up to a multiple of 32
    /// (0 when there is none).
    pub fn rows_needed(&self, tokens: &TokenBatch) -> usize {
        let replaced = match self.padding_mode {
            PaddingMode::Learned => self.padding_embedding.is_some(),
            PaddingMode::Zero => true,
            _ => false,
        };
        if !replaced || self.encoder.precision() == crate::t5gemma::Precision::Bf16 {
            return tokens.len;
        }
        let last = (0..tokens.len)
            .rev()
            .find(|&j| (0..tokens.batch).any(|b| tokens.mask[b * tokens.len + j] != 0))
            .map_or(0, |j| j + 1);
        // Whole blocks of 32 keys: the softmax sums and the products then see the real keys in
        // the same vector lanes and pair blocks as over every position, followed by nothing
        // but zeros, so the bits do not change.
        (last.div_ceil(ROW_BLOCK) * ROW_BLOCK).min(tokens.len)
    }

    /// The conditioner's output from an encoder output `[B, L, hidden]` and its mask `[B, L]`:
    /// projection (if any), then pad handling.
    pub fn finish(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let emb = match &self.proj_out {
            Some(p) => p.forward(hidden)?,
            None => hidden.to_dtype(DType::F32)?,
        };
        self.apply_padding(&emb, mask)
    }

    /// Pad handling of `emb [B, L, D]` by `mask [B, L]` (non-zero = real token).
    pub fn apply_padding(&self, emb: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let s = emb.shape().to_vec();
        if s.len() != 3 || mask.shape() != &s[..2] || s[2] != self.out_dim {
            return Err(input_err(
                &self.id,
                format!(
                    "embeddings {:?} and mask {:?} must be [B, L, {}] and [B, L]",
                    s,
                    mask.shape(),
                    self.out_dim
                ),
            ));
        }
        Ok(match (self.padding_mode, &self.padding_embedding) {
            (PaddingMode::Learned, Some(p)) => ops::fill_masked_rows(emb, mask, Some(p))?,
            (PaddingMode::Zero, _) => ops::fill_masked_rows(emb, mask, None)?,
            _ => emb.clone(),
        })
    }
}

/// The DiT conditioning inputs built from the conditioners (`get_conditioning_inputs`).
#[derive(Debug, Clone)]
pub struct Conditioning {
    /// Cross-attention tokens `[B, L + 1, cond_dim]` (prompt tokens then the seconds token, in the
    /// order of `cross_attention_cond_ids`).
    pub cross_attn_cond: Tensor,
    /// Their mask `[B, L + 1]` (u8; the DiT ignores it, the negative branch uses it).
    pub cross_attn_mask: Tensor,
    /// Global condition `[B, cond_dim · |global_cond_ids|]`.
    pub global_cond: Tensor,
}

impl Conditioning {
    /// Batch size.
    pub fn batch(&self) -> usize {
        self.cross_attn_cond.shape()[0]
    }

    /// The cross-attention context of the unconditional branch under classifier-free guidance
    /// (the DiT's rule): without a negative prompt, zeros shaped like `self.cross_attn_cond`;
    /// with one, the negative context with every position whose negative mask is 0 set to zero
    /// (not to the padding embedding). The global condition of that branch stays the positive
    /// one.
    pub fn cfg_null_context(&self, negative: Option<&Conditioning>) -> Result<Tensor> {
        let s = self.cross_attn_cond.shape().to_vec();
        let Some(neg) = negative else {
            return Ok(self
                .cross_attn_cond
                .device()
                .put(&Tensor::zeros(&s, DType::F32))?);
        };
        if neg.cross_attn_cond.shape() != s.as_slice() {
            return Err(input_err(
                "negative conditioning",
                format!(
                    "context {:?} differs from the positive {:?}",
                    neg.cross_attn_cond.shape(),
                    s
                ),
            ));
        }
        Ok(ops::fill_masked_rows(
            &neg.cross_attn_cond,
            &neg.cross_attn_mask,
            None,
        )?)
    }
}

/// The whole SA3 conditioner (`MultiConditioner` + `get_conditioning_inputs`): the prompt
/// conditioner and the number conditioners, routed as `model.diffusion` says.
#[derive(Debug, Clone)]
pub struct TextConditioner {
    prompt: PromptConditioner,
    numbers: Vec<NumberConditioner>,
    cross_ids: Vec<String>,
    global_ids: Vec<String>,
    cond_dim: usize,
}

/// One conditioner's output: embeddings `[B, N, D]` and mask `[B, N]`.
type CondOut = (Tensor, Tensor);

impl TextConditioner {
    /// Load everything from a parsed `model_config.json` and a loader over the checkpoint
    /// (`model.safetensors`, root prefix): the tokenizer and the encoder from the text-encoder
    /// folder ([`ModelConfig::t5_folder`]), the learned tensors under [`CONDITIONER_PREFIX`].
    ///
    /// Errors name the file and key: a missing folder or tokenizer, a tokenizer whose vocabulary
    /// exceeds the embedding, a missing tensor.
    pub fn load(cfg: &ModelConfig, loader: &WeightLoader) -> Result<Self> {
        let folder = cfg.t5_folder()?;
        let encoder = T5GemmaEncoder::load(&folder)?;
        Self::load_with_encoder(cfg, loader, encoder)
    }

    /// [`TextConditioner::load`] with an already loaded encoder.
    pub fn load_with_encoder(
        cfg: &ModelConfig,
        loader: &WeightLoader,
        encoder: T5GemmaEncoder,
    ) -> Result<Self> {
        let folder = cfg.t5_folder()?;
        let (pid, pcfg) = cfg.prompt_conditioner()?;
        let tok_path = folder.join("tokenizer.json");
        let tokenizer = PromptTokenizer::from_file(&tok_path, pcfg.max_length)?;
        let vocab = encoder.config().vocab_size;
        if tokenizer.vocab_size() > vocab {
            return Err(DitError::Config {
                path: folder.join("config.json"),
                reason: format!(
                    "`encoder.vocab_size` ({vocab}) is smaller than the vocabulary of {} ({} ids)",
                    tok_path.display(),
                    tokenizer.vocab_size()
                ),
            });
        }
        let cond = loader.pp(CONDITIONER_PREFIX);
        let cond_dim = cfg.model.conditioning.cond_dim;
        let prompt = PromptConditioner::new(pid, &pcfg, cond_dim, tokenizer, encoder, &cond)?;
        let mut numbers = Vec::new();
        for (i, e) in cfg.model.conditioning.configs.iter().enumerate() {
            if let ConditionerSettings::Number(n) = e.settings_at(&cfg.path, i)? {
                numbers.push(NumberConditioner::load(&e.id, &n, cond_dim, &cond)?);
            }
        }
        let d = &cfg.model.diffusion;
        Ok(TextConditioner {
            prompt,
            numbers,
            cross_ids: d.cross_attention_cond_ids.clone(),
            global_ids: d.global_cond_ids.clone(),
            cond_dim,
        })
    }

    /// The prompt conditioner.
    pub fn prompt(&self) -> &PromptConditioner {
        &self.prompt
    }

    /// The prompt conditioner, mutable.
    pub fn prompt_mut(&mut self) -> &mut PromptConditioner {
        &mut self.prompt
    }

    /// Move every weight and parameter (encoder, projection, padding embedding, number
    /// conditioners) to `device`; the conditioning is then computed there, from host prompts
    /// and durations uploaded once per call.
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.prompt.to_device(device)?;
        for n in &mut self.numbers {
            n.to_device(device)?;
        }
        Ok(())
    }

    /// Drop the resident pages of the text encoder's memory-mapped weights once a request's
    /// prompts are encoded (see [`T5GemmaEncoder::release_pages`]); the next conditioning
    /// reads them from the file again. Returns the bytes released.
    pub fn release_pages(&self) -> Result<usize> {
        self.prompt.encoder().release_pages()
    }

    /// The number conditioner `id`, if any.
    pub fn number(&self, id: &str) -> Option<&NumberConditioner> {
        self.numbers.iter().find(|n| n.id == id)
    }

    /// The number conditioner `id`, mutable (to replace its Linear weight).
    pub fn number_mut(&mut self, id: &str) -> Option<&mut NumberConditioner> {
        self.numbers.iter_mut().find(|n| n.id == id)
    }

    /// The ids of the number conditioners, in config order.
    pub fn number_ids(&self) -> impl Iterator<Item = &str> {
        self.numbers.iter().map(|n| n.id.as_str())
    }

    /// Width of every conditioning token.
    pub fn cond_dim(&self) -> usize {
        self.cond_dim
    }

    /// `(prompt_emb [B, L, cond_dim], mask [B, L] u8)`: tokenizer, encoder, pad handling.
    pub fn encode_prompts(&self, prompts: &[&str]) -> Result<(Tensor, Tensor)> {
        self.prompt.encode_prompts(prompts)
    }

    /// The `seconds_total` embeddings `[B, 1, cond_dim]`.
    pub fn seconds_embedding(&self, seconds: &[f32]) -> Result<Tensor> {
        self.number("seconds_total")
            .ok_or_else(|| {
                input_err(
                    "seconds_total",
                    "the model has no `seconds_total` conditioner".into(),
                )
            })?
            .embed(seconds)
    }

    /// The DiT inputs for prompts and durations (one each per batch item).
    pub fn conditioning(&self, prompts: &[&str], seconds_total: &[f32]) -> Result<Conditioning> {
        let (emb, mask) = self.encode_prompts(prompts)?;
        self.conditioning_from_prompt(&emb, &mask, seconds_total)
    }

    /// The negative-prompt branch (spec §4.4): the conditioner run on the negative prompts with
    /// the same durations. Feed it to [`Conditioning::cfg_null_context`] of the positive
    /// conditioning to get the unconditional context.
    pub fn negative(
        &self,
        negative_prompts: &[&str],
        seconds_total: &[f32],
    ) -> Result<Conditioning> {
        self.conditioning(negative_prompts, seconds_total)
    }

    /// The DiT inputs from an already computed prompt embedding (`[B, L, cond_dim]`, pad handling
    /// applied) and mask `[B, L]`.
    pub fn conditioning_from_prompt(
        &self,
        prompt_emb: &Tensor,
        prompt_mask: &Tensor,
        seconds_total: &[f32],
    ) -> Result<Conditioning> {
        let b = prompt_emb.shape().first().copied().unwrap_or(0);
        if seconds_total.len() != b {
            return Err(input_err(
                "seconds_total",
                format!("{} values for a batch of {b} prompts", seconds_total.len()),
            ));
        }
        let mut outs: Vec<(&str, CondOut)> =
            vec![(self.prompt.id(), (prompt_emb.clone(), prompt_mask.clone()))];
        for n in &self.numbers {
            if n.id != "seconds_total" {
                return Err(input_err(
                    &n.id,
                    "no values given for this number conditioner".into(),
                ));
            }
            let e = n.embed(seconds_total)?;
            let ones = e.device().put(&Tensor::from_vec(vec![1u8; b], &[b, 1])?)?;
            outs.push((n.id(), (e, ones)));
        }
        self.assemble(&outs)
    }

    /// `get_conditioning_inputs`: cross-attention tokens and masks concatenated over the
    /// sequence in `cross_attention_cond_ids` order, global conditions over channels.
    fn assemble(&self, outs: &[(&str, CondOut)]) -> Result<Conditioning> {
        let find = |id: &str| -> Result<&CondOut> {
            outs.iter()
                .find(|(k, _)| *k == id)
                .map(|(_, v)| v)
                .ok_or_else(|| input_err(id, "no conditioner output with this id".into()))
        };
        let mut toks = Vec::new();
        let mut masks = Vec::new();
        for id in &self.cross_ids {
            let (e, m) = find(id)?;
            let (e, m) = if e.rank() == 2 {
                (e.unsqueeze(1)?, m.unsqueeze(1)?)
            } else {
                (e.clone(), m.clone())
            };
            toks.push(e);
            masks.push(m.to_dtype(DType::U8)?);
        }
        let cross = Tensor::cat(&toks.iter().collect::<Vec<_>>(), 1)?;
        let cross_attn_mask = Tensor::cat(&masks.iter().collect::<Vec<_>>(), 1)?;
        let globals: Vec<Tensor> = self
            .global_ids
            .iter()
            .map(|id| Ok(find(id)?.0.clone()))
            .collect::<Result<_>>()?;
        let mut global = Tensor::cat(
            &globals.iter().collect::<Vec<_>>(),
            globals.first().map_or(0, |g| g.rank() - 1),
        )?;
        if global.rank() == 3 {
            global = global.squeeze(1)?.contiguous()?;
        }
        Ok(Conditioning {
            cross_attn_cond: cross.contiguous()?,
            cross_attn_mask,
            global_cond: global,
        })
    }
}

/// The local-add condition `[B, 1 + C, T]` = `[inpaint_mask ; inpaint_masked_input]` over
/// channels. `inpaint` is `(mask [B|1, 1, T], masked_input [B|1, C, T])` (a batch of 1 is
/// repeated); `None` gives the all-zero condition of plain text-to-audio.
pub fn local_add_cond(
    batch: usize,
    channels: usize,
    t: usize,
    inpaint: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    let Some((mask, masked)) = inpaint else {
        return Ok(Tensor::zeros(&[batch, channels + 1, t], DType::F32));
    };
    let ms = mask.shape();
    let xs = masked.shape();
    let ok_b = |n: usize| n == batch || n == 1;
    if ms.len() != 3
        || xs.len() != 3
        || ms[1] != 1
        || ms[2] != t
        || xs[1] != channels
        || xs[2] != t
        || !ok_b(ms[0])
        || !ok_b(xs[0])
    {
        return Err(input_err(
            "local_add_cond",
            format!("mask {ms:?} and masked input {xs:?} must be [B|1, 1, {t}] and [B|1, {channels}, {t}] (B = {batch})"),
        ));
    }
    if batch == 0 {
        return Ok(Tensor::zeros(&[0, channels + 1, t], DType::F32));
    }
    let (m, x) = (mask.to_dtype(DType::F32)?, masked.to_dtype(DType::F32)?);
    let rows = (0..batch)
        .map(|b| {
            let mb = m.narrow(0, if ms[0] == 1 { 0 } else { b }, 1)?;
            let xb = x.narrow(0, if xs[0] == 1 { 0 } else { b }, 1)?;
            Tensor::cat(&[&mb, &xb], 1)
        })
        .collect::<aria_core::Result<Vec<_>>>()?;
    Ok(Tensor::cat(&rows.iter().collect::<Vec<_>>(), 0)?)
}

/// A sample-domain mask reduced to `t` latent frames by nearest interpolation with an integer
/// ratio (`F.interpolate(mode="nearest")`): frame `i` takes sample `ratio · i`.
pub fn latent_mask_nearest(mask_samples: &[f32], t: usize, ratio: usize) -> Result<Vec<f32>> {
    (0..t)
        .map(|i| {
            mask_samples.get(i * ratio).copied().ok_or_else(|| {
                input_err(
                    "inpaint mask",
                    format!(
                        "{} samples do not cover {t} latents of {ratio} samples",
                        mask_samples.len()
                    ),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_matches_pytorch_symmetry() {
        let l = linspace_f32(0.0, 1.0, 128);
        assert_eq!(l[0], 0.0);
        assert_eq!(l[127], 1.0);
        // Second half is computed from the end.
        let step = 1.0f32 / 127.0;
        assert_eq!(l[100], (-step).mul_add(27.0, 1.0));
        assert_eq!(l[10], step * 10.0);
        // Fused: index 72 is one ulp above the twice-rounded `1 − step·55`.
        assert_eq!(l[72].to_bits(), (1.0 - step * 55.0).to_bits() + 1);
        assert_eq!(linspace_f32(1.0, 0.0, 9)[8], 0.0);
    }

    /// The reference-rounded entries are near-midpoint cases: the exact exponential lies within
    /// 0.02 ulp of the midpoint between the two neighbours, so a half-ulp-accurate library may
    /// round either way; every other entry is the correctly rounded value.
    #[test]
    fn reference_rounding_only_at_midpoints() {
        let f = expo_frequencies(128, EXPO_MIN_FREQ, EXPO_MAX_FREQ);
        let span = (EXPO_MAX_FREQ.ln() - EXPO_MIN_FREQ.ln()) as f32;
        let lmin = EXPO_MIN_FREQ.ln() as f32;
        for (i, r) in linspace_f32(0.0, 1.0, 128).into_iter().enumerate() {
            let exact = ((r * span + lmin) as f64).exp();
            let nearest = exact as f32;
            if let Some(&(_, d)) = EXPO_REFERENCE_ROUNDING.iter().find(|(k, _)| *k == i) {
                let lo = if (nearest as f64) < exact {
                    nearest
                } else {
                    f32::from_bits(nearest.to_bits() - 1)
                };
                let ulp = f32::from_bits(lo.to_bits() + 1) as f64 - lo as f64;
                let frac = (exact - lo as f64) / ulp;
                assert!((frac - 0.5).abs() < 0.02, "entry {i}: {frac}");
                assert_eq!(f[i].to_bits(), nearest.to_bits().wrapping_add_signed(d));
            } else {
                assert_eq!(f[i], nearest, "entry {i}");
            }
        }
        assert!((f[0] - 0.5).abs() < 1e-7);
        assert!((f[127] - 10000.0).abs() < 2e-3);
    }

    #[test]
    fn expo_features_endpoints() {
        let t = expo_fourier_features(&[0.0, 1.0], 256).unwrap();
        assert_eq!(t.shape(), &[2, 256]);
        let v = t.to_vec_f32().unwrap();
        // value 0: cos = 1, sin = 0.
        assert!(v[..128].iter().all(|&c| c == 1.0));
        assert!(v[128..256].iter().all(|&s| s == 0.0));
        // value 1, lowest frequency 0.5: a = π → cos = −1.
        assert!((v[256] + 1.0).abs() < 1e-6);
        assert!(expo_fourier_features(&[0.0], 3).is_err());
    }
}
