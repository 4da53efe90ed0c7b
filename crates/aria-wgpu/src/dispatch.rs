//! [`Op`] → kernel: the products and attention here, every other op on `pointwise`.

use super::{pointwise, WgpuBackend};
use aria_tensor::backend::{Backend, Op};
use aria_tensor::Result;

/// Run one routed op.
pub(crate) fn run(be: &WgpuBackend, op: &Op) -> Result<Tensor> {
    match op {
        Op::Linear { x, w, b, .. } => be.linear(x, w, b.as_ref()),
        Op::LinearPacked {
            x,
            w,
            format,
            w8a8,
            shape,
            b,
        } => be.linear_packed(x, w, *format, *w8a8, *shape, b.as_ref()),
        Op::Matmul { a, b } => be.matmul(a, b),
        Op::Conv1d { x, w, b, padding } => be.conv1d(x, w, b.as_ref(), *padding),
        Op::Attention {
            q,
            k,
            v,
            diff,
            opts,
        } => be.attention(q, k, v, diff.as_ref().map(|(a, b)| (a, b)), opts),
        _ => match pointwise::run(be, op) {
            Some(r) => r,
            None => Err(be.unsupported(op)),
        },
    }
}

use aria_tensor::Tensor;
