//! The cache manager: importance with decay, eviction order and capacity, admission policies,
//! the cache wired to it, and the refinement worker (best of 3, at most 5 attempts, bounded
//! share, paused by requests, cancelled on drop).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_cache::manager::{
    tonality, Admission, Capacity, Manager, ManagerConfig, RefineConfig, Refiner, QUALITY,
};
use aria_cache::store::{NewEntry, SqliteStore, Store};
use aria_cache::{
    Audio, Cache, CacheConfig, Embedder, Generation, Generator, Request, Result, WarmLatents,
};
use aria_core::Tensor;
use aria_testing::TempDir;

const HOUR: i64 = 3_600_000;

fn clip(prompt: &str, samples: usize) -> NewEntry {
    NewEntry {
        prompt: prompt.into(),
        seconds: 1.0,
        audio: Some(Audio::new(vec![0.1; samples], 1, 1000).unwrap()),
        steps: 8,
        origin: "generated".into(),
        ..Default::default()
    }
}

#[test]
fn eviction_follows_decayed_importance_then_age() {
    let dir = TempDir::new("manager-order");
    let mut s = SqliteStore::open(dir.join("cache.sqlite")).unwrap();
    let ids: Vec<u64> = (0..4)
        .map(|i| s.insert(&clip(&format!("p{i}"), 10)).unwrap())
        .collect();
    let t0 = s.get(ids[0]).unwrap().unwrap().used_ms;
    // ids[1]: 10 step·s two hours ago; ids[2]: 9 now; ids[3]: 5 now; ids[0]: never reused.
    s.record_hit(ids[1], 10.0, t0 + HOUR).unwrap();
    s.record_hit(ids[2], 9.0, t0 + 3 * HOUR).unwrap();
    s.record_hit(ids[3], 5.0, t0 + 3 * HOUR).unwrap();
    let cfg = ManagerConfig {
        capacity: Capacity::entries(4),
        new_entry_importance: 0.0,
        ..Default::default()
    };
    let m = Manager::open(cfg.clone(), &s).unwrap();
    let now = t0 + 3 * HOUR;
    assert!((m.importance(ids[1], now).unwrap() - 10.0 * 0.81).abs() < 1e-9);
    // 8.1 < 9: the older reuse decayed below the newer one.
    let order: Vec<u64> = m.eviction_order().collect();
    assert_eq!(order, vec![ids[0], ids[3], ids[1], ids[2]]);
    assert_eq!(m.weakest(now).unwrap().0, ids[0]);
    // The order holds at any later time (common decay factor).
    let later = now + 50 * HOUR;
    let mut by_imp = ids.clone();
    by_imp.sort_by(|a, b| {
        m.importance(*a, later)
            .unwrap()
            .total_cmp(&m.importance(*b, later).unwrap())
    });
    assert_eq!(by_imp, order);

    // Ties go oldest first: two never-reused entries.
    let mut m = Manager::open(cfg, &s).unwrap();
    let e = clip("late", 10);
    let late = s.insert(&e).unwrap();
    m.on_insert(late, &e, now + 1);
    assert_eq!(
        m.eviction_order().take(2).collect::<Vec<_>>(),
        vec![ids[0], late]
    );
    let gone = m.evict(&mut s, Some(late)).unwrap();
    assert_eq!(gone, vec![ids[0]]);
    assert!(s.get(ids[0]).unwrap().is_none());
    assert_eq!((m.len(), s.list().unwrap().len()), (4, 4));
}

#[test]
fn capacity_by_bytes_and_admission_policies() {
    let dir = TempDir::new("manager-bytes");
    let mut s = SqliteStore::open(dir.join("cache.sqlite")).unwrap();
    // 100 samples = 400 bytes each; at most 1 000 bytes.
    let cfg = ManagerConfig {
        capacity: Capacity {
            max_entries: None,
            max_bytes: Some(1000),
        },
        ..Default::default()
    };
    let mut m = Manager::open(cfg, &s).unwrap();
    let now = 1_000 * HOUR;
    let mut ids = Vec::new();
    for i in 0..4 {
        let (id, ev) = m
            .admit(&mut s, clip(&format!("b{i}"), 100), now + i)
            .unwrap();
        ids.push(id.unwrap());
        assert_eq!(ev.len(), usize::from(i >= 2), "round {i}");
        assert!(m.bytes() <= 1000);
    }
    assert_eq!(s.stats().unwrap().payload_bytes, m.bytes());
    assert_eq!(s.list().unwrap().len(), 2);
    // A clip larger than the whole capacity is refused.
    assert_eq!(m.admit(&mut s, clip("huge", 300), now).unwrap().0, None);

    // Quality threshold.
    let dir = TempDir::new("manager-quality");
    let mut s = SqliteStore::open(dir.join("cache.sqlite")).unwrap();
    let cfg = ManagerConfig {
        admission: Admission::MinQuality(0.5),
        ..Default::default()
    };
    let mut m = Manager::open(cfg, &s).unwrap();
    let mut good = clip("good", 10);
    good.quality.insert(QUALITY.into(), 0.7);
    let mut bad = clip("bad", 10);
    bad.quality.insert(QUALITY.into(), 0.2);
    assert!(m.admit(&mut s, good, now).unwrap().0.is_some());
    assert!(m.admit(&mut s, bad, now).unwrap().0.is_none());
    assert!(m
        .admit(&mut s, clip("unscored", 10), now)
        .unwrap()
        .0
        .is_none());

    // More important than the weakest when full.
    let dir = TempDir::new("manager-weakest");
    let mut s = SqliteStore::open(dir.join("cache.sqlite")).unwrap();
    let cfg = ManagerConfig {
        capacity: Capacity::entries(2),
        admission: Admission::BeatsWeakest,
        new_entry_importance: 2.0,
    };
    let mut m = Manager::open(cfg, &s).unwrap();
    let a = m.admit(&mut s, clip("a", 10), now).unwrap().0.unwrap();
    let b = m.admit(&mut s, clip("b", 10), now).unwrap().0.unwrap();
    s.record_hit(a, 40.0, now).unwrap();
    m.on_hit(a, 40.0, now);
    s.record_hit(b, 40.0, now).unwrap();
    m.on_hit(b, 40.0, now);
    // Both weigh 42 now: a newcomer (2) is refused ...
    assert!(m.admit(&mut s, clip("c", 10), now).unwrap().0.is_none());
    // ... until they have decayed below 2 (ln 21 / ln(1/0.9) ≈ 29 hours).
    let (c, ev) = m.admit(&mut s, clip("c", 10), now + 30 * HOUR).unwrap();
    assert!(c.is_some());
    assert_eq!(ev.len(), 1);
    assert_eq!(s.list().unwrap().len(), 2);
}

/// Same first word, same vector: one dimension per word of [`WORDS`], one for the rest.
struct FirstWord;

const WORDS: [&str; 10] = [
    "rain", "dog", "car", "bell", "wind", "x1", "y2", "z3", "w4", "low",
];

impl Embedder for FirstWord {
    fn name(&self) -> &str {
        "first-word"
    }
    fn dim(&self) -> usize {
        WORDS.len() + 1
    }
    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let w = t.split_whitespace().next().unwrap_or("");
                let k = WORDS.iter().position(|x| *x == w).unwrap_or(WORDS.len());
                let mut v = vec![0f32; WORDS.len() + 1];
                v[k] = 1.0;
                v
            })
            .collect())
    }
}

const SR: u32 = 8000;

/// Noise or a tone: a tone when `seed % 3 == tone_mod`; counts its generations and sleeps
/// `delay` in each.
struct Mock {
    tone_mod: u64,
    delay: Duration,
    calls: AtomicUsize,
}

impl Mock {
    fn new(tone_mod: u64, delay: Duration) -> Mock {
        Mock {
            tone_mod,
            delay,
            calls: AtomicUsize::new(0),
        }
    }
}

fn noise_or_tone(seed: u64, tone: bool, n: usize) -> Vec<f32> {
    let mut r = aria_cache::select::SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            if tone {
                (i as f32 * 0.3).sin()
            } else {
                r.next_f64() as f32 - 0.5
            }
        })
        .collect()
}

impl Generator for Mock {
    fn id(&self) -> String {
        "mock".into()
    }
    fn sample_rate(&self) -> u32 {
        SR
    }
    fn latent_shape(&self, r: &Request) -> Result<Vec<usize>> {
        Ok(vec![1, 1, ((r.seconds * 10.0).round() as usize).max(1)])
    }
    fn sigmas(&self, r: &Request) -> Result<Vec<f32>> {
        Ok((0..=r.steps)
            .map(|i| 1.0 - i as f32 / r.steps as f32)
            .collect())
    }
    fn encode(&self, _a: &Audio, r: &Request) -> Result<Tensor> {
        let t = self.latent_shape(r)?[2];
        Ok(Tensor::from_vec(vec![0.0; t], &[1, 1, t])?)
    }
    fn generate(&self, r: &Request, _w: Option<&WarmLatents>) -> Result<Generation> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let t = self.latent_shape(r)?[2];
        let n = (r.seconds * f64::from(SR)) as usize;
        let tone = r.seed % 3 == self.tone_mod;
        Ok(Generation {
            audio: Audio::new(noise_or_tone(r.seed, tone, n), 1, SR)?,
            latents: Tensor::from_vec(vec![r.seed as f32; t], &[1, 1, t])?,
            step_times: Vec::new(),
            total: self.delay,
        })
    }
    fn decode(&self, _l: &Tensor, r: &Request) -> Result<Audio> {
        Audio::new(vec![0.0; (r.seconds * f64::from(SR)) as usize], 1, SR)
    }
}

#[test]
fn the_cache_admits_scores_and_evicts_through_its_manager() {
    let dir = TempDir::new("manager-cache");
    let path = dir.join("cache.sqlite");
    let cfg = CacheConfig {
        manager: Some(ManagerConfig {
            capacity: Capacity::entries(3),
            ..Default::default()
        }),
        ..Default::default()
    };
    let g = Mock::new(0, Duration::ZERO);
    let mut c = Cache::open(
        Box::new(SqliteStore::open(&path).unwrap()),
        Arc::new(FirstWord),
        cfg.clone(),
    )
    .unwrap();
    for (i, p) in ["rain a", "dog b", "car c", "bell d", "wind e"]
        .iter()
        .enumerate()
    {
        let out = c.generate(&g, &Request::new(*p, 0.5, 8, i as u64)).unwrap();
        let id = out.admitted.unwrap();
        let e = c.get(id).unwrap().unwrap();
        let q = e.data.quality[QUALITY];
        assert!((q - tonality(e.data.audio.as_ref().unwrap())).abs() < 1e-6);
        assert!(c.len() <= 3 && c.list().unwrap().len() == c.len());
    }
    // A reused entry outlives the newer ones that were not.
    let first = c.list().unwrap()[0].id;
    let out = c
        .generate(&g, &Request::new("car again", 0.5, 8, 9))
        .unwrap();
    assert_eq!(out.reference, Some(first));
    for (i, p) in ["x1", "y2", "z3", "w4"].iter().enumerate() {
        c.generate(&g, &Request::new(*p, 0.5, 8, 20 + i as u64))
            .unwrap();
    }
    let ids: Vec<u64> = c.list().unwrap().iter().map(|e| e.id).collect();
    assert!(ids.contains(&first), "{ids:?}");
    assert_eq!(ids.len(), 3);
    drop(c);
    // Reopened: the manager reloads the same bookkeeping.
    let c = Cache::open(
        Box::new(SqliteStore::open(&path).unwrap()),
        Arc::new(FirstWord),
        cfg,
    )
    .unwrap();
    let m = c.manager().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m.bytes(), c.stats().unwrap().payload_bytes);
}

/// A store with one weak, reused entry (noise) of prompt `prompt`.
fn weak_entry(path: &std::path::Path) -> u64 {
    let mut s = SqliteStore::open(path).unwrap();
    let mut e = clip("rain on a roof", 0);
    e.audio = Some(Audio::new(noise_or_tone(7, false, 4000), 1, SR).unwrap());
    e.seconds = 0.5;
    assert!(tonality(e.audio.as_ref().unwrap()) < 0.15);
    // Weak, yet above what any noise scores: only a tone beats it.
    e.quality.insert(QUALITY.into(), 0.25);
    e.embeddings.insert(
        "first-word".into(),
        FirstWord.embed_texts(&["rain"]).unwrap()[0].clone(),
    );
    let id = s.insert(&e).unwrap();
    s.record_hit(id, 12.0, aria_cache::store::now_ms()).unwrap();
    id
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

fn fast() -> RefineConfig {
    RefineConfig {
        share: 1.0,
        per_minute: 10_000,
        idle: Duration::from_millis(20),
        ..Default::default()
    }
}

#[test]
fn refinement_keeps_the_best_of_three_and_the_bookkeeping() {
    let dir = TempDir::new("manager-refine");
    let path = dir.join("cache.sqlite");
    let id = weak_entry(&path);
    let before = SqliteStore::open(&path).unwrap().get(id).unwrap().unwrap();
    // A tone on one seed in three: one attempt of three candidates finds one almost surely.
    let gen = Arc::new(Mock::new(0, Duration::ZERO));
    let r = Refiner::spawn(
        Box::new(SqliteStore::open(&path).unwrap()),
        gen.clone(),
        Arc::new(FirstWord),
        fast(),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || r.stats().replaced == 1));
    assert_eq!(r.take_refined(), vec![id]);
    std::thread::sleep(Duration::from_millis(100));
    let st = r.stats();
    drop(r);
    // Each attempt is three generations; the entry stopped being weak once replaced.
    assert_eq!(st.generations, 3 * st.attempts);
    assert_eq!(st.replaced, 1);
    let after = SqliteStore::open(&path).unwrap().get(id).unwrap().unwrap();
    assert!(
        after.data.quality[QUALITY] > 0.9,
        "{:?}",
        after.data.quality
    );
    assert_eq!(after.data.origin, "refined");
    assert_eq!(
        (
            after.hits,
            after.data.importance,
            after.created_ms,
            after.used_ms
        ),
        (
            before.hits,
            before.data.importance,
            before.created_ms,
            before.used_ms
        )
    );
    assert_eq!(after.data.seed.unwrap() % 3, 0);
    // The cache picks the refined clip up.
    let mut c = Cache::open(
        Box::new(SqliteStore::open(&path).unwrap()),
        Arc::new(FirstWord),
        CacheConfig::default(),
    )
    .unwrap();
    assert!(c.reload(id).unwrap());
    assert_eq!(c.len(), 1);
}

#[test]
fn at_most_five_attempts_per_entry_even_across_restarts() {
    let dir = TempDir::new("manager-attempts");
    let path = dir.join("cache.sqlite");
    let id = weak_entry(&path);
    // Never a tone: never better.
    let gen = Arc::new(Mock::new(99, Duration::ZERO));
    let r = Refiner::spawn(
        Box::new(SqliteStore::open(&path).unwrap()),
        gen.clone(),
        Arc::new(FirstWord),
        fast(),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || r.stats().attempts == 5));
    std::thread::sleep(Duration::from_millis(150));
    let st = r.stats();
    drop(r);
    assert_eq!(
        (st.attempts, st.generations, st.replaced, st.errors),
        (5, 15, 0, 0)
    );
    let s = SqliteStore::open(&path).unwrap();
    let blob = s
        .get_state(aria_cache::manager::ATTEMPTS_KEY)
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8(blob).unwrap(), format!("{{\"{id}\":5}}"));
    // A new worker on the same store does not start over.
    let r = Refiner::spawn(Box::new(s), gen.clone(), Arc::new(FirstWord), fast()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(r.stats().attempts, 0);
    assert_eq!(gen.calls.load(Ordering::SeqCst), 15);
}

#[test]
fn the_worker_keeps_to_its_share_pauses_for_requests_and_stops_on_drop() {
    let dir = TempDir::new("manager-share");
    let path = dir.join("cache.sqlite");
    weak_entry(&path);
    let gen = Arc::new(Mock::new(99, Duration::from_millis(20)));
    let cfg = RefineConfig {
        share: 0.25,
        max_attempts: 1000,
        ..fast()
    };
    let r = Refiner::spawn(
        Box::new(SqliteStore::open(&path).unwrap()),
        gen.clone(),
        Arc::new(FirstWord),
        cfg.clone(),
    )
    .unwrap();
    // Paused while a request runs.
    let guard = r.request();
    let held = gen.calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    // At most the generation that was already running when the request came.
    assert!(gen.calls.load(Ordering::SeqCst) <= held + 1);
    drop(guard);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1200));
    let st = r.stats();
    let wall = t0.elapsed().as_secs_f64();
    assert!(st.generations >= 5, "{st:?}");
    // Busy at most a quarter of the time (one 20 ms generation of slack).
    assert!(
        st.busy.as_secs_f64() <= 0.25 * (wall + 0.3) + 0.02,
        "{st:?} over {wall} s"
    );
    let t0 = Instant::now();
    drop(r);
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    let n = gen.calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(gen.calls.load(Ordering::SeqCst), n);

    // Generations per minute are capped too.
    let gen = Arc::new(Mock::new(99, Duration::ZERO));
    let r = Refiner::spawn(
        Box::new(SqliteStore::open(&path).unwrap()),
        gen.clone(),
        Arc::new(FirstWord),
        RefineConfig {
            per_minute: 4,
            ..cfg
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(r);
    assert_eq!(gen.calls.load(Ordering::SeqCst), 4);
}
