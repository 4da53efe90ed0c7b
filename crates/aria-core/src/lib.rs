//! # aria-core
//!
//! The contract under every aria model: [`Tensor`] (shape, strides, f32/f16/bf16 plus raw
//! integer dtypes, CPU storage that is owned or borrowed from a memory-mapped file), the ops
//! models are written with ([`ops`]: the op set with its one check step), the [`Backend`]
//! trait and the backend registry through which the CPU backend ([`backend::Cpu`], over the
//! `aria-cpu` kernels, re-exported as [`cpu`]) and the device backends plug in, the layers
//! ([`nn`]), and safetensors weight loading with a prefix-stack loader ([`WeightLoader`]).
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
mod dtype;
mod error;
pub mod hooks;
pub mod hub;
#[cfg(feature = "ndarray")]
pub mod interop;
pub mod loader;
pub mod nn;
pub mod noise;
pub mod ops;
pub mod rng;
pub mod storage;
mod tensor;

pub use backend::{Backend, Device};
pub use dtype::{DType, Elem};
pub use error::{CoreError, Result, SafeTensorsErrorKind};
pub use loader::{save_safetensors, SafeTensorsFile, TensorInfo, WeightLoader};
pub use storage::Storage;
pub use tensor::{contiguous_strides, Tensor};

pub use half::{bf16, f16};

pub mod threads;
