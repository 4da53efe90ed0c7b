//! The error type of `aria-core`.

use std::path::PathBuf;

use crate::DType;

/// Result alias used throughout `aria-core`.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in `aria-core`: every variant names the file, tensor, op, shape or
/// dtype involved so that a message alone is enough to locate the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// An I/O error while opening or mapping a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A safetensors file whose header or layout is invalid (corrupt, truncated, hostile).
    #[error("{path}: invalid safetensors file ({kind}): {reason}")]
    SafeTensors {
        /// The file.
        path: PathBuf,
        /// Which rule the file breaks.
        kind: SafeTensorsErrorKind,
        /// What is wrong, naming the tensor when one is involved.
        reason: String,
    },
    /// A tensor was requested that no loaded file contains.
    #[error("tensor `{name}` not found in {files}")]
    MissingTensor {
        /// Full tensor name.
        name: String,
        /// The files that were searched.
        files: String,
    },
    /// A loaded tensor has another shape than the model expects.
    #[error("tensor `{name}` in {file}: expected shape {expected:?}, found {found:?}")]
    WeightShape {
        /// Full tensor name.
        name: String,
        /// File that holds it.
        file: String,
        /// Expected shape.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not what was asked for and cannot be converted.
    #[error("tensor `{name}` in {file}: dtype {found} where {expected} was expected")]
    WeightDType {
        /// Full tensor name.
        name: String,
        /// File that holds it.
        file: String,
        /// Expected dtype(s), in words.
        expected: String,
        /// Dtype found.
        found: DType,
    },
    /// A file stores a dtype aria does not handle.
    #[error("tensor `{name}` in {file}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// Full tensor name.
        name: String,
        /// File that holds it.
        file: String,
        /// The dtype as written in the file.
        dtype: String,
    },
    /// A JSON file (config) could not be read or parsed.
    #[error("{path}: {reason}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong (parser message, missing key...).
        reason: String,
    },
    /// Shapes given to an op do not fit together.
    #[error("{op}: {reason} (shapes {shapes:?})")]
    Shape {
        /// The op.
        op: &'static str,
        /// What is wrong.
        reason: String,
        /// The shapes involved.
        shapes: Vec<Vec<usize>>,
    },
    /// An op was given a dtype it does not accept.
    #[error("{op}: dtype {dtype:?} not supported here ({reason})")]
    DType {
        /// The op.
        op: &'static str,
        /// The offending dtype.
        dtype: DType,
        /// Context.
        reason: String,
    },
    /// No backend of this name is registered in this program (see
    /// [`backend::registry`](crate::backend::registry)).
    #[error(
        "no `{name}` backend in this program (available: {available}); it may need a cargo feature"
    )]
    NoBackend {
        /// The name asked for.
        name: String,
        /// The registered names, comma-separated.
        available: String,
    },
    /// An op is not implemented by the backend the tensor lives on.
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// The backend's name.
        backend: String,
    },
    /// A device backend reported an error.
    #[error("{backend} backend: {reason}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What happened.
        reason: String,
    },
    /// An invalid argument (out-of-range index, zero-sized window...).
    #[error("{0}")]
    Invalid(String),
    /// A noise source cannot hand out the draw that was asked for (exhausted, wrong shape, bad
    /// file).
    #[error("noise from {origin}: {reason}")]
    Noise {
        /// Where the draws come from (a file, "replayed draws").
        origin: String,
        /// What is wrong, naming the draw.
        reason: String,
    },
}

/// The rule of the safetensors format that a [`CoreError::SafeTensors`] file breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SafeTensorsErrorKind {
    /// The file is shorter than the 8-byte header length.
    TooSmall,
    /// The declared header length exceeds the format's limit (100 000 000 bytes).
    HeaderTooLarge,
    /// The declared header length runs past the end of the file.
    HeaderLength,
    /// The header is not valid UTF-8 JSON of the expected structure (an object of tensor
    /// entries `{dtype, shape, data_offsets}` plus an optional string-to-string
    /// `__metadata__`).
    Header,
    /// A tensor's byte length does not match its dtype and shape, or its shape overflows.
    TensorSize,
    /// Tensor byte ranges are not laid out back to back from the start of the data section
    /// (a gap, an overlap or a reversed range).
    Offsets,
    /// The data section is shorter or longer than the tensors declared in the header
    /// (truncated file or trailing bytes).
    DataLength,
    /// The same tensor name appears in two shards of one checkpoint.
    DuplicateTensor,
    /// A tensor cannot be written (reserved or repeated name).
    Write,
}

impl std::fmt::Display for SafeTensorsErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SafeTensorsErrorKind::TooSmall => "file too small",
            SafeTensorsErrorKind::HeaderTooLarge => "header too large",
            SafeTensorsErrorKind::HeaderLength => "header length past end of file",
            SafeTensorsErrorKind::Header => "malformed header",
            SafeTensorsErrorKind::TensorSize => "tensor size mismatch",
            SafeTensorsErrorKind::Offsets => "bad data offsets",
            SafeTensorsErrorKind::DataLength => "data section length mismatch",
            SafeTensorsErrorKind::DuplicateTensor => "duplicate tensor",
            SafeTensorsErrorKind::Write => "cannot write",
        })
    }
}

impl CoreError {
    /// Shorthand for a [`CoreError::Shape`] error.
    pub fn shape(op: &'static str, reason: impl Into<String>, shapes: &[&[usize]]) -> Self {
        CoreError::Shape {
            op,
            reason: reason.into(),
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        }
    }
}
