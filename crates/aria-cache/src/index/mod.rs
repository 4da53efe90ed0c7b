//! Vector indexes over unit embeddings, scored by inner product (cosine for unit vectors).
//!
//! - [`ExactIndex`]: every vector scored with SIMD dot products; the oracle.
//! - [`IvfIndex`]: IVF-flat — spherical k-means cells with a seeded init, `nprobe` cells scanned.
//! - [`PyramidIndex`]: clips embedded at several temporal granularities (whole clip, halves,
//!   quarters, … down to a minimum length δ) through the audio side of an
//!   [`Embedder`](crate::Embedder); a query returns the best-matching segment.
//!
//! Every index serializes to bytes (`to_bytes` / `from_bytes`, little-endian, versioned) for the
//! store to persist.

mod bytes;
mod exact;
mod ivf;
mod pyramid;

pub use exact::ExactIndex;
pub use ivf::{IvfIndex, IvfParams};
pub use pyramid::{segment_windows, PyramidIndex, PyramidParams, Segment, SegmentHit};

use crate::{CacheError, Result};

/// One search result: an entry id and its score (inner product with the query).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The entry's id.
    pub id: u64,
    /// Inner product with the query (cosine similarity for unit vectors).
    pub score: f32,
}

/// What every index offers: add, remove, top-k search.
pub trait VectorIndex: Send + Sync {
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Number of entries.
    fn len(&self) -> usize;
    /// Whether it holds no entry.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Add (or replace) entry `id` with vector `v`.
    fn add(&mut self, id: u64, v: &[f32]) -> Result<()>;
    /// Remove entry `id`; `false` when it was not there.
    fn remove(&mut self, id: u64) -> bool;
    /// The `k` best entries for `q`, best first (ties: lower id first).
    fn search(&self, q: &[f32], k: usize) -> Result<Vec<Hit>>;
}

pub(crate) fn check_dim(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(CacheError::Dim {
            what: what.into(),
            expected,
            got,
        })
    }
}

/// `a` ranks before `b`: higher score, then lower id.
fn better(a: &Hit, b: &Hit) -> bool {
    a.score > b.score || (a.score == b.score && a.id < b.id)
}

/// A bounded best-`k` collector (kept sorted, best first; `k` is small).
#[derive(Debug, Clone)]
pub(crate) struct TopK {
    k: usize,
    hits: Vec<Hit>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            hits: Vec::with_capacity(k + 1),
        }
    }

    /// The score an entry must beat to enter (−∞ until full).
    #[inline]
    pub(crate) fn threshold(&self) -> f32 {
        if self.hits.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.hits.last().map_or(f32::NEG_INFINITY, |h| h.score)
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, h: Hit) {
        if self.k == 0 || h.score.is_nan() {
            return;
        }
        if self.hits.len() == self.k {
            match self.hits.last() {
                Some(last) if better(&h, last) => {}
                _ => return,
            }
            self.hits.pop();
        }
        let pos = self.hits.partition_point(|x| better(x, &h));
        self.hits.insert(pos, h);
    }

    pub(crate) fn merge(mut self, other: TopK) -> TopK {
        for h in other.hits {
            self.push(h);
        }
        self
    }

    pub(crate) fn into_vec(self) -> Vec<Hit> {
        self.hits
    }
}

/// Recall@k of `approx` against `exact` (the fraction of the exact top-k ids found).
pub fn recall_at_k(approx: &[Hit], exact: &[Hit]) -> f64 {
    if exact.is_empty() {
        return 1.0;
    }
    let found = exact
        .iter()
        .filter(|e| approx.iter().any(|a| a.id == e.id))
        .count();
    found as f64 / exact.len() as f64
}

/// SplitMix64: the small seeded generator of k-means init and tests.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 11) as u128 * n as u128) >> 53) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topk_keeps_best_sorted_with_id_ties() {
        let mut t = TopK::new(3);
        for (id, s) in [
            (5, 0.1),
            (1, 0.9),
            (2, 0.5),
            (3, 0.9),
            (4, 0.7),
            (6, f32::NAN),
        ] {
            t.push(Hit { id, score: s });
        }
        let ids: Vec<u64> = t.into_vec().iter().map(|h| h.id).collect();
        assert_eq!(ids, [1, 3, 4]);
        let mut z = TopK::new(0);
        z.push(Hit { id: 1, score: 1.0 });
        assert!(z.into_vec().is_empty());
    }

    #[test]
    fn recall_counts_overlap() {
        let h = |id| Hit { id, score: 0.0 };
        assert_eq!(recall_at_k(&[h(1), h(2)], &[h(2), h(3)]), 0.5);
    }
}
