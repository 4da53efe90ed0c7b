//! # aria-cache
//!
//! A SoundWeaver-style warm-start cache for serving: retrieve a semantically close cached clip
//! (embedder trait, exact and IVF vector index, pyramid segment embeddings), align its duration
//! with a phase vocoder, noise it to an intermediate step and run only the remaining denoising
//! steps. It drives generation through a small `Generator` trait and depends on `aria-core` only.
//!
//! The path of one request ([`Cache::generate`]):
//!
//! 1. [`Embedder`] → prompt vector; the [`index`] returns the top-K entries, and (with an
//!    audio embedder) the pyramid of segment embeddings ([`index::PyramidIndex`],
//!    [`CacheConfig::segments`]) the best segment below the whole clip of the top-K clips, so a
//!    part of a longer clip can be the reference;
//! 2. [`select`]: the quality gate (eq. 1), the duration gate (eq. 2) and a seeded draw
//!    `p ∝ exp(s_pos/τ)`; a chosen segment is cut from its clip ([`warm::segment_of`]: its
//!    audio, and its stored latents at latent-frame granularity);
//! 3. [`warm::align_within`], latents first: the entry's stored latents when its duration
//!    matches, cropped or tiled to the request's frames when it is within
//!    [`CacheConfig::latent_tolerance`] (no encode), else its audio stretched by the phase
//!    [`vocoder`] and encoded by the [`Generator`];
//! 4. the generator noises `x̂₀` to the schedule's σ at the skip step (fixed, or chosen per
//!    request by the [`gater`], a contextual bandit that learns from each result) and runs the
//!    rest;
//! 5. the reuse is recorded (importance), the result admitted to the [`store`] (SQLite or
//!    PostgreSQL) and the least important entries evicted beyond the capacity
//!    ([`manager::Capacity::DEFAULT`]: 1 000 entries, 4 GiB); the store counts what happened
//!    ([`cache::counter`]).
//!
//! With a CLAP embedder (`embed::ClapEmbedder`) an entry is indexed by its audio's embedding, so
//! `s_pos` and `s_neg` compare the clip's sound with the prompt and the negative prompt (eq. 1–2).
//! Without it the similarity of a cached clip to a prompt is that of the prompt that made (or
//! describes) the clip.
//! `aria::cache` (the `aria` crate's `cache` feature) implements [`Generator`] for its pipeline.
//!
//! The index on its own (any unit vectors; here three tiny hand-made ones):
//!
//! ```
//! use aria_cache::index::{ExactIndex, VectorIndex};
//! # fn main() -> aria_cache::Result<()> {
//! let mut index = ExactIndex::new(3);
//! index.add(7, &[1.0, 0.0, 0.0])?;
//! index.add(8, &[0.0, 1.0, 0.0])?;
//! index.add(9, &[0.6, 0.8, 0.0])?;
//! let hits = index.search(&[0.0, 1.0, 0.0], 2)?;
//! assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![8, 9]);
//! assert!(index.add(10, &[1.0, 0.0]).is_err()); // a wrong dimension is an error, not a panic
//! # Ok(()) }
//! ```

mod error;

pub mod cache;
pub mod embed;
pub mod gater;
pub mod index;
pub mod manager;
mod segments;
pub mod select;
pub mod store;
pub mod tempo;
pub mod vocoder;
pub mod warm;

pub use cache::{Cache, CacheConfig, IndexKind, Lookup, Outcome, Overhead};
pub use embed::Embedder;
pub use error::{CacheError, Result};
pub use store::{Audio, Store};
pub use warm::{Generation, Generator, Request, SkipPolicy, WarmLatents};
