//! The layer vocabulary every aria model is built from.
//!
//! [`Linear`] and [`Conv1d`] are the only places a model holds a weight matrix. The weight is a
//! [`Weight`], one of three kinds, and a model never knows which it holds:
//! - **dense**: a tensor in its stored dtype (f32/f16/bf16), usually borrowed from the memory
//!   map of the checkpoint;
//! - **packed**: a quantized format provided by another crate (`aria-quant`) through the
//!   [`PackedWeight`] trait defined here;
//! - plus, on top of either, **adapters** ([`Adapter`], e.g. LoRA/DoRA files) whose strengths
//!   can be changed or removed at run time ([`Linear::set_adapters`]) without reloading.
//!
//! Layers are loaded candle-style, with the checkpoint key written verbatim:
//!
//! ```
//! use aria_core::nn::{Bias, Linear};
//! use aria_core::{save_safetensors, Tensor, WeightLoader};
//! # fn main() -> aria_core::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("aria-nn-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).map_err(|e| aria_core::CoreError::Invalid(e.to_string()))?;
//! # let path = dir.join("w.safetensors");
//! let w = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! let b = Tensor::from_vec(vec![0.5f32, 0.5, 0.5], &[3])?;
//! save_safetensors(&path, &[("proj.weight", &w), ("proj.bias", &b)], None)?;
//! let vb = WeightLoader::open(&[&path])?;
//!
//! let proj = Linear::load(&vb.pp("proj"), 2, 3, Bias::Yes)?;
//! let y = proj.forward(&Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?)?;
//! assert_eq!(y.to_vec::<f32>()?, vec![1.5, 2.5, 3.5]);
//! # drop((proj, vb));
//! # std::fs::remove_dir_all(&dir).map_err(|e| aria_core::CoreError::Invalid(e.to_string()))?;
//! # Ok(()) }
//! ```

mod conv;
mod linear;
mod weight;

pub use aria_cpu::host::Bf16DotWeight;
pub use conv::Conv1d;
pub use linear::{Bias, Linear};
pub use weight::{
    pack_stacked, put_packed, Adapter, DevicePacked, LowRank, PackedBlocks, PackedSource,
    PackedWeight, Weight, WeightFormat,
};
