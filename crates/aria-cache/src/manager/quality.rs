//! The quality `Q` of a cached clip, by which admission and refinement judge it.
//!
//! With an audio embedder (CLAP-like: audio and text in one space), `Q` is the cosine
//! similarity of the clip's audio embedding to its prompt's embedding, as in SoundWeaver. Without
//! one there is nothing that relates audio to text, so `Q` is a documented proxy, the clip's
//! **tonality**: `1 − spectral flatness` of its mean power spectrum (mono downmix, Hann frames
//! of 1 024 samples, half overlapping, at most 48 spread over the clip). White noise scores near
//! 0, a steady tone near 1, silence 0. It tells structured audio from noise; it says nothing
//! about whether the clip fits the prompt.

use realfft::RealFftPlanner;

use crate::store::Audio;

/// Name of `Q` among an entry's quality scores.
pub const QUALITY: &str = "q";

const FRAME: usize = 1024;
const MAX_FRAMES: usize = 48;

/// `Q` of a clip: `audio_vec · prompt_vec` when the embedder has an audio side (both unit
/// vectors), else [`tonality`].
pub fn quality(prompt_vec: &[f32], audio_vec: Option<&[f32]>, audio: &Audio) -> f32 {
    match audio_vec {
        Some(v) => v.iter().zip(prompt_vec).map(|(a, b)| a * b).sum(),
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
        assert!(
            (quality(&v, Some(&v), &Audio::new(vec![0.0; 4], 1, sr).unwrap()) - 1.0).abs() < 1e-6
        );
    }
}
