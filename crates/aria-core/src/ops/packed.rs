//! [`linear_packed`]: the product with a packed weight, as an op of the set (so a backend that
//! packs the format at upload runs it), with its check step and the `q8_0` and `bf16_panels`
//! CPU references.

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
/// On a device the backend runs it. On the CPU this is the reference for `q8_0` and
/// `bf16_panels`: a `q8_0` output is `Σ_blocks d·(Σ x·q)` (W8A8: `s·Σ_blocks d·Σ q_x·q`) in block
/// order, plus the bias; a `bf16_panels` output is the bf16 pair products of the rounded
/// activations summed in f32 pair by pair (the scalar statement of `vdpbf16ps`), plus the bias. Layers on the CPU run their packed weights through the format's own fast kernels
/// (`aria-quant`), which agree with this within rounding.
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
