//! Noise sources: the sampler asks for one Gaussian tensor for the initial state and one per step
//! (in that order, as the reference draws them). [`GaussianNoise`] is the seeded generator for
//! normal use; [`ReplayNoise`] yields stored draws (e.g. recorded from the reference) in order.
//!
//! The generator is portable and documented so that a seed gives the same noise on every
//! platform: SplitMix64 ([`aria_core::rng::SplitMix64`]: Steele, Lea, Flood 2014; constants
//! `0x9E3779B97F4A7C15`, `0xBF58476D1CE4E5B9`, `0x94D049BB133111EB`; state starting at the seed)
//! drives a Box–Muller transform in f64 ([`aria_core::rng::box_muller`];
//! `u₁ = 1 − (x₁ >> 11)·2⁻⁵³`, `u₂ = (x₂ >> 11)·2⁻⁵³`, `r = sqrt(−2 ln u₁)`, outputs
//! `r·cos(2πu₂)` then `r·sin(2πu₂)`), each rounded to f32.

use std::collections::VecDeque;

use aria_core::rng::{box_muller, SplitMix64};
use aria_core::Tensor;

use crate::{DitError, Result};

/// Yields the Gaussian draws of a generation, in call order.
pub trait NoiseSource {
    /// The next draw, of `shape`.
    fn next(&mut self, shape: &[usize]) -> Result<Tensor>;
}

/// Seeded standard-normal generator (SplitMix64 + Box–Muller, see the module docs).
#[derive(Debug, Clone)]
pub struct GaussianNoise {
    rng: SplitMix64,
    spare: Option<f32>,
}

impl GaussianNoise {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        GaussianNoise {
            rng: SplitMix64::new(seed),
            spare: None,
        }
    }

    /// One standard-normal value.
    pub fn sample(&mut self) -> f32 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        let scale = 1.0 / (1u64 << 53) as f64;
        let u1 = 1.0 - (self.rng.next_u64() >> 11) as f64 * scale;
        let u2 = (self.rng.next_u64() >> 11) as f64 * scale;
        let (c, s) = box_muller(u1, u2);
        self.spare = Some(s);
        c
    }
}

impl NoiseSource for GaussianNoise {
    fn next(&mut self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.sample()).collect();
        Ok(Tensor::from_vec(v, shape)?)
    }
}

/// Replays stored draws in order; a draw of the wrong shape or running out is an error.
#[derive(Debug, Clone, Default)]
pub struct ReplayNoise {
    draws: VecDeque<Tensor>,
    used: usize,
}

impl ReplayNoise {
    /// Replay `draws` in order.
    pub fn new(draws: Vec<Tensor>) -> Self {
        ReplayNoise {
            draws: draws.into(),
            used: 0,
        }
    }

    /// Draws not yet used.
    pub fn remaining(&self) -> usize {
        self.draws.len()
    }
}

impl NoiseSource for ReplayNoise {
    fn next(&mut self, shape: &[usize]) -> Result<Tensor> {
        let what = || format!("replayed noise draw {}", self.used);
        let t = self.draws.pop_front().ok_or_else(|| DitError::Input {
            what: what(),
            reason: "no draws left".into(),
        })?;
        if t.shape() != shape {
            return Err(DitError::Input {
                what: what(),
                reason: format!("shape {:?}, requested {shape:?}", t.shape()),
            });
        }
        self.used += 1;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_noise_is_reproducible_and_normal() {
        let a = GaussianNoise::new(7)
            .next(&[4096])
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let b = GaussianNoise::new(7)
            .next(&[4096])
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let c = GaussianNoise::new(8)
            .next(&[4096])
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        let var = a.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / a.len() as f32;
        assert!(
            mean.abs() < 0.06 && (var - 1.0).abs() < 0.08,
            "mean {mean} var {var}"
        );
        // The first values of seed 0 are pinned so that the stream cannot change silently.
        let mut g = GaussianNoise::new(0);
        let first: Vec<u32> = (0..4).map(|_| g.sample().to_bits()).collect();
        assert_eq!(first, [0xbff123e9, 0x3f5d5052, 0x3e69120e, 0xbd2c7e5a]);
    }

    #[test]
    fn replay_checks_shapes() {
        let mut r = ReplayNoise::new(vec![Tensor::zeros(&[1, 2], aria_core::DType::F32)]);
        assert!(r.next(&[2, 1]).is_err());
        let mut r = ReplayNoise::new(vec![Tensor::zeros(&[1, 2], aria_core::DType::F32)]);
        assert!(r.next(&[1, 2]).is_ok());
        assert!(r.next(&[1, 2]).is_err());
    }
}
