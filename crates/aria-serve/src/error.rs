//! The error type of `aria-serve`.

/// Result alias of `aria-serve`.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// What can go wrong while serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The job store failed (the message names the store and the operation).
    #[error("{0}")]
    Store(String),
    /// The queue holds its maximum of queued jobs.
    #[error("queue full: {depth} jobs queued, limit queue_max = {max}")]
    QueueFull {
        /// Jobs queued now.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// The configuration is unusable (the message names the setting).
    #[error("{0}")]
    Config(String),
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, and on which path or address.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The model failed to load or run.
    #[error(transparent)]
    Aria(#[from] aria::Error),
}

impl ServeError {
    /// An [`ServeError::Io`] saying what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ServeError {
        ServeError::Io {
            what: what.into(),
            source,
        }
    }
}
