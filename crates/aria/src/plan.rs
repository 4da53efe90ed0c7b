//! The length bookkeeping of the reference `generate()`: how many latents to sample for a
//! duration, which of them are valid (padding mask), the inpainting masks, and the crop.

/// Geometry of a model that the bookkeeping needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// Audio sample rate (44100).
    pub sample_rate: u32,
    /// Audio samples per latent (4096 for the released models).
    pub downsampling_ratio: usize,
    /// Latents the length is aligned to (`chunk_size / stride`, 2 for SA3).
    pub latent_align: usize,
    /// Largest number of audio samples a generation may have.
    pub max_samples: usize,
}

/// Lengths of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    /// Audio samples generated (`T · downsampling_ratio`).
    pub samples: usize,
    /// Latent frames `T`.
    pub latents: usize,
    /// `ceil(int(seconds · sr) / ratio)`: latents the requested duration covers (schedule length).
    pub effective: usize,
    /// `min(effective + headroom, T)`: latents that are valid in the padding mask.
    pub valid: usize,
    /// Samples of the returned audio (`int(seconds · sr)`).
    pub output_samples: usize,
}

/// `int(x)` of Python for the non-negative values used here (truncation toward zero).
fn py_int(x: f64) -> usize {
    if x <= 0.0 {
        0
    } else {
        x as usize
    }
}

impl Geometry {
    /// Lengths for `seconds` of audio with `padding_sec` of headroom (`duration_padding_sec`,
    /// 6 s by default): `n = int((s + pad)·sr)` rounded up to the latent size and then to the
    /// alignment, capped at `max_samples`.
    pub fn lengths(&self, seconds: f64, padding_sec: f64) -> Lengths {
        let sr = f64::from(self.sample_rate);
        let ratio = self.downsampling_ratio.max(1);
        let samples = if seconds <= 0.0 {
            self.max_samples
        } else {
            let mut n = py_int((seconds + padding_sec) * sr);
            n = n.div_ceil(ratio) * ratio;
            let align = ratio * self.latent_align.max(1);
            n = n.div_ceil(align) * align;
            n.min(self.max_samples)
        };
        let latents = samples / ratio;
        let eff_samples = py_int(seconds * sr);
        let effective = eff_samples.div_ceil(ratio);
        let headroom = py_int(padding_sec * sr / ratio as f64);
        let valid = (effective + headroom).min(latents);
        Lengths {
            samples,
            latents,
            effective,
            valid,
            output_samples: eff_samples,
        }
    }

    /// [`Self::lengths`] of a batch: the latent length of the longest duration for every
    /// item, each with its own effective, valid and output lengths.
    pub fn batch_lengths(&self, seconds: &[f64], padding_sec: f64) -> Vec<Lengths> {
        let longest = seconds.iter().copied().fold(0f64, f64::max);
        let shared = self.lengths(longest, padding_sec);
        let headroom = py_int(
            padding_sec * f64::from(self.sample_rate) / self.downsampling_ratio.max(1) as f64,
        );
        seconds
            .iter()
            .map(|&s| {
                let own = self.lengths(s, padding_sec);
                Lengths {
                    samples: shared.samples,
                    latents: shared.latents,
                    effective: own.effective,
                    valid: (own.effective + headroom).min(shared.latents),
                    output_samples: own.output_samples,
                }
            })
            .collect()
    }

    /// The sample-domain inpainting mask (1 = keep, 0 = regenerate) of length `lengths.samples`:
    /// zeros on every `[int(start·sr), int(end·sr))` range and after `int(seconds·sr)`.
    pub fn inpaint_mask_samples(&self, lengths: &Lengths, ranges: &[(f64, f64)]) -> Vec<f32> {
        let n = lengths.samples;
        let sr = f64::from(self.sample_rate);
        let mut m = vec![1f32; n];
        for &(s, e) in ranges {
            let a = py_int(s * sr).min(n);
            let b = py_int(e * sr).min(n);
            if a < b {
                m[a..b].fill(0.0);
            }
        }
        let eff = lengths.output_samples;
        if eff > 0 && eff < n {
            m[eff..].fill(0.0);
        }
        m
    }

    /// Nearest-neighbour downsampling of a sample-domain mask to one value per latent
    /// (`mask[i · ratio]`).
    pub fn mask_to_latents(&self, mask: &[f32], latents: usize) -> Vec<f32> {
        let n = mask.len();
        (0..latents)
            .map(|i| {
                // PyTorch "nearest": src = floor(i · n / latents).
                let src = ((i as f64) * (n as f64 / latents as f64)).floor() as usize;
                mask.get(src.min(n.saturating_sub(1)))
                    .copied()
                    .unwrap_or(0.0)
            })
            .collect()
    }
}

/// The padding mask `[i < valid]` over `latents` positions, as 0/1 floats.
pub fn padding_mask(latents: usize, valid: usize) -> Vec<f32> {
    (0..latents)
        .map(|i| if i < valid { 1.0 } else { 0.0 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SA3: Geometry = Geometry {
        sample_rate: 44100,
        downsampling_ratio: 4096,
        latent_align: 2,
        max_samples: 5_292_032,
    };

    #[test]
    fn released_model_lengths_match_the_spec() {
        for (s, t) in [(5.0, 120), (10.0, 174), (30.0, 388), (120.0, 1292)] {
            assert_eq!(SA3.lengths(s, 6.0).latents, t, "{s} s");
        }
        let l = SA3.lengths(30.0, 6.0);
        assert_eq!((l.effective, l.valid), (323, 387));
        assert_eq!(l.output_samples, 1_323_000);
    }

    #[test]
    fn tiny_fixture_lengths() {
        let g = Geometry {
            sample_rate: 44100,
            downsampling_ratio: 256,
            latent_align: 2,
            max_samples: 5_292_032,
        };
        let l = g.lengths(0.1, 0.1);
        assert_eq!(
            (l.samples, l.latents, l.effective, l.valid, l.output_samples),
            (9216, 36, 18, 35, 4410)
        );
        let m = g.inpaint_mask_samples(&l, &[(0.02, 0.04), (0.06, 0.08)]);
        assert_eq!(m[881], 1.0);
        assert_eq!(m[882], 0.0);
        assert_eq!(m[1763], 0.0);
        assert_eq!(m[1764], 1.0);
        assert_eq!(m[4409], 1.0);
        assert_eq!(m[4410], 0.0);
        let lat = g.mask_to_latents(&m, 36);
        assert_eq!(lat[3], 1.0);
        assert_eq!(lat[4], 0.0);
    }
}
