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

pub use aria_core::noise::{NoiseSource, RecordingNoise, ReplayNoise, SeededNoise, TorchNoise};

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
}
