//! The warm-start cache driving the pipeline (feature `cache`), on the sa3-tiny fixture model:
//! a warm start at step 0 through the whole cache path (lookup, selection, phase vocoder,
//! encoder, forward noising) gives the bytes of a cold generation; later steps reuse stored
//! latents for the same duration and stretched audio for another; with the default tolerance a
//! close duration starts from the stored latents fitted to its frames, with no encode.
#![cfg(feature = "cache")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use aria::cache::CacheGenerator;
use aria::discover::{resolve_model, SearchPaths};
use aria::noise::SeedGenerator;
use aria::pipeline::RunOptions;
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_cache::warm::Alignment;
use aria_cache::{store, Cache, CacheConfig, Embedder, Generator, Request, SkipPolicy};
use aria_testing::fixtures::fixture;

/// Character-trigram hashing into 64 dimensions: similar prompts get similar vectors.
struct Trigrams;

impl Embedder for Trigrams {
    fn name(&self) -> &str {
        "trigrams-64"
    }
    fn dim(&self) -> usize {
        64
    }
    fn embed_texts(&self, texts: &[&str]) -> aria_cache::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let b = t.to_lowercase().into_bytes();
                let mut v = vec![0f32; 64];
                for w in b.windows(3) {
                    let h = w.iter().fold(2166136261u32, |h, &x| {
                        (h ^ u32::from(x)).wrapping_mul(16777619)
                    });
                    v[(h % 64) as usize] += 1.0;
                }
                aria_cache::embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

fn pipeline() -> Option<Pipeline> {
    let dir = fixture("sa3-tiny")?;
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    Some(Pipeline::load(&files, &LoadOptions::default()).unwrap())
}

fn template() -> GenerateRequest {
    let mut t = GenerateRequest::new("", 1.0);
    t.duration_padding_sec = 0.25;
    t
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A cache that fits stored latents only to equal durations (so a close one is stretched and
/// encoded, the path the first test follows).
fn cache(dir: &std::path::Path, skip: SkipPolicy) -> Cache {
    cache_with(dir, skip, 0.0)
}

fn cache_with(dir: &std::path::Path, skip: SkipPolicy, latent_tolerance: f64) -> Cache {
    let cfg = CacheConfig {
        skip,
        latent_tolerance,
        ..Default::default()
    };
    Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        Arc::new(Trigrams),
        cfg,
    )
    .unwrap()
}

#[test]
fn warm_start_at_step_zero_through_the_cache_is_a_cold_generation() {
    let Some(pipe) = pipeline() else { return };
    let g = CacheGenerator::with_template(&pipe, template(), SeedGenerator::Torch);
    let dir = aria_testing::TempDir::new("cache-warm");

    // A cold generation straight from the pipeline.
    let req = Request::new("soft rain on a window", 0.5, 4, 9);
    let mut r = g.request(&req);
    r.seconds = 0.5;
    let cold = pipe
        .run(&r, &mut TorchNoise::new(9), RunOptions::default())
        .unwrap();
    let cold_audio = cold.audio.to_vec_f32().unwrap();

    // An empty cache generates cold and admits the result.
    let mut c = cache(&dir, SkipPolicy::Steps(0));
    let first = c.generate(&g, &req).unwrap();
    assert!(first.reference.is_none());
    assert_eq!(bits(&first.generation.audio.samples), bits(&cold_audio));
    assert!(first.admitted.is_some());

    // A close prompt of another duration hits, is stretched and encoded, and at step 0 the
    // result is still the cold generation of that request, bit for bit.
    let req2 = Request::new("soft rain on the window", 0.6, 4, 11);
    let mut r2 = g.request(&req2);
    r2.seconds = 0.6;
    let cold2 = pipe
        .run(&r2, &mut TorchNoise::new(11), RunOptions::default())
        .unwrap();
    let w = c.generate(&g, &req2).unwrap();
    assert_eq!(w.reference, first.admitted);
    assert!(
        matches!(w.alignment, Some(Alignment::Stretched { rate }) if (rate - 0.5 / 0.6).abs() < 1e-3)
    );
    assert_eq!((w.start_step, w.steps_run, w.sigma), (0, 4, 1.0));
    assert_eq!(
        bits(&w.generation.latents.to_vec_f32().unwrap()),
        bits(&cold2.latents.to_vec_f32().unwrap())
    );
    assert_eq!(
        bits(&w.generation.audio.samples),
        bits(&cold2.audio.to_vec_f32().unwrap())
    );
    drop(c);

    // Skipping half the steps: the same duration reuses the stored latents, two steps run, and
    // the result differs from the cold one; σ is the schedule's at step 2.
    let mut c = cache(&dir, SkipPolicy::Fraction(0.5));
    assert_eq!(c.len(), 2, "reopened with both results");
    let req3 = Request::new("soft rain on a window", 0.5, 4, 9);
    let w = c.generate(&g, &req3).unwrap();
    assert_eq!(w.alignment, Some(Alignment::StoredLatents));
    assert_eq!((w.start_step, w.steps_run), (2, 2));
    assert_eq!(w.generation.step_times.len(), 2);
    assert_eq!(w.sigma, g.sigmas(&req3).unwrap()[2]);
    assert!(w.sigma > 0.0 && w.sigma < 1.0);
    assert_ne!(bits(&w.generation.audio.samples), bits(&cold_audio));
    let hit = c.get(w.reference.unwrap()).unwrap().unwrap();
    assert!(hit.hits >= 1 && hit.data.importance > 0.0, "{hit:?}");
    drop(c);
}

#[test]
fn a_close_duration_starts_from_fitted_latents_with_the_bits_of_that_warm_start() {
    let Some(pipe) = pipeline() else { return };
    let g = CacheGenerator::with_template(&pipe, template(), SeedGenerator::Torch);
    let dir = aria_testing::TempDir::new("cache-fit");
    let mut c = cache_with(
        &dir,
        SkipPolicy::Steps(2),
        aria_cache::warm::LATENT_TOLERANCE,
    );
    let first = c
        .generate(&g, &Request::new("soft rain on a window", 0.5, 4, 9))
        .unwrap();
    let id = first.admitted.unwrap();
    let stored = c.get(id).unwrap().unwrap().data.latents.unwrap();

    // 0.6 s against the 0.5 s entry (rate 0.83): its latents fitted, two steps from step 2.
    let req = Request::new("soft rain on the window", 0.6, 4, 11);
    let w = c.generate(&g, &req).unwrap();
    assert_eq!(w.reference, Some(id));
    assert!(
        matches!(w.alignment, Some(Alignment::FittedLatents { rate }) if (rate - 0.5 / 0.6).abs() < 1e-9),
        "{:?}",
        w.alignment
    );
    assert_eq!(w.overhead.encode, std::time::Duration::ZERO);
    assert_eq!((w.start_step, w.steps_run), (2, 2));

    // The generator run from those fitted latents at step 2 gives the same bits.
    let frames = g.latent_frames(0.5).unwrap();
    let shape = g.latent_shape(&req).unwrap();
    assert!(
        frames >= 1 && frames <= stored.shape[2],
        "{frames} of {:?}",
        stored.shape
    );
    let x =
        aria_cache::warm::fit_frames("entry", &stored.data, &stored.shape, frames, &shape).unwrap();
    let direct = g
        .generate(
            &req,
            Some(&aria_cache::WarmLatents {
                latents: x,
                start_step: 2,
            }),
        )
        .unwrap();
    assert_eq!(
        bits(&w.generation.latents.to_vec_f32().unwrap()),
        bits(&direct.latents.to_vec_f32().unwrap())
    );
    assert_eq!(
        bits(&w.generation.audio.samples),
        bits(&direct.audio.samples)
    );
}
