//! [`linear_packed`]: the product with a packed weight, as an op of the set (each backend runs
//! it on the layout it packed at upload, the CPU included), and [`packed_linear`], the same for
//! a [`PackedWeight`](crate::nn::PackedWeight).

use super::route;
use crate::backend::Op;
use crate::nn::WeightFormat;
use crate::{Result, Tensor};

/// `y = x·Wᵀ + b` for `x [.., cols]` f32 and a weight `[rows, cols]` packed in `format` (`w`:
/// the blocks, `U8 [rows, row_bytes]`, on the CPU; or the layout a backend packed at
/// [`upload_packed`](crate::Backend::upload_packed), on that backend). With `w8a8` the
/// activations are quantized per token to int8 (`s = max|x|/127`, ties to even, ±127) and each
/// block's products summed exactly in integers.
///
/// The backend `w` lives on runs it, the CPU included: its kernels for every format
/// (`aria_cpu::quant` for the block formats, which read the blocks in place, and the bf16
/// panels of `aria_cpu::bf16dot`; its layout is what `Cpu::upload_packed` gives). The scalar
/// statement of each format's product, which the kernels are tested against, is
/// `aria_cpu::host::linear_packed_reference`.
pub fn linear_packed(
    x: &Tensor,
    w: &Tensor,
    format: WeightFormat,
    w8a8: bool,
    shape: [usize; 2],
    b: Option<&Tensor>,
) -> Result<Tensor> {
    route!(
        "linear_packed",
        [x, w, b],
        Op::LinearPacked {
            x: x.clone(),
            w: w.clone(),
            format,
            w8a8,
            shape,
            b: b.cloned()
        }
    )
}

/// `y = x·Wᵀ + b` for a packed weight `w` and `x [.., in]` (f32, or f16/bf16 widened to f32):
/// [`linear_packed`] on the weight's [`operand`](crate::nn::PackedWeight::operand), the layout
/// the backend it lives on packed. What a [`nn::Linear`](crate::nn::Linear) holding a packed
/// weight runs, on every backend.
pub fn packed_linear(
    x: &Tensor,
    w: &dyn crate::nn::PackedWeight,
    b: Option<&Tensor>,
) -> Result<Tensor> {
    let o = w.operand();
    let widened;
    let x = if x.dtype().is_float() && x.dtype() != crate::DType::F32 {
        widened = x.to_dtype(crate::DType::F32)?;
        &widened
    } else {
        x
    };
    linear_packed(x, &o.data, o.format, o.w8a8, [o.rows, o.cols], b)
}
