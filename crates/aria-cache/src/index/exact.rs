//! Exact inner-product search: the oracle the approximate indexes are measured against.

use std::collections::HashMap;

use aria_core::{cpu, threads};
use rayon::prelude::*;

use super::bytes::{Reader, Writer};
use super::{check_dim, Hit, TopK, VectorIndex};
use crate::Result;

/// Rows scored per parallel task.
const ROWS_PER_TASK: usize = 4096;

const MAGIC: &[u8; 4] = b"AIXE";

/// Every vector scored against the query with the runtime-dispatched SIMD dot product of
/// `aria-core`; large indexes are split across the `aria-core` thread pool.
#[derive(Debug, Clone)]
pub struct ExactIndex {
    dim: usize,
    ids: Vec<u64>,
    data: Vec<f32>,
    slot: HashMap<u64, usize>,
}

/// Scan `rows` (`ids.len()` rows of `dim`) into a best-`k`.
pub(crate) fn scan(isa: cpu::Isa, q: &[f32], ids: &[u64], rows: &[f32], top: &mut TopK) {
    let dim = q.len();
    if dim == 0 {
        return;
    }
    for (&id, row) in ids.iter().zip(rows.chunks_exact(dim)) {
        let s = cpu::dot_on(isa, q, row);
        if s >= top.threshold() {
            top.push(Hit { id, score: s });
        }
    }
}

impl ExactIndex {
    /// An empty index of `dim`-vectors.
    pub fn new(dim: usize) -> Self {
        ExactIndex {
            dim,
            ids: Vec::new(),
            data: Vec::new(),
            slot: HashMap::new(),
        }
    }

    /// The stored ids, in storage order.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// The vector of `id`.
    pub fn get(&self, id: u64) -> Option<&[f32]> {
        self.slot
            .get(&id)
            .map(|&s| &self.data[s * self.dim..(s + 1) * self.dim])
    }

    /// All vectors, row-major in storage order (`len × dim`).
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// The best `k` for each query, queries scored in parallel.
    pub fn search_batch(&self, queries: &[Vec<f32>], k: usize) -> Result<Vec<Vec<Hit>>> {
        threads::install(|| queries.par_iter().map(|q| self.search(q, k)).collect())
    }

    /// The encoding [`ExactIndex::from_bytes`] reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::header(MAGIC);
        w.u64(self.dim as u64);
        w.u64s(&self.ids);
        w.f32s(&self.data);
        w.0
    }

    /// Decode [`ExactIndex::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::open("exact index", MAGIC, bytes)?;
        let dim = r.u64()? as usize;
        let ids = r.u64s()?;
        let data = r.f32s()?;
        r.finish()?;
        if data.len() != ids.len().saturating_mul(dim) {
            return Err(r.err(format!(
                "{} floats for {} vectors of {dim}",
                data.len(),
                ids.len()
            )));
        }
        let slot: HashMap<u64, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        if slot.len() != ids.len() {
            return Err(r.err("duplicate ids".into()));
        }
        Ok(ExactIndex {
            dim,
            ids,
            data,
            slot,
        })
    }
}

impl VectorIndex for ExactIndex {
    fn dim(&self) -> usize {
        self.dim
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    fn add(&mut self, id: u64, v: &[f32]) -> Result<()> {
        check_dim("exact index vector", self.dim, v.len())?;
        match self.slot.get(&id) {
            Some(&s) => self.data[s * self.dim..(s + 1) * self.dim].copy_from_slice(v),
            None => {
                self.slot.insert(id, self.ids.len());
                self.ids.push(id);
                self.data.extend_from_slice(v);
            }
        }
        Ok(())
    }

    fn remove(&mut self, id: u64) -> bool {
        let Some(s) = self.slot.remove(&id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        let d = self.dim;
        if s != last {
            self.ids.swap(s, last);
            let (head, tail) = self.data.split_at_mut(last * d);
            head[s * d..(s + 1) * d].copy_from_slice(&tail[..d]);
            self.slot.insert(self.ids[s], s);
        }
        self.ids.pop();
        self.data.truncate(last * d);
        true
    }

    fn search(&self, q: &[f32], k: usize) -> Result<Vec<Hit>> {
        check_dim("exact index query", self.dim, q.len())?;
        let isa = cpu::current();
        let d = self.dim.max(1);
        if self.ids.len() <= ROWS_PER_TASK || threads::num_threads() <= 1 {
            let mut top = TopK::new(k);
            scan(isa, q, &self.ids, &self.data, &mut top);
            return Ok(top.into_vec());
        }
        let top = threads::install(|| {
            self.ids
                .par_chunks(ROWS_PER_TASK)
                .zip(self.data.par_chunks(ROWS_PER_TASK * d))
                .map(|(ids, rows)| {
                    let mut t = TopK::new(k);
                    scan(isa, q, ids, rows, &mut t);
                    t
                })
                .reduce(|| TopK::new(k), TopK::merge)
        });
        Ok(top.into_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_replace_remove_search_roundtrip() -> Result<()> {
        let mut ix = ExactIndex::new(2);
        ix.add(10, &[1.0, 0.0])?;
        ix.add(11, &[0.0, 1.0])?;
        ix.add(12, &[0.6, 0.8])?;
        ix.add(10, &[-1.0, 0.0])?; // replace
        assert_eq!(ix.len(), 3);
        let h = ix.search(&[0.0, 1.0], 2)?;
        assert_eq!((h[0].id, h[1].id), (11, 12));
        assert!((h[1].score - 0.8).abs() < 1e-6);
        assert!(ix.remove(11));
        assert!(!ix.remove(11));
        assert_eq!(ix.get(12), Some(&[0.6f32, 0.8][..]));
        let back = ExactIndex::from_bytes(&ix.to_bytes())?;
        assert_eq!(back.ids(), ix.ids());
        assert_eq!(back.data(), ix.data());
        assert_eq!(back.search(&[1.0, 0.0], 1)?[0].id, 12);
        assert!(ix.add(1, &[1.0]).is_err());
        assert!(ExactIndex::from_bytes(&ix.to_bytes()[..10]).is_err());
        Ok(())
    }
}
