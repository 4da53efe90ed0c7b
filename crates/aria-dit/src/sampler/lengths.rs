//! Sequence-length bookkeeping of `generate()` (spec §1 step 2, §4.6, §7): the latent length `T`
//! for the requested durations, the effective length `L_eff` used by the schedule, and the
//! attention padding mask (`L_eff` plus headroom).

use aria_core::Tensor;

use crate::Result;

/// The constants `generate()` uses; [`Default`] gives the released-model values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthParams {
    /// Audio sample rate (44100).
    pub sample_rate: u32,
    /// Audio samples per latent frame (4096 for the released autoencoders).
    pub downsampling_ratio: usize,
    /// Latent alignment: `chunk_size / stride` of the encoder (32 / 16 = 2).
    pub latent_align: usize,
    /// Cap on the number of audio samples (`generate()`'s keyword default 5,292,032).
    pub max_samples: usize,
    /// Padding added to the longest duration before sizing (`duration_padding_sec`, 6.0).
    pub duration_padding_sec: f64,
    /// Extra valid latents after each item's duration (`headroom_seconds`, 6.0).
    pub headroom_seconds: f64,
}

impl Default for LengthParams {
    fn default() -> Self {
        LengthParams {
            sample_rate: 44100,
            downsampling_ratio: 4096,
            latent_align: 2,
            max_samples: 5_292_032,
            duration_padding_sec: 6.0,
            headroom_seconds: 6.0,
        }
    }
}

impl LengthParams {
    /// Number of audio samples `generate()` produces for a batch whose longest duration is
    /// `max_seconds` (`_adapt_sample_size`): `int((S + padding)·sr)` rounded up to the
    /// downsampling ratio, then to `ratio·latent_align`, capped at `max_samples`; `S ≤ 0` gives
    /// the cap.
    pub fn adapted_samples(&self, max_seconds: f64) -> usize {
        if max_seconds <= 0.0 {
            return self.max_samples;
        }
        let n = ((max_seconds + self.duration_padding_sec) * self.sample_rate as f64) as i64;
        let n = n.max(0) as usize;
        let r = self.downsampling_ratio.max(1);
        let n = n.div_ceil(r) * r;
        let align = r * self.latent_align.max(1);
        let n = n.div_ceil(align) * align;
        n.min(self.max_samples)
    }

    /// Latent length `T` for the given per-item durations.
    pub fn latent_len(&self, seconds: &[f64]) -> usize {
        let s = seconds.iter().copied().fold(0.0f64, f64::max);
        self.adapted_samples(s) / self.downsampling_ratio.max(1)
    }

    /// `L_eff = ceil(int(seconds·sr) / ratio)` (negative for negative durations).
    pub fn effective_len(&self, seconds: f64) -> i64 {
        let samples = (seconds * self.sample_rate as f64) as i64;
        (samples as f64 / self.downsampling_ratio.max(1) as f64).ceil() as i64
    }

    /// `int(headroom·sr / ratio)` latents.
    pub fn headroom_latents(&self) -> i64 {
        (self.headroom_seconds * self.sample_rate as f64 / self.downsampling_ratio.max(1) as f64)
            as i64
    }

    /// `L_valid = min(L_eff + headroom, T)` (≤ 0: every position padded).
    pub fn valid_len(&self, seconds: f64, t: usize) -> i64 {
        (self.effective_len(seconds) + self.headroom_latents()).min(t as i64)
    }

    /// Schedule sequence lengths per item: `max(L_eff, 1)`.
    pub fn schedule_lens(&self, seconds: &[f64]) -> Vec<f32> {
        seconds
            .iter()
            .map(|&s| self.effective_len(s).max(1) as f32)
            .collect()
    }

    /// The attention padding mask `[B, T]` (u8, 1 = valid) for the given durations.
    pub fn padding_mask(&self, seconds: &[f64], t: usize) -> Result<Tensor> {
        let valid: Vec<i64> = seconds.iter().map(|&s| self.valid_len(s, t)).collect();
        padding_mask_from_lengths(&valid, t)
    }
}

/// `[B, T]` u8 mask with `mask[b, i] = i < valid[b]`.
pub fn padding_mask_from_lengths(valid: &[i64], t: usize) -> Result<Tensor> {
    let mut m = vec![0u8; valid.len() * t];
    for (row, &v) in m.chunks_mut(t.max(1)).zip(valid) {
        let k = v.clamp(0, t as i64) as usize;
        row[..k].iter_mut().for_each(|x| *x = 1);
    }
    Ok(Tensor::from_vec(m, &[valid.len(), t])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_model_examples() {
        let p = LengthParams::default();
        // Spec §1: 5 s → 120, 10 s → 174, 30 s → 388, 120 s → 1292.
        assert_eq!(p.latent_len(&[5.0]), 120);
        assert_eq!(p.latent_len(&[10.0]), 174);
        assert_eq!(p.latent_len(&[30.0]), 388);
        assert_eq!(p.latent_len(&[120.0]), 1292);
        // Spec §4.6: 30 s → L_eff 323, L_valid 387.
        assert_eq!(p.effective_len(30.0), 323);
        assert_eq!(p.valid_len(30.0, 388), 387);
        assert_eq!(p.headroom_latents(), 64);
        let m = p.padding_mask(&[30.0], 388).unwrap().to_vec_f32().unwrap();
        assert_eq!(m.iter().filter(|&&v| v == 1.0).count(), 387);
    }
}
