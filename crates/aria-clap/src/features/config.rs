//! The feature extractor's settings, read from `preprocessor_config.json` (the keys the
//! reference `ClapFeatureExtractor` writes; absent keys take its defaults).

use std::path::Path;

use serde::Deserialize;

use super::{MAX_SAMPLE_RATE, MAX_SECONDS, MIN_SAMPLE_RATE};
use crate::{ClapError, Result};

/// The longest FFT window accepted (bounds the filter banks and the per-frame work).
const MAX_FFT_WINDOW: usize = 1 << 16;
/// The most mel bins accepted.
const MAX_FEATURE_SIZE: usize = 1024;
/// The mel-bin count the reference's fusion shrink is written for (it resizes the whole mel
/// to `[chunk frames, 64]`, whatever `feature_size` says).
pub const FUSION_MEL_BINS: usize = 64;

/// What happens to a clip longer than `max_length_s` (the `truncation` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// `rand_trunc`: one random crop of `max_length_s` of the waveform, slaney-scale mel
    /// (area-normalised filters, librosa's default); one feature channel.
    RandTrunc,
    /// `fusion`: htk-scale mel (unnormalised filters, torchaudio's default) of the whole clip,
    /// then a shrink of it to the crop length and three random crops (front, middle and back
    /// thirds); four feature channels. A clip that fits is repeated four times.
    Fusion,
}

impl Truncation {
    /// The name in `preprocessor_config.json`.
    pub fn name(self) -> &'static str {
        match self {
            Truncation::RandTrunc => "rand_trunc",
            Truncation::Fusion => "fusion",
        }
    }

    /// Feature channels per clip: 1 for `rand_trunc`, 4 for `fusion`.
    pub fn channels(self) -> usize {
        match self {
            Truncation::RandTrunc => 1,
            Truncation::Fusion => 4,
        }
    }
}

/// How a clip shorter than `max_length_s` is filled up (the `padding` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// `repeatpad`: the clip repeated as many whole times as fit, then zeros.
    RepeatPad,
    /// `repeat`: the clip repeated and cut at the maximum length.
    Repeat,
    /// `pad`: zeros after the clip.
    Pad,
}

impl Padding {
    /// The name in `preprocessor_config.json`.
    pub fn name(self) -> &'static str {
        match self {
            Padding::RepeatPad => "repeatpad",
            Padding::Repeat => "repeat",
            Padding::Pad => "pad",
        }
    }
}

/// The feature extractor's settings. Defaults are the reference's constructor defaults.
///
/// Two keys are read but, as in the reference, have no effect: `padding_value` (padding is
/// always with zeros) and `top_db` (the decibel conversion has no dynamic-range clamp; values
/// are floored at -100 dB only). Keys the reference ignores (`n_fft`, `nb_max_samples`,
/// `nb_frequency_bins`, `chunk_length_s`, …) are ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureConfig {
    /// Mel bins (`feature_size`, default 64).
    pub feature_size: usize,
    /// Sample rate the waveform must have (`sampling_rate`, default 48 000 Hz).
    pub sampling_rate: u32,
    /// STFT hop in samples (`hop_length`, default 480).
    pub hop_length: usize,
    /// STFT window and FFT size in samples (`fft_window_size`, default 1024; even).
    pub fft_window_size: usize,
    /// Clip length the model sees, in whole seconds (`max_length_s`, default 10).
    pub max_length_s: u32,
    /// Lowest mel filter edge in Hz (`frequency_min`, default 0).
    pub frequency_min: f64,
    /// Highest mel filter edge in Hz (`frequency_max`, default 14 000).
    pub frequency_max: f64,
    /// Long-clip rule (`truncation`, default `fusion`).
    pub truncation: Truncation,
    /// Short-clip rule (`padding`, default `repeatpad`).
    pub padding: Padding,
    /// `padding_value` as written (unused: the reference pads with zeros).
    pub padding_value: f64,
    /// `top_db` as written (unused by the reference's CLAP extractor).
    pub top_db: Option<f64>,
}

impl FeatureConfig {
    /// The `preprocessor_config.json` text of this configuration, with the keys the reference
    /// writes (so that the reference's `ClapFeatureExtractor.from_pretrained` reads it back).
    pub fn to_json(&self) -> String {
        let v = serde_json::json!({
            "feature_extractor_type": "ClapFeatureExtractor",
            "feature_size": self.feature_size,
            "fft_window_size": self.fft_window_size,
            "frequency_max": self.frequency_max,
            "frequency_min": self.frequency_min,
            "hop_length": self.hop_length,
            "max_length_s": self.max_length_s,
            "nb_frequency_bins": (self.fft_window_size >> 1) + 1,
            "nb_max_samples": self.max_samples(),
            "padding": self.padding.name(),
            "padding_side": "right",
            "padding_value": self.padding_value,
            "return_attention_mask": false,
            "sampling_rate": self.sampling_rate,
            "top_db": self.top_db,
            "truncation": self.truncation.name(),
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

impl Default for FeatureConfig {
    fn default() -> Self {
        FeatureConfig {
            feature_size: 64,
            sampling_rate: 48_000,
            hop_length: 480,
            fft_window_size: 1024,
            max_length_s: 10,
            frequency_min: 0.0,
            frequency_max: 14_000.0,
            truncation: Truncation::Fusion,
            padding: Padding::RepeatPad,
            padding_value: 0.0,
            top_db: None,
        }
    }
}

/// The file as written: numbers as JSON numbers, the rules as strings.
#[derive(Deserialize)]
#[serde(default)]
struct RawConfig {
    feature_size: u64,
    sampling_rate: u64,
    hop_length: u64,
    fft_window_size: u64,
    max_length_s: f64,
    frequency_min: f64,
    frequency_max: f64,
    truncation: String,
    padding: String,
    padding_value: f64,
    top_db: Option<f64>,
}

impl Default for RawConfig {
    fn default() -> Self {
        let d = FeatureConfig::default();
        RawConfig {
            feature_size: d.feature_size as u64,
            sampling_rate: u64::from(d.sampling_rate),
            hop_length: d.hop_length as u64,
            fft_window_size: d.fft_window_size as u64,
            max_length_s: f64::from(d.max_length_s),
            frequency_min: d.frequency_min,
            frequency_max: d.frequency_max,
            truncation: d.truncation.name().into(),
            padding: d.padding.name().into(),
            padding_value: d.padding_value,
            top_db: d.top_db,
        }
    }
}

impl FeatureConfig {
    /// Reads and validates `preprocessor_config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_json(&crate::error::read_text(path)?, &path.display().to_string())
    }

    /// Parses and validates the JSON `text`; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Self> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| ClapError::config(file, e.to_string()))?;
        let bad = |key: &str, why: String| ClapError::config(file, format!("{key}: {why}"));
        let truncation = match raw.truncation.as_str() {
            "rand_trunc" => Truncation::RandTrunc,
            "fusion" => Truncation::Fusion,
            other => {
                return Err(bad(
                    "truncation",
                    format!("{other:?} is not supported (\"rand_trunc\" or \"fusion\")"),
                ))
            }
        };
        let padding = match raw.padding.as_str() {
            "repeatpad" => Padding::RepeatPad,
            "repeat" => Padding::Repeat,
            "pad" => Padding::Pad,
            other => {
                return Err(bad(
                    "padding",
                    format!("{other:?} is not supported (\"repeatpad\", \"repeat\" or \"pad\")"),
                ))
            }
        };
        let m = raw.max_length_s;
        if !(m.is_finite() && m.fract() == 0.0 && m >= 1.0 && m <= f64::from(MAX_SECONDS)) {
            return Err(bad(
                "max_length_s",
                format!("{m} is not a whole number of seconds in 1..={MAX_SECONDS}"),
            ));
        }
        let cfg = FeatureConfig {
            feature_size: usize::try_from(raw.feature_size).unwrap_or(usize::MAX),
            sampling_rate: u32::try_from(raw.sampling_rate).unwrap_or(u32::MAX),
            hop_length: usize::try_from(raw.hop_length).unwrap_or(usize::MAX),
            fft_window_size: usize::try_from(raw.fft_window_size).unwrap_or(usize::MAX),
            max_length_s: m as u32,
            frequency_min: raw.frequency_min,
            frequency_max: raw.frequency_max,
            truncation,
            padding,
            padding_value: raw.padding_value,
            top_db: raw.top_db,
        };
        cfg.check().map_err(|(key, why)| bad(key, why))?;
        Ok(cfg)
    }

    /// Checks every setting; the error names the key and the value.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|(key, why)| {
            ClapError::config("feature extractor settings", format!("{key}: {why}"))
        })
    }

    fn check(&self) -> std::result::Result<(), (&'static str, String)> {
        let sr = self.sampling_rate;
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&sr) {
            return Err((
                "sampling_rate",
                format!("{sr} Hz is outside {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE} Hz"),
            ));
        }
        let n = self.fft_window_size;
        if n < 2 || !n.is_multiple_of(2) || n > MAX_FFT_WINDOW {
            return Err((
                "fft_window_size",
                format!("{n} is not an even number of samples in 2..={MAX_FFT_WINDOW}"),
            ));
        }
        let hop = self.hop_length;
        if hop == 0 || hop > n {
            return Err((
                "hop_length",
                format!("{hop} is not in 1..={n} (the window)"),
            ));
        }
        let f = self.feature_size;
        if f == 0 || f > MAX_FEATURE_SIZE {
            return Err((
                "feature_size",
                format!("{f} is not in 1..={MAX_FEATURE_SIZE}"),
            ));
        }
        if self.truncation == Truncation::Fusion && f != FUSION_MEL_BINS {
            return Err((
                "feature_size",
                format!("{f} with truncation \"fusion\", whose shrink is written for {FUSION_MEL_BINS} mel bins"),
            ));
        }
        let m = self.max_length_s;
        if m == 0 || m > MAX_SECONDS {
            return Err(("max_length_s", format!("{m} is not in 1..={MAX_SECONDS}")));
        }
        let (lo, hi) = (self.frequency_min, self.frequency_max);
        if !(lo.is_finite() && lo >= 0.0) {
            return Err((
                "frequency_min",
                format!("{lo} is not a finite frequency ≥ 0"),
            ));
        }
        if !(hi.is_finite() && hi >= lo) {
            return Err((
                "frequency_max",
                format!("{hi} is not a finite frequency ≥ frequency_min ({lo})"),
            ));
        }
        Ok(())
    }

    /// The model's clip length in samples (`max_length_s · sampling_rate`).
    pub fn max_samples(&self) -> usize {
        self.max_length_s as usize * self.sampling_rate as usize
    }

    /// Frames of the features (`max_samples / hop_length + 1`: 1001 for 10 s).
    pub fn frames(&self) -> usize {
        self.max_samples() / self.hop_length + 1
    }

    /// The shape of one clip's features: `[channels, frames, mel bins]`.
    pub fn feature_shape(&self) -> [usize; 3] {
        [self.truncation.channels(), self.frames(), self.feature_size]
    }
}
