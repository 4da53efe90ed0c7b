//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong loading CLAP, extracting features, tokenizing, embedding or
/// measuring.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClapError {
    /// A tensor op or a weight load in `aria-core` failed.
    #[error(transparent)]
    Core(#[from] aria_core::CoreError),
    /// Reading or resampling audio failed.
    #[error(transparent)]
    Codec(#[from] aria_codec::CodecError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A configuration file (`config.json`, `preprocessor_config.json`) is malformed or names a
    /// setting this implementation does not support.
    #[error("{file}: {reason}")]
    Config {
        /// The file (or the section of it).
        file: String,
        /// What was wrong.
        reason: String,
    },
    /// A tokenizer file is missing or malformed.
    #[error("tokenizer {file}: {reason}")]
    Tokenizer {
        /// The file.
        file: String,
        /// What was wrong.
        reason: String,
    },
    /// Audio given to the feature extractor or the measures is unusable (no samples, too long,
    /// not finite, an odd sample rate).
    #[error("audio {what}: {reason}")]
    Audio {
        /// Which clip or argument.
        what: String,
        /// What was wrong.
        reason: String,
    },
    /// A tensor had the wrong shape for the stage it met.
    #[error("{what}: expected shape {expected:?}, got {got:?}")]
    Shape {
        /// The stage.
        what: String,
        /// The shape required.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },
    /// An argument was out of its allowed range or otherwise invalid.
    #[error("invalid {name}: {reason}")]
    Invalid {
        /// The argument's name.
        name: String,
        /// What was wrong with it.
        reason: String,
    },
}

impl ClapError {
    /// A [`ClapError::Invalid`].
    pub fn invalid(name: impl Into<String>, reason: impl Into<String>) -> Self {
        ClapError::Invalid {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// A [`ClapError::Audio`].
    pub fn audio(what: impl Into<String>, reason: impl Into<String>) -> Self {
        ClapError::Audio {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// A [`ClapError::Config`].
    pub fn config(file: impl Into<String>, reason: impl Into<String>) -> Self {
        ClapError::Config {
            file: file.into(),
            reason: reason.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, ClapError>;

/// A text file's contents; an error names the file.
pub(crate) fn read_text(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ClapError::Io {
        path: path.to_path_buf(),
        source,
    })
}
