//! # aria-testing
//!
//! Test support shared by the aria crates (not published, not part of any public API):
//! - [`fixtures`]: locating the parity fixtures recorded by the official code (the
//!   repository's `fixtures/` folder) and comparing against them;
//! - [`skip`](mod@skip): recording a test that skips (absent data, service or hardware), so that the
//!   test command can list every skip with its reason; under `CI=true` a skip fails;
//! - [`counting`]: a device backend that computes with the CPU kernels but keeps its tensors
//!   behind [`aria_core::Device`], counting every upload, download and op. It proves that a
//!   model runs entirely on a device backend — no op falls back to a silent host round trip —
//!   which is what lets the wgpu and CUDA backends grow op by op;
//! - [`harness`]: the op harness, every op of the set × format × shapes on a backend against
//!   the CPU reference, with tolerances from one table;
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
pub mod harness;
#[cfg(feature = "dit")]
pub mod sampler;
pub mod skip;
pub mod tempdir;

pub use skip::{skip, skip_for_hardware};
pub use tempdir::{SharedTempDir, TempDir};
