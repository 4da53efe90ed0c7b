//! The log-mel spectrogram as the reference computes it (`transformers.audio_utils`): periodic
//! Hann window, centred frames with reflect padding, power spectrum, triangular mel filters,
//! decibels. Everything is in f64 as numpy does it, except that the reference stores each FFT
//! value as `complex64` before taking its magnitude; that rounding is reproduced.

use std::sync::Arc;

use rayon::prelude::*;
use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use crate::{ClapError, Result};

/// The mel-energy floor (and decibel clip) of the reference: 1e-10, i.e. -100 dB.
const MEL_FLOOR: f64 = 1e-10;
/// Frames computed per parallel task.
const FRAMES_PER_TASK: usize = 32;

/// Which mel scale (and filter normalisation) a bank uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelScale {
    /// `2595 · log10(1 + f / 700)`, filters unnormalised (torchaudio's default; `fusion`).
    Htk,
    /// Linear below 1 kHz, logarithmic above, filters area-normalised (librosa's default;
    /// `rand_trunc`).
    Slaney,
}

fn hertz_to_mel(f: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
        MelScale::Slaney if f >= 1000.0 => 15.0 + (f / 1000.0).ln() * (27.0 / 6.4f64.ln()),
        MelScale::Slaney => 3.0 * f / 200.0,
    }
}

fn mel_to_hertz(m: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
        MelScale::Slaney if m >= 15.0 => 1000.0 * ((6.4f64.ln() / 27.0) * (m - 15.0)).exp(),
        MelScale::Slaney => 200.0 * m / 3.0,
    }
}

/// numpy's `linspace(start, stop, num)`: `i · step + start`, the last value exactly `stop`.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let step = (stop - start) / (num - 1) as f64;
    let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// The periodic Hann window of `n` samples: numpy's `hanning(n + 1)` without its last value.
pub(crate) fn hann_periodic(n: usize) -> Vec<f64> {
    let m1 = n as f64; // (n + 1) − 1
    (0..n)
        .map(|k| {
            let x = (2 * k) as f64 - m1;
            0.5 + 0.5 * (std::f64::consts::PI * x / m1).cos()
        })
        .collect()
}

/// A triangular mel filter bank: dense `[frequency bins, mel bins]` (the reference's layout)
/// and, per mel bin, the span of bins where its weights are non-zero.
#[derive(Debug, Clone)]
pub(crate) struct MelBank {
    pub(crate) dense: Vec<f64>,
    mels: usize,
    /// Per mel bin: first bin and the weights from there on.
    spans: Vec<(usize, Vec<f64>)>,
}

impl MelBank {
    /// The reference's `mel_filter_bank(bins, mels, f_min, f_max, rate, norm, scale)` with
    /// `norm = "slaney"` exactly for the slaney scale, as the CLAP extractor builds them.
    pub(crate) fn new(
        bins: usize,
        mels: usize,
        f_min: f64,
        f_max: f64,
        rate: u32,
        scale: MelScale,
    ) -> Self {
        let mel_freqs = linspace(
            hertz_to_mel(f_min, scale),
            hertz_to_mel(f_max, scale),
            mels + 2,
        );
        let ff: Vec<f64> = mel_freqs.iter().map(|&m| mel_to_hertz(m, scale)).collect();
        let fft_freqs = linspace(0.0, f64::from(rate / 2), bins);
        let diff: Vec<f64> = ff.windows(2).map(|w| w[1] - w[0]).collect();
        let mut dense = vec![0f64; bins * mels];
        for (i, &f) in fft_freqs.iter().enumerate() {
            for j in 0..mels {
                let down = -(ff[j] - f) / diff[j];
                let up = (ff[j + 2] - f) / diff[j + 1];
                let mut w = down.min(up).max(0.0);
                if scale == MelScale::Slaney {
                    w *= 2.0 / (ff[j + 2] - ff[j]);
                }
                dense[i * mels + j] = w;
            }
        }
        let spans = (0..mels)
            .map(|j| {
                let col: Vec<f64> = (0..bins).map(|i| dense[i * mels + j]).collect();
                match col.iter().position(|&w| w != 0.0) {
                    Some(first) => {
                        let last = col.iter().rposition(|&w| w != 0.0).unwrap_or(first);
                        (first, col[first..=last].to_vec())
                    }
                    None => (0, Vec::new()),
                }
            })
            .collect();
        MelBank { dense, mels, spans }
    }
}

/// numpy's `reflect` padding as an index map: `i` (may be negative or past the end) to an
/// index of a signal of `n ≥ 1` samples, mirrored about the end samples (not repeating them).
fn reflect(i: i64, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as i64 - 1);
    let m = i.rem_euclid(period);
    (if m >= n as i64 { period - m } else { m }) as usize
}

/// The short-time Fourier transform settings and plan, shared by both mel banks.
pub(crate) struct Stft {
    window: Vec<f64>,
    hop: usize,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl Stft {
    pub(crate) fn new(n_fft: usize, hop: usize) -> Self {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n_fft);
        Stft {
            window: hann_periodic(n_fft),
            hop,
            fft,
        }
    }

    pub(crate) fn window(&self) -> &[f64] {
        &self.window
    }

    /// Frames of a waveform of `n` samples (centred, padded by half a window on each side).
    pub(crate) fn frames(&self, n: usize) -> usize {
        n / self.hop + 1
    }

    /// The log-mel spectrogram of `wave` (not empty) as f32 `[frames, mel bins]` row-major:
    /// `10 · log10(max(1e-10, mel · |STFT|²))`.
    pub(crate) fn log_mel(&self, wave: &[f32], bank: &MelBank) -> Result<Vec<f32>> {
        let n_fft = self.window.len();
        let frames = self.frames(wave.len());
        let mels = bank.mels;
        let mut out = vec![0f32; frames * mels];
        out.par_chunks_mut(FRAMES_PER_TASK * mels)
            .enumerate()
            .try_for_each(|(task, chunk)| -> Result<()> {
                let mut buf = self.fft.make_input_vec();
                let mut spec: Vec<Complex<f64>> = self.fft.make_output_vec();
                let mut scratch = self.fft.make_scratch_vec();
                let mut power = vec![0f64; spec.len()];
                for (k, row) in chunk.chunks_mut(mels).enumerate() {
                    let start = (task * FRAMES_PER_TASK + k) * self.hop;
                    for (j, b) in buf.iter_mut().enumerate() {
                        let at = reflect(start as i64 + j as i64 - (n_fft / 2) as i64, wave.len());
                        *b = f64::from(wave[at]) * self.window[j];
                    }
                    self.fft
                        .process_with_scratch(&mut buf, &mut spec, &mut scratch)
                        .map_err(|e| ClapError::invalid("STFT", e.to_string()))?;
                    for (p, c) in power.iter_mut().zip(&spec) {
                        // The reference keeps the spectrum as complex64.
                        let (re, im) = (f64::from(c.re as f32), f64::from(c.im as f32));
                        *p = re * re + im * im;
                    }
                    for (v, (first, w)) in row.iter_mut().zip(&bank.spans) {
                        let e: f64 = w.iter().zip(&power[*first..]).map(|(a, b)| a * b).sum();
                        *v = (10.0 * e.max(MEL_FLOOR).log10()) as f32;
                    }
                }
                Ok(())
            })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_matches_numpy() {
        // np.pad([0, 1, 2, 3], 5, mode="reflect") → 1 2 3 2 1 | 0 1 2 3 | 2 1 0 1 2
        let got: Vec<usize> = (-5..9).map(|i| reflect(i, 4)).collect();
        assert_eq!(got, [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]);
    }

    #[test]
    fn hann_is_periodic() {
        let w = hann_periodic(8);
        assert_eq!(w[0], 0.0);
        assert!((w[4] - 1.0).abs() < 1e-15);
        assert!((w[2] - 0.5).abs() < 1e-15 && (w[6] - 0.5).abs() < 1e-15);
    }

    #[test]
    fn filters_are_triangles_inside_the_band() {
        let b = MelBank::new(513, 64, 50.0, 14_000.0, 48_000, MelScale::Htk);
        for (first, w) in &b.spans {
            assert!(!w.is_empty());
            assert!(w.iter().all(|&x| (0.0..=1.0).contains(&x)));
            // bin spacing 46.875 Hz: nothing at or above 14 kHz
            assert!(first + w.len() <= 14_000 * 512 / 24_000 + 1);
        }
    }
}
