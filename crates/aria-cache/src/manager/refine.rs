//! The refinement queue: a worker thread regenerates weak entries.
//!
//! SoundWeaver "selectively refines frequently reused but low-quality entries during idle
//! periods … the system chooses the best out of three regenerations … We limit each prompt to
//! at most five regeneration attempts". Here:
//!
//! - **Weak**: an entry reused at least [`RefineConfig::min_hits`] times whose quality `Q`
//!   ([`super::QUALITY`]) is below [`RefineConfig::weak_below`]; the most important
//!   (decayed importance) first. Entries without a `Q` score are left alone.
//! - **Attempt**: [`RefineConfig::candidates`] cold generations of the entry's prompt, duration
//!   and steps with fresh seeds; the best by `Q` replaces the clip ([`Store::replace`], one
//!   transaction: the id, hits, importance and timestamps stay) when it beats the current `Q`.
//! - **At most [`RefineConfig::max_attempts`] attempts per entry**, counted in the store (the
//!   state blob [`ATTEMPTS_KEY`]) before the attempt starts, so a crash never grants an extra one.
//! - **Bounded work**: a token bucket of generation time. Credit accrues at
//!   [`RefineConfig::share`] seconds per wall-clock second (capped at one minute's worth); a
//!   generation starts only with non-negative credit and spends its measured duration. Over any
//!   long stretch the worker therefore generates at most `share` of the wall time (plus the
//!   one-minute burst), and at most [`RefineConfig::per_minute`] generations start in any
//!   60 s window.
//! - **Requests first**: while a [`RequestGuard`] is alive ([`Refiner::request`]) no generation
//!   starts; one already running finishes (the [`crate::Generator`] trait cannot be
//!   interrupted), so a request waits for at most one refinement generation.
//! - **Cancellation**: dropping the [`Refiner`] stops the worker after the generation in flight
//!   (nothing of an unfinished attempt is written) and joins it.
//!
//! The worker writes through its own store connection; a [`crate::Cache`] on the same store
//! picks refined entries up with [`crate::Cache::reload`] on the ids of
//! [`Refiner::take_refined`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::quality::{quality, QUALITY};
use crate::select::SplitMix64;
use crate::store::{decayed_importance, now_ms, Entry, NewEntry, Store, StoredLatents};
use crate::warm::{Generation, Generator, Request};
use crate::{CacheError, Embedder, Result};

/// Key of the state blob holding the attempts per entry (JSON `{"id": attempts}`).
pub const ATTEMPTS_KEY: &str = "manager.refine_attempts";

/// How the refinement worker behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct RefineConfig {
    /// Regenerations per attempt; the best by `Q` is kept.
    pub candidates: usize,
    /// Attempts per entry at most.
    pub max_attempts: u32,
    /// Entries with `Q` below this are weak.
    pub weak_below: f32,
    /// Reuses an entry needs before it is refined.
    pub min_hits: u64,
    /// Share of wall time the worker may spend generating, in `(0, 1]`.
    pub share: f64,
    /// Generations started per minute at most.
    pub per_minute: u32,
    /// How long the worker sleeps when no entry is weak.
    pub idle: Duration,
    /// Steps for entries that record none (imported audio).
    pub default_steps: usize,
}

impl Default for RefineConfig {
    fn default() -> Self {
        RefineConfig {
            candidates: 3,
            max_attempts: 5,
            weak_below: 0.3,
            min_hits: 1,
            share: 0.1,
            per_minute: 30,
            idle: Duration::from_secs(1),
            default_steps: 8,
        }
    }
}

impl RefineConfig {
    fn validate(&self) -> Result<()> {
        let bad = |name: &str, reason: String| {
            Err(CacheError::Invalid {
                name: format!("refinement {name}"),
                reason,
            })
        };
        if self.candidates == 0 {
            return bad("candidates", "must be at least 1".into());
        }
        if !(self.share > 0.0 && self.share <= 1.0) {
            return bad("share", format!("{} is not in (0, 1]", self.share));
        }
        if self.per_minute == 0 {
            return bad("per_minute", "must be at least 1".into());
        }
        if !self.weak_below.is_finite() {
            return bad("weak_below", format!("{} is not finite", self.weak_below));
        }
        Ok(())
    }
}

/// What the worker has done.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefineStats {
    /// Attempts started.
    pub attempts: u64,
    /// Generations run.
    pub generations: u64,
    /// Entries whose clip was replaced.
    pub replaced: u64,
    /// Time spent generating.
    pub busy: Duration,
    /// Time since the worker started.
    pub elapsed: Duration,
    /// Errors met (the worker keeps going).
    pub errors: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    stats: RefineStats,
    refined: Vec<u64>,
}

#[derive(Debug, Default)]
struct Shared {
    cancel: AtomicBool,
    active: AtomicUsize,
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }

    /// Sleeps up to `d` (woken early by cancellation or the end of a request).
    fn sleep(&self, d: Duration) {
        let g = self.lock();
        if !self.cancelled() {
            let _ = self.wake.wait_timeout(g, d);
        }
    }
}

/// Held while a request runs: the worker starts no generation meanwhile.
#[derive(Debug)]
pub struct RequestGuard {
    shared: Arc<Shared>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
        self.shared.wake.notify_all();
    }
}

/// The refinement worker (see the module docs). Dropping it cancels and joins the worker.
#[derive(Debug)]
pub struct Refiner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Refiner {
    /// Starts the worker on its own connection `store`, regenerating with `gen` and scoring with
    /// `embedder` (which must be the cache's, so refined embeddings match the index).
    pub fn spawn(
        store: Box<dyn Store>,
        gen: Arc<dyn Generator + Send + Sync>,
        embedder: Arc<dyn Embedder>,
        cfg: RefineConfig,
    ) -> Result<Refiner> {
        cfg.validate()?;
        let shared = Arc::new(Shared::default());
        let w = Worker {
            store,
            gen,
            embedder,
            cfg,
            shared: shared.clone(),
            credit: 0.0,
            last: Instant::now(),
            starts: VecDeque::new(),
            started: Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("aria-cache-refine".into())
            .spawn(move || w.run())
            .map_err(|e| CacheError::Store(format!("cannot start the refinement worker: {e}")))?;
        Ok(Refiner {
            shared,
            thread: Some(thread),
        })
    }

    /// Marks a request as running until the guard is dropped.
    pub fn request(&self) -> RequestGuard {
        self.shared.active.fetch_add(1, Ordering::AcqRel);
        RequestGuard {
            shared: self.shared.clone(),
        }
    }

    /// Ids refined since the last call (for [`crate::Cache::reload`]).
    pub fn take_refined(&self) -> Vec<u64> {
        std::mem::take(&mut self.shared.lock().refined)
    }

    /// The worker's counters.
    pub fn stats(&self) -> RefineStats {
        self.shared.lock().stats.clone()
    }

    /// Whether the worker thread still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Refiner {
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Worker {
    store: Box<dyn Store>,
    gen: Arc<dyn Generator + Send + Sync>,
    embedder: Arc<dyn Embedder>,
    cfg: RefineConfig,
    shared: Arc<Shared>,
    /// Seconds of generation the bucket allows now.
    credit: f64,
    last: Instant,
    starts: VecDeque<Instant>,
    started: Instant,
}

/// Why a candidate loop stopped early.
enum Stop {
    Cancelled,
    Failed(CacheError),
}

impl From<CacheError> for Stop {
    fn from(e: CacheError) -> Self {
        Stop::Failed(e)
    }
}

impl Worker {
    fn run(mut self) {
        while !self.shared.cancelled() {
            match self.step() {
                Ok(true) => {}
                Ok(false) => self.shared.sleep(self.cfg.idle),
                Err(e) => {
                    {
                        let mut s = self.shared.lock();
                        s.stats.errors += 1;
                        s.stats.last_error = Some(e.to_string());
                    }
                    self.shared.sleep(self.cfg.idle);
                }
            }
        }
    }

    fn attempts(&self) -> Result<BTreeMap<u64, u32>> {
        match self.store.get_state(ATTEMPTS_KEY)? {
            None => Ok(BTreeMap::new()),
            Some(b) => serde_json::from_slice(&b).map_err(|e| {
                CacheError::Store(format!("state `{ATTEMPTS_KEY}` is not an attempt map: {e}"))
            }),
        }
    }

    /// The most important weak entry with attempts left.
    fn next(&self, attempts: &BTreeMap<u64, u32>) -> Result<Option<Entry>> {
        let now = now_ms();
        let best = self
            .store
            .list()?
            .into_iter()
            .filter(|e| {
                e.hits >= self.cfg.min_hits
                    && e.data
                        .quality
                        .get(QUALITY)
                        .is_some_and(|q| *q < self.cfg.weak_below)
                    && attempts.get(&e.id).copied().unwrap_or(0) < self.cfg.max_attempts
            })
            .max_by(|a, b| {
                let ia = decayed_importance(a.data.importance, a.used_ms, now);
                let ib = decayed_importance(b.data.importance, b.used_ms, now);
                ia.total_cmp(&ib).then(b.id.cmp(&a.id))
            });
        Ok(best)
    }

    /// One attempt; `false` when there was nothing to do.
    fn step(&mut self) -> Result<bool> {
        let mut attempts = self.attempts()?;
        let Some(target) = self.next(&attempts)? else {
            return Ok(false);
        };
        // Wait for the budget before counting the attempt.
        if !self.wait_for_budget() {
            return Ok(true);
        }
        let Some(entry) = self.store.get(target.id)? else {
            return Ok(true);
        };
        let n = attempts.entry(entry.id).or_insert(0);
        *n += 1;
        let attempt = *n;
        // Count it durably first, pruning entries that left the store.
        let live: std::collections::HashSet<u64> =
            self.store.list()?.into_iter().map(|e| e.id).collect();
        attempts.retain(|id, _| live.contains(id));
        let blob = serde_json::to_vec(&attempts)
            .map_err(|e| CacheError::Store(format!("state `{ATTEMPTS_KEY}`: {e}")))?;
        self.store.put_state(ATTEMPTS_KEY, &blob)?;
        self.store
            .add_counters(&[(crate::cache::counter::REFINE_ATTEMPTS, 1)])?;
        self.shared.lock().stats.attempts += 1;
        match self.attempt(&entry, attempt) {
            Ok(()) => Ok(true),
            Err(Stop::Cancelled) => Ok(true),
            Err(Stop::Failed(e)) => Err(e),
        }
    }

    fn attempt(&mut self, entry: &Entry, attempt: u32) -> std::result::Result<(), Stop> {
        let d = &entry.data;
        let steps = if d.steps == 0 {
            self.cfg.default_steps
        } else {
            d.steps
        };
        let name = self.embedder.name().to_string();
        let prompt_vec = self
            .embedder
            .embed_texts(&[d.prompt.as_str()])?
            .pop()
            .ok_or_else(|| CacheError::Model {
                what: name.clone(),
                reason: "the embedder returned no vector".into(),
            })?;
        let current = d.quality.get(QUALITY).copied().unwrap_or(f32::NEG_INFINITY);
        let mut rng = SplitMix64::new(
            d.seed.unwrap_or(0)
                ^ entry.id.rotate_left(32)
                ^ u64::from(attempt).wrapping_mul(0x9E37),
        );
        let mut best: Option<(f32, Generation, Option<Vec<f32>>, u64)> = None;
        for k in 0..self.cfg.candidates {
            if k > 0 && !self.wait_for_budget() {
                return Err(Stop::Cancelled);
            }
            let seed = rng.next_u64();
            let req = Request {
                prompt: d.prompt.clone(),
                negative_prompt: d.negative_prompt.clone(),
                seconds: d.seconds,
                steps,
                seed,
            };
            let t0 = Instant::now();
            let g = self.gen.generate(&req, None);
            let took = t0.elapsed();
            self.spend(took);
            let g = g?;
            if self.shared.cancelled() {
                return Err(Stop::Cancelled);
            }
            let a = &g.audio;
            let interleaved = a.interleaved(0..a.frames());
            let av = self
                .embedder
                .embed_audio(&interleaved, a.channels, a.sample_rate)?;
            let q = quality(&prompt_vec, av.as_deref(), a);
            if best.as_ref().is_none_or(|b| q > b.0) {
                best = Some((q, g, av, seed));
            }
        }
        let Some((q, g, av, seed)) = best else {
            return Ok(());
        };
        if q <= current {
            return Ok(());
        }
        let mut e: NewEntry = d.clone();
        e.audio = d.audio.is_some().then(|| g.audio.clone());
        if d.latents.is_some() {
            e.latents = Some(StoredLatents {
                generator: self.gen.id(),
                shape: g.latents.shape().to_vec(),
                data: g.latents.to_vec_f32().map_err(CacheError::from)?,
            });
        }
        if e.audio.is_none() && e.latents.is_none() {
            e.audio = Some(g.audio.clone());
        }
        e.quality.insert(QUALITY.into(), q);
        // The segment embeddings were of the old clip: those of the new one (the cache's
        // default pyramid), or none.
        let key = crate::segments::key(&name);
        e.embeddings.remove(&key);
        if let Some(v) = av {
            if d.embeddings.contains_key(&key) {
                let segs = crate::segments::embed(
                    self.embedder.as_ref(),
                    &g.audio,
                    &crate::cache::SEGMENTS,
                )?;
                if !segs.is_empty() {
                    e.embeddings.insert(key, crate::segments::pack(&segs));
                }
            }
            e.embeddings.insert(name, v);
        }
        e.steps = steps;
        e.seed = Some(seed);
        e.origin = "refined".into();
        if self.shared.cancelled() {
            return Err(Stop::Cancelled);
        }
        if self.store.replace(entry.id, &e)? {
            self.store
                .add_counters(&[(crate::cache::counter::REFINE_REPLACED, 1)])?;
            let mut s = self.shared.lock();
            s.stats.replaced += 1;
            s.refined.push(entry.id);
        }
        Ok(())
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.credit = (self.credit + dt * self.cfg.share).min(60.0 * self.cfg.share);
    }

    fn spend(&mut self, took: Duration) {
        self.refill();
        self.credit -= took.as_secs_f64();
        let mut s = self.shared.lock();
        s.stats.generations += 1;
        s.stats.busy += took;
        s.stats.elapsed = self.started.elapsed();
    }

    /// Waits until no request runs, the bucket has credit and the per-minute cap allows a
    /// start; `false` when cancelled meanwhile.
    fn wait_for_budget(&mut self) -> bool {
        loop {
            if self.shared.cancelled() {
                return false;
            }
            if self.shared.active.load(Ordering::Acquire) > 0 {
                self.shared.sleep(Duration::from_millis(50));
                continue;
            }
            self.refill();
            if self.credit < 0.0 {
                let wait = (-self.credit / self.cfg.share).min(1.0);
                self.shared.sleep(Duration::from_secs_f64(wait.max(0.001)));
                continue;
            }
            let now = Instant::now();
            while self
                .starts
                .front()
                .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
            {
                self.starts.pop_front();
            }
            if self.starts.len() >= self.cfg.per_minute as usize {
                let oldest = self.starts.front().copied().unwrap_or(now);
                let wait = Duration::from_secs(60).saturating_sub(now.duration_since(oldest));
                self.shared.sleep(
                    wait.min(Duration::from_secs(1))
                        .max(Duration::from_millis(1)),
                );
                continue;
            }
            self.starts.push_back(now);
            self.shared.lock().stats.elapsed = self.started.elapsed();
            return true;
        }
    }
}
