//! Segment embeddings of cached clips (the pyramid of SoundWeaver's retrieval), as the cache
//! stores and indexes them.
//!
//! With an embedder that has an audio side, every admitted clip is embedded whole (its entry's
//! vector) and in the windows of [`segment_windows`] below the whole clip (levels ≥ 1: halves,
//! quarters, …, down to δ = [`PyramidParams::min_seconds`]). The segment vectors are stored
//! with the entry under `<embedder>#segments`, so that a restarted cache or another worker
//! indexes them without embedding again: per segment, its level, start and length (seconds)
//! followed by its vector.

use crate::index::{segment_windows, PyramidParams, Segment};
use crate::store::Audio;
use crate::{CacheError, Embedder, Result};

/// The store's embedding name of the segment vectors of `embedder`.
pub(crate) fn key(embedder: &str) -> String {
    format!("{embedder}#segments")
}

/// The segments below the whole clip of `audio` embedded with the audio side of `embedder`
/// (empty when it has none, or when the clip is shorter than two windows of δ).
pub(crate) fn embed(
    embedder: &dyn Embedder,
    audio: &Audio,
    params: &PyramidParams,
) -> Result<Vec<(Segment, Vec<f32>)>> {
    let sr = audio.sample_rate;
    let mut out = Vec::new();
    for (level, start, len) in segment_windows(audio.frames(), sr, params) {
        if level == 0 {
            continue;
        }
        let seg = audio.interleaved(start..start + len);
        let Some(v) = embedder.embed_audio(&seg, audio.channels, sr)? else {
            return Ok(Vec::new());
        };
        // As stored ([`pack`]: f32), so a restarted cache indexes the same segments.
        let segment = Segment {
            clip: 0,
            level,
            start: f64::from((start as f64 / f64::from(sr)) as f32),
            seconds: f64::from((len as f64 / f64::from(sr)) as f32),
        };
        out.push((segment, v));
    }
    Ok(out)
}

/// Segment vectors as one stored row: `[level, start, seconds, v…]` per segment.
pub(crate) fn pack(segments: &[(Segment, Vec<f32>)]) -> Vec<f32> {
    let mut out = Vec::new();
    for (s, v) in segments {
        out.extend([s.level as f32, s.start as f32, s.seconds as f32]);
        out.extend_from_slice(v);
    }
    out
}

/// [`pack`] read back for `dim`-vectors; `what` names the row in errors.
pub(crate) fn unpack(what: &str, dim: usize, row: &[f32]) -> Result<Vec<(Segment, Vec<f32>)>> {
    let bad = |reason: String| CacheError::Invalid {
        name: what.to_string(),
        reason,
    };
    let stride = dim + 3;
    if dim == 0 || !row.len().is_multiple_of(stride) {
        return Err(bad(format!(
            "{} values are not whole segments of 3 + {dim}",
            row.len()
        )));
    }
    row.chunks_exact(stride)
        .map(|c| {
            let (level, start, seconds) = (c[0], c[1], c[2]);
            let ok = level.fract() == 0.0
                && (1.0..64.0).contains(&level)
                && start.is_finite()
                && start >= 0.0
                && seconds.is_finite()
                && seconds > 0.0
                && c[3..].iter().all(|x| x.is_finite());
            if !ok {
                return Err(bad(format!(
                    "segment (level {level}, start {start} s, {seconds} s) or its vector is not valid"
                )));
            }
            let segment = Segment {
                clip: 0,
                level: level as u32,
                start: f64::from(start),
                seconds: f64::from(seconds),
            };
            Ok((segment, c[3..].to_vec()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_unpack_roundtrip_and_refusals() {
        let segs = vec![
            (
                Segment {
                    clip: 0,
                    level: 1,
                    start: 0.0,
                    seconds: 2.5,
                },
                vec![0.6, 0.8],
            ),
            (
                Segment {
                    clip: 0,
                    level: 2,
                    start: 1.25,
                    seconds: 1.25,
                },
                vec![1.0, 0.0],
            ),
        ];
        let row = pack(&segs);
        assert_eq!(unpack("row", 2, &row).unwrap(), segs);
        assert!(unpack("row", 2, &row[..row.len() - 1])
            .unwrap_err()
            .to_string()
            .contains("whole segments"));
        let mut bad = row.clone();
        bad[0] = 0.5;
        assert!(unpack("row", 2, &bad).is_err());
        let mut bad = row;
        bad[4] = f32::NAN;
        assert!(unpack("row", 2, &bad).is_err());
    }
}
