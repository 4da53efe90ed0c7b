//! Sources of the Gaussian noise that the reference SAME adds at inference (bottleneck noise
//! regularisation, decoder new-token noise).
//!
//! The reference draws with `torch.randn_like` from a global generator; aria takes the draws from
//! a [`NoiseSource`], so a test can replay stored draws ([`StoredNoise`]) and a program can use a
//! seeded generator ([`GaussianNoise`]).

use std::collections::VecDeque;

use aria_core::rng::{box_muller, Xoshiro256pp};
use aria_core::Tensor;

use crate::error::{CodecError, Result};

/// Yields standard-normal tensors in call order.
pub trait NoiseSource {
    /// A tensor of the given shape filled with independent `N(0, 1)` samples (f32).
    fn normal(&mut self, shape: &[usize]) -> Result<Tensor>;
}

/// Replays a fixed list of draws, in order; each must have the requested shape.
#[derive(Debug, Default)]
pub struct StoredNoise {
    draws: VecDeque<Tensor>,
}

impl StoredNoise {
    /// Draws to replay, first one first.
    pub fn new(draws: Vec<Tensor>) -> Self {
        StoredNoise {
            draws: draws.into(),
        }
    }

    /// Draws not consumed yet.
    pub fn remaining(&self) -> usize {
        self.draws.len()
    }
}

impl NoiseSource for StoredNoise {
    fn normal(&mut self, shape: &[usize]) -> Result<Tensor> {
        let t = self.draws.pop_front().ok_or_else(|| {
            CodecError::Invalid(format!("stored noise exhausted (asked for {shape:?})"))
        })?;
        if t.shape() != shape {
            return Err(CodecError::Invalid(format!(
                "stored noise draw has shape {:?}, the model asked for {shape:?}",
                t.shape()
            )));
        }
        Ok(t.to_dtype(aria_core::DType::F32)?)
    }
}

/// A seeded Gaussian generator ([xoshiro256++](aria_core::rng::Xoshiro256pp) with the
/// Box–Muller transform, `u1 = ((x₁ >> 11) + 1)·2⁻⁵³`, `u2 = (x₂ >> 11)·2⁻⁵³`). Not the PyTorch
/// stream: the same seed gives the same numbers in aria on every platform, not those of torch.
#[derive(Debug, Clone)]
pub struct GaussianNoise {
    rng: Xoshiro256pp,
    spare: Option<f32>,
}

impl GaussianNoise {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        GaussianNoise {
            rng: Xoshiro256pp::new(seed),
            spare: None,
        }
    }

    /// One `N(0, 1)` sample.
    pub fn sample(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        // u1 in (0, 1], u2 in [0, 1)
        let u1 = ((self.rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let (c, s) = box_muller(u1, u2);
        self.spare = Some(s);
        c
    }
}

impl NoiseSource for GaussianNoise {
    fn normal(&mut self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.sample()).collect();
        Ok(Tensor::from_vec(v, shape)?)
    }
}

impl<N: NoiseSource + ?Sized> NoiseSource for &mut N {
    fn normal(&mut self, shape: &[usize]) -> Result<Tensor> {
        (**self).normal(shape)
    }
}

/// How one decode obtains its noise: not at all, in call order from a [`NoiseSource`], or keyed
/// by absolute latent position (so that any window of a sequence sees the same numbers).
pub(crate) enum Draw<'a> {
    Off,
    Seq(&'a mut dyn NoiseSource),
    Keyed(u64),
}

impl<'a> Draw<'a> {
    pub(crate) fn from_opt(n: Option<&'a mut dyn NoiseSource>) -> Self {
        match n {
            Some(s) => Draw::Seq(s),
            None => Draw::Off,
        }
    }

    /// Noise for `rows` consecutive positions starting at absolute position `pos0` in each of
    /// `batch` items, `per` values per position, laid out `[batch, rows, per]`; in sequential
    /// mode one draw of shape `seq_shape` (whose element count must match).
    pub(crate) fn rows(
        &mut self,
        stream: u64,
        batch: usize,
        pos0: usize,
        rows: usize,
        per: usize,
        seq_shape: &[usize],
    ) -> Result<Option<Vec<f32>>> {
        match self {
            Draw::Off => Ok(None),
            Draw::Seq(src) => Ok(Some(src.normal(seq_shape)?.to_vec_f32()?)),
            Draw::Keyed(seed) => {
                let mut out = Vec::with_capacity(batch * rows * per);
                for b in 0..batch {
                    for r in 0..rows {
                        let key = mix(mix(mix(*seed, stream), b as u64), (pos0 + r) as u64);
                        let mut g = GaussianNoise::new(key);
                        out.extend((0..per).map(|_| g.sample()));
                    }
                }
                Ok(Some(out))
            }
        }
    }

    /// Reborrow for one call.
    pub(crate) fn reborrow(&mut self) -> Draw<'_> {
        match self {
            Draw::Off => Draw::Off,
            Draw::Seq(s) => Draw::Seq(&mut **s),
            Draw::Keyed(k) => Draw::Keyed(*k),
        }
    }
}

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(a << 6)
        .wrapping_add(a >> 2);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_stream_is_pinned() {
        let mut g = GaussianNoise::new(7);
        let first: Vec<u32> = (0..4).map(|_| g.sample().to_bits()).collect();
        assert_eq!(first, [0x3f90c02f, 0x4007e629, 0xbf3b2155, 0x3eb831f8]);
    }
}
