//! Resampling stays bounded whatever the rates: the reference's torchaudio kernel only where it
//! is small (every usual rate), a bounded sinc resampler elsewhere, both keeping a sine a sine.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use aria_codec::audio::{
    self, resample_plan, ResamplePlan, MAX_EXACT_KERNEL_TAPS, MAX_EXACT_PHASE_TAPS,
};
use aria_core::Tensor;

const USUAL: [u32; 11] = [
    8000, 11025, 16000, 22050, 24000, 32000, 48000, 88200, 96000, 176400, 192000,
];

/// `ch` channels of `0.5·sin(2π·freq·i/rate + c)` (phase computed in f64).
fn sine(ch: usize, n: usize, rate: f64, freq: f64) -> Tensor {
    let v: Vec<f32> = (0..ch)
        .flat_map(|c| {
            (0..n).map(move |i| {
                (0.5 * (std::f64::consts::TAU * freq * i as f64 / rate + c as f64).sin()) as f32
            })
        })
        .collect();
    Tensor::from_vec(v, &[ch, n]).unwrap()
}

/// Least-squares fit of `a·sin + b·cos` at `freq` to each channel of `y` (sampled at `rate`)
/// away from the edges: the worst (|amplitude − 0.5|, |time shift| in samples against the input's
/// phase, max residual) over the channels.
fn fit(y: &Tensor, rate: f64, freq: f64) -> (f64, f64, f64) {
    let (ch, n) = (y.shape()[0], y.shape()[1]);
    let v = y.to_vec_f32().unwrap();
    assert!(v.iter().all(|s| s.is_finite()), "non-finite output");
    let w = std::f64::consts::TAU * freq / rate;
    let (mut amp_err, mut shift_err, mut res) = (0f64, 0f64, 0f64);
    for c in 0..ch {
        let row = &v[c * n..(c + 1) * n];
        let range = n / 20..n - n / 20;
        let (mut ss, mut sc, mut cc, mut ys, mut yc) = (0f64, 0f64, 0f64, 0f64, 0f64);
        for i in range.clone() {
            let (s, co) = (w * i as f64 + c as f64).sin_cos();
            let y = f64::from(row[i]);
            ss += s * s;
            sc += s * co;
            cc += co * co;
            ys += y * s;
            yc += y * co;
        }
        let det = ss * cc - sc * sc;
        let a = (ys * cc - yc * sc) / det;
        let b = (yc * ss - ys * sc) / det;
        amp_err = amp_err.max(((a * a + b * b).sqrt() - 0.5).abs());
        shift_err = shift_err.max((b.atan2(a) / w).abs());
        for i in range {
            let (s, co) = (w * i as f64 + c as f64).sin_cos();
            res = res.max((f64::from(row[i]) - a * s - b * co).abs());
        }
    }
    (amp_err, shift_err, res)
}

#[test]
fn usual_rates_use_the_reference_kernel() {
    for &r in &USUAL {
        for (from, to) in [(r, 44100), (44100, r)] {
            match resample_plan(from, to) {
                ResamplePlan::Exact { phases, taps } => {
                    assert!(phases * taps <= MAX_EXACT_KERNEL_TAPS, "{from} → {to}");
                }
                p => panic!("{from} → {to}: {p:?}"),
            }
        }
    }
    // 48 kHz → 44.1 kHz reduces to 160 → 147: 147 phases of 160 + 2·7 taps.
    assert_eq!(
        resample_plan(48000, 44100),
        ResamplePlan::Exact {
            phases: 147,
            taps: 174
        }
    );
    assert_eq!(resample_plan(44100, 44100), ResamplePlan::Passthrough);
}

#[test]
fn no_rate_pair_builds_a_large_kernel() {
    // 44 101 → 44 100 is irreducible: its torchaudio kernel would be 44 100 × 44 115 taps.
    assert_eq!(resample_plan(44101, 44100), ResamplePlan::Bounded);
    assert_eq!(resample_plan(44100, 44101), ResamplePlan::Bounded);
    assert_eq!(resample_plan(12345, 44100), ResamplePlan::Bounded);
    for from in (1000..=400_000).step_by(997) {
        for to in [16000, 44100, 48000] {
            if let ResamplePlan::Exact { phases, taps } = resample_plan(from, to) {
                assert!(
                    phases * taps <= MAX_EXACT_KERNEL_TAPS && taps <= MAX_EXACT_PHASE_TAPS,
                    "{from} → {to}: {phases} × {taps}"
                );
            }
        }
    }
}

#[test]
fn an_odd_rate_resamples_fast_and_keeps_the_sine() {
    let x = sine(2, 44101, 44101.0, 1000.0);
    let t0 = Instant::now();
    let y = audio::resample(&x, 44101, 44100).unwrap();
    let secs = t0.elapsed().as_secs_f32();
    assert_eq!(y.shape(), &[2, 44100]);
    let (amp, shift, res) = fit(&y, 44100.0, 1000.0);
    eprintln!(
        "44101 → 44100 Hz, 1 s stereo: {secs:.2} s; amplitude off by {amp:.1e}, shift {shift:.3} \
         samples, residual {res:.1e}"
    );
    assert!(
        amp < 1e-4 && shift <= 1.0 && res < 1e-4,
        "{amp} {shift} {res}"
    );
    assert!(secs < 20.0, "took {secs} s");

    // Upsampling and downsampling by odd ratios: the same sine, aligned with the input to
    // within one output sample.
    for (from, to, freq) in [
        (12345, 44100, 440.0),
        (44100, 30001, 3000.0),
        (96001, 44100, 5000.0),
    ] {
        let n = from as usize / 2;
        let y = audio::resample(&sine(1, n, f64::from(from), freq), from, to).unwrap();
        assert_eq!(
            y.shape()[1],
            (n as u64 * u64::from(to)).div_ceil(u64::from(from)) as usize
        );
        let (amp, shift, res) = fit(&y, f64::from(to), freq);
        assert!(
            amp < 1e-4 && shift <= 1.0 && res < 1e-4,
            "{from} → {to}: amplitude off by {amp}, shift {shift}, residual {res}"
        );
    }
}

#[test]
fn the_bounded_resampler_removes_content_above_the_new_nyquist() {
    // 20 kHz at 44 101 Hz has no place at 30 001 Hz (Nyquist 15 kHz): it must be filtered out.
    let y = audio::resample(&sine(1, 44101, 44101.0, 20000.0), 44101, 30001).unwrap();
    let v = y.to_vec_f32().unwrap();
    assert!(v.iter().all(|s| s.is_finite()), "non-finite output");
    let n = v.len();
    let peak = v[n / 10..n - n / 10]
        .iter()
        .fold(0f32, |m, s| m.max(s.abs()));
    assert!(peak < 1e-5, "aliased peak {peak}");
}
