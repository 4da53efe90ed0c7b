//! The cache manager: importance, capacity-bounded eviction, admission of new results
//! ([`Manager`]) and the background refinement of weak entries ([`Refiner`]).
//!
//! # Importance
//!
//! SoundWeaver (§2.3, eq. 7) scores an entry by the generation time it saved:
//!
//! ```text
//! I_i = Σ_{t ∈ U_i} S_t · D_t
//! ```
//!
//! "where U_i denotes the set of reuse events for entry i, S_t is the number of skipped NFEs for
//! request t, and D_t is the audio duration", with "exponential decay I_i ← I_i · γ^Δt where
//! γ = 0.9 (per hour) and Δt is the elapsed time in hours since the last update". The store keeps
//! `I_i` as of the entry's `used_ms` ([`Store::record_hit`] decays it before adding a reuse), so
//! the importance at any `now_ms` is `I_i · 0.9^((now_ms − used_ms)/3 600 000)`
//! ([`crate::store::decayed_importance`]).
//!
//! One addition to the paper: an admitted result starts with
//! [`ManagerConfig::new_entry_importance`] (decaying like the rest). With 0, a fresh entry would
//! be weaker than every entry ever reused, however long ago, and a full cache would only ever
//! evict its newest entries.
//!
//! # Eviction
//!
//! Whenever the cache holds more than [`Capacity::max_entries`] entries or more than
//! [`Capacity::max_bytes`] bytes of payload (audio and latents), the least important entry at
//! `now_ms` goes first; equal importances go oldest first (by creation time, then id). Since the
//! decay multiplies every entry by the same factor per hour, the order does not change with time:
//! the manager keeps the entries ordered by `ln I_i − (used_ms/h)·ln γ` and evicts in
//! `O(log n)`.
//!
//! # Admission
//!
//! [`Admission`]: every result, results whose quality `Q` ([`QUALITY`]) reaches a threshold, or
//! (when the cache is full) results more important than the weakest entry.
//!
//! The manager follows one store: it loads the entries' importance, timestamps and sizes when it
//! opens and is told of every change made through [`crate::Cache`]. A store that other processes
//! write as well calls for [`Manager::reload`] now and then.

mod quality;
mod refine;

use std::collections::{BTreeSet, HashMap};

pub use quality::{embedding_quality, quality, tonality, QUALITY};
pub use refine::{RefineConfig, RefineStats, Refiner, RequestGuard, ATTEMPTS_KEY};

use crate::store::{NewEntry, Store, IMPORTANCE_DECAY_PER_HOUR};
use crate::{CacheError, Result};

const HOUR_MS: f64 = 3_600_000.0;

/// Bounds of the cache (`None`: unbounded; `Default` is [`Capacity::UNBOUNDED`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Capacity {
    /// At most this many entries.
    pub max_entries: Option<usize>,
    /// At most this many bytes of audio and latents (4 bytes a value).
    pub max_bytes: Option<u64>,
}

impl Capacity {
    /// The bounds a cache has unless told otherwise ([`crate::CacheConfig::default`], `aria
    /// generate --cache`, `aria serve --cache`): 1 000 entries (the paper's cache size) and
    /// 4 GiB of payload (a 10 s stereo clip at 44.1 kHz is 3.5 MB of f32 audio).
    pub const DEFAULT: Capacity = Capacity {
        max_entries: Some(1000),
        max_bytes: Some(4 << 30),
    };

    /// No bound.
    pub const UNBOUNDED: Capacity = Capacity {
        max_entries: None,
        max_bytes: None,
    };

    /// At most `n` entries.
    pub fn entries(n: usize) -> Capacity {
        Capacity {
            max_entries: Some(n),
            max_bytes: None,
        }
    }
}

/// Which new results enter the cache.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Admission {
    /// Every result (eviction keeps the cache bounded).
    #[default]
    Always,
    /// Results whose quality `Q` ([`QUALITY`]) is at least this.
    MinQuality(f32),
    /// Every result while the cache has room; when full, only a result more important than the
    /// weakest entry ([`ManagerConfig::new_entry_importance`] against its decayed importance).
    BeatsWeakest,
}

/// How the manager behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerConfig {
    /// Bounds.
    pub capacity: Capacity,
    /// Admission policy.
    pub admission: Admission,
    /// Importance an admitted result starts with, in step·seconds (one reuse skipping 4 steps
    /// of a 10 s clip adds 40).
    pub new_entry_importance: f64,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            capacity: Capacity::default(),
            admission: Admission::Always,
            new_entry_importance: 1.0,
        }
    }
}

/// A total order on `f64` (the eviction key).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Key {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// What the manager knows of an entry.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Meta {
    /// Importance as of `since_ms`.
    importance: f64,
    since_ms: i64,
    created_ms: i64,
    bytes: u64,
}

impl Meta {
    /// `ln I − (since/h)·ln γ`: orders entries as their importance at any common time does.
    fn key(&self) -> Key {
        if self.importance <= 0.0 || !self.importance.is_finite() {
            return Key(f64::NEG_INFINITY);
        }
        Key(self.importance.ln()
            - (self.since_ms as f64 / HOUR_MS) * IMPORTANCE_DECAY_PER_HOUR.ln())
    }

    fn slot(&self, id: u64) -> (Key, i64, u64) {
        (self.key(), self.created_ms, id)
    }
}

/// Importance bookkeeping, eviction and admission over one store (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Manager {
    cfg: ManagerConfig,
    meta: HashMap<u64, Meta>,
    order: BTreeSet<(Key, i64, u64)>,
    bytes: u64,
}

/// Payload bytes of an entry as the store counts them.
pub fn payload_bytes(e: &NewEntry) -> u64 {
    let n = e.audio.as_ref().map_or(0, |a| a.samples.len())
        + e.latents.as_ref().map_or(0, |l| l.data.len());
    4 * n as u64
}

impl Manager {
    /// A manager over `store`'s entries.
    pub fn open(cfg: ManagerConfig, store: &dyn Store) -> Result<Manager> {
        if !(cfg.new_entry_importance >= 0.0 && cfg.new_entry_importance.is_finite()) {
            return Err(CacheError::Invalid {
                name: "new_entry_importance".into(),
                reason: format!("{} is not a finite value ≥ 0", cfg.new_entry_importance),
            });
        }
        if let Admission::MinQuality(q) = cfg.admission {
            if !q.is_finite() {
                return Err(CacheError::Invalid {
                    name: "admission quality threshold".into(),
                    reason: format!("{q} is not finite"),
                });
            }
        }
        let mut m = Manager {
            cfg,
            ..Default::default()
        };
        m.reload(store)?;
        Ok(m)
    }

    /// Reloads every entry's importance, timestamps and size from `store`.
    pub fn reload(&mut self, store: &dyn Store) -> Result<()> {
        let sizes: HashMap<u64, u64> = store.payload_sizes()?.into_iter().collect();
        self.meta.clear();
        self.order.clear();
        self.bytes = 0;
        for e in store.list()? {
            let m = Meta {
                importance: e.data.importance,
                since_ms: e.used_ms,
                created_ms: e.created_ms,
                bytes: sizes.get(&e.id).copied().unwrap_or(0),
            };
            self.put(e.id, m);
        }
        Ok(())
    }

    fn put(&mut self, id: u64, m: Meta) {
        self.forget(id);
        self.order.insert(m.slot(id));
        self.bytes += m.bytes;
        self.meta.insert(id, m);
    }

    /// Drops `id` from the bookkeeping (after it left the store).
    pub fn forget(&mut self, id: u64) {
        if let Some(old) = self.meta.remove(&id) {
            self.order.remove(&old.slot(id));
            self.bytes -= old.bytes;
        }
    }

    /// Drops every entry from the bookkeeping (after the store was cleared).
    pub fn forget_all(&mut self) {
        self.meta.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// The configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.cfg
    }

    /// Entries followed.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether no entry is followed.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Payload bytes of the entries followed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Importance of `id` at `now_ms` (decayed); `None` when unknown.
    pub fn importance(&self, id: u64, now_ms: i64) -> Option<f64> {
        self.meta
            .get(&id)
            .map(|m| crate::store::decayed_importance(m.importance, m.since_ms, now_ms))
    }

    /// The least important entry and its importance at `now_ms`.
    pub fn weakest(&self, now_ms: i64) -> Option<(u64, f64)> {
        let &(_, _, id) = self.order.first()?;
        Some((id, self.importance(id, now_ms)?))
    }

    /// Ids from the least to the most important (ties oldest first).
    pub fn eviction_order(&self) -> impl Iterator<Item = u64> + '_ {
        self.order.iter().map(|s| s.2)
    }

    /// Records an entry just inserted at `created_ms` (its stored importance and size from
    /// `e`).
    pub fn on_insert(&mut self, id: u64, e: &NewEntry, created_ms: i64) {
        let m = Meta {
            importance: e.importance,
            since_ms: created_ms,
            created_ms,
            bytes: payload_bytes(e),
        };
        self.put(id, m);
    }

    /// Records a reuse of `id` adding `importance` at `now_ms`, as [`Store::record_hit`] does.
    pub fn on_hit(&mut self, id: u64, importance: f64, now_ms: i64) {
        if let Some(mut m) = self.meta.get(&id).copied() {
            m.importance =
                crate::store::decayed_importance(m.importance, m.since_ms, now_ms) + importance;
            m.since_ms = now_ms;
            self.put(id, m);
        }
    }

    /// Records a refinement of `id` (its payload size may change).
    pub fn on_replace(&mut self, id: u64, e: &NewEntry) {
        if let Some(mut m) = self.meta.get(&id).copied() {
            m.bytes = payload_bytes(e);
            self.put(id, m);
        }
    }

    fn over(&self, extra_entries: usize, extra_bytes: u64) -> bool {
        let c = &self.cfg.capacity;
        c.max_entries
            .is_some_and(|n| self.meta.len() + extra_entries > n)
            || c.max_bytes.is_some_and(|b| self.bytes + extra_bytes > b)
    }

    /// Whether `e` (with its quality scores) should enter the cache now (`force`: whatever the
    /// policy, if it fits the capacity at all); sets its starting importance when it should.
    pub fn should_admit(&self, e: &mut NewEntry, now_ms: i64, force: bool) -> bool {
        let ok = force
            || match self.cfg.admission {
                Admission::Always => true,
                Admission::MinQuality(t) => e.quality.get(QUALITY).is_some_and(|q| *q >= t),
                Admission::BeatsWeakest => {
                    !self.over(1, payload_bytes(e))
                        || self
                            .weakest(now_ms)
                            .is_none_or(|(_, w)| self.cfg.new_entry_importance > w)
                }
            };
        let fits = self
            .cfg
            .capacity
            .max_bytes
            .is_none_or(|b| payload_bytes(e) <= b)
            && self.cfg.capacity.max_entries != Some(0);
        if ok && fits {
            e.importance = e.importance.max(self.cfg.new_entry_importance);
        }
        ok && fits
    }

    /// The entries to evict, in order, so that the cache fits its capacity; `keep` (e.g. the
    /// entry just admitted) is never among them.
    pub fn plan_evictions(&self, keep: Option<u64>) -> Vec<u64> {
        let c = &self.cfg.capacity;
        let (mut n, mut bytes) = (self.meta.len(), self.bytes);
        let mut out = Vec::new();
        for &(_, _, id) in &self.order {
            let over =
                c.max_entries.is_some_and(|m| n > m) || c.max_bytes.is_some_and(|b| bytes > b);
            if !over {
                break;
            }
            if Some(id) == keep {
                continue;
            }
            n -= 1;
            bytes -= self.meta.get(&id).map_or(0, |m| m.bytes);
            out.push(id);
        }
        out
    }

    /// Evicts from `store` until the cache fits (never `keep`); returns the ids removed.
    pub fn evict(&mut self, store: &mut dyn Store, keep: Option<u64>) -> Result<Vec<u64>> {
        let plan = self.plan_evictions(keep);
        for &id in &plan {
            store.remove(id)?;
            self.forget(id);
        }
        Ok(plan)
    }

    /// Admits `e` into `store` under the policy, then evicts to capacity: `(id if admitted,
    /// ids evicted)`. The caller indexes the new entry and unindexes the evicted ones. `now_ms`
    /// is the store's clock ([`crate::store::now_ms`]) for a live cache.
    pub fn admit(
        &mut self,
        store: &mut dyn Store,
        mut e: NewEntry,
        now_ms: i64,
    ) -> Result<(Option<u64>, Vec<u64>)> {
        if !self.should_admit(&mut e, now_ms, false) {
            return Ok((None, Vec::new()));
        }
        let id = store.insert(&e)?;
        self.on_insert(id, &e, now_ms);
        let ev = self.evict(store, Some(id))?;
        Ok((Some(id), ev))
    }
}
