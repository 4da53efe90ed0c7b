//! The reference input preparation of audio prompts: sinc resampling exactly as
//! `torchaudio.transforms.Resample` computes it (same kernel, same padding, same length), then
//! pad/crop and channel fixing. File reading and writing is `aria_codec::audio`.

use aria_codec::audio::{fix_channels, pad_crop, AudioClip};
use aria_core::{DType, Tensor};

use crate::Result;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Resample one channel from `from` Hz to `to` Hz with the Hann-windowed sinc interpolation of
/// `torchaudio.functional.resample` (lowpass filter width 6, rolloff 0.99): same kernel (built
/// in f64, used in f32), same zero padding, same output length `ceil(len · to / from)`.
pub fn resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || x.is_empty() {
        return x.to_vec();
    }
    let g = gcd(from as usize, to as usize);
    let orig = from as usize / g;
    let new = to as usize / g;
    let lpw = 6.0f64;
    let base = orig.min(new) as f64 * 0.99;
    let width = (lpw * orig as f64 / base).ceil() as usize;
    let klen = 2 * width + orig;
    let mut kernels = vec![0f32; new * klen];
    for i in 0..new {
        // `arange(0, -new, -1) / new` is evaluated in float32 by the reference.
        let phase = f64::from(-(i as f32) / new as f32);
        for j in 0..klen {
            let idx = (j as f64 - width as f64) / orig as f64;
            let mut t = (phase + idx) * base;
            t = t.clamp(-lpw, lpw);
            let window = (t * std::f64::consts::PI / lpw / 2.0).cos().powi(2);
            t *= std::f64::consts::PI;
            let k = if t == 0.0 { 1.0 } else { t.sin() / t };
            kernels[i * klen + j] = (k * window * (base / orig as f64)) as f32;
        }
    }
    let len = x.len();
    let mut padded = vec![0f32; width + len + width + orig];
    padded[width..width + len].copy_from_slice(x);
    let frames = (padded.len() - klen) / orig + 1;
    let target = (new * len).div_ceil(orig);
    let mut out = Vec::with_capacity(frames * new);
    'outer: for k in 0..frames {
        let src = &padded[k * orig..k * orig + klen];
        for i in 0..new {
            if out.len() == target {
                break 'outer;
            }
            let ker = &kernels[i * klen..(i + 1) * klen];
            let acc: f32 = src.iter().zip(ker).map(|(a, b)| a * b).sum();
            out.push(acc);
        }
    }
    out
}

/// The reference `prepare_audio`: resample to `sample_rate`, zero-pad or crop (from the start)
/// to `length` samples, then make `channels` channels (mono is duplicated, extra channels are
/// dropped). Returns `[1, channels, length]`.
pub fn prepare_audio(
    clip: &AudioClip,
    sample_rate: u32,
    length: usize,
    channels: usize,
) -> Result<Tensor> {
    let s = clip.data.shape();
    let (ch, n) = (s[0], s[1]);
    let v = clip.data.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
    let rows: Vec<f32> = v
        .chunks(n.max(1))
        .take(ch)
        .flat_map(|c| resample(c, clip.sample_rate, sample_rate))
        .collect();
    let m = rows.len() / ch.max(1);
    let x = Tensor::from_vec(rows, &[ch, m])?;
    let x = pad_crop(&x, length)?;
    let x = fix_channels(&x, channels)?;
    Ok(x.unsqueeze(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resample_keeps_a_low_sine_and_has_the_reference_length() {
        let x: Vec<f32> = (0..4800)
            .map(|i| (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 48000.0).sin())
            .collect();
        let y = resample(&x, 48000, 44100);
        assert_eq!(y.len(), 4410);
        for (i, v) in y.iter().enumerate().skip(200).take(4000) {
            let want = (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 44100.0).sin();
            assert!((v - want).abs() < 2e-3, "{i}: {v} vs {want}");
        }
    }

    #[test]
    fn prepare_pads_and_duplicates_mono() {
        let clip = AudioClip {
            data: Tensor::from_vec(vec![0.5f32, -0.25, 0.125], &[1, 3]).unwrap(),
            sample_rate: 44100,
        };
        let s = prepare_audio(&clip, 44100, 5, 2).unwrap();
        assert_eq!(s.shape(), &[1, 2, 5]);
        assert_eq!(
            s.to_vec_f32().unwrap(),
            vec![0.5, -0.25, 0.125, 0.0, 0.0, 0.5, -0.25, 0.125, 0.0, 0.0]
        );
    }
}
