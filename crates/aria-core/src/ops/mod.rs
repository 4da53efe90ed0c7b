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

pub use aria_cpu::host::{attention_amx, binary_map, map};
pub use aria_tensor::backend::check::{linear_dims, linear_packed_shape};
pub use aria_tensor::options::{AttnOpts, FourierLayout, GluAct, HeadNorm, KeyMaskMode, RmsStyle};
pub use attention::{attention, attention_diff};
pub use conv::{conv1d, weight_norm};
pub use elementwise::{
    add, add_scalar, affine, div, embedding, gelu, gelu_tanh, glu, mul, mul_scalar, rope,
    rope_tables, sigmoid, silu, sin_pi, softmax_last, sub, tanh,
};
pub use fused::{
    apg_guidance, axpby, cfg_rescale, gated_residual_add, merge_heads, rms_norm_modulate,
    split_heads,
};
pub use layout::unfold;
pub use linear::{linear, linear_prepared, matmul};
pub use norm::{dyt, layer_norm, rms_norm};
pub use packed::{linear_packed, packed_linear};
pub use pad::pad;
pub use rows::{distinct_rows, DistinctRows};
pub use same::{qkv_heads, rope_table, std_last};
pub use text::{fill_masked_rows, fourier_features};

use crate::Tensor;

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
            None => ::aria_cpu::run_checked_host(op, &spec),
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
