//! The error type of `aria-codec`.

use std::path::PathBuf;

use aria_core::CoreError;

/// Result alias used throughout `aria-codec`.
pub type Result<T, E = CodecError> = std::result::Result<T, E>;

/// Everything that can go wrong in `aria-codec`; each variant names the file, key, tensor or shape
/// involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A tensor op, a weight lookup or a safetensors file failed.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A configuration file is missing a key, has a wrong value or asks for an unsupported feature.
    #[error("{path}: `{key}`: {reason}")]
    Config {
        /// The configuration file (or the label passed to `from_json`).
        path: PathBuf,
        /// The JSON key path, e.g. `model.pretransform.config.decoder.config.latent_dim`.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// An audio file could not be read, decoded or written.
    #[error("{path}: {reason}")]
    Audio {
        /// The audio file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Inputs of the wrong shape or an invalid argument.
    #[error("{0}")]
    Invalid(String),
}

impl CodecError {
    pub(crate) fn audio(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> Self {
        CodecError::Audio {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}
