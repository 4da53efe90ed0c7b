//! Tensor-level ops. Every model in aria is written against these functions only.
//!
//! Conventions: activations are f32; weights may be f32, f16 or bf16 (widened inside the
//! kernels); inputs may be strided views (they are made contiguous when a kernel needs it);
//! outputs are contiguous. Ops run on the device the inputs live on (see [`crate::backend`]).

mod attention;
mod conv;
mod elementwise;
mod linear;
mod norm;
pub mod torch_bf16;

pub use attention::{attention, attention_diff, AttnOpts, KeyMaskMode};
pub use conv::{conv1d, weight_norm};
pub use elementwise::{
    add, add_scalar, affine, binary_map, div, embedding, gelu, gelu_tanh, glu, map, mul,
    mul_scalar, rope, rope_tables, sigmoid, silu, sin_pi, softmax_last, sub, tanh, GluAct,
};
pub use linear::{linear, linear_dims, matmul};
pub use norm::{dyt, layer_norm, rms_norm, RmsStyle};

use crate::{CoreError, DType, Result, Tensor};

/// The f32 elements of a tensor, borrowed if it is a contiguous f32 CPU tensor, copied otherwise.
pub(crate) fn f32_data(t: &Tensor) -> Result<std::borrow::Cow<'_, [f32]>> {
    if t.dtype() == DType::F32 && t.is_contiguous() && t.device().is_cpu() {
        Ok(std::borrow::Cow::Borrowed(t.as_slice::<f32>()?))
    } else if t.device().is_cpu() {
        Ok(std::borrow::Cow::Owned(t.to_vec_f32()?))
    } else {
        Ok(std::borrow::Cow::Owned(t.to_cpu()?.to_vec_f32()?))
    }
}

pub(crate) fn require_float(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(CoreError::DType {
            op,
            dtype: t.dtype(),
            reason: "a float tensor is required".into(),
        })
    }
}
