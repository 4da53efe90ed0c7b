//! The error type of `aria-quant`.

use std::path::PathBuf;

use aria_core::CoreError;

/// Result alias used throughout `aria-quant`.
pub type Result<T, E = QuantError> = std::result::Result<T, E>;

/// Everything that can go wrong while quantizing, computing with or storing packed weights.
/// Every variant names the tensor, file, format or shape involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// An error from `aria-core` (tensor access, safetensors parsing, I/O).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A weight or activation has a shape the operation cannot take.
    #[error("{what}: {reason} (shape {shape:?})")]
    Shape {
        /// What was being quantized or computed.
        what: String,
        /// What is wrong.
        reason: String,
        /// The offending shape.
        shape: Vec<usize>,
    },
    /// A weight or activation has a dtype the operation cannot take.
    #[error("{what}: dtype {dtype} not supported ({reason})")]
    DType {
        /// What was being quantized or computed.
        what: String,
        /// The dtype found.
        dtype: aria_core::DType,
        /// What would be accepted.
        reason: String,
    },
    /// A weight holds a value no packed format can represent (NaN, ±∞, or beyond the f16
    /// range of the block scales).
    #[error("{what}: element [{row}, {col}] = {value} cannot be quantized ({reason})")]
    Value {
        /// What was being quantized.
        what: String,
        /// Row of the element.
        row: usize,
        /// Column of the element.
        col: usize,
        /// The value.
        value: f32,
        /// Why it cannot be stored.
        reason: String,
    },
    /// A format name or tag that this build does not know (or a known format at another
    /// layout version).
    #[error("unknown packed format `{tag}` (known: {known})")]
    UnknownFormat {
        /// The tag as found.
        tag: String,
        /// The tags this build reads.
        known: String,
    },
    /// A compute mode that the weight's format does not support (W8A8 on a 4-bit format).
    #[error("{format}: compute mode {mode} is not supported ({reason})")]
    Compute {
        /// The weight's format tag.
        format: String,
        /// The requested mode.
        mode: String,
        /// Which formats support it.
        reason: String,
    },
    /// A packed file that is not what the reader expects (container version, format, policy,
    /// source checksum, a tensor's table entry).
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor or metadata key.
        reason: String,
    },
    /// A packed tensor whose bytes do not match the checksum stored for it (corrupt file).
    #[error(
        "{path}: tensor `{tensor}` is corrupt: checksum {found:016x}, expected {expected:016x}"
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Checksum recorded in the file.
        expected: u64,
        /// Checksum of the bytes read.
        found: u64,
    },
    /// The packed file was made from other weights than the ones it is used with.
    #[error("{path}: packed from source {found}, but the model's source is {expected}")]
    SourceMismatch {
        /// The file.
        path: PathBuf,
        /// The source checksum the caller expects.
        expected: String,
        /// The source checksum recorded in the file.
        found: String,
    },
    /// An I/O error while writing a packed file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl From<QuantError> for CoreError {
    fn from(e: QuantError) -> Self {
        match e {
            QuantError::Core(c) => c,
            other => CoreError::Backend {
                backend: "aria-quant".into(),
                reason: other.to_string(),
            },
        }
    }
}
