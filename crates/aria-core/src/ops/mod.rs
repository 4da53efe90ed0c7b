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
pub(crate) use linear::pack_weight;
pub use linear::{linear, linear_dims, linear_prepared, matmul};
pub use norm::{dyt, layer_norm, rms_norm, RmsStyle};
pub use packed::{linear_packed, linear_packed_shape};
pub use pad::pad;
pub(crate) use rows::distinct_rows_host;
pub use rows::{distinct_rows, DistinctRows};
pub use same::{qkv_heads, rope_table, std_last, HeadNorm};
pub use text::{fill_masked_rows, fourier_features, FourierLayout};

/// The CPU bodies of the op set, which the CPU backend ([`Cpu`](crate::backend::Cpu)) runs on
/// checked operands (each named as its op).
pub(crate) mod host {
    pub(crate) use super::attention::{
        attention_diff_host as attention_diff, attention_host as attention,
    };
    pub(crate) use super::conv::conv1d_host as conv1d;
    pub(crate) use super::elementwise::{
        add_host as add, add_scalar_host as add_scalar, affine_host as affine, div_host as div,
        embedding_host as embedding, gelu_host as gelu, gelu_tanh_host as gelu_tanh,
        glu_host as glu, mul_host as mul, mul_scalar_host as mul_scalar, rope_host as rope,
        sigmoid_host as sigmoid, silu_host as silu, sin_pi_host as sin_pi,
        softmax_last_host as softmax_last, sub_host as sub, tanh_host as tanh,
    };
    pub(crate) use super::fused::{
        apg_guidance_host as apg_guidance, axpby_host as axpby, cfg_rescale_host as cfg_rescale,
        gated_residual_add_host as gated_residual_add, merge_heads_host as merge_heads,
        rms_norm_modulate_host as rms_norm_modulate, split_heads_host as split_heads,
    };
    pub(crate) use super::layout::unfold_host as unfold;
    pub(crate) use super::linear::linear_host as linear;
    pub(crate) use super::linear::matmul_host as matmul;
    pub(crate) use super::norm::{
        dyt_host as dyt, layer_norm_host as layer_norm, rms_norm_host as rms_norm,
    };
    pub(crate) use super::packed::linear_packed_host as linear_packed;
    pub(crate) use super::pad::pad_host as pad;
    pub(crate) use super::same::{
        qkv_heads_host as qkv_heads, rope_table_host as rope_table, std_last_host as std_last,
    };
    pub(crate) use super::text::{
        fill_masked_rows_host as fill_masked_rows, fourier_features_host as fourier_features,
    };
}

use crate::backend::Device;
use crate::{CoreError, DType, Result, Tensor};

/// The check step, then the backend: `route!("name", [a, b], Op::X {..})` runs the op's
/// [`check`](crate::backend::Op::check) (every shape and dtype rule) and hands the op to the
/// backend its operands live on: a device backend, or the CPU backend
/// ([`Cpu`](crate::backend::Cpu)) when they are all host tensors. The result is held to the
/// checked shape and dtype on every backend alike. Operands are `&Tensor` or `Option<&Tensor>`
/// expressions; the macro is the calling op's value.
macro_rules! route {
    ($name:literal, [$($t:expr),* $(,)?], $op:expr) => {{
        let op = $op;
        let spec = op.check()?;
        match $crate::backend::device_of(
            $name,
            &[$($crate::ops::IntoOperand::into_operand($t)),*],
        )? {
            Some(be) => $crate::backend::check::run_checked(&*be, op, &spec),
            None => $crate::backend::run_checked_host(op, &spec),
        }
    }};
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
