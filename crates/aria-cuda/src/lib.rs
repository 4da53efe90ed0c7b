//! # aria-cuda
//!
//! The CUDA backend of `aria-core`: [`CudaBackend`] implements [`aria_core::Backend`] for the op
//! set with kernels compiled at run time by NVRTC (sources under `kernels/`, cached by source
//! hash, see [`kernels`]) and cuBLAS for the matrix products (f32, and fp16/bf16 tensor cores
//! with f32 accumulation). [`graph`] captures the per-step denoising work once and replays it,
//! with the per-step scalars and the steering strength in device buffers.
//!
//! Everything CUDA is opened at run time (`cudarc` with dynamic loading): the crate builds
//! and its tests run on machines without CUDA. [`cuda_available`] says whether a driver and a
//! device are present; [`CudaBackend::new`] fails with a clear error otherwise.
//!
//! # Status
//!
//! Checked without a GPU (CI): every kernel compiles to PTX with NVRTC for `compute_80` and
//! `compute_90` and defines the entry points the backend launches (`.ci/cuda.sh`); launch
//! configurations, GEMM layouts (against a column-major reference), argument structs, shape
//! checks, the op-to-kernel routing and the unsupported-op errors are unit-tested.
//! **Not yet run on a GPU**: the parity tests (`tests/parity_ops.rs`, `tests/parity_dit.rs`)
//! and the graph replay test skip without a device; `cargo xtask cuda-check` runs them, with
//! the timings, on a GPU machine. Ops without a device kernel (`embedding` and the PyTorch-bf16
//! replay ops) are refused by name ([`plan::route`]). Attention runs in f32 on CUDA cores;
//! fp16 tensor-core attention and int8 (W8A8) products are not written yet.
//!
//! Without a GPU the kernel registry still says what would be compiled:
//!
//! ```
//! let entries: Vec<_> = aria_cuda::kernels::all_entries().collect();
//! assert!(!entries.is_empty());
//! // The backend opens only where a driver and a device exist, and says why not otherwise.
//! if !aria_cuda::cuda_available() {
//!     assert!(aria_cuda::CudaBackend::new(0).is_err());
//! }
//! ```

mod error;
pub mod kernels;

pub use error::{CudaError, CudaResult};

/// The backend's name, as in [`aria_core::CoreError::Unsupported`].
pub const NAME: &str = "cuda";

mod backend;
pub mod gemm;
pub mod graph;
pub mod launch;
mod ops;
pub mod plan;

pub use backend::{cuda_available, CudaBackend, CudaStorage};
pub use graph::{check_capture, StepGraph, StepScalars};
pub use ops::{attention_args, broadcast_shape, broadcast_strides};
