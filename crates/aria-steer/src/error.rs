//! The crate's error type.

use std::path::PathBuf;

use aria_core::CoreError;

/// Result alias of this crate.
pub type Result<T, E = SteerError> = std::result::Result<T, E>;

/// What can go wrong when reading, checking or applying steering directions.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    /// A tensor or file-level error from `aria-core` (I/O, malformed safetensors, shapes).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A direction file that is not a valid aria direction file.
    #[error("direction file `{path}`: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A direction file made for another model (overridable with `force`).
    #[error(
        "direction file `{path}` was extracted from another model: {reason} \
         (force the load to use it anyway)"
    )]
    ModelMismatch {
        /// The file.
        path: PathBuf,
        /// Which part of the identity differs.
        reason: String,
    },
    /// A direction whose width does not fit the site it is applied to (never overridable).
    #[error("direction file `{path}`: {what} has {found} dimensions, the model needs {expected}")]
    Dimension {
        /// The file.
        path: PathBuf,
        /// The entry (`residual block 3`, `latent`, `text`).
        what: String,
        /// The model's width at that site.
        expected: usize,
        /// The direction's width.
        found: usize,
    },
    /// A malformed `FILE[:key=value]...` steering spec.
    #[error("steering spec `{spec}`: {reason}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Invalid arguments to a library call (named in the message).
    #[error("{0}")]
    Invalid(String),
}

impl From<SteerError> for CoreError {
    fn from(e: SteerError) -> Self {
        match e {
            SteerError::Core(c) => c,
            other => CoreError::Invalid(other.to_string()),
        }
    }
}
