//! Indexes: IVF-flat recall against the exact oracle on a synthetic clustered set, add/remove,
//! byte round trips, and pyramid segment retrieval with a synthetic audio embedder.
#![allow(clippy::unwrap_used)]

use aria_cache::embed::normalize;
use aria_cache::index::{
    recall_at_k, segment_windows, ExactIndex, IvfIndex, IvfParams, PyramidIndex, PyramidParams,
    VectorIndex,
};
use aria_cache::{Embedder, Result};

/// A small deterministic generator (xorshift64*), uniform and roughly normal draws.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32) / (1u64 << 24) as f32
    }

    fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.next()).sum::<f32>() - 6.0
    }

    fn unit(&mut self, d: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..d).map(|_| self.normal()).collect();
        normalize(&mut v);
        v
    }
}

/// `n` unit vectors around `clusters` random centres (spread `sigma` per coordinate).
fn clustered(n: usize, d: usize, clusters: usize, sigma: f32, seed: u64) -> Vec<Vec<f32>> {
    let mut r = Rng(seed);
    let centres: Vec<Vec<f32>> = (0..clusters).map(|_| r.unit(d)).collect();
    (0..n)
        .map(|i| {
            let c = &centres[(i * 7919) % clusters];
            let mut v: Vec<f32> = c.iter().map(|x| x + sigma * r.normal()).collect();
            normalize(&mut v);
            v
        })
        .collect()
}

/// Per-coordinate spread: the noise (norm ≈ σ·√48) is as large as the unit centres, so the
/// clusters overlap and one probed cell is not enough.
const SIGMA: f32 = 0.15;

#[test]
fn ivf_recall_at_10_against_exact() {
    let (n, d) = (4000, 48);
    let data = clustered(n + 200, d, 60, SIGMA, 7);
    let (base, queries) = data.split_at(n);
    let ids: Vec<u64> = (0..n as u64).map(|i| 1000 + i).collect();
    let flat: Vec<f32> = base.concat();
    let mut exact = ExactIndex::new(d);
    for (id, v) in ids.iter().zip(base) {
        exact.add(*id, v).unwrap();
    }
    let ivf = IvfIndex::build(d, &ids, &flat, IvfParams::default()).unwrap();
    assert_eq!(ivf.len(), n);
    assert_eq!(ivf.nlist(), 32); // round(√4000 / 2)
    let want = exact.search_batch(queries, 10).unwrap();
    let got = ivf.search_batch(queries, 10).unwrap();
    let recall: f64 = got
        .iter()
        .zip(&want)
        .map(|(g, w)| recall_at_k(g, w))
        .sum::<f64>()
        / want.len() as f64;
    eprintln!("synthetic IVF recall@10 (nprobe 8, nlist 32, n {n}): {recall:.4}");
    assert!(recall >= 0.95, "recall@10 {recall}");
    let mut one = ivf.clone();
    one.set_nprobe(1);
    let got1 = one.search_batch(queries, 10).unwrap();
    let recall1: f64 = got1
        .iter()
        .zip(&want)
        .map(|(g, w)| recall_at_k(g, w))
        .sum::<f64>()
        / want.len() as f64;
    eprintln!("... at nprobe 1: {recall1:.4}");
    assert!(recall1 < recall, "nprobe 1 {recall1} vs 8 {recall}");
    // Scanning every cell is exact.
    let mut all = ivf.clone();
    all.set_nprobe(ivf.nlist());
    for (q, w) in queries.iter().zip(&want).take(20) {
        assert_eq!(all.search(q, 10).unwrap(), *w);
    }
}

#[test]
fn ivf_add_remove_retrain_and_bytes() {
    let d = 16;
    let data = clustered(600, d, 12, 0.1, 3);
    let mut ivf = IvfIndex::new(
        d,
        IvfParams {
            nlist: 12,
            ..IvfParams::default()
        },
    );
    assert!(!ivf.is_trained());
    for (i, v) in data.iter().enumerate() {
        ivf.add(i as u64, v).unwrap();
    }
    // Untrained: one cell, exact.
    assert_eq!(ivf.nlist(), 1);
    assert_eq!(ivf.search(&data[5], 1).unwrap()[0].id, 5);
    ivf.retrain().unwrap();
    assert!(ivf.is_trained());
    assert_eq!(ivf.nlist(), 12);
    assert_eq!(ivf.len(), 600);
    assert_eq!(ivf.cell_sizes().iter().sum::<usize>(), 600);
    assert_eq!(ivf.search(&data[5], 1).unwrap()[0].id, 5);
    assert!(ivf.remove(5));
    assert!(!ivf.remove(5));
    assert_ne!(ivf.search(&data[5], 1).unwrap()[0].id, 5);
    ivf.add(5, &data[9]).unwrap();
    ivf.add(5, &data[5]).unwrap(); // replace, not duplicate
    assert_eq!(ivf.len(), 600);
    let back = IvfIndex::from_bytes(&ivf.to_bytes()).unwrap();
    assert_eq!(back.cell_sizes(), ivf.cell_sizes());
    for q in data.iter().step_by(37) {
        assert_eq!(back.search(q, 5).unwrap(), ivf.search(q, 5).unwrap());
    }
    assert!(IvfIndex::from_bytes(&ivf.to_bytes()[..40]).is_err());
    assert!(IvfIndex::from_bytes(&ExactIndex::new(4).to_bytes()).is_err());
    assert!(ivf.search(&[0.0; 3], 1).is_err());
}

/// A synthetic audio-and-text embedder: the energy of a clip at each of 8 tones (Goertzel,
/// integer-Hz tones, so whole-second windows see them orthogonally); text "tone j" is the j-th
/// unit vector.
struct ToneEmbedder;

const TONES: [f64; 8] = [200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0];
const SR: u32 = 8000;

impl Embedder for ToneEmbedder {
    fn name(&self) -> &str {
        "tones"
    }

    fn dim(&self) -> usize {
        TONES.len()
    }

    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let j: usize = t.trim_start_matches("tone ").parse().unwrap_or(0);
                let mut v = vec![0.0; TONES.len()];
                v[j] = 1.0;
                v
            })
            .collect())
    }

    fn embed_audio(&self, samples: &[f32], channels: usize, sr: u32) -> Result<Option<Vec<f32>>> {
        let mono: Vec<f64> = samples
            .chunks_exact(channels)
            .map(|f| f.iter().map(|&x| x as f64).sum::<f64>() / channels as f64)
            .collect();
        let mut v: Vec<f32> = TONES
            .iter()
            .map(|&f| {
                let w = 2.0 * std::f64::consts::PI * f / sr as f64;
                let (mut s1, mut s2) = (0.0, 0.0);
                for &x in &mono {
                    let s = x + 2.0 * w.cos() * s1 - s2;
                    s2 = s1;
                    s1 = s;
                }
                ((s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2)
                    .max(0.0)
                    .sqrt()) as f32
            })
            .collect();
        normalize(&mut v);
        Ok(Some(v))
    }
}

/// Stereo audio made of consecutive `(tone index, seconds)` sections.
fn sections(parts: &[(usize, usize)]) -> Vec<f32> {
    let mut out = Vec::new();
    for &(j, secs) in parts {
        for i in 0..secs * SR as usize {
            let x = (2.0 * std::f64::consts::PI * TONES[j] * i as f64 / SR as f64).sin() as f32;
            out.extend([0.5 * x, 0.5 * x]);
        }
    }
    out
}

#[test]
fn pyramid_finds_the_best_segment() {
    let p = PyramidParams {
        min_seconds: 2.0,
        hop_fraction: 1.0,
        max_levels: 8,
    };
    // 8 s: levels of 8 s, 4 s ×2, 2 s ×4 (1 s would be below δ).
    let w = segment_windows(8 * SR as usize, SR, &p);
    assert_eq!(w.len(), 7);
    assert_eq!(w[6], (2, 6 * SR as usize, 2 * SR as usize));
    let half = segment_windows(
        8 * SR as usize,
        SR,
        &PyramidParams {
            hop_fraction: 0.5,
            ..p
        },
    );
    assert_eq!(half.len(), 1 + 3 + 7);

    let e = ToneEmbedder;
    let mut ix = PyramidIndex::new(TONES.len(), p).unwrap();
    assert_eq!(
        ix.add_clip(&e, 10, &sections(&[(0, 2), (1, 2), (2, 2), (3, 2)]), 2, SR)
            .unwrap(),
        7
    );
    assert_eq!(
        ix.add_clip(&e, 11, &sections(&[(4, 6), (5, 2)]), 2, SR)
            .unwrap(),
        7
    );
    assert_eq!(ix.add_clip(&e, 12, &sections(&[(6, 4)]), 2, SR).unwrap(), 3);
    assert_eq!(ix.len(), 17);

    let q = |t: &str| e.embed_texts(&[t]).unwrap().remove(0);
    let hit = ix.search(&q("tone 2"), 1).unwrap()[0];
    assert_eq!(hit.segment.clip, 10);
    assert_eq!(
        (hit.segment.level, hit.segment.start, hit.segment.seconds),
        (2, 4.0, 2.0)
    );
    assert!(hit.score > 0.999, "{}", hit.score);
    let hit = ix.search(&q("tone 5"), 1).unwrap()[0];
    assert_eq!(
        (hit.segment.clip, hit.segment.start, hit.segment.seconds),
        (11, 6.0, 2.0)
    );
    // The whole clip wins where it is uniform (level 0 has the lowest segment id on ties).
    let hit = ix.search(&q("tone 6"), 1).unwrap()[0];
    assert_eq!(hit.segment.clip, 12);
    assert!(hit.score > 0.999);
    // One hit per clip, best first.
    let hits = ix.search(&q("tone 4"), 3).unwrap();
    let clips: Vec<u64> = hits.iter().map(|h| h.segment.clip).collect();
    assert_eq!(clips[0], 11);
    assert_eq!(clips.len(), 3);
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));

    let back = PyramidIndex::from_bytes(&ix.to_bytes()).unwrap();
    assert_eq!(
        back.search(&q("tone 2"), 2).unwrap(),
        ix.search(&q("tone 2"), 2).unwrap()
    );
    assert!(ix.remove_clip(10));
    assert_eq!(ix.segments_of(10), vec![]);
    assert_ne!(ix.search(&q("tone 2"), 1).unwrap()[0].segment.clip, 10);
}

/// An embedder without an audio side.
struct TextOnly;

impl Embedder for TextOnly {
    fn name(&self) -> &str {
        "text-only"
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(vec![vec![1.0, 0.0]; texts.len()])
    }
}

#[test]
fn pyramid_needs_an_audio_side() {
    let mut ix = PyramidIndex::new(2, PyramidParams::default()).unwrap();
    let err = ix.add_clip(&TextOnly, 1, &[0.0; 32], 2, 8).unwrap_err();
    assert!(err.to_string().contains("no audio side"), "{err}");
    assert!(ix.is_empty());
    assert!(ix.add_clip(&TextOnly, 1, &[0.0; 3], 2, 8).is_err());
}
