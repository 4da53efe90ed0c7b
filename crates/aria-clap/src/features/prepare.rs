//! Turning decoded audio (interleaved, any channel count, any usual rate) into the mono
//! waveform at the extractor's rate.

use aria_codec::audio::resample;
use aria_core::Tensor;

use super::{MAX_SAMPLE_RATE, MAX_SECONDS, MIN_SAMPLE_RATE};
use crate::{ClapError, Result};

/// The sample rate CLAP checkpoints are trained at.
pub const CLAP_SAMPLE_RATE: u32 = 48_000;

/// [`prepare_at`] to 48 kHz, the rate of the released CLAP checkpoints.
pub fn prepare(samples: &[f32], channels: usize, sample_rate: u32) -> Result<Vec<f32>> {
    prepare_at(samples, channels, sample_rate, CLAP_SAMPLE_RATE)
}

/// Mixes interleaved `samples` (`channels` per frame, at `sample_rate` Hz) down to mono (the
/// mean of the channels, summed in f64) and resamples it to `target_rate` Hz with
/// `aria_codec::audio::resample` (torchaudio's windowed-sinc algorithm for the usual rates).
///
/// Errors ([`ClapError::Audio`], naming the property and the value), all before anything
/// clip-sized is allocated: no samples; `channels` 0 or not dividing the sample count; a rate
/// outside [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`] (4 000..=384 000 Hz); a clip over [`MAX_SECONDS`]; a sample that is not finite.
pub fn prepare_at(
    samples: &[f32],
    channels: usize,
    sample_rate: u32,
    target_rate: u32,
) -> Result<Vec<f32>> {
    if channels == 0 {
        return Err(ClapError::audio("channels", "0 channels"));
    }
    for (what, rate) in [
        ("sample rate", sample_rate),
        ("target sample rate", target_rate),
    ] {
        if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
            return Err(ClapError::audio(
                what,
                format!("{rate} Hz is outside {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE} Hz"),
            ));
        }
    }
    if samples.is_empty() {
        return Err(ClapError::audio("samples", "no samples"));
    }
    if !samples.len().is_multiple_of(channels) {
        return Err(ClapError::audio(
            "samples",
            format!(
                "{} samples do not divide into {channels} channels",
                samples.len()
            ),
        ));
    }
    let frames = samples.len() / channels;
    if frames as u64 > u64::from(MAX_SECONDS) * u64::from(sample_rate) {
        return Err(ClapError::audio(
            "length",
            format!(
                "{:.1} s ({frames} frames at {sample_rate} Hz) is over the {MAX_SECONDS} s bound",
                frames as f64 / f64::from(sample_rate)
            ),
        ));
    }
    if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
        return Err(ClapError::audio(
            "samples",
            format!(
                "sample {i} (frame {}, channel {}) is {}",
                i / channels,
                i % channels,
                samples[i]
            ),
        ));
    }
    let mono: Vec<f32> = if channels == 1 {
        samples.to_vec()
    } else {
        samples
            .chunks_exact(channels)
            .map(|f| (f.iter().map(|&v| f64::from(v)).sum::<f64>() / channels as f64) as f32)
            .collect()
    };
    if sample_rate == target_rate {
        return Ok(mono);
    }
    let t = Tensor::from_vec(mono, &[1, frames])?;
    Ok(resample(&t, sample_rate, target_rate)?.to_vec_f32()?)
}
