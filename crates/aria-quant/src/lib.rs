//! # aria-quant
//!
//! Quantized weight storage for aria: a packed weight is one more kind of
//! [`aria_core::nn::Weight`], so model code computes with it without knowing.
//!
//! - [`format`](mod@format): the packed block formats `q8_0`, `q4_k` and `q6_k` (`#[repr(C)]` block structs
//!   with compile-time size checks, a tag with the layout version, reference quantize and
//!   dequantize).
//! - [`PackedMatrix`]: a quantized `[out, in]` matrix, quantized row by row from f32/f16/bf16
//!   weights (memory-mapped or owned), implementing [`aria_core::nn::PackedWeight`].
//! - [`kernels`]: f32 activations × packed weights, dequantized slab by slab while the CPU's
//!   f32 product packs them (bit-identical to that product on the dequantized weight, on each
//!   path, and for any thread count), and W8A8 (per-token int8 activations, exact int32 block
//!   sums on AMX-INT8, AVX-512 VNNI, AVX-VNNI, AVX2, NEON `sdot`/plain NEON, scalar), chosen by a `try_*` ladder from explicit inputs
//!   ([`Compute`] is a configuration value, not an environment switch).
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
pub mod kernels;
mod matrix;
mod policy;

pub use checksum::{xxh64, Xxh64};
pub use error::{QuantError, Result};
pub use format::Format;
pub use matrix::{Compute, PackedMatrix};
pub use policy::Policy;
