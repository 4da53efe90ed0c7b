//! The skip gater's saved state (round trip, truncated and corrupt bytes, the SQLite store) and
//! the gater inside the cache (`SkipPolicy::Gated`).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use aria_cache::gater::sim::{self, SimConfig, Simulator};
use aria_cache::gater::{state_key, Exploration, Fallback, Gater, GaterConfig};
use aria_cache::{
    store, Audio, Cache, CacheConfig, Embedder, Generation, Generator, Request, SkipPolicy,
    WarmLatents,
};
use aria_core::Tensor;
use aria_testing::TempDir;

fn trained() -> Gater {
    let mut s = Simulator::new(SimConfig::default());
    let mut g = Gater::new(
        GaterConfig {
            exploration: Exploration::EpsilonGreedy { epsilon: 0.1 },
            rank_window: 16,
            ..Default::default()
        },
        16,
    )
    .unwrap();
    sim::run(&mut g, &mut s, 300).unwrap();
    g
}

#[test]
fn state_round_trips_bit_for_bit() {
    let g = trained();
    let b = g.to_bytes();
    let back = Gater::from_bytes(&b).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.to_bytes(), b);
    // The restored gater continues exactly like the original.
    let (mut a, mut c) = (g, back);
    let mut s1 = Simulator::new(SimConfig::default());
    let mut s2 = s1.clone();
    assert_eq!(
        sim::run(&mut a, &mut s1, 50).unwrap(),
        sim::run(&mut c, &mut s2, 50).unwrap()
    );
}

#[test]
fn truncated_or_corrupt_state_is_an_error() {
    let b = trained().to_bytes();
    for n in (0..b.len())
        .step_by(b.len() / 60)
        .chain(b.len() - 9..b.len())
    {
        let e = Gater::from_bytes(&b[..n]).unwrap_err().to_string();
        assert!(
            e.contains("truncated") || e.contains("checksum") || e.contains("magic"),
            "{n}: {e}"
        );
    }
    for at in (0..b.len()).step_by(b.len() / 80) {
        let mut c = b.clone();
        c[at] ^= 0x40;
        assert!(Gater::from_bytes(&c).is_err(), "flip at {at}");
    }
    let mut v = b.clone();
    v[8] = 9;
    let e = Gater::from_bytes(&v).unwrap_err().to_string();
    assert!(e.contains("version 9"), "{e}");
    assert!(Gater::from_bytes(b"not a gater at all, really")
        .unwrap_err()
        .to_string()
        .contains("magic"));
    let mut long = b.clone();
    long.extend_from_slice(&[0; 8]);
    assert!(Gater::from_bytes(&long).is_err());
}

#[test]
fn state_persists_in_the_sqlite_store() {
    let dir = TempDir::new("gater-store");
    let g = trained();
    {
        let mut st = store::open(dir.to_str().unwrap()).unwrap();
        g.save(st.as_mut(), "emb").unwrap();
    }
    let st = store::open(dir.to_str().unwrap()).unwrap();
    assert!(st.get_state(&state_key("emb")).unwrap().is_some());
    let cfg = *g.config();
    let back = Gater::load(st.as_ref(), "emb", 16, cfg).unwrap();
    assert_eq!(back, g);
    // Another embedder (or dimension) starts fresh.
    assert_eq!(
        Gater::load(st.as_ref(), "other", 16, cfg)
            .unwrap()
            .updates(),
        0
    );
    assert_eq!(
        Gater::load(st.as_ref(), "emb", 8, cfg).unwrap().updates(),
        0
    );
    // New run-time parameters keep what was learned.
    let greedy = GaterConfig {
        exploration: Exploration::Greedy,
        ..cfg
    };
    let b = Gater::load(st.as_ref(), "emb", 16, greedy).unwrap();
    assert_eq!(b.updates(), g.updates());
    assert_eq!(b.config().exploration, Exploration::Greedy);
    drop(st);
    // A corrupt saved state is an error, not a silent reset.
    let mut st = store::open(dir.to_str().unwrap()).unwrap();
    st.put_state(&state_key("emb"), b"ARIAGATE\x01\0\0\0garbage!")
        .unwrap();
    assert!(Gater::load(st.as_ref(), "emb", 16, cfg).is_err());
    drop(st);
}

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
                let k = match t.split_whitespace().next().unwrap_or("") {
                    "rain" => 0,
                    "dog" => 1,
                    "low" => 2,
                    _ => 3,
                };
                let mut v = vec![0f32; 4];
                v[k] = 1.0;
                v
            })
            .collect())
    }
}

/// 1 kHz mono, one latent per 10 samples.
struct Mock;

impl Generator for Mock {
    fn id(&self) -> String {
        "mock".into()
    }
    fn sample_rate(&self) -> u32 {
        1000
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
        let t = self.latent_shape(r)?[2];
        let v = (0..t)
            .map(|i| a.samples.get(i * 10).copied().unwrap_or(0.0))
            .collect();
        Ok(Tensor::from_vec(v, &[1, 1, t])?)
    }
    fn generate(&self, r: &Request, w: Option<&WarmLatents>) -> aria_cache::Result<Generation> {
        let t = self.latent_shape(r)?[2];
        let runs = r.steps - w.map_or(0, |w| w.start_step);
        let n = (r.seconds * 1000.0) as usize;
        Ok(Generation {
            audio: Audio::new(vec![0.25; n], 1, 1000)?,
            latents: Tensor::from_vec(vec![0.0; t], &[1, 1, t])?,
            step_times: vec![Duration::from_millis(1); runs],
            total: Duration::from_millis(runs as u64),
        })
    }
    fn decode(&self, _l: &Tensor, r: &Request) -> aria_cache::Result<Audio> {
        Audio::new(vec![0.0; (r.seconds * 1000.0) as usize], 1, 1000)
    }
}

fn gated(dir: &std::path::Path) -> Cache {
    let cfg = CacheConfig {
        skip: SkipPolicy::Gated(GaterConfig::default()),
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
fn the_cache_asks_the_gater_and_saves_it() {
    let dir = TempDir::new("gater-cache");
    let g = Mock;
    let mut c = gated(&dir);
    assert_eq!(c.gater().unwrap().gater().updates(), 0);
    // Cold: nothing to warm-start from, the gater is not asked.
    let a = c
        .generate(&g, &Request::new("rain on a roof", 2.0, 8, 1))
        .unwrap();
    assert!(a.reference.is_none());
    assert_eq!(c.gater().unwrap().gater().updates(), 0);
    // A hit: novel context, the conservative 20 % = 2 of 8 steps; the gater learns.
    let b = c
        .generate(&g, &Request::new("rain on glass", 2.0, 8, 2))
        .unwrap();
    assert!(b.reference.is_some());
    assert_eq!(b.start_step, 2);
    assert!(b.overhead.gate > Duration::ZERO);
    assert_eq!(c.gater().unwrap().gater().updates(), 1);
    let mut hits = 1;
    for i in 0..20u64 {
        let o = c
            .generate(
                &g,
                &Request::new("rain again", 2.0 + 0.05 * i as f64, 8, 3 + i),
            )
            .unwrap();
        if o.reference.is_some() {
            hits += 1;
            assert!(o.start_step <= 5, "{}", o.start_step);
        }
    }
    let learned = c.gater().unwrap().gater().clone();
    assert_eq!(learned.updates(), hits);
    drop(c);
    // Reopened: the same gater.
    let c = gated(&dir);
    assert_eq!(c.gater().unwrap().gater(), &learned);
    drop(c);
}

#[test]
fn gated_policy_without_a_gater_is_conservative() {
    let p = SkipPolicy::Gated(GaterConfig::default());
    assert_eq!(p.start_step(8), 2);
    assert_eq!(p.start_step(50), 10);
    let mut g = Gater::new(GaterConfig::default(), 4).unwrap();
    let d = g
        .decide(&aria_cache::gater::Context {
            prompt: vec![0.0, 1.0, 0.0, 0.0],
            s_pos: 0.9,
            s_neg: 0.1,
            q: 1.0,
            duration_ratio: 1.0,
            steps: 50,
        })
        .unwrap();
    assert_eq!((d.fallback, d.skip_steps), (Some(Fallback::Novel), 10));
}
