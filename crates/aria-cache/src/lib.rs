//! # aria-cache
//!
//! **Status: planned; nothing is implemented yet.** A SoundWeaver-style warm-start cache for
//! serving: retrieve a semantically close cached clip (embedder trait, exact and IVF vector
//! index, pyramid segment embeddings), align its duration with a phase vocoder, noise it to an
//! intermediate step and run only the remaining denoising steps; a contextual-bandit skip gater,
//! importance-based eviction with decay, refinement, and persistence across restarts. It drives
//! generation through a small `Generator` trait and depends on `aria-core` only.
