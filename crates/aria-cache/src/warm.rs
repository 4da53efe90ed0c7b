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
//! `x̂₀` comes from the cached clip, latents first:
//! - its stored latents as they are, when the same generator made them for the same latent
//!   shape and duration ([`Alignment::StoredLatents`]);
//! - its stored latents cropped or tiled at latent-frame granularity to the request's frames,
//!   when the durations differ by no more than a tolerance (the cache's
//!   [`crate::CacheConfig::latent_tolerance`]) and the generator says how many frames a duration
//!   covers ([`Generator::latent_frames`]): no decode, no encode
//!   ([`Alignment::FittedLatents`]);
//! - otherwise its audio, time-stretched by the phase vocoder to the requested duration
//!   ([`crate::vocoder`]) and encoded by the generator ([`Alignment::Stretched`]).

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
    /// Latent frames (the last axis of [`Self::latent_shape`]) that hold `seconds` of audio.
    /// `None` (the default): stored latents are reused only at the same shape and duration.
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        let _ = seconds;
        None
    }
}

/// How `x̂₀` was obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Alignment {
    /// The entry's stored latents (same generator, shape and duration).
    StoredLatents,
    /// The entry's stored latents cropped or tiled along the frames to the request's latent
    /// shape (same generator; durations within the tolerance); nothing decoded or encoded.
    FittedLatents {
        /// `d_i / L`: above 1 the clip was cropped, below 1 its frames repeat.
        rate: f64,
    },
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

/// The default of [`crate::CacheConfig::latent_tolerance`]: stored latents are fitted (cropped or
/// tiled) rather than stretched and encoded when `d_i / L` lies in `[1 / 1.25, 1.25]`.
pub const LATENT_TOLERANCE: f64 = 0.25;

/// `x̂₀` for `req` from a cached entry (loaded with its payload): its latents when they fit
/// exactly, else audio stretched to the requested duration and encoded. Stored latents of
/// another duration are never fitted here; [`align_within`] does that.
pub fn align(
    g: &dyn Generator,
    entry: &Entry,
    req: &Request,
) -> Result<(Tensor, Alignment, AlignTimings)> {
    align_within(g, entry, req, 0.0)
}

/// [`align`], latents first: when the same generator stored the entry's latents and
/// `d_i / L` lies in `[1 / (1 + tolerance), 1 + tolerance]`, the stored latents' frames that
/// hold `d_i` ([`Generator::latent_frames`]) are cropped or repeated from the start to the
/// request's latent shape ([`fit_frames`]), with no encode. A tolerance of 0 fits only equal
/// durations.
pub fn align_within(
    g: &dyn Generator,
    entry: &Entry,
    req: &Request,
    tolerance: f64,
) -> Result<(Tensor, Alignment, AlignTimings)> {
    align_fitting(g, entry, req, tolerance, false)
}

/// [`align_within`], and with `crop_longer` a reference longer than the request (`d_i > L`,
/// any ratio) starts from its stored latents cropped to the request's frames too: its first
/// `L` seconds at its own tempo, with no stretch and no encode (the selector's duration gate
/// bounds how much is cut). Only a reference shorter than `L / (1 + tolerance)` is then
/// stretched and encoded.
pub fn align_fitting(
    g: &dyn Generator,
    entry: &Entry,
    req: &Request,
    tolerance: f64,
    crop_longer: bool,
) -> Result<(Tensor, Alignment, AlignTimings)> {
    let t = AlignTimings::default();
    let shape = g.latent_shape(req)?;
    if let Some(l) = &entry.data.latents {
        if l.generator == g.id() {
            let same_duration = (entry.data.seconds - req.seconds).abs() < SAME_DURATION;
            if l.shape == shape && same_duration {
                let x = Tensor::from_vec(l.data.clone(), &l.shape)?;
                return Ok((x, Alignment::StoredLatents, t));
            }
            let rate = entry.data.seconds / req.seconds;
            let within = tolerance.is_finite()
                && tolerance >= 0.0
                && (rate <= 1.0 + tolerance || crop_longer)
                && rate * (1.0 + tolerance) >= 1.0;
            if within || same_duration {
                if let Some(frames) = g.latent_frames(entry.data.seconds) {
                    let name = format!("cache entry {}", entry.id);
                    let x = fit_frames(&name, &l.data, &l.shape, frames, &shape)?;
                    return Ok((x, Alignment::FittedLatents { rate }, t));
                }
            }
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

/// The part `[start, start + seconds)` of a cached clip (loaded with its payload) as an entry of
/// its own: a segment of the pyramid index chosen as the reference. Its audio is cut at the
/// sample rate; its stored latents, when `g` made them and tells their frames
/// ([`Generator::latent_frames`]), are cut at latent-frame granularity (the frames from
/// `⌊start · V / d⌋` that hold `seconds`, `V` the frames holding the clip's `d` seconds), else
/// dropped (the audio is then stretched and encoded). A span outside the clip is an error.
pub fn segment_of(g: &dyn Generator, entry: &Entry, start: f64, seconds: f64) -> Result<Entry> {
    let d = entry.data.seconds;
    let name = format!("cache entry {}", entry.id);
    if !(start.is_finite() && seconds.is_finite() && start >= 0.0 && seconds > 0.0)
        || start + seconds > d + SAME_DURATION
    {
        return Err(CacheError::Invalid {
            name,
            reason: format!("segment [{start} s, +{seconds} s) is not within its {d} s"),
        });
    }
    // The entry's metadata with the segment's payload (the clip's own is not copied).
    let src = &entry.data;
    let mut data = crate::store::NewEntry {
        prompt: src.prompt.clone(),
        negative_prompt: src.negative_prompt.clone(),
        seconds: seconds.min(d - start),
        quality: src.quality.clone(),
        importance: src.importance,
        steps: src.steps,
        seed: src.seed,
        origin: src.origin.clone(),
        ..Default::default()
    };
    data.audio = match &entry.data.audio {
        Some(a) if a.frames() > 0 => {
            let sr = f64::from(a.sample_rate);
            let n = a.frames();
            let s0 = ((start * sr).round() as usize).min(n);
            let len = ((data.seconds * sr).round() as usize).clamp(1, n - s0.min(n - 1));
            let s0 = s0.min(n - len);
            let mut out = Vec::with_capacity(len * a.channels);
            for c in 0..a.channels {
                out.extend_from_slice(&a.samples[c * n + s0..c * n + s0 + len]);
            }
            Some(Audio::new(out, a.channels, a.sample_rate)?)
        }
        _ => None,
    };
    data.latents = match (&entry.data.latents, g.latent_frames(d)) {
        (Some(l), Some(v)) if l.generator == g.id() && v > 0 => {
            let Some((&t, lead)) = l.shape.split_last() else {
                return Err(CacheError::Invalid {
                    name,
                    reason: format!("latents of shape {:?}", l.shape),
                });
            };
            let rows: usize = lead.iter().product();
            if rows.checked_mul(t) != Some(l.data.len()) || t == 0 {
                return Err(CacheError::Invalid {
                    name,
                    reason: format!("{} latent values for shape {:?}", l.data.len(), l.shape),
                });
            }
            let v = v.min(t);
            let f0 = ((start * v as f64 / d).floor() as usize).min(v - 1);
            let len = g.latent_frames(data.seconds).unwrap_or(1).clamp(1, v - f0);
            let mut out = Vec::with_capacity(rows * len);
            for row in l.data.chunks_exact(t) {
                out.extend_from_slice(&row[f0..f0 + len]);
            }
            let mut shape = l.shape.clone();
            if let Some(last) = shape.last_mut() {
                *last = len;
            }
            Some(crate::store::StoredLatents {
                generator: l.generator.clone(),
                shape,
                data: out,
            })
        }
        _ => None,
    };
    if data.audio.is_none() && data.latents.is_none() {
        return Err(CacheError::Invalid {
            name,
            reason: "holds neither audio nor latents of this generator to cut a segment from"
                .into(),
        });
    }
    Ok(Entry {
        id: entry.id,
        data,
        hits: entry.hits,
        created_ms: entry.created_ms,
        used_ms: entry.used_ms,
    })
}

/// Latents `data` of shape `from` (`[.., T]`) fitted to `to` (the same leading axes, `T'`
/// frames): frame `t` of each row is the source frame `t mod V`, where `V = min(frames, T)` are
/// the frames that hold the clip (so `T' ≤ V` crops, `T' > V` repeats the clip from its start).
/// An error names `name` when the leading axes differ or the data does not match its shape.
pub fn fit_frames(
    name: &str,
    data: &[f32],
    from: &[usize],
    frames: usize,
    to: &[usize],
) -> Result<Tensor> {
    let bad = |reason: String| CacheError::Invalid {
        name: name.to_string(),
        reason,
    };
    let (Some((&t_from, lead_from)), Some((&t_to, lead_to))) = (from.split_last(), to.split_last())
    else {
        return Err(bad(format!(
            "latents of shape {from:?} cannot become {to:?}"
        )));
    };
    if lead_from != lead_to || t_from == 0 || t_to == 0 {
        return Err(bad(format!(
            "latents of shape {from:?} cannot become {to:?}"
        )));
    }
    let rows: usize = lead_from.iter().product();
    if rows.checked_mul(t_from) != Some(data.len()) {
        return Err(bad(format!(
            "{} latent values for shape {from:?}",
            data.len()
        )));
    }
    let v = frames.clamp(1, t_from);
    let mut out = Vec::with_capacity(rows * t_to);
    for row in data.chunks_exact(t_from) {
        out.extend((0..t_to).map(|t| row[t % v]));
    }
    Ok(Tensor::from_vec(out, to)?)
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
