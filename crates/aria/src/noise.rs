//! Sources of the Gaussian draws a generation makes, in call order: the initial noise, one draw
//! per sampler step, then the autoencoder's draws (bottleneck noise, decoder new-token noise;
//! encoder new-token noise comes right after the initial noise when audio is encoded).
//!
//! The trait and the sources are those of [`aria_core::noise`], which the sampler and the
//! autoencoder draw from directly:
//! - [`TorchNoise`]: a seed gives the draws of the official `generate(seed=…)`
//!   (`torch.manual_seed(seed)` followed by its `torch.randn` calls), bit for bit;
//! - [`SeededNoise`]: aria's own portable generator (the same numbers on every platform, not
//!   those of torch);
//! - [`ReplayNoise`]: the draws stored in a safetensors file (`draw_00`, `draw_01`, … — the
//!   naming of the reference fixtures), or given in memory;
//! - [`RecordingNoise`]: records what another source hands out so it can be saved and
//!   replayed.
//!
//! [`SeedGenerator`] names the two seeded generators (e.g. for a command-line flag).
//! [`BatchNoise`] gives every item of a batch its own source, so that item `i` of
//! [`Pipeline::generate_batch`](crate::Pipeline::generate_batch) draws exactly what the same
//! request draws alone.

use aria_core::Tensor;

pub use aria_core::noise::{NoiseSource, RecordingNoise, ReplayNoise, SeededNoise, TorchNoise};

/// Noise for a batch where every item has its own source (its own seed).
///
/// Every draw a batched generation makes is laid out item-major: its first dimension is the
/// batch (`[B, C, T]` for the initial and sampler-step noise and the bottleneck noise) or a
/// multiple of it (`[B·cells, seg, D]` for the decoder's new-token noise). A draw of leading
/// dimension `B·k` is made as `B` draws of leading dimension `k`, item `i` from source `i`, and
/// concatenated; each source thus hands out, in the same order and with the same shapes, the
/// draws of that item's request run alone. A draw whose leading dimension is not a multiple of
/// the batch is refused (it could not be attributed to the items).
pub struct BatchNoise {
    items: Vec<Box<dyn NoiseSource>>,
}

impl std::fmt::Debug for BatchNoise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchNoise")
            .field("items", &self.items.len())
            .finish()
    }
}

impl BatchNoise {
    /// One source per item, in batch order.
    pub fn new(items: Vec<Box<dyn NoiseSource>>) -> Self {
        BatchNoise { items }
    }

    /// One source of `generator` per seed, in batch order.
    pub fn seeded(generator: SeedGenerator, seeds: &[u64]) -> Self {
        BatchNoise::new(seeds.iter().map(|&s| generator.source(s)).collect())
    }

    /// How many items it serves.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it serves no item (every draw is then refused).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl NoiseSource for BatchNoise {
    fn draw(&mut self, shape: &[usize], what: &str) -> aria_core::Result<Tensor> {
        let b = self.items.len();
        let lead = shape.first().copied().unwrap_or(0);
        if b == 0 || lead == 0 || lead % b != 0 {
            return Err(aria_core::CoreError::Noise {
                origin: format!("per-item sources of a batch of {b}"),
                reason: format!(
                    "{what}: a draw of shape {shape:?} cannot be split over the items \
                     (its first dimension must be a positive multiple of the batch)"
                ),
            });
        }
        if b == 1 {
            return self.items[0].draw(shape, what);
        }
        let mut one = shape.to_vec();
        one[0] = lead / b;
        let parts: Vec<Tensor> = self
            .items
            .iter_mut()
            .map(|n| n.draw(&one, what))
            .collect::<aria_core::Result<_>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, 0)
    }
}

/// Which generator a seed drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeedGenerator {
    /// PyTorch's CPU stream ([`TorchNoise`]): reproduces the official `generate(seed=…)`.
    #[default]
    Torch,
    /// aria's own portable generator ([`SeededNoise`]).
    Aria,
}

impl SeedGenerator {
    /// A noise source for `seed`.
    pub fn source(self, seed: u64) -> Box<dyn NoiseSource> {
        match self {
            SeedGenerator::Torch => Box::new(TorchNoise::new(seed)),
            SeedGenerator::Aria => Box::new(SeededNoise::new(seed)),
        }
    }

    /// The generator's name as [`FromStr`](std::str::FromStr) reads it (`torch`, `aria`).
    pub fn name(self) -> &'static str {
        match self {
            SeedGenerator::Torch => "torch",
            SeedGenerator::Aria => "aria",
        }
    }
}

impl std::fmt::Display for SeedGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SeedGenerator {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "torch" => Ok(SeedGenerator::Torch),
            "aria" => Ok(SeedGenerator::Aria),
            _ => Err(format!("unknown generator `{s}` (expected torch or aria)")),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn generators_parse_and_give_their_streams() {
        for g in [SeedGenerator::Torch, SeedGenerator::Aria] {
            assert_eq!(g.name().parse::<SeedGenerator>().unwrap(), g);
        }
        assert!("numpy".parse::<SeedGenerator>().is_err());
        let a = SeedGenerator::Torch.source(5).draw(&[32], "x").unwrap();
        let b = TorchNoise::new(5).draw(&[32], "x").unwrap();
        assert_eq!(a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
        let c = SeedGenerator::Aria.source(5).draw(&[32], "x").unwrap();
        assert_ne!(a.to_vec_f32().unwrap(), c.to_vec_f32().unwrap());
    }

    #[test]
    fn batch_noise_gives_each_item_its_own_stream() {
        let mut bn = BatchNoise::seeded(SeedGenerator::Torch, &[7, 9]);
        // [2·3, 4]: item-major, three rows per item.
        let d = bn.draw(&[6, 4], "x").unwrap().to_vec_f32().unwrap();
        let d2 = bn.draw(&[2, 5], "y").unwrap().to_vec_f32().unwrap();
        for (i, seed) in [7u64, 9].into_iter().enumerate() {
            let mut alone = TorchNoise::new(seed);
            let a = alone.draw(&[3, 4], "x").unwrap().to_vec_f32().unwrap();
            let a2 = alone.draw(&[1, 5], "y").unwrap().to_vec_f32().unwrap();
            assert_eq!(&d[i * 12..(i + 1) * 12], a.as_slice());
            assert_eq!(&d2[i * 5..(i + 1) * 5], a2.as_slice());
        }
        let e = bn.draw(&[3, 4], "odd").unwrap_err().to_string();
        assert!(e.contains("odd") && e.contains("batch of 2"), "{e}");
    }
}
