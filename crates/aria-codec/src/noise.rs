//! Where the Gaussian noise that the reference SAME adds at inference (bottleneck noise
//! regularisation, encoder and decoder new-token noise) comes from.
//!
//! The reference draws with `torch.randn_like` from the global generator; aria takes the draws
//! from an [`aria_core::noise::NoiseSource`] (the trait the sampler uses too), so a test can
//! replay stored draws ([`ReplayNoise`]), and a program can use torch's stream
//! ([`TorchNoise`]) or aria's own portable one ([`SeededNoise`]).

use aria_core::rng::Rng;

use crate::error::Result;

pub use aria_core::noise::{NoiseSource, ReplayNoise, SeededNoise, TorchNoise};

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
            Draw::Seq(src) => {
                let what = match stream {
                    0 => "bottleneck noise",
                    _ => "new-token noise",
                };
                Ok(Some(src.draw(seq_shape, what)?.to_vec_f32()?))
            }
            Draw::Keyed(seed) => {
                let mut out = Vec::with_capacity(batch * rows * per);
                for b in 0..batch {
                    for r in 0..rows {
                        let key = mix(mix(mix(*seed, stream), b as u64), (pos0 + r) as u64);
                        let mut g = Rng::new(key);
                        out.extend((0..per).map(|_| g.normal()));
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keyed_rows_depend_only_on_the_absolute_position() {
        let whole = Draw::Keyed(9).rows(1, 1, 0, 6, 4, &[]).unwrap().unwrap();
        let part = Draw::Keyed(9).rows(1, 1, 2, 3, 4, &[]).unwrap().unwrap();
        assert_eq!(&whole[8..20], &part[..]);
        let other = Draw::Keyed(9).rows(0, 1, 2, 3, 4, &[]).unwrap().unwrap();
        assert_ne!(part, other);
    }

    #[test]
    fn sequential_rows_name_the_draw() {
        let mut src = ReplayNoise::new(Vec::new());
        let mut d = Draw::Seq(&mut src);
        let e = d.rows(0, 1, 0, 2, 2, &[1, 2, 2]).unwrap_err().to_string();
        assert!(e.contains("bottleneck noise"), "{e}");
    }
}
