use super::route;
use crate::backend::{Op, Prepared};
use crate::{Result, Tensor};

/// `y = x·Wᵀ + b`: `x [.., K]` (f32), `w [N, K]` (f32, f16 or bf16, e.g. memory-mapped),
/// `b [N]`; returns `[.., N]` f32. Runs on the backend `x` lives on.
///
/// On the CPU, weight panels are converted to f32 while they are packed, so f16/bf16 weights
/// cost no extra memory; each output is `Σ_k x·w` accumulated in K order (FMA on SIMD paths)
/// plus the bias.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    linear_prepared(x, w, b, None)
}

/// [`linear`] with `prepared`, the backend's own layout of `w` made once
/// ([`Backend::prepare_weight`](crate::backend::Backend::prepare_weight)): the same result, bit
/// for bit, without laying `w` out again. A layout of another shape than `w` is refused by the
/// check step.
///
/// ```
/// use aria_core::{ops, Device, Tensor};
/// # fn main() -> aria_core::Result<()> {
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let w = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.25], &[2, 2])?;
/// let p = aria_core::backend::of(&Device::Cpu).prepare_weight(&w)?;
/// assert!(p.is_some(), "the CPU packs its panels");
/// let a = ops::linear_prepared(&x, &w, None, p.as_ref())?.to_vec::<f32>()?;
/// assert_eq!(a, ops::linear(&x, &w, None)?.to_vec::<f32>()?);
/// # Ok(()) }
/// ```
pub fn linear_prepared(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    prepared: Option<&Prepared>,
) -> Result<Tensor> {
    route!(
        "linear",
        [x, w, b],
        Op::Linear {
            x: x.clone(),
            w: w.clone(),
            b: b.cloned(),
            prepared: prepared.cloned(),
        }
    )
}

/// Batched matrix product `[.., M, K] · [.., K, N] → [.., M, N]` (f32; batch dims equal).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    route!(
        "matmul",
        [a, b],
        Op::Matmul {
            a: a.clone(),
            b: b.clone()
        }
    )
}
