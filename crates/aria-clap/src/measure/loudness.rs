//! ITU-R BS.1770-4 integrated loudness and loudness normalisation.
//!
//! The meter follows the standard and reproduces `pyloudnorm` (`Meter.integrated_loudness`)
//! step for step: K-weighting (a high shelf, then a high-pass, as `f64` biquads), mean squares
//! over 400 ms blocks with 75 % overlap (block `j` covers samples
//! `⌊0.4 · 0.25 j · rate⌋ .. ⌊0.4 · (0.25 j + 1) · rate⌋`, the last one possibly cut short by the
//! end of the clip but still divided by the full block length; the block count is
//! `round((T − 0.4) / 0.1) + 1`, ties to even), block loudness
//! `−0.691 + 10 log10 Σ Gᵢ zᵢ`, an absolute gate at −70 LUFS (`≥`), a relative gate 10 LU below
//! the loudness of the blocks that passed it (`>`), and the mean power of the blocks above both.

use crate::{ClapError, Result};

/// Channel weights `Gᵢ` in `pyloudnorm`'s channel order: left, right, centre, left surround,
/// right surround.
const CHANNEL_WEIGHTS: [f64; 5] = [1.0, 1.0, 1.0, 1.41, 1.41];
/// Block length in seconds.
const BLOCK: f64 = 0.4;
/// Block hop as a fraction of the block (1 − 75 % overlap).
const STEP: f64 = 1.0 - 0.75;
/// Absolute gate, LUFS.
const ABSOLUTE_GATE: f64 = -70.0;
/// Relative gate, LU below the absolutely gated loudness.
const RELATIVE_GATE: f64 = -10.0;
/// Lowest sample rate accepted (both filter designs need the shelf below Nyquist).
const MIN_RATE: u32 = 4000;

/// How the two K-weighting biquads are designed for a sample rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KWeighting {
    /// The bilinear transform of the standard's analog prototype (B. De Man's fit: shelf at
    /// 1681.97 Hz, +4.0 dB, Q 0.7072; high-pass at 38.135 Hz, Q 0.5003). At 48 kHz it gives the
    /// coefficients printed in BS.1770-4, and a 0 dBFS 997 Hz sine in one channel reads
    /// −3.01 LUFS as the standard requires. `pyloudnorm`'s `filter_class="DeMan"`.
    #[default]
    Bs1770,
    /// RBJ audio-EQ-cookbook biquads (shelf 1500 Hz, +4 dB, Q 1/√2; high-pass 38 Hz, Q 0.5,
    /// normalised to unit pass-band gain). `pyloudnorm`'s default `filter_class="K-weighting"`;
    /// reads about 0.04 LU lower than [`KWeighting::Bs1770`] on most material. Use it to match
    /// numbers produced with `pyloudnorm.Meter(rate)`.
    Cookbook,
}

/// A biquad `[b0, b1, b2, a1, a2]` (`a0 = 1`).
type Biquad = [f64; 5];

impl KWeighting {
    /// The shelf and high-pass biquads for `rate` Hz.
    fn design(self, rate: f64) -> [Biquad; 2] {
        use std::f64::consts::PI;
        match self {
            KWeighting::Bs1770 => {
                let (fc, g, q) = (
                    1_681.974_450_955_532,
                    3.999_843_853_97,
                    0.707_175_236_955_419_3,
                );
                let k = (PI * fc / rate).tan();
                let vh = 10f64.powf(g / 20.0);
                let vb = vh.powf(0.499_666_774_155);
                let a0 = 1.0 + k / q + k * k;
                let shelf = [
                    (vh + vb * k / q + k * k) / a0,
                    2.0 * (k * k - vh) / a0,
                    (vh - vb * k / q + k * k) / a0,
                    2.0 * (k * k - 1.0) / a0,
                    (1.0 - k / q + k * k) / a0,
                ];
                let (fc, q) = (38.135_470_876_139_82, 0.500_327_037_325_395_3);
                let k = (PI * fc / rate).tan();
                let a0 = 1.0 + k / q + k * k;
                let high_pass = [
                    1.0,
                    -2.0,
                    1.0,
                    2.0 * (k * k - 1.0) / a0,
                    (1.0 - k / q + k * k) / a0,
                ];
                [shelf, high_pass]
            }
            KWeighting::Cookbook => {
                let a = 10f64.powf(4.0 / 40.0);
                let w0 = 2.0 * PI * (1500.0 / rate);
                let alpha = w0.sin() / (2.0 * (1.0 / 2f64.sqrt()));
                let (c, sa) = (w0.cos(), 2.0 * a.sqrt() * alpha);
                let a0 = (a + 1.0) - (a - 1.0) * c + sa;
                let shelf = [
                    a * ((a + 1.0) + (a - 1.0) * c + sa) / a0,
                    -2.0 * a * ((a - 1.0) + (a + 1.0) * c) / a0,
                    a * ((a + 1.0) + (a - 1.0) * c - sa) / a0,
                    2.0 * ((a - 1.0) - (a + 1.0) * c) / a0,
                    ((a + 1.0) - (a - 1.0) * c - sa) / a0,
                ];
                let w0 = 2.0 * PI * (38.0 / rate);
                let (c, alpha) = (w0.cos(), w0.sin() / (2.0 * 0.5));
                let a0 = 1.0 + alpha;
                let high_pass = [
                    (1.0 + c) / 2.0 / a0,
                    -(1.0 + c) / a0,
                    (1.0 + c) / 2.0 / a0,
                    -2.0 * c / a0,
                    (1.0 - alpha) / a0,
                ];
                [shelf, high_pass]
            }
        }
    }
}

/// Integrated loudness (LUFS) of interleaved audio by ITU-R BS.1770-4 with the
/// [`KWeighting::Bs1770`] filters; see [`integrated_loudness_with`].
pub fn integrated_loudness(interleaved: &[f32], channels: usize, sample_rate: u32) -> Result<f64> {
    integrated_loudness_with(interleaved, channels, sample_rate, KWeighting::Bs1770)
}

/// Integrated loudness (LUFS) of interleaved audio by ITU-R BS.1770-4 with the given K-weighting
/// design (see the module docs for the exact block and gating rules).
///
/// `channels` is 1 to 5 in the order left, right, centre, left surround, right surround
/// (weights 1, 1, 1, 1.41, 1.41; mono and stereo are weighted 1). Samples are in full-scale
/// units (±1.0 = 0 dBFS); louder samples are measured as they are.
///
/// Errors: no channels or more than 5, a length that is not a multiple of `channels`, a sample
/// rate below 4 kHz, a non-finite sample, a clip shorter than one 400 ms block (the error names
/// its length), and a clip with no block above the −70 LUFS absolute gate (silence; `pyloudnorm`
/// returns −∞ there).
pub fn integrated_loudness_with(
    interleaved: &[f32],
    channels: usize,
    sample_rate: u32,
    weighting: KWeighting,
) -> Result<f64> {
    check_audio(interleaved, channels, sample_rate)?;
    let rate = f64::from(sample_rate);
    let frames = interleaved.len() / channels;
    let filters = weighting.design(rate);
    let t = frames as f64 / rate;
    let blocks = ((t - BLOCK) / (BLOCK * STEP)).round_ties_even() as usize + 1;
    let norm = 1.0 / (BLOCK * rate);
    // z[j][i]: mean square of block j of channel i.
    let mut z = vec![[0.0f64; 5]; blocks];
    let mut y = vec![0.0f64; frames];
    for ch in 0..channels {
        for (yk, x) in y
            .iter_mut()
            .zip(interleaved.iter().skip(ch).step_by(channels))
        {
            *yk = f64::from(*x);
        }
        for f in &filters {
            biquad(f, &mut y);
        }
        for (j, zj) in z.iter_mut().enumerate() {
            let lo = ((BLOCK * (j as f64 * STEP) * rate) as usize).min(frames);
            let hi = ((BLOCK * (j as f64 * STEP + 1.0) * rate) as usize).min(frames);
            zj[ch] = norm * y[lo..hi].iter().map(|v| v * v).sum::<f64>();
        }
    }
    let weighted = |zj: &[f64; 5]| -> f64 {
        zj.iter()
            .zip(&CHANNEL_WEIGHTS)
            .take(channels)
            .map(|(z, g)| g * z)
            .sum()
    };
    let block_lufs: Vec<f64> = z
        .iter()
        .map(|zj| -0.691 + 10.0 * weighted(zj).log10())
        .collect();
    let gated_power = |keep: &dyn Fn(f64) -> bool| -> Option<f64> {
        let mut acc = [0.0f64; 5];
        let mut count = 0usize;
        for (zj, &l) in z.iter().zip(&block_lufs) {
            if keep(l) {
                count += 1;
                for (a, v) in acc.iter_mut().zip(zj) {
                    *a += v;
                }
            }
        }
        (count > 0).then(|| weighted(&acc.map(|a| a / count as f64)))
    };
    let silent = || {
        ClapError::audio(
            "loudness input",
            "no 400 ms block is above the -70 LUFS absolute gate (silence)",
        )
    };
    let absolute = gated_power(&|l| l >= ABSOLUTE_GATE).ok_or_else(silent)?;
    let relative = -0.691 + 10.0 * absolute.log10() + RELATIVE_GATE;
    let power = gated_power(&|l| l > relative && l > ABSOLUTE_GATE).ok_or_else(silent)?;
    Ok(-0.691 + 10.0 * power.log10())
}

/// Scale interleaved audio so that its integrated loudness ([`integrated_loudness`], BS.1770
/// filters) becomes `target_lufs`: a single gain `10^((target − measured) / 20)` applied to
/// every sample (computed in `f64`).
///
/// Peaks are **not** limited: the result may exceed ±1.0 (a quiet clip normalised to −14 LUFS
/// easily does). Clipping or limiting would change the loudness just set and add distortion the
/// embedding model would see; callers that need a bounded signal should check the peak and
/// choose a lower target. Errors: those of [`integrated_loudness`], a non-finite target, and a
/// result that overflows `f32`.
pub fn normalize_loudness(
    interleaved: &[f32],
    channels: usize,
    sample_rate: u32,
    target_lufs: f64,
) -> Result<Vec<f32>> {
    if !target_lufs.is_finite() {
        return Err(ClapError::invalid(
            "target_lufs",
            format!("must be finite, got {target_lufs}"),
        ));
    }
    let measured = integrated_loudness(interleaved, channels, sample_rate)?;
    let gain = 10f64.powf((target_lufs - measured) / 20.0);
    let out: Vec<f32> = interleaved
        .iter()
        .map(|&x| (f64::from(x) * gain) as f32)
        .collect();
    if out.iter().any(|v| !v.is_finite()) {
        return Err(ClapError::audio(
            "loudness normalisation",
            format!("a gain of {gain:e} overflows f32"),
        ));
    }
    Ok(out)
}

/// Transposed direct form II, in place (as `scipy.signal.lfilter`).
fn biquad(f: &Biquad, y: &mut [f64]) {
    let [b0, b1, b2, a1, a2] = *f;
    let (mut z1, mut z2) = (0.0f64, 0.0f64);
    for v in y.iter_mut() {
        let x = *v;
        let out = b0 * x + z1;
        z1 = b1 * x - a1 * out + z2;
        z2 = b2 * x - a2 * out;
        *v = out;
    }
}

fn check_audio(interleaved: &[f32], channels: usize, sample_rate: u32) -> Result<()> {
    if channels == 0 || channels > CHANNEL_WEIGHTS.len() {
        return Err(ClapError::invalid(
            "channels",
            format!("must be 1 to 5 (L, R, C, Ls, Rs), got {channels}"),
        ));
    }
    if sample_rate < MIN_RATE {
        return Err(ClapError::invalid(
            "sample_rate",
            format!("must be at least {MIN_RATE} Hz, got {sample_rate}"),
        ));
    }
    if !interleaved.len().is_multiple_of(channels) {
        return Err(ClapError::audio(
            "loudness input",
            format!(
                "{} samples is not a whole number of {channels}-channel frames",
                interleaved.len()
            ),
        ));
    }
    let frames = interleaved.len() / channels;
    if (frames as f64) < BLOCK * f64::from(sample_rate) {
        return Err(ClapError::audio(
            "loudness input",
            format!(
                "{frames} frames ({:.3} s) is shorter than one 400 ms block",
                frames as f64 / f64::from(sample_rate)
            ),
        ));
    }
    if let Some(i) = interleaved.iter().position(|v| !v.is_finite()) {
        return Err(ClapError::audio(
            "loudness input",
            format!("sample {i} is not finite ({})", interleaved[i]),
        ));
    }
    Ok(())
}
