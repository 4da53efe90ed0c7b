//! The error type of `aria-dit`.

use std::path::PathBuf;

/// Result alias of `aria-dit`.
pub type Result<T, E = DitError> = std::result::Result<T, E>;

/// Errors of `aria-dit`. Variants name the file, key, tensor or shape involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DitError {
    /// An error from the tensor engine or weight loader.
    #[error(transparent)]
    Core(#[from] aria_core::CoreError),
    /// A configuration file is missing a key, has an unknown one, or holds a bad value.
    #[error("{path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// The tokenizer could not be loaded or failed.
    #[error("tokenizer {path}: {reason}")]
    Tokenizer {
        /// The `tokenizer.json` file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An input of the wrong shape or value.
    #[error("{what}: {reason}")]
    Input {
        /// The input.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The run was cancelled through a callback.
    #[error("cancelled at step {step}")]
    Cancelled {
        /// The step at which the cancellation was seen.
        step: usize,
    },
}
