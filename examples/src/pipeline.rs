//! [`Pipeline`]: a loaded SA3 model and the reference `generate()` flow (spec §1) on top of the
//! component crates: prompt and duration conditioning and the DiT from `aria-dit`, the SAME
//! autoencoder from `aria-codec`, and the bookkeeping of [`crate::plan`].

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aria_codec::audio::{prepare_audio, AudioClip};
use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::{DType, Tensor, WeightLoader};
use aria_dit::conditioner::{Conditioning, TextConditioner};
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;
use aria_dit::lora::{LoraFile, LoraStack};
pub use aria_dit::t5gemma::Precision;

use crate::discover::ModelFiles;
use crate::noise::NoiseSource;
use crate::plan::{Geometry, Lengths};
use crate::{Error, Result};
use aria_dit::dit::DitConditioning;
use aria_dit::sampler::{
    self, Guidance, GuidedDit, GuidedOptions, NegativeConditioning, SampleOptions, SamplerKind,
    Schedule, Shift, StepControl,
};

/// The `sample_size` default of the reference `generate()` (1292 latents, about 120 s).
pub const GENERATE_SAMPLE_SIZE: usize = 5_292_032;

/// Overrides of the autoencoder's stochastic terms (config values when not overridden).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SameNoise {
    /// Standard deviation of the encoder's new-token noise.
    pub encoder_mask_noise: f32,
    /// Standard deviation of the decoder's new-token noise.
    pub decoder_mask_noise: f32,
    /// Whether the bottleneck adds `1e-3·running_std` noise at decode.
    pub bottleneck_noise_regularize: bool,
}

impl SameNoise {
    /// Every stochastic term off (deterministic decode).
    pub const OFF: SameNoise = SameNoise {
        encoder_mask_noise: 0.0,
        decoder_mask_noise: 0.0,
        bottleneck_noise_regularize: false,
    };
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// LoRA files with their strengths, applied in order.
    pub loras: Vec<(PathBuf, f32)>,
    /// Override of the autoencoder's stochastic terms.
    pub same_noise: Option<SameNoise>,
    /// Decode in the official 128-latent chunks (`None`: as `model.pretransform.chunked` says).
    pub chunked_decode: Option<bool>,
    /// Arithmetic of the text encoder (`None`: what the reference uses for the folder, i.e.
    /// its bf16 arithmetic for the released bf16 T5Gemma, which reproduces the official
    /// conditioning bit for bit; `F32` is closer to exact arithmetic).
    pub text_precision: Option<Precision>,
}

/// Audio to start from (audio-to-audio).
#[derive(Debug, Clone)]
pub struct InitAudio {
    /// The clip (any sample rate and channel count).
    pub clip: AudioClip,
    /// Noise level `σ_max` in (0, 1]: how far from the clip the result may move.
    pub noise_level: f32,
}

/// Audio to inpaint: the ranges are regenerated, the rest is kept.
#[derive(Debug, Clone)]
pub struct Inpaint {
    /// The clip (any sample rate and channel count).
    pub clip: AudioClip,
    /// `(start, end)` in seconds of every region to regenerate.
    pub ranges: Vec<(f64, f64)>,
}

/// One generation request (the keyword arguments of the reference `generate()`).
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// The prompt.
    pub prompt: String,
    /// Negative prompt (used when `cfg_scale != 1`).
    pub negative_prompt: Option<String>,
    /// Duration in seconds.
    pub seconds: f64,
    /// Sampler steps (8 for the post-trained models).
    pub steps: usize,
    /// Classifier-free guidance scale (1: off, one model evaluation per step).
    pub cfg_scale: f32,
    /// Adaptive projected guidance (1: full APG, 0: plain CFG).
    pub apg_scale: f32,
    /// Sampler (`None`: ping-pong for `rf_denoiser`, Euler for `rectified_flow`).
    pub sampler: Option<SamplerKind>,
    /// Headroom added to the duration when sizing the latent sequence (6 s).
    pub duration_padding_sec: f64,
    /// Audio-to-audio start.
    pub init_audio: Option<InitAudio>,
    /// Inpainting.
    pub inpaint: Option<Inpaint>,
    /// Precomputed DiT conditioning (positive, negative) instead of running the text encoder
    /// (the reference's `conditioning_tensors`; the seconds token must match `seconds`).
    pub conditioning: Option<(Conditioning, Option<Conditioning>)>,
}

impl GenerateRequest {
    /// A text-to-audio request with the reference defaults.
    pub fn new(prompt: impl Into<String>, seconds: f64) -> GenerateRequest {
        GenerateRequest {
            prompt: prompt.into(),
            negative_prompt: None,
            seconds,
            steps: 8,
            cfg_scale: 1.0,
            apg_scale: 1.0,
            sampler: None,
            duration_padding_sec: 6.0,
            init_audio: None,
            inpaint: None,
            conditioning: None,
        }
    }
}

/// What happens during [`Pipeline::generate`], in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// Text and duration conditioning computed.
    TextDone,
    /// Input audio encoded (audio-to-audio / inpainting only).
    AudioEncoded,
    /// Sampler step `index` (0-based) of `total` done; `t` is the level it started from.
    Step {
        /// Step index.
        index: usize,
        /// Number of steps.
        total: usize,
        /// Noise level the step started at.
        t: f32,
    },
    /// Decoding started.
    Decoding,
    /// Decoding done.
    Decoded,
}

/// Wall-clock time of each stage of a generation.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Tokenizer, text encoder and conditioners.
    pub text: Duration,
    /// Encoding of input audio.
    pub encode: Duration,
    /// Each sampler step.
    pub steps: Vec<Duration>,
    /// Autoencoder decode.
    pub decode: Duration,
    /// The whole call.
    pub total: Duration,
}

/// The result of a generation.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Audio `[channels, samples]` at [`Pipeline::sample_rate`], clamped to [−1, 1] and cropped
    /// to the requested duration.
    pub audio: Tensor,
    /// Final latents `[1, C, T]`.
    pub latents: Tensor,
    /// Lengths used.
    pub lengths: Lengths,
    /// Time per stage.
    pub timings: Timings,
}

/// The result of a batched generation ([`Pipeline::generate_batch`]), shaped as the reference
/// returns it.
#[derive(Debug, Clone)]
pub struct BatchGenerated {
    /// Audio `[B, channels, samples]` clamped to [−1, 1], each item zeroed past its valid
    /// latents; cropped to the duration when every item asks for the same one, full length
    /// otherwise (as the reference does).
    pub audio: Tensor,
    /// Final latents `[B, C, T]`.
    pub latents: Tensor,
    /// Lengths of every item (sharing `samples` and `latents`).
    pub lengths: Vec<Lengths>,
    /// Time per stage.
    pub timings: Timings,
}

/// A loaded SA3 model.
pub struct Pipeline {
    files: ModelFiles,
    config: ModelConfig,
    geometry: Geometry,
    text: TextConditioner,
    dit: Dit,
    ae: Autoencoder,
    chunked_decode: bool,
    /// The duration embedder's Linear with LoRA merged (`None` without a LoRA targeting it).
    seconds_lora: Option<SecondsLinear>,
}

/// A duration-embedder Linear whose weight a LoRA changed: `(id, weight [D, 256], bias [D])`.
struct SecondsLinear {
    id: String,
    weight: Tensor,
    bias: Tensor,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("dir", &self.files.dir)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Load a model folder (see [`crate::discover`]): configuration, text encoder, DiT and
    /// autoencoder. Weights stay memory-mapped where their dtype allows.
    pub fn load(files: &ModelFiles, opts: &LoadOptions) -> Result<Pipeline> {
        let config = ModelConfig::from_file(&files.config)?;
        if config.model_type != "diffusion_cond" {
            return Err(Error::Config(format!(
                "{}: model_type `{}` is not a text-to-audio model (diffusion_cond)",
                files.config.display(),
                config.model_type
            )));
        }
        let mut ae_cfg = AutoencoderConfig::from_model_config(&files.config).map_err(codec)?;
        if let Some(n) = opts.same_noise {
            ae_cfg.encoder.mask_noise = n.encoder_mask_noise;
            ae_cfg.decoder.mask_noise = n.decoder_mask_noise;
            ae_cfg.bottleneck.noise_regularize = n.bottleneck_noise_regularize;
        }
        let weights = WeightLoader::open_checkpoint(&files.weights)?;
        let dit = Dit::load(&config.model.diffusion.config, &weights.pp("model.model"))?;
        let ae = Autoencoder::load(&ae_cfg, &weights).map_err(codec)?;
        let mut text = TextConditioner::load(&config, &weights)?;
        if let Some(p) = opts.text_precision {
            text.prompt_mut().encoder_mut().set_precision(p);
        }
        let enc = &config.model.pretransform["config"]["encoder"]["config"];
        let chunk = enc.get("chunk_size").and_then(|v| v.as_u64()).unwrap_or(32) as usize;
        let stride = ae_cfg.encoder.strides.first().copied().unwrap_or(16).max(1);
        let geometry = Geometry {
            sample_rate: config.sample_rate,
            downsampling_ratio: ae_cfg.downsampling_ratio,
            latent_align: (chunk / stride).max(1),
            max_samples: GENERATE_SAMPLE_SIZE.max(config.sample_size),
        };
        let mut p = Pipeline {
            files: files.clone(),
            chunked_decode: opts.chunked_decode.unwrap_or(ae_cfg.chunked),
            config,
            geometry,
            text,
            dit,
            ae,
            seconds_lora: None,
        };
        if !opts.loras.is_empty() {
            p.apply_loras(&opts.loras, &weights)?;
        }
        Ok(p)
    }

    fn apply_loras(&mut self, loras: &[(PathBuf, f32)], weights: &WeightLoader) -> Result<()> {
        let mut stack = LoraStack::new();
        for (path, strength) in loras {
            let f = LoraFile::open(path).map_err(|e| Error::Lora {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            stack.push(std::sync::Arc::new(f), *strength);
        }
        let lora_err = |e: aria_dit::DitError| Error::Lora {
            path: loras.last().map(|l| l.0.clone()).unwrap_or_default(),
            reason: e.to_string(),
        };
        stack.apply(&mut self.dit).map_err(lora_err)?;
        // The conditioner side: the duration embedder's Linear (the only conditioner layer).
        let id = self
            .config
            .number_conditioners()?
            .first()
            .map(|(i, _)| i.to_string());
        if let Some(id) = id {
            let module = format!("conditioners.{id}.embedder.embedding.1");
            let w = weights.pp(format!("conditioner.{module}"));
            let d = self.config.model.conditioning.cond_dim;
            let base = w.get_as("weight", &[d, 256], DType::F32)?;
            if let Some(weight) = stack.merged_weight(&module, &base).map_err(lora_err)? {
                let bias = w.get_as("bias", &[d], DType::F32)?;
                self.seconds_lora = Some(SecondsLinear { id, weight, bias });
            }
        }
        Ok(())
    }

    /// The duration embeddings `[B, cond_dim]` of `seconds` as the conditioning uses them
    /// (with a LoRA's merged duration-embedder weight when one is loaded).
    pub fn seconds_embedding(&self, seconds: &[f32]) -> Result<Tensor> {
        match &self.seconds_lora {
            Some(sl) => {
                let nc = self
                    .text
                    .number(&sl.id)
                    .ok_or_else(|| Error::Config(format!("no number conditioner `{}`", sl.id)))?;
                let norm: Vec<f32> = seconds.iter().map(|&s| nc.normalize(s)).collect();
                let f = aria_dit::conditioner::expo_fourier_features(&norm, 256)?;
                Ok(aria_core::ops::linear(&f, &sl.weight, Some(&sl.bias))?)
            }
            None => {
                let e = self.text.seconds_embedding(seconds)?;
                let b = seconds.len();
                let d = e.elem_count() / b.max(1);
                Ok(e.reshape(&[b, d])?)
            }
        }
    }

    /// Replace the duration token (last cross-attention token) and the global condition by the
    /// LoRA-merged duration embedding.
    fn with_seconds_lora(&self, mut c: Conditioning, seconds: &[f32]) -> Result<Conditioning> {
        if self.seconds_lora.is_none() {
            return Ok(c);
        }
        let e = self.seconds_embedding(seconds)?;
        let s = c.cross_attn_cond.shape().to_vec();
        let d = s[2];
        let mut v = c
            .cross_attn_cond
            .to_dtype(DType::F32)?
            .contiguous()?
            .to_vec_f32()?;
        let ev = e.to_vec_f32()?;
        for (bi, row) in ev.chunks_exact(d.max(1)).enumerate() {
            let last = (bi * s[1] + s[1] - 1) * d;
            v[last..last + d].copy_from_slice(row);
        }
        c.cross_attn_cond = Tensor::from_vec(v, &s)?;
        c.global_cond = e;
        Ok(c)
    }

    /// The model files.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The parsed `model_config.json`.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The text conditioner (tokenizer, T5Gemma encoder, duration embedder).
    pub fn text(&self) -> &TextConditioner {
        &self.text
    }

    /// The DiT.
    pub fn dit(&self) -> &Dit {
        &self.dit
    }

    /// The autoencoder.
    pub fn autoencoder(&self) -> &Autoencoder {
        &self.ae
    }

    /// Output sample rate (44100).
    pub fn sample_rate(&self) -> u32 {
        self.config.sample_rate
    }

    /// Length bookkeeping of this model.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Longest duration a request may ask for, in seconds.
    pub fn max_seconds(&self) -> f64 {
        self.geometry
            .max_samples
            .min(self.config.sample_size.max(1)) as f64
            / f64::from(self.sample_rate())
    }

    fn validate(&self, req: &GenerateRequest) -> Result<()> {
        let max = self.max_seconds();
        if !(req.seconds.is_finite() && req.seconds > 0.0) {
            return Err(Error::Input(format!(
                "duration must be a positive number of seconds, got {}",
                req.seconds
            )));
        }
        if req.seconds > max {
            return Err(Error::Input(format!(
                "duration {} s exceeds this model's maximum of {max:.1} s",
                req.seconds
            )));
        }
        if req.steps == 0 || req.steps > 1000 {
            return Err(Error::Input(format!(
                "steps must be between 1 and 1000, got {}",
                req.steps
            )));
        }
        if !req.cfg_scale.is_finite() || !req.apg_scale.is_finite() {
            return Err(Error::Input("cfg and apg scales must be finite".into()));
        }
        if let Some(init) = &req.init_audio {
            if !(init.noise_level > 0.0 && init.noise_level <= 1.0) {
                return Err(Error::Input(format!(
                    "init noise level must be in (0, 1], got {}",
                    init.noise_level
                )));
            }
        }
        if let Some(inp) = &req.inpaint {
            if inp.ranges.is_empty() {
                return Err(Error::Input(
                    "inpainting needs at least one range START,END".into(),
                ));
            }
            for &(s, e) in &inp.ranges {
                if !(s >= 0.0 && s < e && e <= req.seconds) {
                    return Err(Error::Input(format!(
                        "inpaint range {s},{e} must satisfy 0 <= start < end <= duration ({} s)",
                        req.seconds
                    )));
                }
            }
        }
        Ok(())
    }

    /// Encode audio `[1, 2, n]` (already prepared) to latents, chunked as configured.
    fn encode_prepared(&self, x: &Tensor, noise: &mut dyn NoiseSource) -> Result<Tensor> {
        let mut adapter = CodecNoise {
            inner: noise,
            what: "encoder new-token noise",
            err: None,
        };
        let r = if self.chunked_decode {
            self.ae.encode_chunked(x, Some(&mut adapter))
        } else {
            self.ae.encode(x, Some(&mut adapter))
        };
        adapter.finish(r)
    }

    /// Encode an audio clip to latents `[1, C, T]` (resampled to the model rate, stereo, padded
    /// to whole latents).
    pub fn encode_audio(&self, clip: &AudioClip, noise: &mut dyn NoiseSource) -> Result<Tensor> {
        let ratio = self.geometry.downsampling_ratio * self.geometry.latent_align;
        let n = (clip.frames() as u64 * u64::from(self.sample_rate()))
            .div_ceil(u64::from(clip.sample_rate.max(1)));
        let n = (n as usize).div_ceil(ratio).max(1) * ratio;
        let x = prepare_audio(clip, self.sample_rate(), Some(n), 2)?;
        self.encode_prepared(&x, noise)
    }

    /// Decode latents `[1, C, T]` to audio `[channels, samples]` (official path: chunked as
    /// configured, stochastic terms drawn from `noise`), clamped to [−1, 1].
    pub fn decode_latents(&self, latents: &Tensor, noise: &mut dyn NoiseSource) -> Result<Tensor> {
        let a = self.decode_raw(latents, noise)?;
        let a = aria_core::ops::map(&a, |v| v.clamp(-1.0, 1.0))?;
        Ok(a.squeeze(0)?)
    }

    fn decode_raw(&self, latents: &Tensor, noise: &mut dyn NoiseSource) -> Result<Tensor> {
        let mut adapter = CodecNoise {
            inner: noise,
            what: "decoder noise",
            err: None,
        };
        let r = if self.chunked_decode {
            self.ae.decode_chunked(latents, Some(&mut adapter))
        } else {
            self.ae.decode(latents, Some(&mut adapter))
        };
        adapter.finish(r)
    }

    /// Run the reference `generate()` for one request. Draws come from `noise` in the
    /// reference order (initial noise, encoder noise, one per step, decoder noise); `on_event`
    /// is told about every stage and step and may stop the run by returning
    /// [`ControlFlow::Break`] (the call then returns [`Error::Cancelled`]).
    pub fn generate(
        &self,
        req: &GenerateRequest,
        noise: &mut dyn NoiseSource,
        on_event: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<Generated> {
        let b = self.generate_batch(std::slice::from_ref(req), noise, on_event)?;
        let lengths =
            b.lengths.into_iter().next().ok_or_else(|| {
                Error::Input("a generation of one request returned no item".into())
            })?;
        Ok(Generated {
            audio: b.audio.squeeze(0)?,
            latents: b.latents,
            lengths,
            timings: b.timings,
        })
    }

    /// Check that batched requests agree on everything the reference shares across a batch
    /// (steps, guidance, sampler, headroom, precomputed conditioning or not, negative prompts
    /// or not) and carry no audio inputs.
    fn validate_batch(&self, reqs: &[GenerateRequest]) -> Result<()> {
        let first = reqs
            .first()
            .ok_or_else(|| Error::Input("a batch needs at least one request".into()))?;
        for r in reqs {
            self.validate(r)?;
        }
        if reqs.len() == 1 {
            return Ok(());
        }
        for (i, r) in reqs.iter().enumerate().skip(1) {
            let differs = |what: &str| {
                Error::Input(format!(
                    "batched request {i} differs from request 0 in {what}, which a batch shares"
                ))
            };
            if r.steps != first.steps {
                return Err(differs("steps"));
            }
            if r.cfg_scale != first.cfg_scale || r.apg_scale != first.apg_scale {
                return Err(differs("the guidance scales"));
            }
            if r.sampler != first.sampler {
                return Err(differs("the sampler"));
            }
            if r.duration_padding_sec != first.duration_padding_sec {
                return Err(differs("the duration padding"));
            }
            if r.conditioning.is_some() != first.conditioning.is_some() {
                return Err(differs("having precomputed conditioning"));
            }
            if r.negative_prompt.is_some() != first.negative_prompt.is_some() {
                return Err(differs("having a negative prompt"));
            }
        }
        if reqs
            .iter()
            .any(|r| r.init_audio.is_some() || r.inpaint.is_some())
        {
            return Err(Error::Input(
                "audio-to-audio and inpainting run one request at a time, not in a batch".into(),
            ));
        }
        Ok(())
    }

    /// The conditioning of a batch: precomputed (concatenated) or from the prompts.
    fn batch_conditioning(
        &self,
        reqs: &[GenerateRequest],
        use_cfg: bool,
    ) -> Result<(Conditioning, Option<Conditioning>)> {
        if reqs[0].conditioning.is_some() {
            let mut pos = Vec::with_capacity(reqs.len());
            let mut neg = Vec::with_capacity(reqs.len());
            for r in reqs {
                if let Some((c, n)) = &r.conditioning {
                    pos.push(c.clone());
                    neg.push(n.clone());
                }
            }
            let neg = if neg.iter().all(Option::is_some) {
                Some(concat_conditioning(
                    &neg.into_iter().flatten().collect::<Vec<_>>(),
                )?)
            } else if neg.iter().all(Option::is_none) {
                None
            } else {
                return Err(Error::Input(
                    "batched precomputed conditioning: some items have a negative branch, \
                     some do not"
                        .into(),
                ));
            };
            return Ok((concat_conditioning(&pos)?, neg));
        }
        let secs: Vec<f32> = reqs.iter().map(|r| r.seconds as f32).collect();
        let prompts: Vec<&str> = reqs.iter().map(|r| r.prompt.as_str()).collect();
        let c = self.text.conditioning(&prompts, &secs)?;
        let c = self.with_seconds_lora(c, &secs)?;
        let negs: Vec<&str> = reqs
            .iter()
            .filter_map(|r| r.negative_prompt.as_deref())
            .collect();
        let n = if use_cfg && negs.len() == reqs.len() {
            Some(self.with_seconds_lora(self.text.negative(&negs, &secs)?, &secs)?)
        } else {
            None
        };
        Ok((c, n))
    }

    /// Run the reference `generate()` on a batch: lists of prompts, negative prompts and
    /// durations, everything else shared (see [`GenerateRequest`]; audio inputs need a batch
    /// of one). The latent length follows the longest duration; each item gets its own
    /// padding mask, schedule and duration conditioning, and the draws have the batch as
    /// their first dimension, as in the reference.
    pub fn generate_batch(
        &self,
        reqs: &[GenerateRequest],
        noise: &mut dyn NoiseSource,
        on_event: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<BatchGenerated> {
        let t_start = Instant::now();
        self.validate_batch(reqs)?;
        let req = &reqs[0];
        let nb = reqs.len();
        let mut timings = Timings::default();
        let mut emit = |e: Event| match on_event(&e) {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(()) => Err(Error::Cancelled),
        };
        let g = self.geometry;
        let seconds: Vec<f64> = reqs.iter().map(|r| r.seconds).collect();
        let all_lengths = g.batch_lengths(&seconds, req.duration_padding_sec);
        let lengths = all_lengths[0];
        let (c, t) = (self.config.model.io_channels, lengths.latents);

        // Inpainting mask in the sample domain (1 = keep).
        let mask_samples = req
            .inpaint
            .as_ref()
            .map(|inp| g.inpaint_mask_samples(&lengths, &inp.ranges));

        // Initial noise, drawn right after seeding.
        let x_noise = noise.draw(&[nb, c, t], "initial noise")?;

        // Conditioning.
        let t0 = Instant::now();
        let use_cfg = req.cfg_scale != 1.0;
        let (cond, neg) = self.batch_conditioning(reqs, use_cfg)?;
        if cond.batch() != nb {
            return Err(Error::Input(format!(
                "precomputed conditioning has batch {} for {nb} requests",
                cond.batch()
            )));
        }
        timings.text = t0.elapsed();
        emit(Event::TextDone)?;

        // Audio inputs.
        let t0 = Instant::now();
        let init_latents = match &req.init_audio {
            Some(init) => {
                let x = prepare_audio(&init.clip, self.sample_rate(), Some(lengths.samples), 2)?;
                Some(self.encode_prepared(&x, noise)?)
            }
            None => None,
        };
        let inpaint_latents = match &req.inpaint {
            Some(inp) => {
                let x = prepare_audio(&inp.clip, self.sample_rate(), Some(lengths.samples), 2)?;
                Some(self.encode_prepared(&x, noise)?)
            }
            None => None,
        };
        if req.init_audio.is_some() || req.inpaint.is_some() {
            timings.encode = t0.elapsed();
            emit(Event::AudioEncoded)?;
        }

        // Local-add condition: [mask ; inpaint latents · mask].
        let mask_lat = match &mask_samples {
            Some(m) => g.mask_to_latents(m, t),
            None => vec![0f32; t],
        };
        let mut local = vec![0f32; (c + 1) * t];
        local[..t].copy_from_slice(&mask_lat);
        if let Some(il) = &inpaint_latents {
            let v = il.to_vec_f32()?;
            for ch in 0..c {
                for i in 0..t {
                    local[(ch + 1) * t + i] = v[ch * t + i] * mask_lat[i];
                }
            }
        }
        // The same local condition for every item (zeros without inpainting).
        let local: Vec<f32> = (0..nb).flat_map(|_| local.iter().copied()).collect();
        let local = Tensor::from_vec(local, &[nb, c + 1, t])?;
        let pm: Vec<f32> = all_lengths
            .iter()
            .flat_map(|l| crate::plan::padding_mask(t, l.valid))
            .collect();
        let padding_mask = Tensor::from_vec(pm.clone(), &[nb, t])?;

        // Sampling.
        let sigma_max = req.init_audio.as_ref().map_or(1.0, |i| i.noise_level);
        let x0 = match &init_latents {
            Some(il) => {
                let a = il.to_vec_f32()?;
                let b = x_noise.to_vec_f32()?;
                let v = a
                    .iter()
                    .zip(&b)
                    .map(|(x, n)| x * (1.0 - sigma_max) + n * sigma_max)
                    .collect();
                Tensor::from_vec(v, &[1, c, t])?
            }
            None => x_noise,
        };
        let kind = match req.sampler {
            Some(k) => k,
            None => SamplerKind::default_for(&self.config.model.diffusion.diffusion_objective)?,
        };
        let shift = Shift::from_options(
            self.config
                .model
                .diffusion
                .sampling_distribution_shift_options
                .as_ref(),
        )?;
        let eff: Vec<f32> = all_lengths
            .iter()
            .map(|l| l.effective.max(1) as f32)
            .collect();
        let schedule = Schedule::build(req.steps, sigma_max, &shift, &eff)?;
        let dcond = DitConditioning {
            cross_attn_cond: &cond.cross_attn_cond,
            global_cond: &cond.global_cond,
            local_add_cond: Some(&local),
        };
        let negative = neg.as_ref().map(|n| NegativeConditioning {
            cross_attn_cond: &n.cross_attn_cond,
            cross_attn_mask: Some(&n.cross_attn_mask),
        });
        let guidance = Guidance {
            cfg_scale: req.cfg_scale,
            apg_scale: req.apg_scale,
            ..Guidance::default()
        };
        let model = GuidedDit::new(
            &self.dit,
            &dcond,
            negative,
            Some(&padding_mask),
            GuidedOptions {
                guidance,
                ..Default::default()
            },
        )?;
        let mut step_times = Vec::with_capacity(req.steps);
        let mut cancelled = false;
        let latents = {
            let mut last = Instant::now();
            let mut cb = |info: &sampler::StepInfo<'_>| {
                step_times.push(last.elapsed());
                last = Instant::now();
                let t = info.sigma.first().copied().unwrap_or(0.0);
                match emit(Event::Step {
                    index: info.step,
                    total: info.steps,
                    t,
                }) {
                    Ok(()) => StepControl::Continue,
                    Err(_) => {
                        cancelled = true;
                        StepControl::Cancel
                    }
                }
            };
            let mut dn = DitNoise {
                inner: noise,
                err: None,
            };
            let opts = SampleOptions {
                callback: Some(&mut cb),
                ..Default::default()
            };
            let r = sampler::sample(&model, kind, x0, &schedule, &mut dn, opts);
            match (r, dn.err) {
                (_, Some(e)) => return Err(e),
                (Err(_), None) if cancelled => return Err(Error::Cancelled),
                (r, None) => r?,
            }
        };
        timings.steps = step_times;

        // Decode, zero the padded region, clamp, crop.
        emit(Event::Decoding)?;
        let t0 = Instant::now();
        let audio = self.decode_raw(&latents, noise)?;
        let ratio = g.downsampling_ratio;
        let (ch, len) = (audio.shape()[1], audio.shape()[2]);
        let mut a = audio.to_vec_f32()?;
        for (r, row) in a.chunks_mut(len.max(1)).enumerate() {
            let item_pm = &pm[(r / ch) * t..(r / ch + 1) * t];
            for (i, v) in row.iter_mut().enumerate() {
                let valid = item_pm.get(i / ratio).copied().unwrap_or(0.0);
                *v = (*v * valid).clamp(-1.0, 1.0);
            }
        }
        // Cropped to the duration when all items share one, as the reference does.
        let same = all_lengths
            .iter()
            .all(|l| l.output_samples == lengths.output_samples);
        let out_len = if same {
            lengths.output_samples.min(len)
        } else {
            len
        };
        let mut cropped = Vec::with_capacity(nb * ch * out_len);
        for row in a.chunks(len.max(1)) {
            cropped.extend_from_slice(&row[..out_len]);
        }
        let audio = Tensor::from_vec(cropped, &[nb, ch, out_len])?;
        timings.decode = t0.elapsed();
        emit(Event::Decoded)?;
        timings.total = t_start.elapsed();
        Ok(BatchGenerated {
            audio,
            latents,
            lengths: all_lengths,
            timings,
        })
    }
}

/// Concatenate conditionings along the batch.
fn concat_conditioning(cs: &[Conditioning]) -> Result<Conditioning> {
    let cat = |f: fn(&Conditioning) -> &Tensor| -> Result<Tensor> {
        let parts: Vec<&Tensor> = cs.iter().map(f).collect();
        Ok(Tensor::cat(&parts, 0)?)
    };
    Ok(Conditioning {
        cross_attn_cond: cat(|c| &c.cross_attn_cond)?,
        cross_attn_mask: cat(|c| &c.cross_attn_mask)?,
        global_cond: cat(|c| &c.global_cond)?,
    })
}

fn codec(e: aria_codec::CodecError) -> Error {
    Error::Codec(e)
}

/// Adapts a [`NoiseSource`] to the autoencoder's noise trait, keeping the first error.
struct CodecNoise<'a> {
    inner: &'a mut dyn NoiseSource,
    what: &'static str,
    err: Option<Error>,
}

impl CodecNoise<'_> {
    fn finish<T>(self, r: aria_codec::Result<T>) -> Result<T> {
        match (r, self.err) {
            (_, Some(e)) => Err(e),
            (Ok(v), None) => Ok(v),
            (Err(e), None) => Err(codec(e)),
        }
    }
}

impl aria_codec::NoiseSource for CodecNoise<'_> {
    fn normal(&mut self, shape: &[usize]) -> aria_codec::Result<Tensor> {
        match self.inner.draw(shape, self.what) {
            Ok(t) => Ok(t),
            Err(e) => {
                let msg = e.to_string();
                self.err = Some(e);
                Err(aria_codec::CodecError::Invalid(msg))
            }
        }
    }
}

/// Adapts a [`NoiseSource`] to the sampler's noise trait, keeping the first error.
struct DitNoise<'a> {
    inner: &'a mut dyn NoiseSource,
    err: Option<Error>,
}

impl sampler::NoiseSource for DitNoise<'_> {
    fn next(&mut self, shape: &[usize]) -> aria_dit::Result<Tensor> {
        match self.inner.draw(shape, "sampler step noise") {
            Ok(t) => Ok(t),
            Err(e) => {
                let msg = e.to_string();
                self.err = Some(e);
                Err(aria_dit::DitError::Input {
                    what: "noise".into(),
                    reason: msg,
                })
            }
        }
    }
}
