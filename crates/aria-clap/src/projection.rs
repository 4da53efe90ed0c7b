//! The projection heads into the shared space (`linear2(relu(linear1(x)))`), the L2
//! normalization, and the logit scales.

use aria_core::nn::{Bias, Linear};
use aria_core::{ops, Tensor, WeightLoader};

use crate::{ClapError, Result};

/// One tower's projection head (`audio_projection` or `text_projection`).
#[derive(Debug)]
pub struct Projection {
    linear1: Linear,
    linear2: Linear,
}

impl Projection {
    /// Load `linear1`/`linear2` from a loader rooted at the head's prefix.
    pub fn load(vb: &WeightLoader, hidden: usize, dim: usize) -> Result<Self> {
        Ok(Projection {
            linear1: Linear::load(&vb.pp("linear1"), hidden, dim, Bias::Yes)?,
            linear2: Linear::load(&vb.pp("linear2"), dim, dim, Bias::Yes)?,
        })
    }

    /// Pack both layers' weights as bf16 panels (see [`crate::Precision::Bf16Dot`]).
    pub fn pack_bf16(&mut self) -> Result<()> {
        crate::precision::pack_bf16(&mut self.linear1)?;
        crate::precision::pack_bf16(&mut self.linear2)
    }

    /// `[B, hidden]` → `[B, dim]` (not normalized).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = ops::map(&self.linear1.forward(x)?, |v| v.max(0.0))?;
        Ok(self.linear2.forward(&h)?)
    }
}

/// The rows of `x [B, D]`, each divided by its L2 norm (as `F.normalize`: the norm is clamped
/// below at 1e-12, so a zero row stays zero).
pub fn l2_normalize_rows(x: &Tensor) -> Result<Vec<Vec<f32>>> {
    let s = x.shape().to_vec();
    if s.len() != 2 {
        return Err(ClapError::Shape {
            what: "embeddings to normalize".into(),
            expected: vec![0, 0],
            got: s,
        });
    }
    let v = x.to_vec_f32()?;
    Ok(v.chunks(s[1].max(1))
        .take(s[0])
        .map(|row| {
            let n = row.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-12);
            row.iter().map(|a| a / n).collect()
        })
        .collect())
}

/// `logits[i][j] = scale · ⟨a_i, b_j⟩` (the reference's `logits_per_text` with `a` = text
/// embeddings, `b` = audio embeddings and `scale = exp(logit_scale_t)`).
pub fn logits(a: &[Vec<f32>], b: &[Vec<f32>], scale: f32) -> Result<Vec<Vec<f32>>> {
    a.iter()
        .map(|x| {
            b.iter()
                .map(|y| {
                    if x.len() != y.len() {
                        return Err(ClapError::invalid(
                            "embeddings",
                            format!("dimensions {} and {} differ", x.len(), y.len()),
                        ));
                    }
                    Ok(x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>() * scale)
                })
                .collect()
        })
        .collect()
}
