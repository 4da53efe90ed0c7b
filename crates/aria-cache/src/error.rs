//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the cache: embedding, indexing, selection, alignment, storage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A tensor op or a model load in `aria-core` failed.
    #[error(transparent)]
    Core(#[from] aria_core::CoreError),
    /// A CLAP model or one of its layers failed.
    #[error(transparent)]
    Clap(#[from] aria_clap::ClapError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A vector had the wrong dimension for the index or embedder it met.
    #[error("{what}: expected dimension {expected}, got {got}")]
    Dim {
        /// What the vector was for.
        what: String,
        /// The dimension required.
        expected: usize,
        /// The dimension given.
        got: usize,
    },
    /// An argument was out of its allowed range or otherwise invalid.
    #[error("invalid {name}: {reason}")]
    Invalid {
        /// The argument's name.
        name: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A model file (embedder weights, tokenizer) is missing or malformed.
    #[error("{what}: {reason}")]
    Model {
        /// Which model or file.
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// The persistent store failed.
    #[error("store: {0}")]
    Store(String),
    /// The generator (the pipeline the cache drives) failed.
    #[error("generator: {0}")]
    Generator(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, CacheError>;
