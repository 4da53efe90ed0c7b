//! [`Cache`]: the warm-start path end to end.
//!
//! For a request: embed the prompt → search the index for the top-K entries → score them and
//! draw a reference ([`crate::select`]) → align it (stored latents as they are or cropped / tiled
//! to the request's frames, or audio stretched by the phase vocoder and encoded) → generate from the skip step (the generator noises `x̂₀` to the
//! schedule's σ there) → record the reuse on the reference (importance += skipped steps ×
//! duration, eq. 7) → admit the result as a new entry.
//!
//! ```no_run
//! # fn f(g: &dyn aria_cache::Generator, e: std::sync::Arc<dyn aria_cache::Embedder>) -> aria_cache::Result<()> {
//! use aria_cache::{store, Cache, CacheConfig, Request};
//! let mut cache = Cache::open(store::open("/var/cache/aria")?, e, CacheConfig::default())?;
//! let out = cache.generate(g, &Request::new("rain on a tin roof", 10.0, 8, 42))?;
//! println!("hit: {}, steps run: {}", out.reference.is_some(), out.steps_run);
//! # Ok(()) }
//! ```
//!
//! Without an audio embedder the entry's vector is the embedding of the prompt that made (or
//! describes) the clip; with one (CLAP), it is the embedding of the clip's audio.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::index::{
    ExactIndex, IvfIndex, IvfParams, PyramidIndex, PyramidParams, Segment, VectorIndex,
};
use crate::manager::{self, Manager, ManagerConfig};
use crate::select::{self, Candidate, SelectorConfig, SplitMix64, NEGATIVE_PROMPT};
use crate::store::{now_ms, Audio, Change, Entry, NewEntry, Store, StoreStats, StoredLatents};
use crate::warm::{self, Alignment, Generation, Generator, Request, SkipPolicy, WarmLatents};
use crate::{CacheError, Embedder, Result};

/// Names of the counters the cache keeps in its store ([`Store::add_counters`],
/// [`Store::counters`]): totals over every process that served through the store, kept across
/// restarts (and across [`Cache::clear`]).
pub mod counter {
    /// Requests served through [`super::Cache::generate`].
    pub const REQUESTS: &str = "requests";
    /// Of those, hits (a cached reference was used).
    pub const HITS: &str = "hits";
    /// Hits that started from the reference's stored latents as they were.
    pub const STORED_LATENTS: &str = "hits.stored_latents";
    /// Hits that started from its stored latents cropped or tiled (no encode).
    pub const FITTED_LATENTS: &str = "hits.fitted_latents";
    /// Hits whose reference audio was stretched and encoded.
    pub const STRETCHED_AUDIO: &str = "hits.stretched_audio";
    /// Sampler steps the hits skipped.
    pub const SKIPPED_STEPS: &str = "skipped_steps";
    /// Results added.
    pub const ADMITTED: &str = "admitted";
    /// Entries evicted to keep within the capacity.
    pub const EVICTED: &str = "evicted";
    /// Hits whose reference was a segment of a longer cached clip (the pyramid index).
    pub const SEGMENT: &str = "hits.segment";
    /// Prefix of the hits that started at step `k` (`start_step.k`): the skip gater's choices,
    /// or the fixed policy's.
    pub const START_STEP: &str = "start_step.";
    /// Refinement attempts ([`crate::manager::Refiner`]).
    pub const REFINE_ATTEMPTS: &str = "refine.attempts";
    /// Entries a refinement replaced.
    pub const REFINE_REPLACED: &str = "refine.replaced";
}

/// The default pyramid of [`CacheConfig::segments`]: halves, quarters and eighths of a clip
/// without overlap, none shorter than δ = 2 s (an 8 s clip: 2 + 4 segments; 30 s and longer: at
/// most 2 + 4 + 8), so admitting a clip costs at most 14 more audio embeddings.
pub const SEGMENTS: PyramidParams = PyramidParams {
    min_seconds: 2.0,
    hop_fraction: 1.0,
    max_levels: 4,
};

/// Which vector index the cache searches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum IndexKind {
    /// Exact inner-product search (the default; well under a millisecond at 10 000 entries).
    #[default]
    Exact,
    /// IVF-flat, trained on the stored vectors when the cache opens.
    Ivf(IvfParams),
}

/// How the cache behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// The reference selector's parameters.
    pub selector: SelectorConfig,
    /// How many steps a hit skips.
    pub skip: SkipPolicy,
    /// Seed of the selector's draws.
    pub seed: u64,
    /// Whether results are added to the cache.
    pub admit: bool,
    /// Whether admitted entries keep their audio (needed to stretch them to other durations).
    pub keep_audio: bool,
    /// Whether admitted entries keep their latents (reused as they are for the same duration,
    /// fitted for a close one).
    pub keep_latents: bool,
    /// How far a reference's duration `d_i` may be from the request's `L` and still start from
    /// its stored latents, cropped or tiled ([`warm::align_within`]): `d_i / L` in
    /// `[1 / (1 + t), 1 + t]`. Beyond it the audio is stretched and encoded. 0: equal durations
    /// only. Default [`warm::LATENT_TOLERANCE`] (0.25).
    pub latent_tolerance: f64,
    /// Whether a reference longer than the request starts from its stored latents cropped to
    /// the request's frames (its first `L` seconds, at its own tempo; [`warm::align_fitting`])
    /// at any ratio the duration gate admits, rather than being stretched and encoded beyond
    /// the tolerance. Default `true`: only a reference shorter than `L / (1 + t)` pays the
    /// vocoder and the encoder.
    pub crop_longer: bool,
    /// The vector index.
    pub index: IndexKind,
    /// The pyramid of segment embeddings ([`PyramidIndex`]; used with an embedder that has an
    /// audio side): each admitted clip is also embedded in windows down to
    /// [`PyramidParams::min_seconds`] (δ), and a segment of a longer clip can be the reference.
    /// Each segment is one more audio embedding when a clip is admitted. `None`: whole clips
    /// only. Default [`SEGMENTS`].
    pub segments: Option<PyramidParams>,
    /// Importance, eviction and admission ([`crate::manager`]); `None`: every result is
    /// admitted and nothing is evicted. Default: every result admitted, evicting the least
    /// important entries beyond [`manager::Capacity::DEFAULT`] (1 000 entries, 4 GiB).
    pub manager: Option<ManagerConfig>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            selector: SelectorConfig::default(),
            skip: SkipPolicy::default(),
            seed: 0,
            admit: true,
            keep_audio: true,
            keep_latents: true,
            latent_tolerance: warm::LATENT_TOLERANCE,
            crop_longer: true,
            index: IndexKind::Exact,
            segments: Some(SEGMENTS),
            manager: Some(ManagerConfig {
                capacity: manager::Capacity::DEFAULT,
                ..Default::default()
            }),
        }
    }
}

/// Time spent in each stage of the cache's own work (not the generation).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overhead {
    /// Prompt embedding.
    pub embed: Duration,
    /// Index search.
    pub search: Duration,
    /// Scoring and drawing.
    pub select: Duration,
    /// Loading the reference from the store.
    pub fetch: Duration,
    /// Phase vocoder.
    pub vocoder: Duration,
    /// Generator's encoder.
    pub encode: Duration,
    /// Writing the result.
    pub admit: Duration,
    /// The skip gater: its decision, and its update and save after the generation.
    pub gate: Duration,
}

impl Overhead {
    /// Everything before the generation (embed + search + select + fetch + vocoder + encode).
    pub fn before_generation(&self) -> Duration {
        self.embed + self.search + self.select + self.fetch + self.vocoder + self.encode
    }
}

/// What [`Cache::lookup`] found.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The prompt's embedding.
    pub query: Vec<f32>,
    /// The selector's scores and choice (`None`: no admitted candidate, a cold generation).
    pub selection: Option<select::Selection>,
    /// The candidates scored (top-K of the index).
    pub candidates: Vec<Candidate>,
}

/// The result of [`Cache::generate`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The generation.
    pub generation: Generation,
    /// The reference entry used, if any.
    pub reference: Option<u64>,
    /// The part of it used, when a segment of the clip was the reference (pyramid level ≥ 1).
    pub segment: Option<Segment>,
    /// How `x̂₀` was obtained.
    pub alignment: Option<Alignment>,
    /// The start step (0 for a cold generation).
    pub start_step: usize,
    /// σ of the schedule at the start step.
    pub sigma: f32,
    /// Sampler steps run.
    pub steps_run: usize,
    /// The id of the admitted result, if admitted.
    pub admitted: Option<u64>,
    /// Entries evicted to make room for it (by the manager, least important first).
    pub evicted: Vec<u64>,
    /// The cache's own time.
    pub overhead: Overhead,
}

/// A warm-start cache over a [`Store`], an [`Embedder`] and a vector index.
pub struct Cache {
    store: Box<dyn Store>,
    embedder: Arc<dyn Embedder>,
    index: Box<dyn VectorIndex>,
    /// Vector of every indexed entry, for `s_neg`.
    vectors: BTreeMap<u64, Vec<f32>>,
    /// Durations of the indexed entries.
    durations: BTreeMap<u64, f64>,
    /// Segment embeddings of the indexed entries ([`CacheConfig::segments`]).
    pyramid: Option<PyramidIndex>,
    negative: Vec<f32>,
    rng: SplitMix64,
    cfg: CacheConfig,
    manager: Option<Manager>,
    /// The skip gater (`SkipPolicy::Gated`).
    gater: Option<crate::gater::Serving>,
    /// The store version the index reflects ([`Cache::sync`]).
    synced: u64,
    /// Entries this cache inserted and indexed since the last sync (their changes need no
    /// reload).
    own: BTreeSet<u64>,
    /// Entries the manager evicted during the current admission ([`Outcome::evicted`]).
    evicted: Vec<u64>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("store", &self.store.location())
            .field("embedder", &self.embedder.name())
            .field("entries", &self.index.len())
            .finish_non_exhaustive()
    }
}

fn one(mut v: Vec<Vec<f32>>, what: &str) -> Result<Vec<f32>> {
    v.pop().ok_or_else(|| CacheError::Model {
        what: what.into(),
        reason: "the embedder returned no vector".into(),
    })
}

impl Cache {
    /// Opens a cache: loads every stored vector of `embedder` into a fresh index.
    pub fn open(
        store: Box<dyn Store>,
        embedder: Arc<dyn Embedder>,
        cfg: CacheConfig,
    ) -> Result<Cache> {
        cfg.selector.validate()?;
        if !(cfg.latent_tolerance.is_finite() && cfg.latent_tolerance >= 0.0) {
            return Err(CacheError::Invalid {
                name: "latent_tolerance".into(),
                reason: format!(
                    "{} is not a finite, non-negative duration tolerance",
                    cfg.latent_tolerance
                ),
            });
        }
        let dim = embedder.dim();
        let negative = one(embedder.embed_texts(&[NEGATIVE_PROMPT])?, embedder.name())?;
        // Read before the vectors: a change committed in between is applied again by `sync`.
        let synced = store.version()?;
        let rows = store.embeddings(embedder.name())?;
        let durations = store
            .list()?
            .into_iter()
            .map(|e| (e.id, e.data.seconds))
            .collect();
        let mut vectors = BTreeMap::new();
        for (id, v) in rows {
            crate::index::check_dim(&format!("stored embedding of entry {id}"), dim, v.len())?;
            vectors.insert(id, v);
        }
        let index: Box<dyn VectorIndex> = match cfg.index {
            IndexKind::Exact => {
                let mut x = ExactIndex::new(dim);
                for (id, v) in &vectors {
                    x.add(*id, v)?;
                }
                Box::new(x)
            }
            IndexKind::Ivf(p) => {
                let ids: Vec<u64> = vectors.keys().copied().collect();
                let data: Vec<f32> = vectors.values().flatten().copied().collect();
                Box::new(IvfIndex::build(dim, &ids, &data, p)?)
            }
        };
        let mut pyramid = match cfg.segments {
            Some(p) => Some(PyramidIndex::new(dim, p)?),
            None => None,
        };
        if let Some(px) = &mut pyramid {
            for (id, row) in store.embeddings(&crate::segments::key(embedder.name()))? {
                if vectors.contains_key(&id) {
                    let what = format!("stored segment embeddings of entry {id}");
                    px.add_segments(id, crate::segments::unpack(&what, dim, &row)?)?;
                }
            }
        }
        let manager = match &cfg.manager {
            Some(m) => Some(Manager::open(m.clone(), store.as_ref())?),
            None => None,
        };
        let gater = crate::gater::Serving::open(&cfg.skip, store.as_ref(), embedder.as_ref())?;
        Ok(Cache {
            manager,
            gater,
            rng: SplitMix64::new(cfg.seed),
            store,
            embedder,
            index,
            vectors,
            durations,
            pyramid,
            negative,
            cfg,
            synced,
            own: BTreeSet::new(),
            evicted: Vec::new(),
        })
    }

    /// Follows a store shared with other processes: applies the changes committed since the
    /// last sync (or since opening) to the in-memory index — new and replaced entries are
    /// (re)indexed from the store, removed ones dropped. Returns how many changes it read.
    /// Cheap when nothing changed (one version query); a store no other process writes has
    /// nothing to follow.
    pub fn sync(&mut self) -> Result<usize> {
        let (version, changes) = self.store.changes_since(self.synced)?;
        let read = changes.len();
        // The last change of each entry is what counts; a clear drops all before it.
        let mut cleared = false;
        // Per entry: whether it is present after the changes, and how many upserts it had.
        let mut last: BTreeMap<u64, (bool, usize)> = BTreeMap::new();
        for c in changes {
            match c {
                Change::Clear => {
                    cleared = true;
                    last.clear();
                }
                Change::Upsert(id) => {
                    let e = last.entry(id).or_insert((true, 0));
                    *e = (true, e.1 + 1);
                }
                Change::Remove(id) => {
                    last.entry(id).or_insert((false, 0)).0 = false;
                }
            }
        }
        if cleared {
            self.unindex_all();
        }
        for (id, (present, upserts)) in last {
            // Only this cache's own insert: already indexed as it is.
            if present && upserts == 1 && !cleared && self.own.contains(&id) {
                continue;
            }
            let found = if present { self.store.get(id)? } else { None };
            self.unindex(id);
            if let Some(e) = found {
                self.index_entry(&e)?;
            }
        }
        self.own.clear();
        self.synced = version;
        Ok(read)
    }

    /// The store version the index reflects (see [`Cache::sync`]).
    pub fn synced_version(&self) -> u64 {
        self.synced
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The store.
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The embedder.
    pub fn embedder(&self) -> &dyn Embedder {
        self.embedder.as_ref()
    }

    /// The embedder, shared (e.g. with a [`manager::Refiner`], whose embeddings must match the
    /// index).
    pub fn embedder_arc(&self) -> Arc<dyn Embedder> {
        self.embedder.clone()
    }

    /// Entries in the index.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The store's totals.
    pub fn stats(&self) -> Result<StoreStats> {
        self.store.stats()
    }

    /// The `k` nearest entries of a query vector, `(id, score)` best first.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>> {
        Ok(self
            .index
            .search(query, k)?
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect())
    }

    /// Embeds the prompt, retrieves the top-K and runs the selector, timing each part into
    /// `o`.
    pub fn lookup_timed(&mut self, req: &Request, o: &mut Overhead) -> Result<Lookup> {
        let t0 = Instant::now();
        let query = one(
            self.embedder.embed_texts(&[req.prompt.as_str()])?,
            self.embedder.name(),
        )?;
        // s_neg (eq. 1–2) against the request's negative prompt when it has one, else against
        // the default "low quality".
        let negative = match req.negative_prompt.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => {
                one(self.embedder.embed_texts(&[n])?, self.embedder.name())?
            }
            _ => self.negative.clone(),
        };
        o.embed = t0.elapsed();
        let t0 = Instant::now();
        let hits = self.index.search(&query, self.cfg.selector.top_k)?;
        // The best segment below the whole clip of the best clips of the pyramid.
        let segment_hits = match &self.pyramid {
            Some(px) if !px.is_empty() => px.search(&query, self.cfg.selector.top_k)?,
            _ => Vec::new(),
        };
        o.search = t0.elapsed();
        let t0 = Instant::now();
        let dot = |v: &[f32]| -> f32 { v.iter().zip(&negative).map(|(a, b)| a * b).sum() };
        let mut candidates: Vec<Candidate> = hits
            .iter()
            .filter_map(|h| {
                let v = self.vectors.get(&h.id)?;
                Some(Candidate {
                    id: h.id,
                    s_pos: h.score,
                    s_neg: dot(v),
                    duration: self.durations.get(&h.id).copied().unwrap_or(0.0),
                    segment: None,
                })
            })
            .collect();
        if let Some(px) = &self.pyramid {
            candidates.extend(segment_hits.iter().filter_map(|h| {
                let seg = h.segment;
                let v = px.vector_of(seg.clip, seg.level, seg.start)?;
                self.durations.contains_key(&seg.clip).then(|| Candidate {
                    id: seg.clip,
                    s_pos: h.score,
                    s_neg: dot(v),
                    duration: seg.seconds,
                    segment: Some(seg),
                })
            }));
        }
        let selection =
            select::select(&candidates, req.seconds, &self.cfg.selector, &mut self.rng)?;
        o.select = t0.elapsed();
        Ok(Lookup {
            query,
            selection,
            candidates,
        })
    }

    /// [`Self::lookup_timed`] without the timings.
    pub fn lookup(&mut self, req: &Request) -> Result<Lookup> {
        self.lookup_timed(req, &mut Overhead::default())
    }

    /// Serves `req`: lookup, warm start from the chosen reference (or cold), record the reuse
    /// and admit the result.
    pub fn generate(&mut self, g: &dyn Generator, req: &Request) -> Result<Outcome> {
        let mut o = Overhead::default();
        let look = self.lookup_timed(req, &mut o)?;
        let sigmas = g.sigmas(req)?;
        let mut start_step = 0;
        let mut warm = None;
        let mut alignment = None;
        let mut reference = None;
        let mut segment = None;
        let mut gated = None;
        if let Some(sel) = &look.selection {
            let id = sel.chosen().candidate.id;
            let t0 = Instant::now();
            let entry = self.store.get(id)?;
            o.fetch = t0.elapsed();
            let s = match &mut self.gater {
                Some(gt) => {
                    let d = gt.decide(&look.query, sel, req)?;
                    o.gate = gt.last_time();
                    let s = d.skip_steps;
                    gated = Some((d, sel.chosen().candidate.s_pos));
                    s
                }
                None => self.cfg.skip.start_step(req.steps),
            };
            // Step 0 still runs the whole warm path (σ = 1: the reference does not enter).
            if let Some(mut entry) = entry {
                segment = sel.chosen().candidate.segment;
                if let Some(seg) = segment {
                    entry = warm::segment_of(g, &entry, seg.start, seg.seconds)?;
                }
                let (x, a, t) = warm::align_fitting(
                    g,
                    &entry,
                    req,
                    self.cfg.latent_tolerance,
                    self.cfg.crop_longer,
                )?;
                o.vocoder = t.vocoder;
                o.encode = t.encode;
                warm = Some(WarmLatents {
                    latents: x,
                    start_step: s,
                });
                alignment = Some(a);
                reference = Some(id);
                start_step = s;
            }
        }
        let generation = g.generate(req, warm.as_ref())?;
        if let (Some(gt), Some((d, s_pos)), Some(_)) = (&mut self.gater, &gated, reference) {
            let sigma = sigmas.get(start_step).copied().unwrap_or(1.0);
            let (store, emb) = (self.store.as_mut(), self.embedder.as_ref());
            gt.learn(d, store, emb, &look.query, &generation.audio, *s_pos, sigma)?;
            o.gate += gt.last_time();
        }
        if let Some(id) = reference {
            // Eq. 7: importance accumulates skipped steps × duration over the reuses.
            let (add, now) = (start_step as f64 * req.seconds, now_ms());
            self.store.record_hit(id, add, now)?;
            if let Some(m) = &mut self.manager {
                m.on_hit(id, add, now);
            }
        }
        let t0 = Instant::now();
        self.evicted.clear();
        let admitted = if self.cfg.admit {
            self.admit_generation(g, req, &generation, Some(look.query))?
        } else {
            None
        };
        o.admit = t0.elapsed();
        let start_key = format!("{}{start_step}", counter::START_STEP);
        let how = match alignment {
            Some(Alignment::StoredLatents) => counter::STORED_LATENTS,
            Some(Alignment::FittedLatents { .. }) => counter::FITTED_LATENTS,
            _ => counter::STRETCHED_AUDIO,
        };
        let hit = u64::from(reference.is_some());
        self.store.add_counters(&[
            (counter::REQUESTS, 1),
            (counter::HITS, hit),
            (how, hit),
            (counter::SEGMENT, u64::from(segment.is_some())),
            (counter::SKIPPED_STEPS, hit * start_step as u64),
            (&start_key, hit),
            (counter::ADMITTED, u64::from(admitted.is_some())),
            (counter::EVICTED, self.evicted.len() as u64),
        ])?;
        Ok(Outcome {
            sigma: sigmas.get(start_step).copied().unwrap_or(1.0),
            steps_run: req.steps - start_step,
            generation,
            reference,
            segment,
            alignment,
            start_step,
            admitted,
            evicted: std::mem::take(&mut self.evicted),
            overhead: o,
        })
    }

    /// Adds a finished generation of `req` (with the prompt's embedding when already computed)
    /// when the manager's admission policy takes it (`None` when not), then evicts to capacity.
    pub fn admit_generation(
        &mut self,
        g: &dyn Generator,
        req: &Request,
        gen: &Generation,
        query: Option<Vec<f32>>,
    ) -> Result<Option<u64>> {
        let latents = self.cfg.keep_latents.then(|| {
            Ok::<_, CacheError>(StoredLatents {
                generator: g.id(),
                shape: gen.latents.shape().to_vec(),
                data: gen.latents.to_vec_f32()?,
            })
        });
        let latents = latents.transpose()?;
        let e = NewEntry {
            prompt: req.prompt.clone(),
            negative_prompt: req.negative_prompt.clone(),
            seconds: req.seconds,
            audio: self.cfg.keep_audio.then(|| gen.audio.clone()),
            latents,
            steps: req.steps,
            seed: Some(req.seed),
            origin: "generated".into(),
            ..Default::default()
        };
        self.admit(e, &gen.audio, query, false)
    }

    /// Adds audio described by `prompt` (e.g. an existing library of clips).
    pub fn import(&mut self, prompt: &str, audio: Audio) -> Result<u64> {
        let e = NewEntry {
            prompt: prompt.into(),
            seconds: audio.seconds(),
            audio: Some(audio.clone()),
            origin: "import".into(),
            ..Default::default()
        };
        self.admit(e, &audio, None, true)?
            .ok_or_else(|| CacheError::Invalid {
                name: format!("import of `{prompt}`"),
                reason: "the clip does not fit the cache's capacity".into(),
            })
    }

    /// Embeds (audio side when the embedder has one, else the prompt), scores and stores `e`,
    /// then indexes it; with a manager, only when admitted (always when `force`), evicting to
    /// capacity after.
    fn admit(
        &mut self,
        mut e: NewEntry,
        audio: &Audio,
        query: Option<Vec<f32>>,
        force: bool,
    ) -> Result<Option<u64>> {
        let name = self.embedder.name().to_string();
        let interleaved = audio.interleaved(0..audio.frames());
        let audio_v = self
            .embedder
            .embed_audio(&interleaved, audio.channels, audio.sample_rate)?;
        let with_audio = audio_v.is_some();
        let text = |q: Option<Vec<f32>>| match q {
            Some(q) => Ok(q),
            None => one(self.embedder.embed_texts(&[e.prompt.as_str()])?, &name),
        };
        let (v, query) = match audio_v {
            Some(v) if self.manager.is_some() => (v, Some(text(query)?)),
            Some(v) => (v, query),
            None => (text(query)?, None),
        };
        crate::index::check_dim("entry embedding", self.embedder.dim(), v.len())?;
        let s_neg: f32 = v.iter().zip(&self.negative).map(|(a, b)| a * b).sum();
        e.quality.insert(format!("s_neg:{name}"), s_neg);
        e.embeddings.insert(name.clone(), v.clone());
        let now = now_ms();
        if let Some(m) = &self.manager {
            let p = query.as_deref().unwrap_or(&v);
            let q = manager::quality(p, with_audio.then_some(v.as_slice()), audio);
            e.quality.insert(manager::QUALITY.into(), q);
            if !m.should_admit(&mut e, now, force) {
                return Ok(None);
            }
        }
        // The pyramid's segments below the whole clip, stored with the entry.
        let segments = match &self.pyramid {
            Some(px) if with_audio => {
                crate::segments::embed(self.embedder.as_ref(), audio, px.params())?
            }
            _ => Vec::new(),
        };
        if !segments.is_empty() {
            e.embeddings.insert(
                crate::segments::key(&name),
                crate::segments::pack(&segments),
            );
        }
        let seconds = e.seconds;
        let id = self.store.insert(&e)?;
        self.own.insert(id);
        self.index.add(id, &v)?;
        self.vectors.insert(id, v);
        self.durations.insert(id, seconds);
        if let (Some(px), false) = (&mut self.pyramid, segments.is_empty()) {
            px.add_segments(id, segments)?;
        }
        if let Some(m) = &mut self.manager {
            m.on_insert(id, &e, now);
            for gone in m.evict(self.store.as_mut(), Some(id))? {
                self.unindex(gone);
                self.evicted.push(gone);
            }
        }
        Ok(Some(id))
    }

    fn unindex(&mut self, id: u64) {
        self.index.remove(id);
        self.vectors.remove(&id);
        self.durations.remove(&id);
        if let Some(px) = &mut self.pyramid {
            px.remove_clip(id);
        }
    }

    /// The skip gater, with `SkipPolicy::Gated`.
    pub fn gater(&self) -> Option<&crate::gater::Serving> {
        self.gater.as_ref()
    }

    /// The skip gater, mutably (offline training, another quality score).
    pub fn gater_mut(&mut self) -> Option<&mut crate::gater::Serving> {
        self.gater.as_mut()
    }

    /// The cache manager, when configured.
    pub fn manager(&self) -> Option<&Manager> {
        self.manager.as_ref()
    }

    /// Re-reads entry `id` from the store (e.g. after a [`manager::Refiner`] replaced its clip
    /// through another connection): re-indexes its embedding, or drops it when gone. `false`
    /// when it is gone.
    pub fn reload(&mut self, id: u64) -> Result<bool> {
        self.unindex(id);
        let Some(e) = self.store.get(id)? else {
            if let Some(m) = &mut self.manager {
                m.forget(id);
            }
            return Ok(false);
        };
        if let Some(m) = &mut self.manager {
            m.on_replace(id, &e.data);
        }
        self.index_entry(&e)?;
        Ok(true)
    }

    /// Indexes a stored entry's embedding of this embedder and its segment embeddings.
    fn index_entry(&mut self, e: &Entry) -> Result<()> {
        let (id, name, dim) = (e.id, self.embedder.name(), self.embedder.dim());
        let Some(v) = e.data.embeddings.get(name) else {
            return Ok(());
        };
        crate::index::check_dim(&format!("stored embedding of entry {id}"), dim, v.len())?;
        let segments = match (
            &self.pyramid,
            e.data.embeddings.get(&crate::segments::key(name)),
        ) {
            (Some(_), Some(row)) => {
                let what = format!("stored segment embeddings of entry {id}");
                Some(crate::segments::unpack(&what, dim, row)?)
            }
            _ => None,
        };
        self.index.add(id, v)?;
        self.vectors.insert(id, v.clone());
        self.durations.insert(id, e.data.seconds);
        if let (Some(px), Some(segs)) = (&mut self.pyramid, segments) {
            px.add_segments(id, segs)?;
        }
        Ok(())
    }

    /// Drops every entry from the in-memory indexes.
    fn unindex_all(&mut self) {
        for id in self.vectors.keys() {
            self.index.remove(*id);
            if let Some(px) = &mut self.pyramid {
                px.remove_clip(*id);
            }
        }
        self.vectors.clear();
        self.durations.clear();
    }

    /// Every entry without its payload.
    pub fn list(&self) -> Result<Vec<Entry>> {
        self.store.list()
    }

    /// Entry `id` with its payload.
    pub fn get(&self, id: u64) -> Result<Option<Entry>> {
        self.store.get(id)
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<u64> {
        let n = self.store.clear()?;
        self.unindex_all();
        if let Some(m) = &mut self.manager {
            m.forget_all();
        }
        Ok(n)
    }
}
