//! The CLAP feature extractor: mono 48 kHz waveforms to the log-mel features the HTSAT audio
//! tower takes, equal to the reference `transformers` `ClapFeatureExtractor`.
//!
//! Per clip (`max` = `max_length_s · sampling_rate` samples, 480 000 for 10 s):
//!
//! - **fits** (`n ≤ max`): filled up to `max` by the [`Padding`] rule, then one log-mel of
//!   `max / hop + 1` frames (1001); `rand_trunc` gives it as one channel (slaney filters),
//!   `fusion` repeats it four times (htk filters). Not longer.
//! - **longer, `rand_trunc`**: a crop of `max` samples at a random offset, slaney log-mel, one
//!   channel; longer.
//! - **longer, `fusion`**: the htk log-mel of the whole clip; if it has exactly the crop's
//!   frame count (`max < n < max + hop`) it is repeated four times and the clip is *not*
//!   longer; otherwise the channels are the whole mel shrunk to the crop length (bilinear, as
//!   PyTorch's `interpolate`) and three crops whose starts are drawn from the front, middle
//!   and back thirds of the valid starts; longer.
//!
//! The log-mel is `10 · log10(max(1e-10, mel · |STFT|²))`: periodic Hann window of
//! `fft_window_size`, frames centred with reflect padding, computed in f64 and returned as f32
//! like the reference. Random choices go through [`Draws`] ([`SeededDraws`] to reproduce a
//! run, [`Replay`] to replay the reference's).
//!
//! Work is bounded: clips are limited to [`MAX_SECONDS`]. `fusion` computes the mel of the
//! whole clip, as the reference does: 25.6 KB per second of audio (64 f32 bins, 100 frames
//! per second), 92 MB for an hour, besides the caller's waveform (192 KB per second).

mod config;
mod draws;
mod prepare;
mod shrink;
mod spectrum;

use aria_core::Tensor;
use rayon::prelude::*;

pub use config::{FeatureConfig, Padding, Truncation, FUSION_MEL_BINS};
pub use draws::{Draw, Draws, Replay, SeededDraws};
pub use prepare::{prepare, prepare_at, CLAP_SAMPLE_RATE};
pub use spectrum::MelScale;

use crate::{ClapError, Result};
use spectrum::{MelBank, Stft};

/// The longest clip accepted, in seconds (one hour).
pub const MAX_SECONDS: u32 = 3600;
/// The lowest sample rate accepted, in Hz: the lowest that aria reads and resamples
/// (`aria_codec::audio::SAMPLE_RATES`).
pub const MIN_SAMPLE_RATE: u32 = *aria_codec::audio::SAMPLE_RATES.start();
/// The highest sample rate accepted, in Hz.
pub const MAX_SAMPLE_RATE: u32 = 384_000;

/// One clip's features.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    /// Row-major f32 `[channels, frames, mel bins]`.
    pub input_features: Vec<f32>,
    /// `[channels (1 for rand_trunc, 4 for fusion), frames (1001 for 10 s), mel bins]`.
    pub shape: [usize; 3],
    /// Whether the clip took a long-clip path (before the batch rule of
    /// [`FeatureExtractor::extract_batch`]).
    pub is_longer: bool,
}

impl Features {
    /// The features as an f32 tensor `[channels, frames, mel bins]`.
    pub fn to_tensor(&self) -> Result<Tensor> {
        Ok(Tensor::from_slice(&self.input_features, &self.shape)?)
    }
}

/// Stacks clips' features (all of one shape) into the model's f32 input `[B, C, T, F]`.
pub fn stack_features(features: &[Features]) -> Result<Tensor> {
    let first = features
        .first()
        .ok_or_else(|| ClapError::invalid("features", "no clips to stack"))?;
    let mut data = Vec::with_capacity(features.len() * first.input_features.len());
    for f in features {
        if f.shape != first.shape || f.input_features.len() != f.shape.iter().product::<usize>() {
            return Err(ClapError::Shape {
                what: "stacked features".into(),
                expected: first.shape.to_vec(),
                got: f.shape.to_vec(),
            });
        }
        data.extend_from_slice(&f.input_features);
    }
    let [c, t, m] = first.shape;
    Ok(Tensor::from_vec(data, &[features.len(), c, t, m])?)
}

/// A draw from `draws`, checked to lie in `low..=high` (a [`Draws`] implementation is
/// outside code: its answer is input).
fn pick<D: Draws + ?Sized>(draws: &mut D, what: Draw, low: usize, high: usize) -> Result<usize> {
    let v = draws.draw(what, low, high)?;
    if (low..=high).contains(&v) {
        Ok(v)
    } else {
        Err(ClapError::invalid(
            what.describe(),
            format!("drew {v}, outside {low}..={high}"),
        ))
    }
}

/// What a clip becomes, decided (with its random draws) before any work.
#[derive(Debug, Clone, Copy)]
enum Plan {
    /// Fits: filled up to the maximum length.
    Fit,
    /// `rand_trunc`, longer: the crop starting at this sample.
    Crop(usize),
    /// `fusion`, longer by less than a hop: the whole mel four times, not longer.
    Whole,
    /// `fusion`, longer: shrink plus the crops starting at these frames.
    Chunks([usize; 3]),
}

/// The feature extractor: the settings, the periodic Hann window, both mel filter banks (f64)
/// and the FFT plan, built once.
pub struct FeatureExtractor {
    cfg: FeatureConfig,
    stft: Stft,
    htk: MelBank,
    slaney: MelBank,
}

impl std::fmt::Debug for FeatureExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeatureExtractor")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl FeatureExtractor {
    /// Validates `cfg` and precomputes the window, the filter banks and the FFT plan.
    pub fn new(cfg: FeatureConfig) -> Result<Self> {
        cfg.validate()?;
        let bins = cfg.fft_window_size / 2 + 1;
        let bank = |scale| {
            MelBank::new(
                bins,
                cfg.feature_size,
                cfg.frequency_min,
                cfg.frequency_max,
                cfg.sampling_rate,
                scale,
            )
        };
        let (htk, slaney) = (bank(MelScale::Htk), bank(MelScale::Slaney));
        let stft = Stft::new(cfg.fft_window_size, cfg.hop_length);
        Ok(FeatureExtractor {
            cfg,
            stft,
            htk,
            slaney,
        })
    }

    /// The settings.
    pub fn config(&self) -> &FeatureConfig {
        &self.cfg
    }

    /// The periodic Hann window (`fft_window_size` values).
    pub fn window(&self) -> &[f64] {
        self.stft.window()
    }

    /// A filter bank as the reference lays it out: row-major `[fft_window_size / 2 + 1,
    /// feature_size]` (htk unnormalised for `fusion`, slaney area-normalised for `rand_trunc`).
    pub fn filter_bank(&self, scale: MelScale) -> &[f64] {
        match scale {
            MelScale::Htk => &self.htk.dense,
            MelScale::Slaney => &self.slaney.dense,
        }
    }

    /// Mixes interleaved audio down to mono and resamples it to the configured rate (see
    /// [`prepare_at`]).
    pub fn prepare(&self, samples: &[f32], channels: usize, sample_rate: u32) -> Result<Vec<f32>> {
        prepare_at(samples, channels, sample_rate, self.cfg.sampling_rate)
    }

    /// One clip's features from its mono waveform at `sampling_rate`. `is_longer` is the
    /// clip's own; the reference's batch rule (see [`FeatureExtractor::extract_batch`]) is
    /// not applied, so a lone short clip in `fusion` mode is not flagged here.
    ///
    /// Errors ([`ClapError::Audio`]): no samples, a sample that is not finite, a clip over
    /// [`MAX_SECONDS`].
    pub fn extract<D: Draws + ?Sized>(&self, wave: &[f32], draws: &mut D) -> Result<Features> {
        self.check_wave(wave, "waveform")?;
        let plan = self.plan(wave.len(), draws)?;
        self.render(wave, plan)
    }

    /// A batch's features `[B, C, T, F]` and `is_longer` flags, as the reference's
    /// `__call__` on a list of clips: the clips' draws in clip order, then the batch rule —
    /// in `fusion` mode, if no clip is longer, one clip drawn at random
    /// ([`Draw::LongerClip`]) is flagged longer. So a batch of one short clip in `fusion`
    /// mode comes back flagged. The clips are computed in parallel.
    pub fn extract_batch<D: Draws + ?Sized>(
        &self,
        clips: &[&[f32]],
        draws: &mut D,
    ) -> Result<(Tensor, Vec<bool>)> {
        if clips.is_empty() {
            return Err(ClapError::invalid("clips", "empty batch"));
        }
        for (i, c) in clips.iter().enumerate() {
            self.check_wave(c, &format!("clip {i}"))?;
        }
        let plans = clips
            .iter()
            .map(|c| self.plan(c.len(), draws))
            .collect::<Result<Vec<_>>>()?;
        let feats = clips
            .par_iter()
            .zip(&plans)
            .map(|(c, &p)| self.render(c, p))
            .collect::<Result<Vec<_>>>()?;
        let mut longer: Vec<bool> = feats.iter().map(|f| f.is_longer).collect();
        if self.cfg.truncation == Truncation::Fusion && !longer.contains(&true) {
            let i = pick(draws, Draw::LongerClip, 0, clips.len() - 1)?;
            longer[i] = true;
        }
        Ok((stack_features(&feats)?, longer))
    }

    fn check_wave(&self, wave: &[f32], what: &str) -> Result<()> {
        if wave.is_empty() {
            return Err(ClapError::audio(what, "no samples"));
        }
        let rate = self.cfg.sampling_rate;
        if wave.len() as u64 > u64::from(MAX_SECONDS) * u64::from(rate) {
            return Err(ClapError::audio(
                what,
                format!(
                    "{:.1} s ({} samples at {rate} Hz) is over the {MAX_SECONDS} s bound",
                    wave.len() as f64 / f64::from(rate),
                    wave.len()
                ),
            ));
        }
        if let Some(i) = wave.iter().position(|v| !v.is_finite()) {
            return Err(ClapError::audio(what, format!("sample {i} is {}", wave[i])));
        }
        Ok(())
    }

    fn plan<D: Draws + ?Sized>(&self, n: usize, draws: &mut D) -> Result<Plan> {
        let max = self.cfg.max_samples();
        if n <= max {
            return Ok(Plan::Fit);
        }
        if self.cfg.truncation == Truncation::RandTrunc {
            return Ok(Plan::Crop(pick(draws, Draw::CropOffset, 0, n - max)?));
        }
        let chunk = self.cfg.frames();
        let total = self.stft.frames(n);
        if total == chunk {
            return Ok(Plan::Whole);
        }
        // numpy's array_split of the valid starts into three; an empty part becomes [0].
        let count = total - chunk + 1;
        let (q, r) = (count / 3, count % 3);
        let sizes = [q + usize::from(r > 0), q + usize::from(r > 1), q];
        let mut starts = [0usize; 3];
        let mut from = 0;
        for (k, what) in [Draw::FusionFront, Draw::FusionMiddle, Draw::FusionBack]
            .into_iter()
            .enumerate()
        {
            starts[k] = match sizes[k] {
                0 => pick(draws, what, 0, 0)?,
                s => pick(draws, what, from, from + s - 1)?,
            };
            from += sizes[k];
        }
        Ok(Plan::Chunks(starts))
    }

    fn render(&self, wave: &[f32], plan: Plan) -> Result<Features> {
        let shape = self.cfg.feature_shape();
        let [channels, frames, mels] = shape;
        let per = frames * mels;
        let (data, is_longer) = match plan {
            Plan::Fit => {
                let bank = match self.cfg.truncation {
                    Truncation::Fusion => &self.htk,
                    Truncation::RandTrunc => &self.slaney,
                };
                (
                    self.stft.log_mel(&self.fill(wave), bank)?.repeat(channels),
                    false,
                )
            }
            Plan::Crop(at) => {
                let crop = &wave[at..at + self.cfg.max_samples()];
                (self.stft.log_mel(crop, &self.slaney)?, true)
            }
            Plan::Whole => (self.stft.log_mel(wave, &self.htk)?.repeat(channels), false),
            Plan::Chunks(starts) => {
                let mel = self.stft.log_mel(wave, &self.htk)?;
                let mut data = shrink::shrink_rows(&mel, mel.len() / mels, mels, frames);
                for s in starts {
                    data.extend_from_slice(&mel[s * mels..s * mels + per]);
                }
                (data, true)
            }
        };
        if data.len() != channels * per {
            return Err(ClapError::Shape {
                what: "clip features".into(),
                expected: shape.to_vec(),
                got: vec![data.len()],
            });
        }
        Ok(Features {
            input_features: data,
            shape,
            is_longer,
        })
    }

    /// A clip of `1..=max` samples filled up to `max` by the padding rule.
    fn fill(&self, wave: &[f32]) -> Vec<f32> {
        let max = self.cfg.max_samples();
        let n = wave.len();
        let mut out = Vec::with_capacity(max);
        let whole = match self.cfg.padding {
            Padding::RepeatPad => max / n,
            Padding::Repeat => max / n + 1,
            Padding::Pad => 1,
        };
        for _ in 0..whole {
            out.extend_from_slice(wave);
        }
        out.truncate(max);
        out.resize(max, 0.0);
        out
    }
}
