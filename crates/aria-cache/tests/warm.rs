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
    /// Whether it says how many latent frames a duration covers (fitted latents).
    frames: bool,
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
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        self.frames
            .then(|| ((seconds * 100.0).round() as usize).max(1))
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
    // decayed by 0.9 per hour between the reuses (milliseconds here), on top of the importance
    // each of the 5 admitted results starts with (the default, bounded manager's).
    let total: f64 = c.list().unwrap().iter().map(|e| e.data.importance).sum();
    let start = aria_cache::manager::ManagerConfig::default().new_entry_importance;
    let want = 4.0 * 2.0 + 4.0 * 3.0 + 5.0 * start;
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

/// Latents first: a reference within the tolerance starts from its stored latents cropped or
/// tiled to the request's frames, with nothing encoded; the warm start is exactly the
/// generator's run from those fitted latents; beyond the tolerance the audio is stretched and
/// encoded; with a tolerance of 0 (or a generator that cannot count frames) only equal
/// durations reuse latents.
#[test]
fn close_durations_start_from_fitted_latents_without_an_encode() {
    let dir = TempDir::new("cache-fit");
    let g = Mock {
        frames: true,
        ..Default::default()
    };
    let mut c = open(&dir, SkipPolicy::Fraction(0.5));
    assert_eq!(
        c.config().latent_tolerance,
        aria_cache::warm::LATENT_TOLERANCE
    );
    // A 2 s entry whose 200 latent frames are a ramp 0, 1, …, 199.
    let ramp: Vec<f32> = (0..200).map(|i| i as f32).collect();
    let req0 = Request::new("rain on a roof", 2.0, 8, 1);
    let gen0 = Generation {
        audio: Audio::new(vec![0.25; 2000], 1, SR).unwrap(),
        latents: Tensor::from_vec(ramp.clone(), &[1, 1, 200]).unwrap(),
        step_times: vec![],
        total: Duration::ZERO,
    };
    let id = c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();

    // 2.4 s (rate 2/2.4 = 0.833, inside [0.8, 1.25]): 240 frames, the ramp then its first 40
    // frames again; 4 steps run from step 4, so the mock adds 4 to each.
    let req = Request::new("rain again", 2.4, 8, 2);
    let w = c.generate(&g, &req).unwrap();
    assert_eq!(w.reference, Some(id));
    assert!(
        matches!(w.alignment, Some(Alignment::FittedLatents { rate }) if (rate - 2.0 / 2.4).abs() < 1e-12),
        "{:?}",
        w.alignment
    );
    let want: Vec<f32> = (0..240).map(|t| ramp[t % 200] + 4.0).collect();
    assert_eq!(w.generation.latents.to_vec_f32().unwrap(), want);
    assert!(g.encoded.borrow().is_empty(), "nothing encoded");
    assert_eq!(w.overhead.encode, Duration::ZERO);
    // The same bits as the generator started from the fitted latents at that step.
    let fitted = aria_cache::warm::fit_frames("t", &ramp, &[1, 1, 200], 200, &[1, 1, 240]).unwrap();
    let direct = g
        .generate(
            &req,
            Some(&WarmLatents {
                latents: fitted,
                start_step: 4,
            }),
        )
        .unwrap();
    assert_eq!(
        w.generation.latents.to_vec_f32().unwrap(),
        direct.latents.to_vec_f32().unwrap()
    );
    c.clear().unwrap();
    let id = c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();

    // 1.7 s (rate 1.18): the first 170 frames, cropped.
    let w = c
        .generate(&g, &Request::new("rain short", 1.7, 8, 3))
        .unwrap();
    assert_eq!(w.reference, Some(id));
    assert!(matches!(w.alignment, Some(Alignment::FittedLatents { .. })));
    let want: Vec<f32> = (0..170).map(|t| ramp[t] + 4.0).collect();
    assert_eq!(w.generation.latents.to_vec_f32().unwrap(), want);
    assert!(g.encoded.borrow().is_empty());
    c.clear().unwrap();
    c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();

    // 1.4 s (rate 1.43, beyond the tolerance, inside the gate): a longer reference is
    // cropped all the same (`crop_longer`, the default), its first 140 frames.
    let w = c
        .generate(&g, &Request::new("rain brief", 1.4, 8, 5))
        .unwrap();
    assert!(
        matches!(w.alignment, Some(Alignment::FittedLatents { rate }) if (rate - 2.0 / 1.4).abs() < 1e-12),
        "{:?}",
        w.alignment
    );
    let want: Vec<f32> = (0..140).map(|t| ramp[t] + 4.0).collect();
    assert_eq!(w.generation.latents.to_vec_f32().unwrap(), want);
    assert!(g.encoded.borrow().is_empty());
    c.clear().unwrap();
    c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();

    // 2.9 s (rate 0.69, inside the gate, beyond the tolerance): stretched and encoded.
    let w = c
        .generate(&g, &Request::new("rain longer", 2.9, 8, 4))
        .unwrap();
    assert!(matches!(w.alignment, Some(Alignment::Stretched { .. })));
    assert_eq!(*g.encoded.borrow(), vec![2900]);
    drop(c);

    // Tolerance 0: only an equal duration reuses latents.
    let dir = TempDir::new("cache-fit");
    let mut c = Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        Arc::new(FirstWord),
        CacheConfig {
            latent_tolerance: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();
    let w = c
        .generate(&g, &Request::new("rain again", 2.4, 8, 2))
        .unwrap();
    assert!(matches!(w.alignment, Some(Alignment::Stretched { .. })));
    drop(c);

    // Without `crop_longer`, a longer reference beyond the tolerance is stretched.
    let dir = TempDir::new("cache-fit");
    let mut c = Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        Arc::new(FirstWord),
        CacheConfig {
            crop_longer: false,
            ..Default::default()
        },
    )
    .unwrap();
    c.admit_generation(&g, &req0, &gen0, None).unwrap().unwrap();
    let w = c
        .generate(&g, &Request::new("rain brief", 1.4, 8, 5))
        .unwrap();
    assert!(matches!(w.alignment, Some(Alignment::Stretched { .. })));
    drop(c);

    // A tolerance that is not a finite, non-negative number is refused, naming the setting.
    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        let e = Cache::open(
            store::open(dir.to_str().unwrap()).unwrap(),
            Arc::new(FirstWord),
            CacheConfig {
                latent_tolerance: bad,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("latent_tolerance"), "{e}");
    }
}

/// The store's counters follow what the cache did: requests, hits by how they started, the
/// steps skipped and the start steps, admissions.
#[test]
fn the_store_counts_requests_hits_and_starts() {
    use aria_cache::cache::counter;
    let dir = TempDir::new("cache-count");
    let g = Mock::default();
    let mut c = open(&dir, SkipPolicy::Fraction(0.5));
    for (p, secs) in [
        ("rain on a roof", 2.0),
        ("rain again", 2.0),
        ("rain later", 3.0),
    ] {
        c.generate(&g, &Request::new(p, secs, 8, 1)).unwrap();
    }
    let n = c.store().counters().unwrap();
    let get = |k: &str| n.get(k).copied().unwrap_or(0);
    assert_eq!(get(counter::REQUESTS), 3);
    assert_eq!(get(counter::HITS), 2);
    assert_eq!(get(counter::STORED_LATENTS), 1);
    assert_eq!(get(counter::STRETCHED_AUDIO), 1);
    assert_eq!(get(counter::FITTED_LATENTS), 0);
    assert_eq!(get(counter::SKIPPED_STEPS), 8);
    assert_eq!(get(&format!("{}4", counter::START_STEP)), 2);
    assert_eq!(get(counter::ADMITTED), 3);
    assert_eq!(get(counter::EVICTED), 0);
}

/// `s_neg` (eq. 1–2) is measured against the request's negative prompt when it has one, else
/// against "low quality".
#[test]
fn s_neg_follows_the_requests_negative_prompt() {
    let dir = TempDir::new("cache-neg");
    let g = Mock::default();
    let mut c = open(&dir, SkipPolicy::Fraction(0.5));
    c.generate(&g, &Request::new("rain on a roof", 2.0, 8, 1))
        .unwrap();
    let plain = c.lookup(&Request::new("rain again", 2.0, 8, 2)).unwrap();
    assert_eq!(plain.candidates.len(), 1);
    assert_eq!(plain.candidates[0].s_neg, 0.0);
    let mut req = Request::new("rain again", 2.0, 8, 2);
    req.negative_prompt = Some("rain and thunder".into());
    let neg = c.lookup(&req).unwrap();
    assert_eq!(
        neg.candidates[0].s_neg, 1.0,
        "the entry is what the request avoids"
    );
    req.negative_prompt = Some("  ".into());
    assert_eq!(c.lookup(&req).unwrap().candidates[0].s_neg, 0.0);
}

/// `fit_frames` crops, tiles per row, and refuses shapes that cannot fit.
#[test]
fn fit_frames_crops_and_tiles_each_row() {
    use aria_cache::warm::fit_frames;
    // Two rows of 5 frames, 3 of which hold the clip.
    let data: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let x = fit_frames("t", &data, &[1, 2, 5], 3, &[1, 2, 7]).unwrap();
    assert_eq!(
        x.to_vec_f32().unwrap(),
        vec![0., 1., 2., 0., 1., 2., 0., 5., 6., 7., 5., 6., 7., 5.]
    );
    let x = fit_frames("t", &data, &[1, 2, 5], 9, &[1, 2, 2]).unwrap();
    assert_eq!(x.to_vec_f32().unwrap(), vec![0., 1., 5., 6.]);
    for (from, to) in [
        (vec![1, 2, 5], vec![1, 3, 5]),
        (vec![1, 2, 5], vec![1, 2, 0]),
        (vec![1, 5, 2], vec![1, 2, 5]),
        (vec![], vec![1]),
    ] {
        let e = fit_frames("entry 7", &data, &from, 3, &to).unwrap_err();
        assert!(e.to_string().contains("entry 7"), "{e}");
    }
    let e = fit_frames("entry 7", &data[..9], &[1, 2, 5], 3, &[1, 2, 5]).unwrap_err();
    assert!(e.to_string().contains("9 latent values"), "{e}");
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
