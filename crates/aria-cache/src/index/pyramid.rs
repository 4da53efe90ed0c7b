//! Pyramid segment embeddings: a clip indexed at several temporal granularities.
//!
//! Level 0 is the whole clip; level `l` has windows of `L / 2^l` seconds, hopping by
//! `hop_fraction` of a window, for every level whose window is at least `min_seconds` (δ). Each
//! window goes through the audio side of an [`Embedder`]; a query returns the best-matching
//! segment (clip, start, length), so a long cached clip can serve a short request.

use std::collections::HashMap;

use super::bytes::{Reader, Writer};
use super::{ExactIndex, Hit, VectorIndex};
use crate::{CacheError, Embedder, Result};

const MAGIC: &[u8; 4] = b"AIXP";

/// How clips are cut into segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PyramidParams {
    /// δ: the shortest window, in seconds (levels stop before going below it).
    pub min_seconds: f64,
    /// Hop between windows of one level, as a fraction of the window (1.0: no overlap).
    pub hop_fraction: f64,
    /// At most this many levels (level 0 included).
    pub max_levels: usize,
}

impl Default for PyramidParams {
    fn default() -> Self {
        PyramidParams {
            min_seconds: 2.0,
            hop_fraction: 0.5,
            max_levels: 6,
        }
    }
}

/// A segment of a cached clip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// The clip's id.
    pub clip: u64,
    /// Pyramid level (0 = the whole clip).
    pub level: u32,
    /// Start, in seconds from the clip's start.
    pub start: f64,
    /// Length in seconds.
    pub seconds: f64,
}

/// A search result of [`PyramidIndex`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentHit {
    /// The segment.
    pub segment: Segment,
    /// Inner product with the query.
    pub score: f32,
}

/// The segment windows `(level, start_frame, frames)` of a clip of `frames` frames at `sr` Hz.
pub fn segment_windows(frames: usize, sr: u32, p: &PyramidParams) -> Vec<(u32, usize, usize)> {
    let mut out = vec![(0, 0, frames)];
    let min_frames = (p.min_seconds * sr as f64).ceil().max(1.0) as usize;
    let hop_frac = p.hop_fraction.clamp(0.05, 1.0);
    for level in 1..p.max_levels.max(1) {
        let win = frames >> level;
        if win < min_frames || win == 0 {
            break;
        }
        let hop = ((win as f64 * hop_frac).round() as usize).max(1);
        let mut start = 0;
        while start + win <= frames {
            out.push((level as u32, start, win));
            start += hop;
        }
    }
    out
}

/// Segments of many clips in one exact inner-product index.
#[derive(Debug, Clone)]
pub struct PyramidIndex {
    params: PyramidParams,
    index: ExactIndex,
    segments: HashMap<u64, Segment>,
    by_clip: HashMap<u64, Vec<u64>>,
    next: u64,
}

impl PyramidIndex {
    /// An empty index of `dim`-vectors.
    pub fn new(dim: usize, params: PyramidParams) -> Result<Self> {
        if params.min_seconds.is_nan()
            || params.hop_fraction.is_nan()
            || params.min_seconds <= 0.0
            || params.hop_fraction <= 0.0
        {
            return Err(CacheError::Invalid {
                name: "PyramidParams".into(),
                reason: format!(
                    "min_seconds {} and hop_fraction {} must be positive",
                    params.min_seconds, params.hop_fraction
                ),
            });
        }
        Ok(PyramidIndex {
            params,
            index: ExactIndex::new(dim),
            segments: HashMap::new(),
            by_clip: HashMap::new(),
            next: 0,
        })
    }

    /// Embed every segment of clip `clip` (interleaved `samples`, `channels`, `sr` Hz) with
    /// the audio side of `embedder`, replacing the clip's earlier segments. Returns how many
    /// segments were indexed. An embedder without an audio side is an error.
    pub fn add_clip(
        &mut self,
        embedder: &dyn Embedder,
        clip: u64,
        samples: &[f32],
        channels: usize,
        sr: u32,
    ) -> Result<usize> {
        if channels == 0 || !samples.len().is_multiple_of(channels) || sr == 0 {
            return Err(CacheError::Invalid {
                name: "clip audio".into(),
                reason: format!("{} samples, {channels} channels, {sr} Hz", samples.len()),
            });
        }
        let frames = samples.len() / channels;
        let mut vecs = Vec::new();
        for (level, start, len) in segment_windows(frames, sr, &self.params) {
            let seg = &samples[start * channels..(start + len) * channels];
            let v =
                embedder
                    .embed_audio(seg, channels, sr)?
                    .ok_or_else(|| CacheError::Invalid {
                        name: "embedder".into(),
                        reason: format!(
                            "`{}` has no audio side for segment embeddings",
                            embedder.name()
                        ),
                    })?;
            let seg = Segment {
                clip,
                level,
                start: start as f64 / sr as f64,
                seconds: len as f64 / sr as f64,
            };
            vecs.push((seg, v));
        }
        self.remove_clip(clip);
        let n = vecs.len();
        let mut ids = Vec::with_capacity(n);
        for (seg, v) in vecs {
            let id = self.next;
            self.index.add(id, &v)?;
            self.next += 1;
            self.segments.insert(id, seg);
            ids.push(id);
        }
        self.by_clip.insert(clip, ids);
        Ok(n)
    }

    /// The parameters segments are cut with.
    pub fn params(&self) -> &PyramidParams {
        &self.params
    }

    /// Index precomputed segment vectors of `clip` (e.g. read back from a store), replacing
    /// its earlier segments. Each segment's `clip` is set to `clip`.
    pub fn add_segments(&mut self, clip: u64, segments: Vec<(Segment, Vec<f32>)>) -> Result<()> {
        for (_, v) in &segments {
            super::check_dim("segment embedding", self.index.dim(), v.len())?;
        }
        self.remove_clip(clip);
        let mut ids = Vec::with_capacity(segments.len());
        for (seg, v) in segments {
            let id = self.next;
            self.index.add(id, &v)?;
            self.next += 1;
            self.segments.insert(id, Segment { clip, ..seg });
            ids.push(id);
        }
        self.by_clip.insert(clip, ids);
        Ok(())
    }

    /// The vector of `clip`'s segment at `level` starting at `start` seconds.
    pub fn vector_of(&self, clip: u64, level: u32, start: f64) -> Option<&[f32]> {
        let ids = self.by_clip.get(&clip)?;
        let id = ids.iter().find(|i| {
            self.segments
                .get(i)
                .is_some_and(|s| s.level == level && s.start == start)
        })?;
        self.index.get(*id)
    }

    /// Drop every segment of `clip`; `false` when it had none.
    pub fn remove_clip(&mut self, clip: u64) -> bool {
        let Some(ids) = self.by_clip.remove(&clip) else {
            return false;
        };
        for id in ids {
            self.index.remove(id);
            self.segments.remove(&id);
        }
        true
    }

    /// The number of segments stored.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// Whether no segment is stored.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The segments of `clip`.
    pub fn segments_of(&self, clip: u64) -> Vec<Segment> {
        self.by_clip
            .get(&clip)
            .map(|ids| {
                ids.iter()
                    .filter_map(|i| self.segments.get(i).copied())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `k` best segments for `q`, at most one per clip (its best segment), best first.
    pub fn search(&self, q: &[f32], k: usize) -> Result<Vec<SegmentHit>> {
        // Each clip holds at most `per_clip` segments, so the best `k · per_clip` segments
        // contain the best segment of each of the best `k` clips.
        let per_clip = self.by_clip.values().map(Vec::len).max().unwrap_or(0);
        let all = self.index.search(q, k.saturating_mul(per_clip))?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for Hit { id, score } in all {
            let Some(seg) = self.segments.get(&id) else {
                continue;
            };
            if seen.insert(seg.clip) {
                out.push(SegmentHit {
                    segment: *seg,
                    score,
                });
                if out.len() == k {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The encoding [`PyramidIndex::from_bytes`] reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::header(MAGIC);
        w.f64(self.params.min_seconds);
        w.f64(self.params.hop_fraction);
        w.u64(self.params.max_levels as u64);
        w.u64(self.next);
        let mut ids: Vec<u64> = self.segments.keys().copied().collect();
        ids.sort_unstable();
        w.u64(ids.len() as u64);
        for id in ids {
            let s = &self.segments[&id];
            w.u64(id);
            w.u64(s.clip);
            w.u32(s.level);
            w.f64(s.start);
            w.f64(s.seconds);
        }
        w.0.extend_from_slice(&self.index.to_bytes());
        w.0
    }

    /// Decode [`PyramidIndex::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::open("pyramid index", MAGIC, bytes)?;
        let params = PyramidParams {
            min_seconds: r.f64()?,
            hop_fraction: r.f64()?,
            max_levels: r.u64()? as usize,
        };
        let next = r.u64()?;
        let n = r.u64()?;
        let mut segments = HashMap::new();
        let mut by_clip: HashMap<u64, Vec<u64>> = HashMap::new();
        for _ in 0..n {
            let id = r.u64()?;
            let seg = Segment {
                clip: r.u64()?,
                level: r.u32()?,
                start: r.f64()?,
                seconds: r.f64()?,
            };
            by_clip.entry(seg.clip).or_default().push(id);
            segments.insert(id, seg);
        }
        let index = ExactIndex::from_bytes(r.rest())?;
        if index.len() != segments.len() || index.ids().iter().any(|i| !segments.contains_key(i)) {
            return Err(r.err(format!(
                "{} segments but {} vectors",
                segments.len(),
                index.len()
            )));
        }
        Ok(PyramidIndex {
            params,
            index,
            segments,
            by_clip,
            next,
        })
    }
}
