//! Warm start: what the cache needs from a text-to-audio pipeline ([`Generator`]) and the
//! alignment of a cached clip to a request ([`align`]).
//!
//! SoundWeaver replaces the pure-noise start `x_T ~ N(0, I)` by a sample of the forward process
//! `q(x_{t*} | x̂₀)` of a cached reference `x̂₀` at an intermediate step and runs only the
//! remaining steps. For the rectified-flow models here the forward process at the schedule's
//! level σ of step `s` is
//!
//! ```text
//! x_s = (1 − σ_s)·x̂₀ + σ_s·ε,    ε ~ N(0, I)
//! ```
//!
//! The generator performs that noising with its own draws ([`Generator::generate`] with
//! [`WarmLatents`]), so that `start_step = 0` (σ = 1) is a cold generation bit for bit.
//!
//! `x̂₀` comes from the cached clip: its stored latents when they were made by the same
//! generator for the same latent shape and duration, otherwise its audio, time-stretched by the
//! phase vocoder to the requested duration ([`crate::vocoder`]) and encoded by the generator.

use std::time::{Duration, Instant};

use aria_core::Tensor;

use crate::store::{Audio, Entry};
use crate::vocoder;
use crate::{CacheError, Result};

/// What the cache asks a generator for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The prompt.
    pub prompt: String,
    /// The negative prompt, if any.
    pub negative_prompt: Option<String>,
    /// Duration in seconds.
    pub seconds: f64,
    /// Sampler steps.
    pub steps: usize,
    /// Seed of the generation's draws.
    pub seed: u64,
}

impl Request {
    /// A request with no negative prompt.
    pub fn new(prompt: impl Into<String>, seconds: f64, steps: usize, seed: u64) -> Request {
        Request {
            prompt: prompt.into(),
            negative_prompt: None,
            seconds,
            steps,
            seed,
        }
    }
}

/// Clean latents `x̂₀` and the first step to run from.
#[derive(Debug, Clone)]
pub struct WarmLatents {
    /// Clean latents with the request's latent shape ([`Generator::latent_shape`]).
    pub latents: Tensor,
    /// First sampler step, in `0..=steps`.
    pub start_step: usize,
}

/// A finished generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The audio at [`Generator::sample_rate`], cropped to the requested duration.
    pub audio: Audio,
    /// The final clean latents.
    pub latents: Tensor,
    /// Wall-clock time of each sampler step that ran.
    pub step_times: Vec<Duration>,
    /// Wall-clock time of the whole generation.
    pub total: Duration,
}

/// A text-to-audio pipeline as the cache drives it. `aria::Pipeline` implements it (the `aria`
/// crate's `cache` feature); the cache itself knows nothing of the model.
pub trait Generator {
    /// A stable id of the model (stored with latents, which only this generator reuses).
    fn id(&self) -> String;
    /// Sample rate of its audio.
    fn sample_rate(&self) -> u32;
    /// Shape of the latents of `req` (e.g. `[1, C, T]`).
    fn latent_shape(&self, req: &Request) -> Result<Vec<usize>>;
    /// The noise levels of `req`'s schedule: `steps + 1` values from σ_max down to 0, the level
    /// step `s` starts from at index `s`.
    fn sigmas(&self, req: &Request) -> Result<Vec<f32>>;
    /// Encodes audio of `req.seconds` (at [`Self::sample_rate`]) to clean latents of
    /// [`Self::latent_shape`].
    fn encode(&self, audio: &Audio, req: &Request) -> Result<Tensor>;
    /// Runs `req`: from noise, or from `warm` noised to the level of its start step.
    fn generate(&self, req: &Request, warm: Option<&WarmLatents>) -> Result<Generation>;
    /// Decodes latents of `req` to audio.
    fn decode(&self, latents: &Tensor, req: &Request) -> Result<Audio>;
}

/// How `x̂₀` was obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Alignment {
    /// The entry's stored latents (same generator, shape and duration).
    StoredLatents,
    /// The entry's audio, stretched by the phase vocoder at this rate (1 when the length already
    /// matched) and encoded.
    Stretched {
        /// `d_i / L`: above 1 the clip was shortened.
        rate: f64,
    },
}

/// Time spent aligning.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AlignTimings {
    /// Phase vocoder.
    pub vocoder: Duration,
    /// Generator's encoder.
    pub encode: Duration,
}

/// Durations closer than this (seconds) count as equal for reusing stored latents.
pub const SAME_DURATION: f64 = 1e-3;

/// `x̂₀` for `req` from a cached entry (loaded with its payload): its latents when they fit,
/// else its audio stretched to the requested duration and encoded.
pub fn align(
    g: &dyn Generator,
    entry: &Entry,
    req: &Request,
) -> Result<(Tensor, Alignment, AlignTimings)> {
    let t = AlignTimings::default();
    let shape = g.latent_shape(req)?;
    if let Some(l) = &entry.data.latents {
        if l.generator == g.id()
            && l.shape == shape
            && (entry.data.seconds - req.seconds).abs() < SAME_DURATION
        {
            let x = Tensor::from_vec(l.data.clone(), &l.shape)?;
            return Ok((x, Alignment::StoredLatents, t));
        }
    }
    let audio = match &entry.data.audio {
        Some(a) => a,
        None => {
            let Some(l) = &entry.data.latents else {
                return Err(CacheError::Invalid {
                    name: format!("cache entry {}", entry.id),
                    reason: "holds neither audio nor latents".into(),
                });
            };
            if l.generator != g.id() {
                return Err(CacheError::Invalid {
                    name: format!("cache entry {}", entry.id),
                    reason: format!(
                        "holds only latents of `{}`, not of `{}`",
                        l.generator,
                        g.id()
                    ),
                });
            }
            // Latents of another duration: decode, then stretch.
            let x = Tensor::from_vec(l.data.clone(), &l.shape)?;
            let src = Request {
                seconds: entry.data.seconds,
                ..req.clone()
            };
            let a = g.decode(&x, &src)?;
            return align_audio(g, &a, entry.data.seconds, req, t);
        }
    };
    if audio.sample_rate != g.sample_rate() {
        return Err(CacheError::Invalid {
            name: format!("cache entry {}", entry.id),
            reason: format!(
                "audio at {} Hz, the generator runs at {} Hz",
                audio.sample_rate,
                g.sample_rate()
            ),
        });
    }
    align_audio(g, audio, entry.data.seconds, req, t)
}

fn align_audio(
    g: &dyn Generator,
    audio: &Audio,
    seconds: f64,
    req: &Request,
    mut t: AlignTimings,
) -> Result<(Tensor, Alignment, AlignTimings)> {
    let sr = f64::from(g.sample_rate());
    // The clip's valid part (stored audio is cropped to its duration already).
    let n_src = ((seconds * sr) as usize).min(audio.frames()).max(1);
    let n_dst = ((req.seconds * sr) as usize).max(1);
    let ch = audio.channels;
    let frames = audio.frames();
    let mut src = Vec::with_capacity(n_src * ch);
    for c in 0..ch {
        src.extend_from_slice(&audio.samples[c * frames..c * frames + n_src]);
    }
    let t0 = Instant::now();
    let stretched = vocoder::stretch_to(&src, ch, n_dst)?;
    t.vocoder = t0.elapsed();
    let rate = n_src as f64 / n_dst as f64;
    let a = Audio::new(stretched, ch, g.sample_rate())?;
    let t0 = Instant::now();
    let x = g.encode(&a, req)?;
    t.encode = t0.elapsed();
    let shape = g.latent_shape(req)?;
    if x.shape() != shape.as_slice() {
        return Err(CacheError::Generator(format!(
            "encoder returned latents {:?}, the request needs {shape:?}",
            x.shape()
        )));
    }
    Ok((x, Alignment::Stretched { rate }, t))
}

/// How many steps a warm start skips: a fixed share or step, or the skip gater's choice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SkipPolicy {
    /// Start at `round(fraction · steps)` (clamped to `0..=steps`).
    Fraction(f32),
    /// Start at this step (clamped to `0..=steps`).
    Steps(usize),
    /// Asked per request of the skip gater ([`crate::gater`]), which learns from each result
    /// and is saved in the store; [`Self::start_step`] gives its conservative level.
    Gated(crate::gater::GaterConfig),
}

impl Default for SkipPolicy {
    /// Half the steps (the paper's rule-based baseline skips 55 % above a similarity of 0.35).
    fn default() -> Self {
        SkipPolicy::Fraction(0.5)
    }
}

impl SkipPolicy {
    /// The start step for `steps` sampler steps.
    pub fn start_step(&self, steps: usize) -> usize {
        match *self {
            SkipPolicy::Fraction(f) => {
                let f = if f.is_finite() {
                    f.clamp(0.0, 1.0)
                } else {
                    0.0
                };
                ((f64::from(f) * steps as f64).round() as usize).min(steps)
            }
            SkipPolicy::Steps(s) => s.min(steps),
            SkipPolicy::Gated(c) => c.conservative_steps(steps),
        }
    }
}
