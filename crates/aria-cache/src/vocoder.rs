//! Duration alignment: a phase-vocoder time stretch that changes a clip's duration and keeps its
//! pitch, with the arithmetic of `librosa.effects.time_stretch` (float64):
//!
//! 1. STFT: `n_fft = 2048`, hop 512, periodic Hann window, centred frames (`n_fft/2` zeros on
//!    each side);
//! 2. phase vocoder: output frame `t` reads the analysis frames around `t·rate`, interpolates
//!    their magnitudes linearly and advances an accumulated phase by the expected advance plus
//!    the wrapped measured deviation;
//! 3. inverse STFT by weighted overlap-add, divided by the window's sum of squares, cut to
//!    `round(n / rate)` samples (Python's `round`, half to even).
//!
//! `rate > 1` shortens, `rate < 1` lengthens. Channels are stretched independently (the phases
//! of each channel evolve on their own, as in librosa).

use std::f64::consts::PI;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use crate::{CacheError, Result};

/// FFT size of the STFT.
pub const N_FFT: usize = 2048;
/// Hop between STFT frames.
pub const HOP: usize = N_FFT / 4;

/// The frame count and transform plans of one STFT geometry.
struct Plans {
    fwd: Arc<dyn RealToComplex<f64>>,
    inv: Arc<dyn ComplexToReal<f64>>,
    window: Vec<f64>,
}

impl Plans {
    fn new() -> Plans {
        let mut planner = RealFftPlanner::<f64>::new();
        // Periodic Hann (scipy's `get_window("hann", n, fftbins=True)`).
        let window = (0..N_FFT)
            .map(|k| 0.5 - 0.5 * (2.0 * PI * k as f64 / N_FFT as f64).cos())
            .collect();
        Plans {
            fwd: planner.plan_fft_forward(N_FFT),
            inv: planner.plan_fft_inverse(N_FFT),
            window,
        }
    }
}

fn fft_err(e: realfft::FftError) -> CacheError {
    CacheError::Invalid {
        name: "phase vocoder FFT".into(),
        reason: e.to_string(),
    }
}

/// The output length of a stretch of `n` samples at `rate`: `round(n / rate)`, half to even.
pub fn stretched_len(n: usize, rate: f64) -> usize {
    (n as f64 / rate).round_ties_even().max(0.0) as usize
}

/// Centred STFT `[frames][N_FFT/2 + 1]` of one channel.
fn stft(p: &Plans, x: &[f64]) -> Result<Vec<Vec<Complex<f64>>>> {
    let pad = N_FFT / 2;
    let padded_len = x.len() + 2 * pad;
    let frames = 1 + (padded_len - N_FFT) / HOP;
    let mut buf = p.fwd.make_input_vec();
    let mut scratch = p.fwd.make_scratch_vec();
    let mut out = Vec::with_capacity(frames);
    for f in 0..frames {
        for (k, b) in buf.iter_mut().enumerate() {
            // Index into the zero-padded signal.
            let i = (f * HOP + k) as isize - pad as isize;
            let v = if i >= 0 && (i as usize) < x.len() {
                x[i as usize]
            } else {
                0.0
            };
            *b = p.window[k] * v;
        }
        let mut spec = p.fwd.make_output_vec();
        p.fwd
            .process_with_scratch(&mut buf, &mut spec, &mut scratch)
            .map_err(fft_err)?;
        out.push(spec);
    }
    Ok(out)
}

/// librosa's `phase_vocoder` (hop `N_FFT/4`). Magnitudes and phases of the analysis frames
/// are computed once (librosa recomputes them per output frame; the values are the same).
fn phase_vocoder(d: &[Vec<Complex<f64>>], rate: f64) -> Vec<Vec<Complex<f64>>> {
    let bins = N_FFT / 2 + 1;
    let n = d.len();
    // np.arange(0, n, rate): ceil(n / rate) values start + i·rate.
    let steps = (n as f64 / rate).ceil() as usize;
    // hop · fft_frequencies(sr=2π): hop · k · (1 / (n_fft · (1 / 2π))).
    let val = 1.0 / (N_FFT as f64 * (1.0 / (2.0 * PI)));
    let phi: Vec<f64> = (0..bins).map(|k| HOP as f64 * (k as f64 * val)).collect();
    // Two zero frames past the end, as librosa pads.
    let polar = |c: Option<&Vec<Complex<f64>>>| -> (Vec<f64>, Vec<f64>) {
        match c {
            Some(c) => (
                c.iter().map(|z| z.norm()).collect(),
                c.iter().map(|z| z.arg()).collect(),
            ),
            None => (vec![0.0; bins], vec![0.0; bins]),
        }
    };
    let frames: Vec<(Vec<f64>, Vec<f64>)> = (0..n + 2).map(|i| polar(d.get(i))).collect();
    let mut acc: Vec<f64> = frames[0].1.clone();
    let mut out = Vec::with_capacity(steps);
    for t in 0..steps {
        let step = t as f64 * rate;
        let i = (step as usize).min(n);
        let ((m0, p0), (m1, p1)) = (&frames[i], &frames[i + 1]);
        let alpha = step.rem_euclid(1.0);
        let mut frame = Vec::with_capacity(bins);
        for k in 0..bins {
            let mag = (1.0 - alpha) * m0[k] + alpha * m1[k];
            let (sin, cos) = acc[k].sin_cos();
            frame.push(Complex::new(mag * cos, mag * sin));
            let mut dphase = p1[k] - p0[k] - phi[k];
            dphase -= 2.0 * PI * (dphase / (2.0 * PI)).round_ties_even();
            acc[k] += phi[k] + dphase;
        }
        out.push(frame);
    }
    out
}

/// librosa's centred `istft(..., length)`.
fn istft(p: &Plans, d: &mut [Vec<Complex<f64>>], length: usize) -> Result<Vec<f64>> {
    let pad = N_FFT / 2;
    let frames = d.len().min((length + 2 * pad).div_ceil(HOP));
    let full = N_FFT + HOP * frames.saturating_sub(1);
    let mut y = vec![0f64; full];
    let mut wss = vec![0f64; full];
    let mut buf = p.inv.make_output_vec();
    let mut scratch = p.inv.make_scratch_vec();
    let scale = 1.0 / N_FFT as f64;
    for (f, spec) in d.iter_mut().take(frames).enumerate() {
        // irfft ignores the imaginary parts of the DC and Nyquist bins.
        spec[0].im = 0.0;
        spec[N_FFT / 2].im = 0.0;
        p.inv
            .process_with_scratch(spec, &mut buf, &mut scratch)
            .map_err(fft_err)?;
        let o = f * HOP;
        for k in 0..N_FFT {
            y[o + k] += p.window[k] * buf[k] * scale;
            wss[o + k] += p.window[k] * p.window[k];
        }
    }
    Ok((0..length)
        .map(|i| {
            let j = i + pad;
            match (y.get(j), wss.get(j)) {
                (Some(&v), Some(&w)) if w > f64::MIN_POSITIVE => v / w,
                (Some(&v), _) => v,
                _ => 0.0,
            }
        })
        .collect())
}

fn check_rate(rate: f64) -> Result<()> {
    if rate.is_finite() && rate > 0.0 {
        Ok(())
    } else {
        Err(CacheError::Invalid {
            name: "time-stretch rate".into(),
            reason: format!("must be a positive number, got {rate}"),
        })
    }
}

/// Stretches one channel by `rate` (output `round(n / rate)` samples), in float64.
pub fn time_stretch_mono(x: &[f64], rate: f64) -> Result<Vec<f64>> {
    check_rate(rate)?;
    let p = Plans::new();
    stretch_with(&p, x, rate)
}

fn stretch_with(p: &Plans, x: &[f64], rate: f64) -> Result<Vec<f64>> {
    let len = stretched_len(x.len(), rate);
    if x.is_empty() || len == 0 {
        return Ok(vec![0.0; len]);
    }
    let d = stft(p, x)?;
    let mut s = phase_vocoder(&d, rate);
    istft(p, &mut s, len)
}

/// Stretches channel-major audio (`channels` rows of `samples.len() / channels` samples) by
/// `rate`; the result is channel-major with `round(n / rate)` samples per channel. Channels run
/// on their own threads.
pub fn time_stretch(samples: &[f32], channels: usize, rate: f64) -> Result<Vec<f32>> {
    check_rate(rate)?;
    if channels == 0 || !samples.len().is_multiple_of(channels) {
        return Err(CacheError::Invalid {
            name: "audio layout".into(),
            reason: format!(
                "{} samples do not split into {channels} channels",
                samples.len()
            ),
        });
    }
    let n = samples.len() / channels;
    let outs: Vec<Result<Vec<f64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..channels)
            .map(|c| {
                let row = &samples[c * n..(c + 1) * n];
                s.spawn(move || {
                    let x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
                    stretch_with(&Plans::new(), &x, rate)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(CacheError::Invalid {
                        name: "phase vocoder".into(),
                        reason: "a channel's thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut out = Vec::with_capacity(stretched_len(n, rate) * channels);
    for o in outs {
        out.extend(o?.into_iter().map(|v| v as f32));
    }
    Ok(out)
}

/// Stretches channel-major audio of `from_frames` per channel to exactly `to_frames` per channel:
/// the phase vocoder at `rate = from / to`, then a cut or zero pad of the at most one sample
/// that rounding leaves.
pub fn stretch_to(samples: &[f32], channels: usize, to_frames: usize) -> Result<Vec<f32>> {
    if channels == 0
        || !samples.len().is_multiple_of(channels)
        || samples.is_empty()
        || to_frames == 0
    {
        return Err(CacheError::Invalid {
            name: "stretch_to".into(),
            reason: format!(
                "need non-empty audio in {channels} channels and a positive target, got {} \
                 samples to {to_frames} frames",
                samples.len()
            ),
        });
    }
    let n = samples.len() / channels;
    if n == to_frames {
        return Ok(samples.to_vec());
    }
    let rate = n as f64 / to_frames as f64;
    let s = time_stretch(samples, channels, rate)?;
    let m = s.len() / channels;
    let mut out = vec![0f32; to_frames * channels];
    for c in 0..channels {
        let k = m.min(to_frames);
        out[c * to_frames..c * to_frames + k].copy_from_slice(&s[c * m..c * m + k]);
    }
    Ok(out)
}
