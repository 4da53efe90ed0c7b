//! # aria-core
//!
//! What every aria model is written with: the ops ([`ops`]: each builds an op of the set, runs
//! its one check step and hands it to the backend its operands live on), the layers ([`nn`]),
//! safetensors weight loading with a prefix-stack loader ([`WeightLoader`]), activation
//! [`hooks`] and the noise of the reference ([`noise`], [`rng`]).
//!
//! The contract itself ([`Tensor`], the op set [`backend::Op`] and its check step, the
//! [`Backend`] trait, the backend registry) is the `aria-tensor` crate, re-exported here. The
//! backends are peers that implement it: the CPU backend ([`backend::Cpu`], the `aria-cpu`
//! crate, re-exported as [`cpu`]), which runs every op whose operands are host tensors, and the
//! device backends (`aria-wgpu`, `aria-cuda`), opened by name from the registry.
//!
//! ```
//! use aria_core::{ops, Tensor};
//! # fn main() -> aria_core::Result<()> {
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let w = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! let y = ops::linear(&x, &w, None)?;
//! assert_eq!(y.shape(), &[2, 3]);
//! assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 3.0, 4.0, 7.0]);
//! # Ok(()) }
//! ```

pub mod alloc;
pub mod backend;
pub mod config;
/// The CPU kernels (the `aria-cpu` crate), which the ops run on CPU tensors.
pub use aria_cpu as cpu;
pub mod hooks;
pub mod hub;
/// Conversions between `Tensor` and `ndarray` arrays (feature `ndarray`; `aria-tensor`'s).
#[cfg(feature = "ndarray")]
pub use aria_tensor::interop;
pub mod loader;
pub mod nn;
pub mod noise;
pub mod ops;
pub mod rng;
/// The thread pools the CPU backend runs in (`aria-cpu`'s).
pub use aria_cpu::threads;
/// Tensor storage: host memory (owned or memory-mapped) or a backend's own (`aria-tensor`'s).
pub use aria_tensor::storage;

pub use aria_tensor::{
    bf16, contiguous_strides, f16, Backend, CoreError, DType, Device, Elem, Result,
    SafeTensorsErrorKind, Storage, Tensor,
};
pub use loader::{save_safetensors, SafeTensorsFile, TensorInfo, WeightLoader};
