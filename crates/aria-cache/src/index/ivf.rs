//! IVF-flat: vectors grouped into the cells of a spherical k-means; a query scans the `nprobe`
//! cells whose centroids it matches best.

use std::collections::HashMap;

use aria_core::{cpu, ops, threads, Tensor};
use rayon::prelude::*;

use super::bytes::{Reader, Writer};
use super::exact::scan;
use super::{check_dim, Hit, SplitMix, TopK, VectorIndex};
use crate::embed::normalize;
use crate::{CacheError, Result};

const MAGIC: &[u8; 4] = b"AIXI";

/// Rows assigned per matrix product during training and bulk adds.
const ASSIGN_ROWS: usize = 4096;

/// How an [`IvfIndex`] is trained and searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IvfParams {
    /// Number of cells; `0` picks `round(√n / 2)` for `n` training vectors (on MiniLM caption
    /// embeddings `√n` cells left recall@10 at `nprobe` 8 below 0.95; half as many reach it).
    pub nlist: usize,
    /// Cells scanned per query.
    pub nprobe: usize,
    /// Lloyd iterations of k-means (it also stops when no assignment changes).
    pub iters: usize,
    /// Seed of the initial centroids (a seeded sample of the training vectors).
    pub seed: u64,
    /// Training uses at most this many vectors per cell (a seeded subsample).
    pub max_train_per_list: usize,
}

impl Default for IvfParams {
    fn default() -> Self {
        IvfParams {
            nlist: 0,
            nprobe: 8,
            iters: 20,
            seed: 0,
            max_train_per_list: 256,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Cell {
    ids: Vec<u64>,
    data: Vec<f32>,
}

/// An IVF-flat index. Until trained it holds one cell and searches exactly, so a cache can grow
/// from empty and call [`IvfIndex::retrain`] once it has enough entries.
#[derive(Debug, Clone)]
pub struct IvfIndex {
    dim: usize,
    params: IvfParams,
    /// `nlist × dim`, unit rows; empty while untrained.
    centroids: Vec<f32>,
    cells: Vec<Cell>,
    loc: HashMap<u64, (usize, usize)>,
}

/// Index of the best-scoring row of `scores` (`rows × k`), per row.
fn argmax_rows(scores: &[f32], k: usize) -> Vec<usize> {
    scores
        .chunks_exact(k)
        .map(|r| {
            let mut best = 0;
            for (j, &s) in r.iter().enumerate() {
                if s > r[best] {
                    best = j;
                }
            }
            best
        })
        .collect()
}

/// The nearest centroid (by inner product) of each row of `data`.
fn assign(data: &[f32], dim: usize, centroids: &[f32]) -> Result<Vec<usize>> {
    let k = centroids.len() / dim.max(1);
    if k <= 1 || dim == 0 {
        return Ok(vec![0; data.len() / dim.max(1)]);
    }
    let c = Tensor::from_slice(centroids, &[k, dim])?;
    let mut out = Vec::with_capacity(data.len() / dim);
    for chunk in data.chunks(ASSIGN_ROWS * dim) {
        let x = Tensor::from_slice(chunk, &[chunk.len() / dim, dim])?;
        let s = ops::linear(&x, &c, None)?.to_vec::<f32>()?;
        out.extend(argmax_rows(&s, k));
    }
    Ok(out)
}

/// Spherical k-means: `k` unit centroids of `samples` (`n × dim`).
fn kmeans(samples: &[f32], dim: usize, k: usize, iters: usize, seed: u64) -> Result<Vec<f32>> {
    let n = samples.len() / dim;
    let mut rng = SplitMix::new(seed);
    // Seeded init: k distinct samples (partial Fisher–Yates).
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = i + rng.below(n - i);
        order.swap(i, j);
    }
    let mut cent: Vec<f32> = order[..k]
        .iter()
        .flat_map(|&i| samples[i * dim..(i + 1) * dim].iter().copied())
        .collect();
    let mut prev: Vec<usize> = Vec::new();
    for _ in 0..iters {
        let a = assign(samples, dim, &cent)?;
        if a == prev {
            break;
        }
        let mut sums = vec![0f64; k * dim];
        let mut counts = vec![0usize; k];
        for (row, &c) in samples.chunks_exact(dim).zip(&a) {
            counts[c] += 1;
            sums[c * dim..(c + 1) * dim]
                .iter_mut()
                .zip(row)
                .for_each(|(s, &x)| *s += x as f64);
        }
        for c in 0..k {
            let dst = &mut cent[c * dim..(c + 1) * dim];
            if counts[c] == 0 {
                // An empty cell restarts at a random sample.
                let i = rng.below(n);
                dst.copy_from_slice(&samples[i * dim..(i + 1) * dim]);
            } else {
                dst.iter_mut()
                    .zip(&sums[c * dim..(c + 1) * dim])
                    .for_each(|(d, &s)| *d = s as f32);
            }
            normalize(dst);
        }
        prev = a;
    }
    Ok(cent)
}

impl IvfIndex {
    /// An empty, untrained index (one cell, exact search) of `dim`-vectors.
    pub fn new(dim: usize, params: IvfParams) -> Self {
        IvfIndex {
            dim,
            params,
            centroids: Vec::new(),
            cells: vec![Cell::default()],
            loc: HashMap::new(),
        }
    }

    /// Train on `ids`/`data` (`len × dim`, row-major) and add them all.
    pub fn build(dim: usize, ids: &[u64], data: &[f32], params: IvfParams) -> Result<Self> {
        check_dim("IVF build data", ids.len() * dim, data.len())?;
        let mut ix = IvfIndex::new(dim, params);
        ix.train(data)?;
        ix.add_batch(ids, data)?;
        Ok(ix)
    }

    /// Train the cells on `samples` (`n × dim`), then re-file every stored entry.
    pub fn train(&mut self, samples: &[f32]) -> Result<()> {
        let dim = self.dim;
        if dim == 0 || !samples.len().is_multiple_of(dim) {
            return Err(CacheError::Dim {
                what: "IVF training data (a multiple of the dimension)".into(),
                expected: dim,
                got: samples.len(),
            });
        }
        let n = samples.len() / dim;
        if n == 0 {
            return Err(CacheError::Invalid {
                name: "IVF training data".into(),
                reason: "no vector to train on".into(),
            });
        }
        let p = self.params;
        let k = if p.nlist == 0 {
            (((n as f64).sqrt() / 2.0).round() as usize).max(1)
        } else {
            p.nlist.min(n)
        };
        // A seeded subsample of at most max_train_per_list per cell.
        let cap = k.saturating_mul(p.max_train_per_list.max(1));
        let sub: Vec<f32>;
        let train = if n > cap {
            let mut rng = SplitMix::new(p.seed ^ 0x5EED);
            let mut order: Vec<usize> = (0..n).collect();
            for i in 0..cap {
                let j = i + rng.below(n - i);
                order.swap(i, j);
            }
            let mut pick = order[..cap].to_vec();
            pick.sort_unstable();
            sub = pick
                .iter()
                .flat_map(|&i| samples[i * dim..(i + 1) * dim].iter().copied())
                .collect();
            &sub[..]
        } else {
            samples
        };
        let centroids = kmeans(train, dim, k, p.iters, p.seed)?;
        let (ids, data) = self.drain();
        self.centroids = centroids;
        self.cells = vec![Cell::default(); k];
        self.add_batch(&ids, &data)
    }

    /// Re-train on the stored entries themselves (e.g. after the cache has grown).
    pub fn retrain(&mut self) -> Result<()> {
        let data: Vec<f32> = self
            .cells
            .iter()
            .flat_map(|c| c.data.iter().copied())
            .collect();
        self.train(&data)
    }

    fn drain(&mut self) -> (Vec<u64>, Vec<f32>) {
        let mut ids = Vec::new();
        let mut data = Vec::new();
        for c in self.cells.drain(..) {
            ids.extend(c.ids);
            data.extend(c.data);
        }
        self.loc.clear();
        (ids, data)
    }

    /// Add many entries at once (cells assigned with one matrix product per block).
    pub fn add_batch(&mut self, ids: &[u64], data: &[f32]) -> Result<()> {
        check_dim("IVF batch data", ids.len() * self.dim, data.len())?;
        let cells = assign(data, self.dim, &self.centroids)?;
        for ((&id, row), c) in ids
            .iter()
            .zip(data.chunks_exact(self.dim.max(1)))
            .zip(cells)
        {
            self.remove(id);
            self.push(c, id, row);
        }
        Ok(())
    }

    fn push(&mut self, c: usize, id: u64, v: &[f32]) {
        let cell = &mut self.cells[c];
        self.loc.insert(id, (c, cell.ids.len()));
        cell.ids.push(id);
        cell.data.extend_from_slice(v);
    }

    /// Whether the cells have been trained.
    pub fn is_trained(&self) -> bool {
        !self.centroids.is_empty()
    }

    /// Number of cells (1 while untrained).
    pub fn nlist(&self) -> usize {
        self.cells.len()
    }

    /// Cells scanned per query.
    pub fn nprobe(&self) -> usize {
        self.params.nprobe
    }

    /// Set the cells scanned per query.
    pub fn set_nprobe(&mut self, nprobe: usize) {
        self.params.nprobe = nprobe;
    }

    /// The parameters.
    pub fn params(&self) -> &IvfParams {
        &self.params
    }

    /// The size of every cell.
    pub fn cell_sizes(&self) -> Vec<usize> {
        self.cells.iter().map(|c| c.ids.len()).collect()
    }

    /// The best `k` for each query, queries searched in parallel.
    pub fn search_batch(&self, queries: &[Vec<f32>], k: usize) -> Result<Vec<Vec<Hit>>> {
        threads::install(|| queries.par_iter().map(|q| self.search(q, k)).collect())
    }

    /// The encoding [`IvfIndex::from_bytes`] reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::header(MAGIC);
        let p = &self.params;
        for v in [self.dim, p.nlist, p.nprobe, p.iters, p.max_train_per_list] {
            w.u64(v as u64);
        }
        w.u64(p.seed);
        w.f32s(&self.centroids);
        w.u64(self.cells.len() as u64);
        for c in &self.cells {
            w.u64s(&c.ids);
            w.f32s(&c.data);
        }
        w.0
    }

    /// Decode [`IvfIndex::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::open("IVF index", MAGIC, bytes)?;
        let mut u = || r.u64().map(|v| v as usize);
        let (dim, nlist, nprobe, iters, max_train_per_list) = (u()?, u()?, u()?, u()?, u()?);
        let seed = r.u64()?;
        let centroids = r.f32s()?;
        let ncells = r.u64()? as usize;
        let trained = !centroids.is_empty();
        if dim == 0
            || centroids.len() % dim != 0
            || (trained && centroids.len() / dim != ncells)
            || (!trained && ncells != 1)
        {
            return Err(r.err(format!(
                "{} centroid floats and {ncells} cells for dimension {dim}",
                centroids.len()
            )));
        }
        let mut ix = IvfIndex {
            dim,
            params: IvfParams {
                nlist,
                nprobe,
                iters,
                seed,
                max_train_per_list,
            },
            centroids,
            cells: Vec::with_capacity(ncells),
            loc: HashMap::new(),
        };
        for c in 0..ncells {
            let ids = r.u64s()?;
            let data = r.f32s()?;
            if data.len() != ids.len() * dim {
                return Err(r.err(format!(
                    "cell {c}: {} floats for {} ids",
                    data.len(),
                    ids.len()
                )));
            }
            for (i, &id) in ids.iter().enumerate() {
                if ix.loc.insert(id, (c, i)).is_some() {
                    return Err(r.err(format!("id {id} stored twice")));
                }
            }
            ix.cells.push(Cell { ids, data });
        }
        r.finish()?;
        Ok(ix)
    }
}

impl VectorIndex for IvfIndex {
    fn dim(&self) -> usize {
        self.dim
    }

    fn len(&self) -> usize {
        self.loc.len()
    }

    fn add(&mut self, id: u64, v: &[f32]) -> Result<()> {
        check_dim("IVF index vector", self.dim, v.len())?;
        let isa = cpu::current();
        let mut best = (0usize, f32::NEG_INFINITY);
        for (c, cen) in self.centroids.chunks_exact(self.dim.max(1)).enumerate() {
            let s = cpu::dot_on(isa, v, cen);
            if s > best.1 {
                best = (c, s);
            }
        }
        self.remove(id);
        self.push(best.0, id, v);
        Ok(())
    }

    fn remove(&mut self, id: u64) -> bool {
        let Some((c, i)) = self.loc.remove(&id) else {
            return false;
        };
        let d = self.dim;
        let cell = &mut self.cells[c];
        let last = cell.ids.len() - 1;
        if i != last {
            cell.ids.swap(i, last);
            let (head, tail) = cell.data.split_at_mut(last * d);
            head[i * d..(i + 1) * d].copy_from_slice(&tail[..d]);
            self.loc.insert(cell.ids[i], (c, i));
        }
        cell.ids.pop();
        cell.data.truncate(last * d);
        true
    }

    fn search(&self, q: &[f32], k: usize) -> Result<Vec<Hit>> {
        check_dim("IVF index query", self.dim, q.len())?;
        let isa = cpu::current();
        let probes: Vec<usize> = if self.centroids.is_empty() {
            vec![0]
        } else {
            let mut t = TopK::new(self.params.nprobe.max(1));
            for (c, cen) in self.centroids.chunks_exact(self.dim).enumerate() {
                t.push(Hit {
                    id: c as u64,
                    score: cpu::dot_on(isa, q, cen),
                });
            }
            t.into_vec().iter().map(|h| h.id as usize).collect()
        };
        let mut top = TopK::new(k);
        for c in probes {
            let cell = &self.cells[c];
            scan(isa, q, &cell.ids, &cell.data, &mut top);
        }
        Ok(top.into_vec())
    }
}
