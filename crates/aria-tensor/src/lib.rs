//! # aria-tensor
//!
//! The contract between aria's models and its backends, and nothing else: [`Tensor`] (shape,
//! strides, f32/f16/bf16 plus raw integer dtypes, host storage that is owned or borrowed from
//! a memory-mapped file, or a backend's own), the op set ([`backend::Op`], each op with its one
//! check step, [`backend::Op::check`], which runs before any backend sees it), the weight
//! formats it carries ([`format`](mod@format)), the [`Backend`] trait a backend implements, and the
//! [`backend::registry`] through which programs open backends by name.
//!
//! It runs no op itself. The CPU backend (`aria-cpu`) and the device backends (`aria-wgpu`,
//! `aria-cuda`) implement [`Backend`] over it as peers; `aria-core` adds the functions models
//! call (`aria_core::ops`), which check an op and hand it to the backend its operands live on,
//! and re-exports this crate, so model code names these types through `aria_core`.
//!
//! ```
//! use aria_tensor::backend::{Op, UnaryOp};
//! use aria_tensor::Tensor;
//! # fn main() -> aria_tensor::Result<()> {
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let w = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! // The check step says what a linear op returns before anything runs it...
//! let op = Op::Linear { x: x.clone(), w: w.clone(), b: None, prepared: None };
//! assert_eq!(op.check()?.shape, [2, 3]);
//! // ...and refuses a malformed op, naming it and the shapes.
//! let bad = Op::Linear { x: x.clone(), w: x.reshape(&[4, 1])?, b: None, prepared: None };
//! assert!(bad.check().unwrap_err().to_string().contains("linear"));
//! # let _ = UnaryOp::Silu;
//! # Ok(()) }
//! ```

pub mod backend;
mod dtype;
mod error;
pub mod format;
#[cfg(feature = "ndarray")]
pub mod interop;
pub mod options;
pub mod storage;
mod tensor;

pub use backend::{Backend, Device};
pub use dtype::{DType, Elem};
pub use error::{CoreError, Result, SafeTensorsErrorKind};
pub use storage::Storage;
pub use tensor::{contiguous_strides, Tensor};

pub use half::{bf16, f16};
