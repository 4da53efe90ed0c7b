//! The pyramid index inside the cache: an admitted clip is embedded in segments too (with an
//! audio embedder), a segment of a longer clip is chosen as the reference when it matches the
//! prompt better and fits the duration gate, the warm start uses that part of the clip (its
//! stored latents' frames, or its audio stretched and encoded), and the segments survive a
//! restart without being embedded again.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aria_cache::cache::counter;
use aria_cache::embed::normalize;
use aria_cache::index::PyramidParams;
use aria_cache::warm::Alignment;
use aria_cache::{
    store, Audio, Cache, CacheConfig, Embedder, Generation, Generator, Request, SkipPolicy,
    WarmLatents,
};
use aria_core::Tensor;
use aria_testing::TempDir;

const SR: u32 = 1000;
/// Integer-Hz tones: whole-second windows at 1 kHz see them orthogonally.
const TONES: [f64; 4] = [100.0, 150.0, 200.0, 250.0];

/// Audio side: the energy at each tone (Goertzel); text "tone j": the j-th unit vector.
#[derive(Default)]
struct Tones {
    audio_calls: AtomicUsize,
}

impl Embedder for Tones {
    fn name(&self) -> &str {
        "tones"
    }
    fn dim(&self) -> usize {
        TONES.len()
    }
    fn embed_texts(&self, texts: &[&str]) -> aria_cache::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0; TONES.len()];
                if let Some(j) = t
                    .strip_prefix("tone ")
                    .and_then(|j| j.parse::<usize>().ok())
                {
                    v[j % TONES.len()] = 1.0;
                }
                v
            })
            .collect())
    }
    fn embed_audio(
        &self,
        samples: &[f32],
        channels: usize,
        sr: u32,
    ) -> aria_cache::Result<Option<Vec<f32>>> {
        self.audio_calls.fetch_add(1, Ordering::Relaxed);
        let mono: Vec<f64> = samples
            .chunks_exact(channels)
            .map(|f| f.iter().map(|&x| f64::from(x)).sum::<f64>() / channels as f64)
            .collect();
        let mut v: Vec<f32> = TONES
            .iter()
            .map(|&f| {
                let w = 2.0 * std::f64::consts::PI * f / f64::from(sr);
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

/// Mono audio of consecutive `(tone, seconds)` sections.
fn sections(parts: &[(usize, usize)]) -> Vec<f32> {
    let mut out = Vec::new();
    for &(j, secs) in parts {
        out.extend((0..secs * SR as usize).map(|i| {
            (2.0 * std::f64::consts::PI * TONES[j] * i as f64 / f64::from(SR)).sin() as f32 * 0.5
        }));
    }
    out
}

/// 100 latent frames a second. A cold generation's audio is tone 0 then tone 1 (4 s each, for
/// an 8 s request) and its latents are the frame indices; a warm one returns its start latents
/// + 1 per step run. The encoder returns −1 − (the frame's sample), so an encode is visible.
#[derive(Default)]
struct Mock {
    encodes: AtomicUsize,
}

impl Generator for Mock {
    fn id(&self) -> String {
        "mock".into()
    }
    fn sample_rate(&self) -> u32 {
        SR
    }
    fn latent_shape(&self, r: &Request) -> aria_cache::Result<Vec<usize>> {
        Ok(vec![1, 1, ((r.seconds * 100.0).round() as usize).max(1)])
    }
    fn sigmas(&self, r: &Request) -> aria_cache::Result<Vec<f32>> {
        Ok((0..=r.steps)
            .map(|i| 1.0 - i as f32 / r.steps as f32)
            .collect())
    }
    fn encode(&self, a: &Audio, r: &Request) -> aria_cache::Result<Tensor> {
        self.encodes.fetch_add(1, Ordering::Relaxed);
        let t = self.latent_shape(r)?[2];
        let v = (0..t)
            .map(|i| -1.0 - a.samples.get(i * 10).copied().unwrap_or(0.0))
            .collect();
        Ok(Tensor::from_vec(v, &[1, 1, t])?)
    }
    fn generate(&self, r: &Request, w: Option<&WarmLatents>) -> aria_cache::Result<Generation> {
        let t = self.latent_shape(r)?[2];
        let (start, base) = match w {
            Some(w) => (w.start_step, w.latents.to_vec_f32()?),
            None => (0, (0..t).map(|i| i as f32).collect()),
        };
        let runs = r.steps - start;
        let half = (r.seconds / 2.0).round() as usize;
        let mut audio = sections(&[(0, half), (1, half)]);
        audio.resize((r.seconds * f64::from(SR)) as usize, 0.0);
        Ok(Generation {
            audio: Audio::new(audio, 1, SR)?,
            latents: Tensor::from_vec(base.iter().map(|x| x + runs as f32).collect(), &[1, 1, t])?,
            step_times: vec![Duration::from_millis(1); runs],
            total: Duration::from_millis(runs as u64),
        })
    }
    fn decode(&self, _l: &Tensor, r: &Request) -> aria_cache::Result<Audio> {
        Audio::new(vec![0.0; (r.seconds * f64::from(SR)) as usize], 1, SR)
    }
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        Some(((seconds * 100.0).round() as usize).max(1))
    }
}

/// Halves only (hop = window), so the 8 s clip has exactly the segments [0, 4) and [4, 8).
fn open(dir: &std::path::Path, emb: Arc<Tones>, segments: bool, admit: bool) -> Cache {
    let cfg = CacheConfig {
        skip: SkipPolicy::Fraction(0.5),
        admit,
        segments: segments.then_some(PyramidParams {
            min_seconds: 2.0,
            hop_fraction: 1.0,
            max_levels: 2,
        }),
        ..Default::default()
    };
    Cache::open(store::open(dir.to_str().unwrap()).unwrap(), emb, cfg).unwrap()
}

#[test]
fn a_segment_of_a_longer_clip_is_the_reference_and_survives_a_restart() {
    let dir = TempDir::new("cache-segments");
    let g = Mock::default();
    let emb = Arc::new(Tones::default());
    let mut c = open(&dir, emb.clone(), true, true);
    // A second cache on the same store.
    let mut follower = open(&dir, emb.clone(), true, false);
    // An 8 s clip: tone 0 for 4 s, then tone 1. Embedded whole and in its two halves.
    let a = c.generate(&g, &Request::new("tone 0", 8.0, 8, 1)).unwrap();
    assert_eq!((a.reference, a.admitted.is_some()), (None, true));
    assert_eq!(emb.audio_calls.load(Ordering::Relaxed), 3);
    let id = a.admitted.unwrap();
    let stored = c.get(id).unwrap().unwrap();
    assert_eq!(stored.data.embeddings["tones#segments"].len(), 2 * (3 + 4));
    drop(c);
    // The other cache indexes the new entry's segments from the store when it reloads the
    // entry (what `sync` does for each change with a PostgreSQL store's change log).
    assert!(follower.reload(id).unwrap());
    let look = follower.lookup(&Request::new("tone 1", 4.0, 8, 9)).unwrap();
    let chosen = look.selection.expect("a reference").chosen().candidate;
    assert_eq!(
        (chosen.id, chosen.segment.map(|s| s.start)),
        (id, Some(4.0))
    );
    assert_eq!(emb.audio_calls.load(Ordering::Relaxed), 3);
    drop(follower);

    // Reopened (admitting nothing more, so the clip stays the only entry): the segments come
    // from the store, nothing is embedded again.
    let mut c = open(&dir, emb.clone(), true, false);
    // "tone 1" for 4 s: the whole clip is out of the duration gate ([2, 6] s); its second
    // half matches best. The warm start begins from that half's stored latents (frames
    // 400..800 of the cold run, + 4 steps run), not an encode.
    let want: Vec<f32> = (400..800).map(|i| (i + 8 + 4) as f32).collect();
    let b = c.generate(&g, &Request::new("tone 1", 4.0, 8, 2)).unwrap();
    let seg = b.segment.expect("a segment reference");
    assert_eq!(b.reference, Some(id));
    assert_eq!((seg.level, seg.start, seg.seconds), (1, 4.0, 4.0));
    assert_eq!(b.alignment, Some(Alignment::StoredLatents));
    assert_eq!(b.start_step, 4);
    assert_eq!(b.generation.latents.to_vec_f32().unwrap(), want);
    assert_eq!(g.encodes.load(Ordering::Relaxed), 0);
    // "tone 0": the first half.
    let d = c.generate(&g, &Request::new("tone 0", 4.0, 8, 3)).unwrap();
    let first = d.segment.expect("a segment reference");
    assert_eq!(
        (d.reference, first.start, first.seconds),
        (Some(id), 0.0, 4.0)
    );
    let want: Vec<f32> = (0..400).map(|i| (i + 8 + 4) as f32).collect();
    assert_eq!(d.generation.latents.to_vec_f32().unwrap(), want);
    // A segment longer than the request (4 s for 3 s) is cropped, at latent frames, with no
    // encode: frames 400..700.
    let e = c.generate(&g, &Request::new("tone 1", 3.0, 8, 5)).unwrap();
    assert_eq!(e.segment.map(|s| s.start), Some(4.0));
    assert!(matches!(e.alignment, Some(Alignment::FittedLatents { .. })));
    let want: Vec<f32> = (400..700).map(|i| (i + 8 + 4) as f32).collect();
    assert_eq!(e.generation.latents.to_vec_f32().unwrap(), want);
    assert_eq!(g.encodes.load(Ordering::Relaxed), 0);
    // A segment shorter than the request beyond the tolerance (4 s for 5.5 s) is stretched
    // from its own audio and encoded.
    let e = c.generate(&g, &Request::new("tone 1", 5.5, 8, 5)).unwrap();
    assert_eq!(e.segment.map(|s| s.start), Some(4.0));
    assert!(matches!(e.alignment, Some(Alignment::Stretched { .. })));
    assert_eq!(g.encodes.load(Ordering::Relaxed), 1);
    assert_eq!(emb.audio_calls.load(Ordering::Relaxed), 3);
    let counters = c.store().counters().unwrap();
    assert_eq!(counters.get(counter::SEGMENT), Some(&4));
    drop(c);

    // Without the pyramid the whole clip is the only candidate, and the gate refuses it.
    let mut c = open(&dir, emb, false, false);
    let f = c.generate(&g, &Request::new("tone 1", 4.0, 8, 6)).unwrap();
    assert_eq!((f.reference, f.segment), (None, None));
}

#[test]
fn segment_of_cuts_audio_and_latents_and_refuses_spans_outside_the_clip() {
    let dir = TempDir::new("cache-segment-of");
    let g = Mock::default();
    let mut c = open(&dir, Arc::new(Tones::default()), true, true);
    let id = c
        .generate(&g, &Request::new("tone 0", 8.0, 8, 1))
        .unwrap()
        .admitted
        .unwrap();
    let e = c.get(id).unwrap().unwrap();
    let s = aria_cache::warm::segment_of(&g, &e, 2.0, 3.0).unwrap();
    assert_eq!(s.data.seconds, 3.0);
    let a = s.data.audio.as_ref().unwrap();
    assert_eq!(a.frames(), 3000);
    assert_eq!(
        a.samples[..],
        e.data.audio.as_ref().unwrap().samples[2000..5000]
    );
    let l = s.data.latents.as_ref().unwrap();
    assert_eq!(l.shape, vec![1, 1, 300]);
    assert_eq!(l.data[0], 200.0 + 8.0);
    for (start, secs) in [(7.0, 2.0), (-1.0, 1.0), (0.0, 0.0), (f64::NAN, 1.0)] {
        let err = aria_cache::warm::segment_of(&g, &e, start, secs).unwrap_err();
        assert!(err.to_string().contains("segment"), "{err}");
    }
}
