//! The gater's context ([`Context`]) and its feature vector ([`Featurizer`]).
//!
//! `x = [hat_s(s_pos) ⊗ hat_r(|ln ρ|), ln ρ, s_neg, q, ln T / ln 50, R·e_prompt]` where
//! `hat_s` is a piecewise-linear ("hat") basis over the similarity at knots
//! [`SIMILARITY_KNOTS`], `hat_r` one over `|ln ρ|` (ρ = `d_i / L`, the duration ratio) at
//! [`RATIO_KNOTS`], `⊗` their outer product (bilinear interpolation on the grid: its values sum
//! to 1, so it holds the bias), `T` the total steps, and `R` a fixed Gaussian projection
//! (seeded, scaled by `1/√P`) of the prompt embedding onto `P` dimensions. The grid lets a
//! model linear in `x` follow a skip optimum that depends jointly on the similarity and the
//! stretch.

use crate::{CacheError, Result};

use super::rng::Rng;

/// Knots of the hat basis over the candidate's similarity `s_pos` (clamped to their range).
pub const SIMILARITY_KNOTS: [f64; 7] = [0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 1.0];
/// Knots of the hat basis over `|ln ρ|`, ρ = `d_i / L` (0.69 ≈ ln 2, the duration gate's edge).
pub const RATIO_KNOTS: [f64; 4] = [0.0, 0.2, 0.4, 0.7];
/// Features besides the projected prompt: the grid, `ln ρ`, `s_neg`, `q`, `ln T`.
pub const FIXED_FEATURES: usize = SIMILARITY_KNOTS.len() * RATIO_KNOTS.len() + 4;

/// What the gater sees of one request with a chosen reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// The prompt's embedding `e_prompt` (the embedder's dimension).
    pub prompt: Vec<f32>,
    /// The reference's similarity to the prompt, `s_pos`.
    pub s_pos: f32,
    /// The reference's similarity to the negative prompt, `s_neg`.
    pub s_neg: f32,
    /// The selector's gated quality `q_i` of the reference (eq. 2).
    pub q: f32,
    /// `d_i / L`: the reference's duration over the requested one.
    pub duration_ratio: f64,
    /// Total sampler steps `T` of the request.
    pub steps: usize,
}

/// Values of a hat basis at `x` (clamped to the knots): at most two non-zero, summing to 1.
fn hats(x: f64, knots: &[f64], out: &mut Vec<f64>) {
    let n = knots.len();
    let start = out.len();
    out.resize(start + n, 0.0);
    let x = x.clamp(knots[0], knots[n - 1]);
    for i in 0..n - 1 {
        if x <= knots[i + 1] {
            let t = (x - knots[i]) / (knots[i + 1] - knots[i]);
            out[start + i] = 1.0 - t;
            out[start + i + 1] = t;
            return;
        }
    }
    out[start + n - 1] = 1.0;
}

/// Maps a [`Context`] to the feature vector `x` (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Featurizer {
    embed_dim: usize,
    prompt_dims: usize,
    /// `prompt_dims × embed_dim`, row-major.
    proj: Vec<f32>,
}

impl Featurizer {
    /// A featurizer for embeddings of `embed_dim`, projecting them onto `prompt_dims`
    /// dimensions with a Gaussian matrix drawn from `seed`.
    pub fn new(embed_dim: usize, prompt_dims: usize, seed: u64) -> Result<Featurizer> {
        if embed_dim == 0 || embed_dim > super::MAX_EMBED_DIM {
            return Err(CacheError::Invalid {
                name: "gater embedding dimension".into(),
                reason: format!("must be in 1..={}, got {embed_dim}", super::MAX_EMBED_DIM),
            });
        }
        if prompt_dims > super::MAX_PROMPT_DIMS {
            return Err(CacheError::Invalid {
                name: "gater prompt_dims".into(),
                reason: format!(
                    "must be at most {}, got {prompt_dims}",
                    super::MAX_PROMPT_DIMS
                ),
            });
        }
        let mut rng = Rng::new(seed ^ 0x005E_ED0F_6A7E);
        let scale = 1.0 / (prompt_dims.max(1) as f64).sqrt();
        let proj = (0..prompt_dims * embed_dim)
            .map(|_| (rng.normal() * scale) as f32)
            .collect();
        Ok(Featurizer {
            embed_dim,
            prompt_dims,
            proj,
        })
    }

    /// The embedding dimension it expects.
    pub fn embed_dim(&self) -> usize {
        self.embed_dim
    }

    /// Length of the feature vector.
    pub fn len(&self) -> usize {
        FIXED_FEATURES + self.prompt_dims
    }

    /// Always false (there is at least the bias).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The feature vector of `c`; errors on a wrong embedding dimension, non-finite scores, a
    /// non-positive duration ratio or zero steps.
    pub fn features(&self, c: &Context) -> Result<Vec<f64>> {
        crate::index::check_dim("gater prompt embedding", self.embed_dim, c.prompt.len())?;
        let bad = |name: &str, reason: String| {
            Err(CacheError::Invalid {
                name: format!("gater context {name}"),
                reason,
            })
        };
        if !(c.s_pos.is_finite() && c.s_neg.is_finite() && c.q.is_finite()) {
            return bad(
                "scores",
                format!("s_pos {}, s_neg {}, q {}", c.s_pos, c.s_neg, c.q),
            );
        }
        if !(c.duration_ratio.is_finite() && c.duration_ratio > 0.0) {
            return bad(
                "duration ratio",
                format!("must be positive, got {}", c.duration_ratio),
            );
        }
        if c.steps == 0 {
            return bad("steps", "must be at least 1".into());
        }
        if c.prompt.iter().any(|v| !v.is_finite()) {
            return bad("prompt embedding", "holds a non-finite value".into());
        }
        let mut x = Vec::with_capacity(self.len());
        let (mut hs, mut hr) = (Vec::new(), Vec::new());
        hats(f64::from(c.s_pos), &SIMILARITY_KNOTS, &mut hs);
        let lr = c.duration_ratio.ln();
        hats(lr.abs(), &RATIO_KNOTS, &mut hr);
        for a in &hs {
            x.extend(hr.iter().map(|b| a * b));
        }
        x.push(lr);
        x.push(f64::from(c.s_neg));
        x.push(f64::from(c.q));
        x.push((c.steps as f64).ln() / 50f64.ln());
        for row in self.proj.chunks_exact(self.embed_dim) {
            let dot: f32 = row.iter().zip(&c.prompt).map(|(a, b)| a * b).sum();
            x.push(f64::from(dot));
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hats_interpolate_and_clamp() {
        let mut v = Vec::new();
        hats(0.5, &SIMILARITY_KNOTS, &mut v);
        assert!((v[1] - 0.5).abs() < 1e-12 && (v[2] - 0.5).abs() < 1e-12);
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        v.clear();
        hats(-3.0, &SIMILARITY_KNOTS, &mut v);
        assert_eq!(v[0], 1.0);
        v.clear();
        hats(7.0, &SIMILARITY_KNOTS, &mut v);
        assert_eq!(v[6], 1.0);
    }

    #[test]
    fn bad_contexts_are_errors() {
        let f = Featurizer::new(3, 2, 1).unwrap();
        let c = Context {
            prompt: vec![1.0, 0.0, 0.0],
            s_pos: 0.8,
            s_neg: 0.1,
            q: 1.0,
            duration_ratio: 1.0,
            steps: 8,
        };
        assert_eq!(f.features(&c).unwrap().len(), f.len());
        assert!(f
            .features(&Context {
                prompt: vec![1.0],
                ..c.clone()
            })
            .is_err());
        assert!(f
            .features(&Context {
                duration_ratio: 0.0,
                ..c.clone()
            })
            .is_err());
        assert!(f
            .features(&Context {
                s_pos: f32::NAN,
                ..c.clone()
            })
            .is_err());
        assert!(f.features(&Context { steps: 0, ..c }).is_err());
    }
}
