//! Persistent cache entries behind the [`Store`] trait, with [`SqliteStore`] as the embedded,
//! crash-safe default (one file under the user's cache directory, WAL journal, every write in a
//! transaction). A server store (several workers on one cache) implements the same trait.
//!
//! An entry holds the clip (channel-major audio and/or the generator's clean latents), what made
//! it (prompt, negative prompt, duration, generator, steps, seed), its embeddings (one per
//! embedder name, so vectors of different models never mix), quality scores, an importance
//! score and timestamps. The vector index is rebuilt from the stored embeddings when a cache
//! opens, so a reopened store yields the same entries and the same search results.

#[cfg(feature = "postgres")]
pub mod postgres;
mod sqlite;

use std::collections::BTreeMap;
use std::path::PathBuf;

#[cfg(feature = "postgres")]
pub use self::postgres::PostgresStore;
pub use sqlite::SqliteStore;

use crate::{CacheError, Result};

/// Latents of a clip as a generator made them.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLatents {
    /// The generator's id ([`crate::Generator::id`]): latents are reused by that generator only.
    pub generator: String,
    /// Shape, e.g. `[1, C, T]`.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: Vec<f32>,
}

/// Audio, channel-major (`channels` rows of `frames()` samples).
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Samples, channel after channel.
    pub samples: Vec<f32>,
    /// Channel count.
    pub channels: usize,
    /// Sample rate in Hz.
    pub sample_rate: u32,
}

impl Audio {
    /// Checks the layout and wraps it.
    pub fn new(samples: Vec<f32>, channels: usize, sample_rate: u32) -> Result<Audio> {
        if channels == 0 || !samples.len().is_multiple_of(channels) || sample_rate == 0 {
            return Err(CacheError::Invalid {
                name: "audio".into(),
                reason: format!(
                    "{} samples in {channels} channels at {sample_rate} Hz",
                    samples.len()
                ),
            });
        }
        Ok(Audio {
            samples,
            channels,
            sample_rate,
        })
    }

    /// Samples per channel.
    pub fn frames(&self) -> usize {
        self.samples.len() / self.channels.max(1)
    }

    /// Duration in seconds.
    pub fn seconds(&self) -> f64 {
        self.frames() as f64 / f64::from(self.sample_rate.max(1))
    }

    /// The frames `range` (clamped to the clip) interleaved, frame after frame: the layout the
    /// audio side of [`crate::Embedder`] takes.
    pub fn interleaved(&self, range: std::ops::Range<usize>) -> Vec<f32> {
        let (ch, n) = (self.channels, self.frames());
        let (start, end) = (range.start.min(n), range.end.min(n));
        let len = end.saturating_sub(start);
        (0..len * ch)
            .map(|k| self.samples[(k % ch) * n + start + k / ch])
            .collect()
    }
}

/// An entry to add (the store assigns the id and the timestamps).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewEntry {
    /// The prompt that made the clip (or describes an imported one).
    pub prompt: String,
    /// The negative prompt, if any.
    pub negative_prompt: Option<String>,
    /// Duration in seconds.
    pub seconds: f64,
    /// The audio, if kept.
    pub audio: Option<Audio>,
    /// The clean latents, if kept.
    pub latents: Option<StoredLatents>,
    /// Embeddings by embedder name (unit vectors).
    pub embeddings: BTreeMap<String, Vec<f32>>,
    /// Quality scores by name (e.g. `s_neg:<embedder>`).
    pub quality: BTreeMap<String, f32>,
    /// Importance (eq. 7 of SoundWeaver: Σ skipped steps × duration over reuses).
    pub importance: f64,
    /// Sampler steps of the generation that made it (0 for imported audio).
    pub steps: usize,
    /// Seed of the generation that made it.
    pub seed: Option<u64>,
    /// Where it came from (`generated`, `import`, …).
    pub origin: String,
}

/// A stored entry: its metadata, with or without the clip.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The store's id.
    pub id: u64,
    /// What was added (the audio and latents only when asked for).
    pub data: NewEntry,
    /// Number of reuses.
    pub hits: u64,
    /// When it was added (Unix milliseconds).
    pub created_ms: i64,
    /// When it was last added or reused (Unix milliseconds).
    pub used_ms: i64,
}

/// Totals of a store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Entries.
    pub entries: u64,
    /// Entries holding audio.
    pub with_audio: u64,
    /// Entries holding latents.
    pub with_latents: u64,
    /// Reuses recorded over all entries.
    pub hits: u64,
    /// Bytes of audio and latents.
    pub payload_bytes: u64,
    /// Sum of durations in seconds.
    pub seconds: f64,
    /// Embedder names with their entry counts.
    pub embedders: Vec<(String, u64)>,
}

/// Where cache entries live. Implementations must make every write atomic.
pub trait Store: Send {
    /// Adds an entry; returns its id.
    fn insert(&mut self, e: &NewEntry) -> Result<u64>;
    /// The entry `id` with its audio and latents; `None` when absent.
    fn get(&self, id: u64) -> Result<Option<Entry>>;
    /// Every entry without audio and latents, by id.
    fn list(&self) -> Result<Vec<Entry>>;
    /// Every `(id, vector)` for embedder `name`, by id.
    fn embeddings(&self, name: &str) -> Result<Vec<(u64, Vec<f32>)>>;
    /// Records a reuse of `id` at `now_ms`: its importance, which is stored as of `used_ms`,
    /// is first decayed to `now_ms` ([`decayed_importance`]), then `importance` is added and
    /// `used_ms` set to `now_ms`.
    fn record_hit(&mut self, id: u64, importance: f64, now_ms: i64) -> Result<()>;
    /// Stores embedder `name`'s vector for `id` (replacing one there).
    fn put_embedding(&mut self, id: u64, name: &str, v: &[f32]) -> Result<()>;
    /// Removes `id`; `false` when absent.
    fn remove(&mut self, id: u64) -> Result<bool>;
    /// Removes every entry; returns how many there were.
    fn clear(&mut self) -> Result<u64>;
    /// Totals.
    fn stats(&self) -> Result<StoreStats>;
    /// Where it is, for messages (a path or a URL without credentials).
    fn location(&self) -> String;
    /// Stores the named state blob (e.g. the skip gater's), atomically replacing the previous.
    fn put_state(&mut self, key: &str, bytes: &[u8]) -> Result<()> {
        let _ = (key, bytes);
        Err(CacheError::Store(format!(
            "{}: state blobs are not supported",
            self.location()
        )))
    }
    /// The named state blob; `None` when never stored.
    fn get_state(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let _ = key;
        Err(CacheError::Store(format!(
            "{}: state blobs are not supported",
            self.location()
        )))
    }
    /// Adds each `(name, delta)` to the named counter in one transaction (a counter never added
    /// to reads 0). Adders in several processes all count: the addition happens in the store.
    /// The default counts nothing.
    fn add_counters(&mut self, deltas: &[(&str, u64)]) -> Result<()> {
        let _ = deltas;
        Ok(())
    }
    /// Every counter, by name (empty for a store that does not count).
    fn counters(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        Ok(Default::default())
    }
    /// Replaces the clip of `id` (a refinement) in one transaction: every field of `e` but its
    /// importance (prompts, duration, audio, latents, embeddings, quality, steps, seed, origin);
    /// keeps the id, hits, importance and timestamps. `false` when `id` is absent.
    fn replace(&mut self, id: u64, e: &NewEntry) -> Result<bool> {
        let _ = (id, e);
        Err(CacheError::Store(format!(
            "{}: replace is not supported",
            self.location()
        )))
    }
    /// `(id, payload bytes)` of every entry, by id: 4 bytes per audio sample and latent value,
    /// as [`StoreStats::payload_bytes`] counts them. The default loads each entry.
    fn payload_sizes(&self) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for e in self.list()? {
            if let Some(full) = self.get(e.id)? {
                let d = &full.data;
                let n = d.audio.as_ref().map_or(0, |a| a.samples.len())
                    + d.latents.as_ref().map_or(0, |l| l.data.len());
                out.push((e.id, 4 * n as u64));
            }
        }
        Ok(out)
    }
    /// A counter that grows with every change (insert, replace, remove, clear, hit), for workers
    /// that follow a store shared with other processes. A store no other process writes may
    /// keep it at 0.
    fn version(&self) -> Result<u64> {
        Ok(0)
    }
    /// The changes after version `since`, oldest first, with the version they lead to.
    fn changes_since(&self, since: u64) -> Result<(u64, Vec<Change>)> {
        let _ = since;
        Ok((0, Vec::new()))
    }
}

/// γ of SoundWeaver's importance decay, per hour: `I ← I·γ^Δt` with Δt in hours.
pub const IMPORTANCE_DECAY_PER_HOUR: f64 = 0.9;

/// An importance recorded at `since_ms`, decayed to `now_ms` (`I·0.9^Δt`, Δt in hours; no
/// decay when `now_ms` is not after `since_ms`).
pub fn decayed_importance(importance: f64, since_ms: i64, now_ms: i64) -> f64 {
    let dt_h = (now_ms.saturating_sub(since_ms)).max(0) as f64 / 3_600_000.0;
    importance * IMPORTANCE_DECAY_PER_HOUR.powf(dt_h)
}

/// One change of a shared store ([`Store::changes_since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `id` was added or its clip replaced: reload its embeddings.
    Upsert(u64),
    /// `id` was removed.
    Remove(u64),
    /// Every entry was removed.
    Clear,
}

/// The default cache folder: `$ARIA_CACHE_DIR`, else `aria/warm-cache` under the platform's
/// user cache directory (`$XDG_CACHE_HOME` or `~/.cache`; `~/Library/Caches` on macOS;
/// `%LOCALAPPDATA%` on Windows).
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("ARIA_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = if cfg!(windows) {
        std::env::var_os("LOCALAPPDATA").map(PathBuf::from)
    } else if cfg!(target_os = "macos") {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join("Library/Caches"))
    } else {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
    };
    base.map(|b| b.join("aria").join("warm-cache"))
}

/// Opens the store a `--cache` value names: a folder (the SQLite file `cache.sqlite` inside,
/// created as needed), a `*.sqlite`/`*.db` file, or `sqlite://PATH`; or a PostgreSQL database
/// shared by several processes, `postgres://…` / `postgresql://…` (with the `postgres`
/// feature; without it such a URL is refused with a message naming the feature).
pub fn open(spec: &str) -> Result<Box<dyn Store>> {
    if let Some(rest) = spec.strip_prefix("sqlite://") {
        return Ok(Box::new(SqliteStore::open(rest)?));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Box::new(PostgresStore::open(spec)?));
        #[cfg(not(feature = "postgres"))]
        return Err(CacheError::Store(
            "postgres:// stores need aria-cache's `postgres` feature, which this build lacks"
                .into(),
        ));
    }
    if spec.contains("://") {
        let scheme = spec.split("://").next().unwrap_or_default();
        return Err(CacheError::Store(format!(
            "`{scheme}://` stores are not supported yet; use a folder, a .sqlite file or \
             sqlite://PATH"
        )));
    }
    let p = PathBuf::from(spec);
    let is_file = p
        .extension()
        .is_some_and(|e| e == "sqlite" || e == "db" || e == "sqlite3");
    let file = if is_file { p } else { p.join("cache.sqlite") };
    Ok(Box::new(SqliteStore::open(file)?))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The non-zero `(name, delta)` pairs of [`Store::add_counters`] as SQL integers (a delta beyond
/// `i64::MAX` saturates).
pub(crate) fn counter_deltas<'a>(deltas: &[(&'a str, u64)]) -> Vec<(&'a str, i64)> {
    deltas
        .iter()
        .filter(|(_, d)| *d > 0)
        .map(|(k, d)| (*k, i64::try_from(*d).unwrap_or(i64::MAX)))
        .collect()
}
