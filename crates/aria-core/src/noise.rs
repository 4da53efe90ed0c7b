//! Where the Gaussian draws of a generation come from: one [`NoiseSource`] trait that the
//! sampler (initial noise, one draw per step) and the autoencoder (encoder and decoder
//! new-token noise, bottleneck noise) all draw from, in call order.
//!
//! - [`TorchNoise`]: PyTorch's CPU stream ([`TorchGenerator`]): a seed gives the draws
//!   `torch.manual_seed(seed)` followed by `torch.randn` calls gives, bit for bit.
//! - [`SeededNoise`]: aria's own portable generator ([`Rng`]).
//! - [`ReplayNoise`]: stored draws in order (in memory, or `draw_00`, `draw_01`, … of a
//!   safetensors file — the naming of the reference fixtures).
//! - [`RecordingNoise`]: forwards to another source and keeps a copy of each draw, to save it
//!   for [`ReplayNoise`].
//!
//! ```
//! use aria_core::noise::{NoiseSource, TorchNoise};
//! # fn main() -> aria_core::Result<()> {
//! // torch.manual_seed(123); torch.randn(1, 16, 36)
//! let x = TorchNoise::new(123).draw(&[1, 16, 36], "initial noise")?;
//! assert_eq!(x.shape(), &[1, 16, 36]);
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use crate::rng::{RandnKernel, Rng, TorchGenerator};
use crate::{CoreError, DType, Result, Tensor, WeightLoader};

/// A source of standard-normal f32 tensors, consumed in call order.
pub trait NoiseSource {
    /// The next draw, of shape `shape`. `what` says what it is for (used in error messages and
    /// by [`RecordingNoise`]).
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor>;
}

impl<N: NoiseSource + ?Sized> NoiseSource for &mut N {
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor> {
        (**self).draw(shape, what)
    }
}

impl<N: NoiseSource + ?Sized> NoiseSource for Box<N> {
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor> {
        (**self).draw(shape, what)
    }
}

/// The draws of `torch.manual_seed(seed)` followed by one `torch.randn(shape)` per request
/// (float32, contiguous; see [`crate::rng::torch`] for the exact sampling rules).
#[derive(Debug, Clone)]
pub struct TorchNoise {
    g: TorchGenerator,
}

impl TorchNoise {
    /// The stream of `torch.manual_seed(seed)` on an AVX2 machine ([`RandnKernel::Avx2`], the
    /// kernel of the reference recordings).
    pub fn new(seed: u64) -> Self {
        TorchNoise {
            g: TorchGenerator::manual_seed(seed),
        }
    }

    /// The same stream with another of torch's float32 `randn` kernels.
    pub fn with_kernel(seed: u64, kernel: RandnKernel) -> Self {
        TorchNoise {
            g: TorchGenerator::manual_seed(seed).with_kernel(kernel),
        }
    }

    /// The generator, e.g. to draw other kinds of numbers from the same stream.
    pub fn generator(&mut self) -> &mut TorchGenerator {
        &mut self.g
    }
}

impl NoiseSource for TorchNoise {
    fn draw(&mut self, shape: &[usize], _what: &str) -> Result<Tensor> {
        let mut v = vec![0f32; shape.iter().product()];
        self.g.randn_f32(&mut v);
        Tensor::from_vec(v, shape)
    }
}

/// Standard-normal draws from aria's own portable generator ([`Rng`]): the same numbers for a
/// seed on every platform, but not those of torch.
#[derive(Debug, Clone)]
pub struct SeededNoise {
    rng: Rng,
}

impl SeededNoise {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededNoise {
            rng: Rng::new(seed),
        }
    }

    /// One standard-normal value from the stream.
    pub fn sample(&mut self) -> f32 {
        self.rng.normal()
    }
}

impl NoiseSource for SeededNoise {
    fn draw(&mut self, shape: &[usize], _what: &str) -> Result<Tensor> {
        let mut v = vec![0f32; shape.iter().product()];
        self.rng.fill_normal(&mut v);
        Tensor::from_vec(v, shape)
    }
}

/// Replays stored draws in order (as f32); a draw of another shape than requested, or running
/// out, is an error naming the draw.
#[derive(Debug, Clone)]
pub struct ReplayNoise {
    origin: String,
    draws: VecDeque<Tensor>,
    used: usize,
}

impl ReplayNoise {
    /// Replay `draws`, first one first.
    pub fn new(draws: Vec<Tensor>) -> Self {
        ReplayNoise {
            origin: "replayed draws".into(),
            draws: draws.into(),
            used: 0,
        }
    }

    /// Open `path` and replay its tensors named `<prefix>draw_NN` (prefix e.g. `""` or
    /// `"in.a2a."`) in numeric order. Errors if there are none or if the numbering has gaps.
    pub fn open(path: &Path, prefix: &str) -> Result<Self> {
        let err = |reason: String| CoreError::Noise {
            origin: path.display().to_string(),
            reason,
        };
        let loader = WeightLoader::open(&[path])?;
        let mut found: Vec<(usize, String)> = loader
            .names()
            .into_iter()
            .filter_map(|n| {
                let idx = n
                    .strip_prefix(prefix)?
                    .strip_prefix("draw_")?
                    .parse::<usize>()
                    .ok()?;
                Some((idx, n))
            })
            .collect();
        found.sort();
        if found.is_empty() {
            return Err(err(format!("no tensors named `{prefix}draw_NN`")));
        }
        let mut draws = VecDeque::with_capacity(found.len());
        for (i, (idx, name)) in found.iter().enumerate() {
            if *idx != i {
                return Err(err(format!("draw {i} is missing")));
            }
            draws.push_back(loader.get_any(name)?);
        }
        Ok(ReplayNoise {
            origin: path.display().to_string(),
            draws,
            used: 0,
        })
    }

    /// Draws not consumed yet.
    pub fn remaining(&self) -> usize {
        self.draws.len()
    }
}

impl NoiseSource for ReplayNoise {
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor> {
        let i = self.used;
        let err = |reason: String| CoreError::Noise {
            origin: self.origin.clone(),
            reason,
        };
        let Some(t) = self.draws.front() else {
            return Err(err(format!(
                "only {i} draws stored, the run needs draw {i} ({what}, shape {shape:?})"
            )));
        };
        if t.shape() != shape {
            return Err(err(format!(
                "draw {i} ({what}) has shape {:?}, the run needs {shape:?}",
                t.shape()
            )));
        }
        let t = t.to_dtype(DType::F32)?;
        self.draws.pop_front();
        self.used += 1;
        Ok(t)
    }
}

/// Forwards to another source and keeps a copy of every draw with what it was for.
pub struct RecordingNoise<'a> {
    inner: &'a mut dyn NoiseSource,
    draws: Vec<(String, Tensor)>,
}

impl std::fmt::Debug for RecordingNoise<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingNoise")
            .field("draws", &self.draws.len())
            .finish_non_exhaustive()
    }
}

impl<'a> RecordingNoise<'a> {
    /// Record what `inner` hands out.
    pub fn new(inner: &'a mut dyn NoiseSource) -> Self {
        RecordingNoise {
            inner,
            draws: Vec::new(),
        }
    }

    /// The draws so far with what each was for.
    pub fn draws(&self) -> &[(String, Tensor)] {
        &self.draws
    }

    /// Save the draws as `draw_00`, `draw_01`, … (the file [`ReplayNoise::open`] reads), with
    /// the purpose of each draw in the metadata.
    pub fn save(&self, path: &Path) -> Result<()> {
        let names: Vec<String> = (0..self.draws.len())
            .map(|i| format!("draw_{i:02}"))
            .collect();
        let list: Vec<(&str, &Tensor)> = names
            .iter()
            .zip(&self.draws)
            .map(|(n, (_, t))| (n.as_str(), t))
            .collect();
        let meta: HashMap<String, String> = names
            .iter()
            .zip(&self.draws)
            .map(|(n, (w, _))| (n.clone(), w.clone()))
            .collect();
        crate::save_safetensors(path, &list, Some(&meta))
    }
}

impl NoiseSource for RecordingNoise<'_> {
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor> {
        let t = self.inner.draw(shape, what)?;
        self.draws.push((what.to_string(), t.clone()));
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn record_then_replay_gives_the_same_draws_and_checks_shapes() {
        let mut seeded = SeededNoise::new(3);
        let mut rec = RecordingNoise::new(&mut seeded);
        let a = rec.draw(&[2, 3], "initial").unwrap();
        let b = rec.draw(&[4], "step 0").unwrap();
        let path = std::env::temp_dir().join(format!(
            "aria-noise-test-{}.safetensors",
            std::process::id()
        ));
        rec.save(&path).unwrap();
        let mut rep = ReplayNoise::open(&path, "").unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(rep.remaining(), 2);
        assert_eq!(
            rep.draw(&[2, 3], "x").unwrap().to_vec_f32().unwrap(),
            a.to_vec_f32().unwrap()
        );
        let err = rep.draw(&[5], "step 0").unwrap_err().to_string();
        assert!(err.contains("draw 1") && err.contains("[4]"), "{err}");
        assert_eq!(
            rep.draw(&[4], "x").unwrap().to_vec_f32().unwrap(),
            b.to_vec_f32().unwrap()
        );
        let err = rep.draw(&[4], "step 1").unwrap_err().to_string();
        assert!(
            err.contains("only 2 draws") && err.contains("step 1"),
            "{err}"
        );
    }

    #[test]
    fn seeded_sources_are_reproducible_and_differ_by_seed() {
        for make in [
            |s| Box::new(SeededNoise::new(s)) as Box<dyn NoiseSource>,
            |s| Box::new(TorchNoise::new(s)) as Box<dyn NoiseSource>,
        ] {
            let a = make(7).draw(&[4096], "a").unwrap().to_vec_f32().unwrap();
            let b = make(7).draw(&[4096], "a").unwrap().to_vec_f32().unwrap();
            let c = make(8).draw(&[4096], "a").unwrap().to_vec_f32().unwrap();
            assert_eq!(a, b);
            assert_ne!(a, c);
            let mean = a.iter().sum::<f32>() / a.len() as f32;
            let var = a.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / a.len() as f32;
            assert!(
                mean.abs() < 0.06 && (var - 1.0).abs() < 0.08,
                "mean {mean} var {var}"
            );
        }
    }
}
