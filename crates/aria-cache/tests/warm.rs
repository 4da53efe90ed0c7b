//! The cache's warm path with a stand-in generator (no model): which `x̂₀` a hit uses, the
//! start step and σ, importance bookkeeping, admission, and the skip policy.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use aria_cache::warm::Alignment;
use aria_cache::{
    store, Audio, Cache, CacheConfig, Embedder, Generation, Generator, Request, SkipPolicy,
    WarmLatents,
};
use aria_core::Tensor;
use aria_testing::TempDir;

/// Same-word prompts map to the same vector: one dimension per distinct first word.
struct FirstWord;

impl Embedder for FirstWord {
    fn name(&self) -> &str {
        "first-word"
    }
    fn dim(&self) -> usize {
        4
    }
    fn embed_texts(&self, texts: &[&str]) -> aria_cache::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 4];
                let k = match t.split_whitespace().next().unwrap_or("") {
                    "rain" => 0,
                    "dog" => 1,
                    "low" => 2,
                    _ => 3,
                };
                v[k] = 1.0;
                v
            })
            .collect())
    }
}

/// 1 kHz mono audio, one latent per 10 samples; the "model" returns its start latents + 1 per
/// step run, so the tests can see what it started from.
#[derive(Default)]
struct Mock {
    encoded: RefCell<Vec<usize>>,
}

const SR: u32 = 1000;

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
        self.encoded.borrow_mut().push(a.frames());
        let t = self.latent_shape(r)?[2];
        let v = (0..t)
            .map(|i| a.samples.get(i * 10).copied().unwrap_or(0.0))
            .collect();
        Ok(Tensor::from_vec(v, &[1, 1, t])?)
    }
    fn generate(&self, r: &Request, w: Option<&WarmLatents>) -> aria_cache::Result<Generation> {
        let t = self.latent_shape(r)?[2];
        let (start, base) = match w {
            Some(w) => (w.start_step, w.latents.to_vec_f32()?),
            None => (0, vec![0.0; t]),
        };
        let runs = r.steps - start;
        let lat: Vec<f32> = base.iter().map(|x| x + runs as f32).collect();
        let n = (r.seconds * f64::from(SR)) as usize;
        Ok(Generation {
            audio: Audio::new(vec![0.25; n], 1, SR)?,
            latents: Tensor::from_vec(lat, &[1, 1, t])?,
            step_times: vec![Duration::from_millis(1); runs],
            total: Duration::from_millis(runs as u64),
        })
    }
    fn decode(&self, l: &Tensor, r: &Request) -> aria_cache::Result<Audio> {
        let _ = l;
        Audio::new(vec![0.0; (r.seconds * f64::from(SR)) as usize], 1, SR)
    }
}

fn open(dir: &std::path::Path, skip: SkipPolicy) -> Cache {
    let cfg = CacheConfig {
        skip,
        ..Default::default()
    };
    Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        Arc::new(FirstWord),
        cfg,
    )
    .unwrap()
}

#[test]
fn hits_reuse_latents_or_stretch_audio_and_book_importance() {
    let dir = TempDir::new("cache-mock");
    let g = Mock::default();
    let mut c = open(&dir, SkipPolicy::Fraction(0.5));

    // Empty: cold, 8 steps, admitted.
    let a = c
        .generate(&g, &Request::new("rain on a roof", 2.0, 8, 1))
        .unwrap();
    assert_eq!(
        (a.reference, a.start_step, a.steps_run, a.sigma),
        (None, 0, 8, 1.0)
    );
    let id_a = a.admitted.unwrap();
    assert!(g.encoded.borrow().is_empty());

    // Same duration: the stored latents (all 8.0) start at step 4, σ = 0.5; nothing encoded.
    let b = c
        .generate(&g, &Request::new("rain again", 2.0, 8, 2))
        .unwrap();
    assert_eq!(b.reference, Some(id_a));
    assert_eq!(b.alignment, Some(Alignment::StoredLatents));
    assert_eq!((b.start_step, b.steps_run, b.sigma), (4, 4, 0.5));
    assert_eq!(b.generation.latents.to_vec_f32().unwrap(), vec![12.0; 200]);
    assert!(g.encoded.borrow().is_empty());

    // Another duration inside the gate (2 s for 3 s; rate 2/3): the audio is stretched to 3000
    // samples and encoded.
    let d = c
        .generate(&g, &Request::new("rain later", 3.0, 8, 3))
        .unwrap();
    assert!(d.reference.is_some());
    assert!(
        matches!(d.alignment, Some(Alignment::Stretched { rate }) if (rate - 2.0 / 3.0).abs() < 1e-9)
    );
    assert_eq!(*g.encoded.borrow(), vec![3000]);

    // Outside the gate (2 s and 3 s entries against 10 s): cold.
    let e = c
        .generate(&g, &Request::new("rain long", 10.0, 8, 4))
        .unwrap();
    assert_eq!((e.reference, e.start_step), (None, 0));
    // Another subject: cold too (s_pos = 0 is below the similarity floor).
    let f = c
        .generate(&g, &Request::new("dog barks", 2.0, 8, 5))
        .unwrap();
    assert!(f.reference.is_none());

    // Importance: Σ skipped steps × duration over the reuses of each reference (eq. 7),
    // decayed by 0.9 per hour between the reuses (milliseconds here).
    let total: f64 = c.list().unwrap().iter().map(|e| e.data.importance).sum();
    let want = 4.0 * 2.0 + 4.0 * 3.0;
    assert!(total <= want && want - total < 1e-3, "{total}");
    let hits: u64 = c.list().unwrap().iter().map(|e| e.hits).sum();
    assert_eq!(hits, 2);
    assert_eq!(c.len(), 5);
    // Quality scores: s_neg against "low quality" (orthogonal here).
    let q = &c.list().unwrap()[0].data.quality;
    assert_eq!(q["s_neg:first-word"], 0.0);
    drop(c);

    // Without admission nothing is added.
    let mut c = Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        Arc::new(FirstWord),
        CacheConfig {
            admit: false,
            ..Default::default()
        },
    )
    .unwrap();
    let r = c
        .generate(&g, &Request::new("dog again", 2.0, 8, 6))
        .unwrap();
    assert!(r.reference.is_some() && r.admitted.is_none());
    assert_eq!(c.len(), 5);
    assert_eq!(c.clear().unwrap(), 5);
    assert!(c.is_empty());
    drop(c);
}

#[test]
fn skip_policy_clamps() {
    assert_eq!(SkipPolicy::Fraction(0.5).start_step(8), 4);
    assert_eq!(SkipPolicy::Fraction(0.55).start_step(8), 4);
    assert_eq!(SkipPolicy::Fraction(0.6).start_step(8), 5);
    assert_eq!(SkipPolicy::Fraction(2.0).start_step(8), 8);
    assert_eq!(SkipPolicy::Fraction(f32::NAN).start_step(8), 0);
    assert_eq!(SkipPolicy::Steps(12).start_step(8), 8);
    assert_eq!(SkipPolicy::default().start_step(8), 4);
}
