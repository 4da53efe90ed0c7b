//! The quality `Q` of a cached clip, by which admission and refinement judge it.
//!
//! With an audio embedder (CLAP-like: audio and text in one space), `Q` is the cosine
//! similarity of the clip's audio embedding to its prompt's embedding, as in SoundWeaver. Without
//! one there is nothing that relates audio to text, so `Q` is a documented proxy, the clip's
//! **tonality**: `1 − spectral flatness` of its mean power spectrum (mono downmix, Hann frames
//! of 1 024 samples, half overlapping, at most 48 spread over the clip). White noise scores near
//! 0, a steady tone near 1, silence 0. It tells structured audio from noise; it says nothing
//! about whether the clip fits the prompt.
//!
//! The embedder side of `Q`, [`embedding_quality`], is also the default `Q_t` of the gater's
//! reward ([`DefaultQuality`](crate::gater::DefaultQuality)), which falls back to its own proxy
//! where no audio embedding exists.

use realfft::RealFftPlanner;

use crate::store::Audio;
use crate::{CacheError, Result};

/// Name of `Q` among an entry's quality scores.
pub const QUALITY: &str = "q";

const FRAME: usize = 1024;
const MAX_FRAMES: usize = 48;

/// `Q` with an audio embedder (CLAP-like): the cosine between the audio embedding and the
/// prompt embedding, accumulated in f64.
///
/// Errors: [`CacheError::Dim`] when the two differ in length, [`CacheError::Invalid`] when
/// either is a zero vector (it has no cosine).
pub fn embedding_quality(prompt_vec: &[f32], audio_vec: &[f32]) -> Result<f64> {
    crate::index::check_dim("audio embedding", prompt_vec.len(), audio_vec.len())?;
    let (mut d, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (p, q) in prompt_vec.iter().zip(audio_vec) {
        d += f64::from(*p) * f64::from(*q);
        na += f64::from(*p) * f64::from(*p);
        nb += f64::from(*q) * f64::from(*q);
    }
    if !(na > 0.0 && nb > 0.0) {
        return Err(CacheError::Invalid {
            name: "quality embeddings".into(),
            reason: "a zero vector has no cosine".into(),
        });
    }
    Ok(d / (na.sqrt() * nb.sqrt()))
}

/// `Q` of a clip: [`embedding_quality`] when the embedder has an audio side, else
/// [`tonality`]. An audio embedding that has no cosine with the prompt's (a zero vector, or
/// one of another dimension) scores 0.
pub fn quality(prompt_vec: &[f32], audio_vec: Option<&[f32]>, audio: &Audio) -> f32 {
    match audio_vec {
        Some(v) => embedding_quality(prompt_vec, v).map_or(0.0, |q| q as f32),
        None => tonality(audio),
    }
}

/// `1 − spectral flatness` of the mean power spectrum of `audio` (see the module docs), in
/// `[0, 1]`.
pub fn tonality(audio: &Audio) -> f32 {
    let (ch, n) = (audio.channels.max(1), audio.frames());
    if n == 0 {
        return 0.0;
    }
    let mono: Vec<f32> = (0..n)
        .map(|i| (0..ch).map(|c| audio.samples[c * n + i]).sum::<f32>() / ch as f32)
        .collect();
    // Half-overlapping frames (fewer, spread evenly, on long clips).
    let frames = if n <= FRAME {
        1
    } else {
        ((n - FRAME) / (FRAME / 2) + 1).min(MAX_FRAMES)
    };
    let stride = if frames > 1 {
        (n - FRAME) / (frames - 1)
    } else {
        0
    };
    let mut planner = RealFftPlanner::<f32>::new();
    let fft = planner.plan_fft_forward(FRAME);
    let mut input = fft.make_input_vec();
    let mut spec = fft.make_output_vec();
    let mut power = vec![0f64; spec.len()];
    let window: Vec<f32> = (0..FRAME)
        .map(|i| {
            let x = std::f32::consts::PI * 2.0 * i as f32 / FRAME as f32;
            0.5 - 0.5 * x.cos()
        })
        .collect();
    for f in 0..frames {
        let start = f * stride;
        for (i, x) in input.iter_mut().enumerate() {
            *x = mono.get(start + i).copied().unwrap_or(0.0) * window[i];
        }
        if fft.process(&mut input, &mut spec).is_err() {
            return 0.0;
        }
        for (p, c) in power.iter_mut().zip(&spec) {
            *p += f64::from(c.norm_sqr());
        }
    }
    // Skip DC; flatness over the rest.
    let bins = &power[1..];
    let mean = bins.iter().sum::<f64>() / bins.len() as f64;
    if mean <= 1e-20 {
        return 0.0;
    }
    let floor = mean * 1e-12;
    let log_mean = bins.iter().map(|p| (p + floor).ln()).sum::<f64>() / bins.len() as f64;
    let flatness = log_mean.exp() / mean;
    (1.0 - flatness).clamp(0.0, 1.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::SplitMix64;

    #[test]
    fn noise_is_flat_and_a_tone_is_not() {
        let sr = 16_000;
        let n = 16_000;
        let mut rng = SplitMix64::new(3);
        let noise: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 * 2.0 - 1.0).collect();
        let tone: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 440.0 * 2.0 * std::f32::consts::PI / sr as f32).sin())
            .collect();
        let qn = tonality(&Audio::new(noise, 1, sr).unwrap());
        let qt = tonality(&Audio::new(tone, 1, sr).unwrap());
        assert!(qn < 0.2, "noise {qn}");
        assert!(qt > 0.95, "tone {qt}");
        assert_eq!(tonality(&Audio::new(vec![0.0; 500], 1, sr).unwrap()), 0.0);
        let v = [0.6f32, 0.8];
        let silence = Audio::new(vec![0.0; 4], 1, sr).unwrap();
        assert!((quality(&v, Some(&v), &silence) - 1.0).abs() < 1e-6);
        assert_eq!(quality(&v, Some(&[0.0, 0.0]), &silence), 0.0);
        assert_eq!(quality(&v, Some(&[1.0]), &silence), 0.0);
        assert!(embedding_quality(&v, &[0.8, -0.6]).unwrap().abs() < 1e-7);
    }
}
