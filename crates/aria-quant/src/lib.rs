//! # aria-quant
//!
//! Quantized weight storage for aria: a packed weight is one more kind of
//! [`aria_core::nn::Weight`], so model code computes with it without knowing. Its products are
//! the op set's `linear_packed`, run by the backend the weight lives on (on the CPU, the
//! kernels of `aria_cpu::quant`, which read the blocks in place); this crate supplies the
//! formats, not kernels.
//!
//! - [`format`](mod@format): the packed block formats `q8_0`, `q4_k` and `q6_k` (the
//!   `#[repr(C)]` block structs with compile-time size checks and their decoding are shared
//!   with the CPU kernels; here: a tag with the layout version, the reference quantizers, and
//!   the reference dequantization).
//! - [`PackedMatrix`]: a quantized `[out, in]` matrix, quantized row by row from f32/f16/bf16
//!   weights (memory-mapped or owned), implementing [`aria_core::nn::PackedWeight`] (its
//!   operand is the blocks themselves), in a [`Compute`] mode (weight-only or W8A8, a
//!   configuration value, not an environment switch).
//! - [`kernels`]: the CPU backend's kernels, re-exported for [`PackedMatrix::matmul_with`]
//!   (one explicit path) and benchmarks.
//! - [`io`]: packed safetensors files (U8 blocks plus a tensor table, format version, policy
//!   and source checksum in the metadata), with typed errors for mismatched, corrupt and
//!   truncated files.
//! - [`Policy`]: which format each layer of a model gets (`q8`, `q4`, `q4-mixed`).
//!
//! ```
//! use aria_core::nn::{Linear, Weight};
//! use aria_core::Tensor;
//! use aria_quant::{Format, PackedMatrix};
//! use std::sync::Arc;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let w: Vec<f32> = (0..64 * 96).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect();
//! let dense = Tensor::from_vec(w.clone(), &[64, 96])?;
//! let packed = PackedMatrix::quantize("proj.weight", &dense, Format::Q8_0)?;
//! let layer = Linear::new("proj", Weight::Packed(Arc::new(packed)), None)?;
//! let x = Tensor::from_vec(vec![0.5f32; 2 * 96], &[2, 96])?;
//! let y = layer.forward(&x)?;
//! let want = aria_core::ops::linear(&x, &dense, None)?;
//! let (y, want) = (y.to_vec::<f32>()?, want.to_vec::<f32>()?);
//! let err = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
//! assert!(err < 0.05, "{err}");
//! # Ok(()) }
//! ```

mod checksum;
mod error;
pub mod format;
pub mod io;
mod matrix;
mod policy;

pub use checksum::{xxh64, Xxh64};
pub use error::{QuantError, Result};
pub use format::Format;
pub use matrix::PackedMatrix;

/// The CPU kernels of the packed formats, which live in the CPU backend (`aria_cpu::quant`);
/// re-exported for [`PackedMatrix::matmul_with`] and benchmarks.
pub mod kernels {
    pub use aria_core::cpu::quant::kernels::*;
}

pub use aria_core::cpu::quant::Compute;
pub use policy::Policy;
