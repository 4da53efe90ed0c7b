//! # aria-cuda
//!
//! The CUDA backend of aria: [`CudaBackend`] implements the contract's
//! [`Backend`](aria_tensor::Backend) for the op set with kernels compiled at run time by NVRTC
//! (sources under `kernels/`, cached by source hash, see [`kernels`]) and cuBLAS for the matrix products (f32, and fp16/bf16 tensor cores
//! with f32 accumulation). [`graph`] records the sampler's per-step DiT evaluation as a graph
//! and replays it, reading the state and σ from device buffers.
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
//! **Not yet run on a GPU**: the op harness (`aria-testing`'s `op_harness`, every op × format ×
//! shape), the model parity test (`tests/parity_dit.rs`) and the graph replay test skip without
//! a device; `cargo xtask cuda-check` runs them, with
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

/// The backend's name, as in [`CoreError::Unsupported`](aria_tensor::CoreError::Unsupported).
pub const NAME: &str = "cuda";

mod backend;
pub mod gemm;
pub mod graph;
pub mod launch;
mod ops;
pub mod plan;

pub use backend::{cuda_available, CudaBackend, CudaStorage};

/// Register this backend as `cuda` in aria-core's
/// [backend registry](aria_tensor::backend::registry): device 0, kernels cached under
/// [`BackendOptions::cache_dir`](aria_tensor::backend::registry::BackendOptions::cache_dir) when
/// given. Opening it fails with a clear error on a machine without a driver or a device.
pub fn register() {
    aria_tensor::backend::registry::register(
        NAME,
        "CUDA kernels compiled at run time (NVRTC) and cuBLAS, on NVIDIA GPUs from Ampere on",
        |opts| {
            if let Some((name, _)) = opts.settings.first() {
                return Err(CudaError::Limit {
                    op: "open",
                    reason: format!("unknown setting `{name}` (the CUDA backend takes none)"),
                }
                .into());
            }
            let cache = kernels::PtxCache::new(opts.cache_dir.clone());
            Ok(CudaBackend::with_cache(0, true, cache)?.device())
        },
    );
}
pub use ops::{attention_args, broadcast_strides};
