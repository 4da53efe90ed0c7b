//! Embedders: text (and optionally audio) to unit vectors.

use crate::Result;

pub mod clap;
pub mod minilm;
pub mod t5gemma;

pub use clap::ClapEmbedder;
pub use minilm::MiniLm;
pub use t5gemma::{mean_pool, ConditioningSource, T5GemmaMeanPool};

/// Maps text, and optionally audio, to unit-length vectors in one shared space.
///
/// Real CLAP weights fit this trait as they are (`embed_audio` returns `Some`). Embedders that
/// have no audio side return `None`; the cache then compares a prompt with the embedding of the
/// prompt that made a cached clip.
pub trait Embedder: Send + Sync {
    /// A short stable name (stored with every entry, so embeddings of different models never mix).
    fn name(&self) -> &str;
    /// The dimension of every vector it returns.
    fn dim(&self) -> usize;
    /// One unit vector per text.
    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
    /// One unit vector for interleaved audio (`channels` channels at `sample_rate` Hz), or `None`
    /// when this embedder has no audio side.
    fn embed_audio(
        &self,
        _samples: &[f32],
        _channels: usize,
        _sample_rate: u32,
    ) -> Result<Option<Vec<f32>>> {
        Ok(None)
    }
}

/// Scales `v` to unit L2 norm in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let n = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    if n > 0.0 {
        let inv = (1.0 / n) as f32;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}
