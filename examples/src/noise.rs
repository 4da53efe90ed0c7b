//! Sources of the Gaussian draws a generation makes, in call order: the initial noise, one draw
//! per sampler step, then the autoencoder's draws (bottleneck noise, decoder new-token noise;
//! encoder new-token noise comes right after the initial noise when audio is encoded).
//!
//! [`SeededNoise`] draws from a portable seeded generator; [`ReplayNoise`] replays the draws
//! stored in a safetensors file (`draw_00`, `draw_01`, … — the naming of the reference
//! fixtures), which is how results are reproduced across implementations; [`RecordingNoise`]
//! records what another source hands out so it can be saved and replayed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aria_core::{Tensor, WeightLoader};

use crate::rng::Rng;
use crate::{Error, Result};

/// A source of standard-normal tensors, consumed in call order.
pub trait NoiseSource {
    /// The next draw, of shape `shape`. `what` says what it is for (used in error messages).
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor>;
}

/// Standard-normal draws from a seeded, portable generator (see [`crate::rng`]).
#[derive(Debug, Clone)]
pub struct SeededNoise {
    rng: Rng,
}

impl SeededNoise {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> SeededNoise {
        SeededNoise {
            rng: Rng::new(seed),
        }
    }
}

impl NoiseSource for SeededNoise {
    fn draw(&mut self, shape: &[usize], _what: &str) -> Result<Tensor> {
        let mut v = vec![0f32; shape.iter().product()];
        self.rng.fill_normal(&mut v);
        Ok(Tensor::from_vec(v, shape)?)
    }
}

/// Replays the draws `<prefix>draw_00`, `<prefix>draw_01`, … of a safetensors file in order.
#[derive(Debug)]
pub struct ReplayNoise {
    path: PathBuf,
    draws: Vec<Tensor>,
    next: usize,
}

impl ReplayNoise {
    /// Open `path` and collect the tensors named `<prefix>draw_NN` (prefix e.g. `""` or
    /// `"in.a2a."`), in numeric order. Errors if there are none or if the numbering has gaps.
    pub fn open(path: &Path, prefix: &str) -> Result<ReplayNoise> {
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
            return Err(Error::Noise {
                path: path.to_path_buf(),
                reason: format!("no tensors named `{prefix}draw_NN`"),
            });
        }
        let mut draws = Vec::with_capacity(found.len());
        for (i, (idx, name)) in found.iter().enumerate() {
            if *idx != i {
                return Err(Error::Noise {
                    path: path.to_path_buf(),
                    reason: format!("draw {i} is missing"),
                });
            }
            draws.push(loader.get_any(name)?.to_dtype(aria_core::DType::F32)?);
        }
        Ok(ReplayNoise {
            path: path.to_path_buf(),
            draws,
            next: 0,
        })
    }

    /// Draws not consumed yet.
    pub fn remaining(&self) -> usize {
        self.draws.len() - self.next
    }
}

impl NoiseSource for ReplayNoise {
    fn draw(&mut self, shape: &[usize], what: &str) -> Result<Tensor> {
        let i = self.next;
        let t = self.draws.get(i).ok_or_else(|| Error::Noise {
            path: self.path.clone(),
            reason: format!(
                "only {} draws stored, the run needs draw {i} ({what}, shape {shape:?})",
                self.draws.len()
            ),
        })?;
        if t.shape() != shape {
            return Err(Error::Noise {
                path: self.path.clone(),
                reason: format!(
                    "draw {i} ({what}) has shape {:?}, the run needs {shape:?}",
                    t.shape()
                ),
            });
        }
        self.next += 1;
        Ok(t.clone())
    }
}

/// Forwards to another source and keeps a copy of every draw.
pub struct RecordingNoise<'a> {
    inner: &'a mut dyn NoiseSource,
    draws: Vec<(String, Tensor)>,
}

impl<'a> RecordingNoise<'a> {
    /// Record what `inner` hands out.
    pub fn new(inner: &'a mut dyn NoiseSource) -> RecordingNoise<'a> {
        RecordingNoise {
            inner,
            draws: Vec::new(),
        }
    }

    /// The draws so far with what each was for.
    pub fn draws(&self) -> &[(String, Tensor)] {
        &self.draws
    }

    /// Save the draws as `draw_00`, `draw_01`, … (the file [`ReplayNoise`] reads), with the
    /// purpose of each draw in the metadata.
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
        aria_core::save_safetensors(path, &list, Some(&meta))?;
        Ok(())
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
        assert!(rep.draw(&[4], "x").is_err());
        std::fs::remove_file(&path).ok();
    }
}
