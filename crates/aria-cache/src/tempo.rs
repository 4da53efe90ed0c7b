//! A tempo estimator in the manner of `librosa.beat.beat_track`'s tempo, for checking that a
//! time stretch changes the tempo by its rate:
//!
//! 1. onset strength: 128-band Slaney mel power spectrogram (`n_fft = 2048`, hop 512, centred),
//!    in dB (`top_db = 80`), positive first difference over time, median over the bands, shifted
//!    by 3 frames (librosa's centring);
//! 2. tempogram: autocorrelation of 384-frame Hann-windowed windows of the onset envelope (the
//!    envelope padded with a linear ramp to zero), each normalized by its maximum, averaged over
//!    time;
//! 3. the lag maximizing `log1p(10⁶·tg) + log-normal prior` (centred on 120 BPM, one octave of
//!    deviation), among tempi below 320 BPM.
//!
//! The BPM resolution is that of integer lags (`60·sr / (512·lag)`).

use std::f64::consts::PI;

use realfft::num_complex::Complex;
use realfft::RealFftPlanner;

use crate::{CacheError, Result};

const N_FFT: usize = 2048;
const HOP: usize = 512;
const N_MELS: usize = 128;
const WIN: usize = 384;

fn hz_to_mel(f: f64) -> f64 {
    let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if f >= min_log_hz {
        min_log_mel + (f / min_log_hz).ln() / logstep
    } else {
        f / f_sp
    }
}

fn mel_to_hz(m: f64) -> f64 {
    let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if m >= min_log_mel {
        min_log_hz * (logstep * (m - min_log_mel)).exp()
    } else {
        f_sp * m
    }
}

/// librosa's `filters.mel(sr, n_fft, n_mels=128)` (Slaney scale and normalization).
fn mel_filters(sr: f64) -> Vec<Vec<f64>> {
    let bins = N_FFT / 2 + 1;
    let fft_f: Vec<f64> = (0..bins)
        .map(|k| k as f64 * sr / 2.0 / (bins - 1) as f64)
        .collect();
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(sr / 2.0));
    let mel_f: Vec<f64> = (0..N_MELS + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (N_MELS + 1) as f64))
        .collect();
    (0..N_MELS)
        .map(|i| {
            let (d0, d1) = (mel_f[i + 1] - mel_f[i], mel_f[i + 2] - mel_f[i + 1]);
            let enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
            fft_f
                .iter()
                .map(|&f| {
                    let lower = (f - mel_f[i]) / d0;
                    let upper = (mel_f[i + 2] - f) / d1;
                    lower.min(upper).max(0.0) * enorm
                })
                .collect()
        })
        .collect()
}

/// The onset-strength envelope of mono audio (librosa `onset_strength(aggregate=np.median)`).
pub fn onset_strength(mono: &[f32], sample_rate: u32) -> Result<Vec<f64>> {
    if mono.is_empty() || sample_rate == 0 {
        return Err(CacheError::Invalid {
            name: "onset strength input".into(),
            reason: format!("{} samples at {sample_rate} Hz", mono.len()),
        });
    }
    let sr = f64::from(sample_rate);
    let mut planner = RealFftPlanner::<f64>::new();
    let fft = planner.plan_fft_forward(N_FFT);
    let window: Vec<f64> = (0..N_FFT)
        .map(|k| 0.5 - 0.5 * (2.0 * PI * k as f64 / N_FFT as f64).cos())
        .collect();
    let mel = mel_filters(sr);
    let pad = N_FFT / 2;
    let frames = 1 + mono.len() / HOP;
    let mut buf = fft.make_input_vec();
    let mut spec = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();
    let mut db = vec![vec![0f64; frames]; N_MELS];
    let mut power = vec![0f64; N_FFT / 2 + 1];
    for f in 0..frames {
        for (k, b) in buf.iter_mut().enumerate() {
            let i = (f * HOP + k) as isize - pad as isize;
            let v = if i >= 0 && (i as usize) < mono.len() {
                f64::from(mono[i as usize])
            } else {
                0.0
            };
            *b = window[k] * v;
        }
        fft.process_with_scratch(&mut buf, &mut spec, &mut scratch)
            .map_err(|e| CacheError::Invalid {
                name: "onset FFT".into(),
                reason: e.to_string(),
            })?;
        for (p, c) in power.iter_mut().zip(&spec) {
            *p = c.norm_sqr();
        }
        for (row, out) in mel.iter().zip(db.iter_mut()) {
            let e: f64 = row.iter().zip(&power).map(|(w, p)| w * p).sum();
            out[f] = 10.0 * e.max(1e-10).log10();
        }
    }
    let top = db
        .iter()
        .flat_map(|r| r.iter())
        .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    for r in db.iter_mut() {
        r.iter_mut().for_each(|v| *v = v.max(top - 80.0));
    }
    // Lag 1 positive difference, median over bands, 1 + n_fft/(2·hop) frames of delay.
    let shift = 1 + N_FFT / (2 * HOP);
    let mut env = vec![0f64; frames];
    let mut col = vec![0f64; N_MELS];
    for t in 1..frames {
        for (c, r) in col.iter_mut().zip(&db) {
            *c = (r[t] - r[t - 1]).max(0.0);
        }
        col.sort_by(|a, b| a.total_cmp(b));
        let med = 0.5 * (col[N_MELS / 2 - 1] + col[N_MELS / 2]);
        if t - 1 + shift < frames {
            env[t - 1 + shift] = med;
        }
    }
    Ok(env)
}

/// The tempo in BPM of mono audio at `sample_rate`.
pub fn estimate_bpm(mono: &[f32], sample_rate: u32) -> Result<f64> {
    let env = onset_strength(mono, sample_rate)?;
    let n = env.len();
    let half = WIN / 2;
    // Linear ramp from 0 to the edge values on both sides.
    let mut padded = Vec::with_capacity(n + 2 * half);
    let (first, last) = (env[0], env[n - 1]);
    padded.extend((0..half).map(|i| first * i as f64 / half as f64));
    padded.extend_from_slice(&env);
    padded.extend((0..half).map(|i| last * (half - i) as f64 / half as f64));
    let window: Vec<f64> = (0..WIN)
        .map(|k| 0.5 - 0.5 * (2.0 * PI * k as f64 / WIN as f64).cos())
        .collect();
    // Autocorrelation through a zero-padded FFT (2·WIN ≥ 2·WIN − 1).
    let m = 2 * WIN;
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(m);
    let inv = planner.plan_fft_inverse(m);
    let mut buf = fwd.make_input_vec();
    let mut spec = fwd.make_output_vec();
    let mut ac = inv.make_output_vec();
    let mut tg = vec![0f64; WIN];
    let frames = n.min(padded.len() + 1 - WIN);
    let err = |e: realfft::FftError| CacheError::Invalid {
        name: "tempogram FFT".into(),
        reason: e.to_string(),
    };
    for f in 0..frames {
        buf.iter_mut().for_each(|b| *b = 0.0);
        for k in 0..WIN {
            buf[k] = padded[f + k] * window[k];
        }
        fwd.process(&mut buf, &mut spec).map_err(err)?;
        spec.iter_mut()
            .for_each(|c| *c = Complex::new(c.norm_sqr(), 0.0));
        inv.process(&mut spec, &mut ac).map_err(err)?;
        let max = ac[..WIN].iter().fold(0f64, |a, &b| a.max(b.abs()));
        let norm = if max > f64::MIN_POSITIVE { max } else { 1.0 };
        for (t, a) in tg.iter_mut().zip(&ac[..WIN]) {
            *t += a / norm;
        }
    }
    tg.iter_mut().for_each(|t| *t /= frames.max(1) as f64);
    let sr = f64::from(sample_rate);
    let mut best = (f64::NEG_INFINITY, 0.0);
    for (lag, &t) in tg.iter().enumerate().skip(1) {
        let bpm = 60.0 * sr / (HOP as f64 * lag as f64);
        if bpm >= 320.0 {
            continue;
        }
        let prior = -0.5 * (bpm.log2() - 120f64.log2()).powi(2);
        let s = (1e6 * t.max(0.0)).ln_1p() + prior;
        if s > best.0 {
            best = (s, bpm);
        }
    }
    Ok(best.1)
}
