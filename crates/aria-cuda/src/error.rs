//! The error type of the CUDA backend.

use aria_tensor::CoreError;

/// What went wrong in the CUDA backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// A CUDA library could not be opened (no driver, no NVRTC, no cuBLAS on this machine).
    #[error("{library} is not available on this machine: {reason}")]
    Unavailable {
        /// The library ("libcuda", "libnvrtc", "libcublas").
        library: &'static str,
        /// Why it could not be used.
        reason: String,
    },
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile {kernel} for {arch}: {log}")]
    Compile {
        /// The kernel source file.
        kernel: &'static str,
        /// The virtual architecture compiled for.
        arch: &'static str,
        /// The compiler's log.
        log: String,
    },
    /// A compiled module lacks an entry point the backend launches.
    #[error("{kernel}: the compiled PTX has no entry point `{entry}`")]
    MissingEntry {
        /// The kernel source file.
        kernel: &'static str,
        /// The missing `extern "C"` function.
        entry: &'static str,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver: {what}: {reason}")]
    Driver {
        /// What was being done.
        what: String,
        /// The driver's error.
        reason: String,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS: {what}: {reason}")]
    Blas {
        /// What was being done.
        what: String,
        /// cuBLAS's status.
        reason: String,
    },
    /// A launch or a shape outside what the kernels handle.
    #[error("{op}: {reason}")]
    Limit {
        /// The op.
        op: &'static str,
        /// The limit that was exceeded.
        reason: String,
    },
    /// Reading or writing the PTX cache directory failed.
    #[error("PTX cache {path}: {source}")]
    Cache {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl From<CudaError> for CoreError {
    fn from(e: CudaError) -> Self {
        CoreError::Backend {
            backend: crate::NAME.to_string(),
            reason: e.to_string(),
        }
    }
}

/// `Result` with [`CudaError`].
pub type CudaResult<T> = std::result::Result<T, CudaError>;

/// A driver error as [`CudaError::Driver`].
pub(crate) fn driver(
    what: impl Into<String>,
) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
    let what = what.into();
    move |e| CudaError::Driver {
        what,
        reason: e.to_string(),
    }
}
