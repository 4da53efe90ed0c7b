//! Conversions between [`Tensor`] and [`ndarray`] arrays (feature `ndarray`).
//!
//! ```
//! use aria_tensor::Tensor;
//! # fn main() -> aria_tensor::Result<()> {
//! let a = ndarray::Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
//! let t = Tensor::from_ndarray(&a.view().into_dyn())?;
//! assert_eq!(t.shape(), &[2, 3]);
//! let back = t.transpose(0, 1)?.to_ndarray()?; // strided views are fine
//! assert_eq!(back.shape(), &[3, 2]);
//! assert_eq!(back[[2, 1]], 5.0);
//! # Ok(()) }
//! ```

use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::{CoreError, Result, Tensor};

impl Tensor {
    /// A contiguous f32 CPU tensor copied from an array view (any memory order).
    pub fn from_ndarray(a: &ArrayViewD<'_, f32>) -> Result<Tensor> {
        let shape = a.shape().to_vec();
        Tensor::from_vec(a.iter().copied().collect(), &shape)
    }

    /// The tensor's elements as an owned f32 array of the same shape (any float dtype is
    /// widened; a device tensor must be moved to the CPU first with [`Tensor::to_cpu`]).
    pub fn to_ndarray(&self) -> Result<ArrayD<f32>> {
        if !self.device().is_cpu() {
            return Err(CoreError::Unsupported {
                op: "to_ndarray",
                backend: format!("{:?}", self.device()),
            });
        }
        let v = self.to_vec_f32()?;
        ArrayD::from_shape_vec(IxDyn(self.shape()), v)
            .map_err(|e| CoreError::shape("to_ndarray", e.to_string(), &[self.shape()]))
    }
}

impl TryFrom<&Tensor> for ArrayD<f32> {
    type Error = CoreError;
    fn try_from(t: &Tensor) -> Result<Self> {
        t.to_ndarray()
    }
}

impl TryFrom<ArrayD<f32>> for Tensor {
    type Error = CoreError;
    fn try_from(a: ArrayD<f32>) -> Result<Self> {
        Tensor::from_ndarray(&a.view())
    }
}
