//! The error type of the `aria` library.

use std::path::{Path, PathBuf};

/// Result alias of the `aria` library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while locating, loading or running a model. Every message
/// names the file, key, tensor or value at fault, so one line is enough to fix the input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the tensor engine or the weight loader.
    #[error(transparent)]
    Core(#[from] aria_core::CoreError),
    /// An error from the text conditioning / DiT / sampler crate.
    #[error(transparent)]
    Dit(#[from] aria_dit::DitError),
    /// An error from the autoencoder / audio crate.
    #[error(transparent)]
    Codec(#[from] aria_codec::CodecError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration file is missing a key or holds a bad value.
    #[error("{0}")]
    Config(String),
    /// A model folder or name could not be resolved.
    #[error("model `{spec}` not found: {details}")]
    ModelNotFound {
        /// What the user asked for.
        spec: String,
        /// Where it looked and what was missing there.
        details: String,
    },
    /// A request parameter is out of range or inconsistent.
    #[error("{0}")]
    Input(String),
    /// An audio file is unreadable, empty or has an unsupported format.
    #[error("{path}: {reason}")]
    Audio {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A noise file does not match the draws the run makes.
    #[error("noise file {path}: {reason}")]
    Noise {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A LoRA file does not fit the model.
    #[error("LoRA {path}: {reason}")]
    Lora {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The run was cancelled by the progress callback.
    #[error("cancelled")]
    Cancelled,
    /// A model component this build cannot run yet.
    #[error("{0}")]
    Unavailable(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
