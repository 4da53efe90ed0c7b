//! What a generation is asked for and what it returns.

use std::time::Duration;

use aria_codec::audio::AudioClip;
use aria_core::Tensor;
use aria_dit::conditioner::Conditioning;
use aria_dit::config::Objective;
use aria_dit::sampler::{SamplerKind, Shift};

use crate::plan::Lengths;

/// Audio to start from (audio-to-audio).
#[derive(Debug, Clone)]
pub struct InitAudio {
    /// The clip (any sample rate and channel count).
    pub clip: AudioClip,
    /// Noise level `σ_max` in (0, 1]: how far from the clip the result may move.
    pub noise_level: f32,
}

/// Latents to start from: audio-to-audio without running the encoder (e.g. the latents of an
/// earlier generation, or of [`crate::Pipeline::encode_audio`]).
#[derive(Debug, Clone)]
pub struct InitLatents {
    /// Latents `[1, C, T]` with `T` = [`crate::Pipeline::lengths`]`(seconds, padding).latents`.
    pub latents: Tensor,
    /// Noise level `σ_max` in (0, 1], as for [`InitAudio`].
    pub noise_level: f32,
}

/// A warm start: clean latents `x̂₀` noised to the schedule's level at `start_step` by the
/// rectified-flow forward process `x = (1 − σ)·x̂₀ + σ·ε` (ε: the initial-noise draw), after which
/// only steps `start_step..steps` run. `start_step = 0` (σ = 1) is a cold generation, bit for
/// bit; `start_step = steps` returns `x̂₀` itself.
#[derive(Debug, Clone)]
pub struct WarmStart {
    /// Clean latents `[1, C, T]` with `T` = [`crate::Pipeline::lengths`]`(seconds, padding).latents`.
    pub latents: Tensor,
    /// First sampler step to run, in `0..=steps`.
    pub start_step: usize,
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
    /// Distribution shift of the schedule (`None`: the model's
    /// `sampling_distribution_shift_options`; the reference's `dist_shift`).
    pub shift: Option<Shift>,
    /// Guidance runs only while `lo ≤ σ ≤ hi` (`(0, 1)`: always).
    pub cfg_interval: (f32, f32),
    /// CFG rescale `φ` (the reference's `scale_phi`; 0: off).
    pub cfg_rescale: f32,
    /// Clamp of the guidance difference's norm (0: off).
    pub cfg_norm_threshold: f32,
    /// Headroom added to the duration when sizing the latent sequence (6 s).
    pub duration_padding_sec: f64,
    /// Audio-to-audio start.
    pub init_audio: Option<InitAudio>,
    /// Audio-to-audio start from latents (excludes `init_audio` and `warm_start`).
    pub init_latents: Option<InitLatents>,
    /// Warm start from clean latents at an intermediate step (excludes the audio-to-audio
    /// starts).
    pub warm_start: Option<WarmStart>,
    /// Inpainting.
    pub inpaint: Option<Inpaint>,
    /// Latents `[1, C, T]` of the inpainting source (e.g. an earlier generation's final
    /// latents, shifted), used instead of encoding `inpaint.clip`: the kept regions then
    /// continue those latents exactly and no audio is encoded. Needs `inpaint` (its ranges);
    /// `T` = [`crate::Pipeline::lengths`]`(seconds, padding).latents`.
    pub inpaint_latents: Option<Tensor>,
    /// Precomputed DiT conditioning (positive, negative) instead of running the text encoder
    /// (the reference's `conditioning_tensors`; the seconds token must match `seconds`).
    pub conditioning: Option<(Conditioning, Option<Conditioning>)>,
}

/// The sampling settings the official tools preset for a model, by its objective: the
/// post-trained (`rf_denoiser`) models 8 ping-pong steps without guidance, the `-base`
/// (`rectified_flow`) models 50 Euler steps with CFG 7.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingDefaults {
    /// Sampler steps.
    pub steps: usize,
    /// Classifier-free guidance scale.
    pub cfg_scale: f32,
    /// Sampler.
    pub sampler: SamplerKind,
}

impl SamplingDefaults {
    /// The preset for a `diffusion_objective`.
    pub fn for_objective(objective: Objective) -> SamplingDefaults {
        match objective {
            Objective::RfDenoiser => SamplingDefaults {
                steps: 8,
                cfg_scale: 1.0,
                sampler: SamplerKind::PingPong,
            },
            Objective::RectifiedFlow => SamplingDefaults {
                steps: 50,
                cfg_scale: 7.0,
                sampler: SamplerKind::Euler,
            },
        }
    }
}

impl GenerateRequest {
    /// A request with the model's preset steps, guidance scale and sampler
    /// ([`SamplingDefaults`]), otherwise as [`GenerateRequest::new`].
    pub fn with_defaults(
        prompt: impl Into<String>,
        seconds: f64,
        defaults: SamplingDefaults,
    ) -> GenerateRequest {
        GenerateRequest {
            steps: defaults.steps,
            cfg_scale: defaults.cfg_scale,
            sampler: Some(defaults.sampler),
            ..GenerateRequest::new(prompt, seconds)
        }
    }

    /// A text-to-audio request with the reference `generate()` defaults (8 steps, no guidance,
    /// the objective's sampler), whatever the model; see [`GenerateRequest::with_defaults`]
    /// for the per-model presets.
    pub fn new(prompt: impl Into<String>, seconds: f64) -> GenerateRequest {
        GenerateRequest {
            prompt: prompt.into(),
            negative_prompt: None,
            seconds,
            steps: 8,
            cfg_scale: 1.0,
            apg_scale: 1.0,
            sampler: None,
            shift: None,
            cfg_interval: (0.0, 1.0),
            cfg_rescale: 0.0,
            cfg_norm_threshold: 0.0,
            duration_padding_sec: 6.0,
            init_audio: None,
            init_latents: None,
            warm_start: None,
            inpaint: None,
            inpaint_latents: None,
            conditioning: None,
        }
    }
}

/// What happens during a generation, in order.
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
    /// Audio of `done` of `total` latents decoded (after each decode window).
    DecodeProgress {
        /// Latents decoded so far.
        done: usize,
        /// Latents to decode.
        total: usize,
    },
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
    /// Autoencoder decode (including the audio sink's time when streaming).
    pub decode: Duration,
    /// The whole call.
    pub total: Duration,
}

/// The result of a generation.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Audio `[channels, samples]` at [`crate::Pipeline::sample_rate`], clamped to [−1, 1] and
    /// cropped to the requested duration. Empty (`[channels, 0]`) when the audio went to an
    /// [`crate::pipeline::AudioSink`] or was not decoded.
    pub audio: Tensor,
    /// Final latents `[1, C, T]`.
    pub latents: Tensor,
    /// Lengths used.
    pub lengths: Lengths,
    /// Time per stage.
    pub timings: Timings,
}

/// The result of a batched generation, shaped as the reference returns it.
#[derive(Debug, Clone)]
pub struct BatchGenerated {
    /// Audio `[B, channels, samples]` clamped to [−1, 1], each item zeroed past its valid
    /// latents; cropped to the duration when every item asks for the same one, full length
    /// otherwise (as the reference does). Empty (`[B, channels, 0]`) when the audio went to an
    /// [`crate::pipeline::AudioSink`] or was not decoded.
    pub audio: Tensor,
    /// Final latents `[B, C, T]`.
    pub latents: Tensor,
    /// Lengths of every item (sharing `samples` and `latents`).
    pub lengths: Vec<Lengths>,
    /// Time per stage.
    pub timings: Timings,
}
