//! # aria-testing
//!
//! Test support shared by the aria crates (not published, not part of any public API):
//! - [`fixtures`]: locating the parity fixtures recorded by the official code and comparing
//!   against them (tests skip visibly when fixtures are absent, and fail under `CI=true`);
//! - [`counting`]: a device backend that computes with the CPU kernels but keeps its tensors
//!   behind [`aria_core::Device`], counting every upload, download and op. It proves that a
//!   model runs entirely on a device backend — no op falls back to a silent host round trip —
//!   which is what lets the wgpu and CUDA backends grow op by op;
//! - `sampler` (the `dit` feature): the fixture models' recorded 8-step ping-pong sample,
//!   replayed on any device;
//! - [`tempdir`]: scratch folders ([`TempDir`], [`SharedTempDir`]) removed when their guard
//!   drops, also when a test fails (kept, with their paths printed, under
//!   `ARIA_KEEP_TEST_FILES`).
//!
//! ```
//! use aria_core::{ops, Tensor};
//! use aria_testing::counting::CountingBackend;
//! # fn main() -> aria_core::Result<()> {
//! let be = CountingBackend::new();
//! let dev = be.device();
//! let x = dev.put(&Tensor::from_vec(vec![1.0f32, -2.0], &[1, 2])?)?;
//! let y = ops::silu(&ops::mul_scalar(&x, 2.0)?)?; // two ops on the device, nothing downloaded
//! assert_eq!(be.counts().downloads, 0);
//! let host = y.to_cpu()?;
//! assert_eq!(be.counts().downloads, 1);
//! assert_eq!(host.shape(), &[1, 2]);
//! # Ok(()) }
//! ```

pub mod counting;
pub mod fixtures;
#[cfg(feature = "dit")]
pub mod sampler;
pub mod tempdir;

pub use tempdir::{SharedTempDir, TempDir};
