//! The T5Gemma mean-pool embedder: the generator's own text conditioning, averaged over the
//! valid tokens and normalized.
//!
//! The cache depends on `aria-core` only, so the conditioning reaches it through
//! [`ConditioningSource`] (any `Fn(&str) -> Result<(Tensor, Tensor)>` is one): the encoder
//! output `[N, D]` (or `[1, N, D]`) and its token mask `[N]` (or `[1, N]`, non-zero = valid).
//! When the pipeline has already computed the conditioning of a request, [`mean_pool`] turns it
//! into the embedding without running the encoder again.

use aria_core::Tensor;

use super::{normalize, Embedder};
use crate::{CacheError, Result};

/// Produces the text conditioning of a prompt: `(states [N, D] or [1, N, D], mask [N] or [1, N])`.
pub trait ConditioningSource: Send + Sync {
    /// The conditioning of `text`.
    fn conditioning(&self, text: &str) -> Result<(Tensor, Tensor)>;
}

impl<F> ConditioningSource for F
where
    F: Fn(&str) -> Result<(Tensor, Tensor)> + Send + Sync,
{
    fn conditioning(&self, text: &str) -> Result<(Tensor, Tensor)> {
        self(text)
    }
}

/// The unit-norm mean of `states` over the tokens whose `mask` is non-zero.
///
/// `states [N, D]` or `[1, N, D]`; `mask` with `N` elements. A mask with no valid token is an
/// error (there is nothing to average).
pub fn mean_pool(states: &Tensor, mask: &Tensor) -> Result<Vec<f32>> {
    let shape = states.shape();
    let (n, d) = match *shape {
        [n, d] | [1, n, d] => (n, d),
        _ => {
            return Err(CacheError::Invalid {
                name: "T5Gemma conditioning".into(),
                reason: format!("expected [N, D] or [1, N, D], got {shape:?}"),
            })
        }
    };
    if mask.elem_count() != n {
        return Err(CacheError::Dim {
            what: "T5Gemma conditioning mask".into(),
            expected: n,
            got: mask.elem_count(),
        });
    }
    let x = states.to_vec_f32()?;
    let m = mask.to_vec_f32()?;
    let mut acc = vec![0f64; d];
    let mut count = 0usize;
    for (row, &valid) in x.chunks_exact(d.max(1)).zip(&m) {
        if valid != 0.0 {
            count += 1;
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v as f64);
        }
    }
    if count == 0 {
        return Err(CacheError::Invalid {
            name: "T5Gemma conditioning mask".into(),
            reason: "no valid token".into(),
        });
    }
    let mut v: Vec<f32> = acc.iter().map(|a| (a / count as f64) as f32).collect();
    normalize(&mut v);
    Ok(v)
}

/// An [`Embedder`] over the generator's T5Gemma conditioning (text only).
pub struct T5GemmaMeanPool {
    source: Box<dyn ConditioningSource>,
    dim: usize,
}

impl std::fmt::Debug for T5GemmaMeanPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("T5GemmaMeanPool")
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

impl T5GemmaMeanPool {
    /// Wrap a conditioning source whose states are `dim` wide.
    pub fn new(dim: usize, source: impl ConditioningSource + 'static) -> Self {
        T5GemmaMeanPool {
            source: Box::new(source),
            dim,
        }
    }
}

impl Embedder for T5GemmaMeanPool {
    fn name(&self) -> &str {
        "t5gemma-mean"
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        texts
            .iter()
            .map(|t| {
                let (s, m) = self.source.conditioning(t)?;
                let v = mean_pool(&s, &m)?;
                if v.len() != self.dim {
                    return Err(CacheError::Dim {
                        what: "T5Gemma conditioning".into(),
                        expected: self.dim,
                        got: v.len(),
                    });
                }
                Ok(v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_only_valid_tokens() -> Result<()> {
        let s = Tensor::from_vec(vec![3.0f32, 0.0, 1.0, 4.0, 100.0, -100.0], &[1, 3, 2])?;
        let m = Tensor::from_vec(vec![1.0f32, 1.0, 0.0], &[1, 3])?;
        let v = mean_pool(&s, &m)?;
        // mean (2, 2) → (1/√2, 1/√2)
        assert!((v[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        assert!((v[1] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7);
        let none = Tensor::from_vec(vec![0.0f32; 3], &[3])?;
        assert!(mean_pool(&s, &none).is_err());
        Ok(())
    }

    #[test]
    fn embedder_wraps_a_closure() -> Result<()> {
        let e = T5GemmaMeanPool::new(2, |t: &str| -> Result<(Tensor, Tensor)> {
            let x = t.len() as f32;
            Ok((
                Tensor::from_vec(vec![x, 1.0], &[1, 2])?,
                Tensor::from_vec(vec![1.0f32], &[1])?,
            ))
        });
        let v = e.embed_texts(&["", "abc"])?;
        assert_eq!(v[0], vec![0.0, 1.0]);
        assert!((v[1][0] - 3.0 / 10f32.sqrt()).abs() < 1e-6);
        let wrong = T5GemmaMeanPool::new(3, |_: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                Tensor::from_vec(vec![1.0f32, 1.0], &[1, 2])?,
                Tensor::from_vec(vec![1.0f32], &[1])?,
            ))
        });
        assert!(matches!(
            wrong.embed_texts(&["x"]),
            Err(CacheError::Dim { .. })
        ));
        Ok(())
    }
}
