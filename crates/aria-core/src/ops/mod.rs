//! Tensor-level ops. Every model in aria is written against these functions only.
//!
//! Conventions: activations are f32; weights may be f32, f16 or bf16 (widened inside the
//! kernels); inputs may be strided views (they are made contiguous when a kernel needs it);
//! outputs are contiguous. Ops run on the device the inputs live on (see [`crate::backend`]).

mod attention;
mod conv;
mod elementwise;
mod fused;
mod layout;
mod linear;
mod norm;
mod packed;
mod pad;
mod rows;
mod same;
mod text;
pub mod torch_bf16;

pub use attention::{attention, attention_amx, attention_diff, AttnOpts, KeyMaskMode};
pub use conv::{conv1d, weight_norm};
pub use elementwise::{
    add, add_scalar, affine, binary_map, div, embedding, gelu, gelu_tanh, glu, map, mul,
    mul_scalar, rope, rope_tables, sigmoid, silu, sin_pi, softmax_last, sub, tanh, GluAct,
};
pub use fused::{
    apg_guidance, axpby, cfg_rescale, gated_residual_add, merge_heads, rms_norm_modulate,
    split_heads,
};
pub use layout::unfold;
pub use linear::{linear, linear_dims, matmul};
pub(crate) use linear::{linear_with, pack_weight};
pub use norm::{dyt, layer_norm, rms_norm, RmsStyle};
pub use packed::{linear_packed, linear_packed_shape};
pub use pad::pad;
pub use rows::{distinct_rows, DistinctRows};
pub use same::{qkv_heads, rope_table, std_last, HeadNorm};
pub use text::{fill_masked_rows, fourier_features, FourierLayout};

use crate::backend::Device;
use crate::{CoreError, DType, Result, Tensor};

/// The check step, then the backend: `route!("name", [a, b], Op::X {..})` runs the op's
/// [`check`](crate::backend::Op::check) (every shape and dtype rule, on the CPU and on a device
/// alike) and, when an operand lives on a device backend, returns from the calling op with that
/// backend's result, held to the checked shape and dtype. Operands are `&Tensor` or
/// `Option<&Tensor>` expressions. The CPU body that follows may rely on the rules.
macro_rules! route {
    ($name:literal, [$($t:expr),* $(,)?], $op:expr) => {
        let op = $op;
        let spec = op.check()?;
        if let Some(be) = $crate::backend::device_of(
            $name,
            &[$($crate::ops::IntoOperand::into_operand($t)),*],
        )? {
            return $crate::backend::check::run_checked(&*be, op, &spec);
        }
        drop((op, spec));
    };
}
pub(crate) use route;

/// `&Tensor` or `Option<&Tensor>`, for [`route!`].
pub(crate) trait IntoOperand<'a> {
    fn into_operand(self) -> Option<&'a Tensor>;
}
impl<'a> IntoOperand<'a> for &'a Tensor {
    fn into_operand(self) -> Option<&'a Tensor> {
        Some(self)
    }
}
impl<'a> IntoOperand<'a> for Option<&'a Tensor> {
    fn into_operand(self) -> Option<&'a Tensor> {
        self
    }
}

/// The f32 elements of a CPU tensor, borrowed if it is contiguous f32, copied otherwise. A
/// device tensor is an error: CPU kernels never download their inputs.
pub(crate) fn f32_data(t: &Tensor) -> Result<std::borrow::Cow<'_, [f32]>> {
    match t.device() {
        Device::Backend(b) => Err(CoreError::Unsupported {
            op: "cpu kernel input",
            backend: b.name().to_string(),
        }),
        Device::Cpu if t.dtype() == DType::F32 && t.is_contiguous() => {
            Ok(std::borrow::Cow::Borrowed(t.as_slice::<f32>()?))
        }
        Device::Cpu => Ok(std::borrow::Cow::Owned(t.to_vec_f32()?)),
    }
}

/// The elements of a contiguous CPU float tensor for the product kernels (typed when the
/// storage is aligned for its type).
pub(crate) fn wdata<'a>(op: &'static str, t: &'a Tensor) -> Result<crate::cpu::gemm::WData<'a>> {
    use crate::cpu::gemm::{Float, WData};
    let ty = match t.dtype() {
        DType::F32 => Float::F32,
        DType::F16 => Float::F16,
        DType::BF16 => Float::Bf16,
        d => {
            return Err(CoreError::DType {
                op,
                dtype: d,
                reason: "a float tensor is required".into(),
            })
        }
    };
    Ok(WData::from_bytes(ty, t.as_bytes()?))
}

pub(crate) use crate::backend::check::require_float;
