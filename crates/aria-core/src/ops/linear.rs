use super::route;
use super::{f32_data, require_float};
use crate::backend::{Op, Prepared};
use crate::cpu::gemm::{gemm_vec, BSrc, PackedB};
use crate::{cpu, threads, Result, Tensor};

pub use crate::backend::check::linear_dims;

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
/// let p = Device::Cpu.backend().prepare_weight(&w)?;
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

/// The weight `w [N, K]` of a linear layer packed for the CPU matrix product of the current
/// path (`None` for a tensor on a device backend, or not a rank-2 float tensor): the CPU
/// backend's [`Prepared`] layout.
pub(crate) fn pack_weight(w: &Tensor) -> Result<Option<PackedB>> {
    let ws = w.shape();
    if !w.device().is_cpu() || ws.len() != 2 || require_float("linear", w).is_err() {
        return Ok(None);
    }
    let (n, k) = (ws[0], ws[1]);
    let wc = w.contiguous()?;
    let wd = crate::ops::wdata("linear", &wc)?;
    let isa = cpu::current();
    Ok(Some(threads::install(|| {
        PackedB::new(isa, &BSrc::Nk(wd, k), n, k)
    })))
}

/// The CPU body of [`linear`], reading `panels` when they fit the product and the path.
pub(crate) fn linear_host(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    panels: Option<&PackedB>,
) -> Result<Tensor> {
    // Checked: float operands, `w [N, K]`, `b [N]`.
    let xs = x.shape();
    let (m, k, n) = linear_dims(x, w, b)?;
    let xd = f32_data(x)?;
    let isa = cpu::current();
    let bd = b.map(f32_data).transpose()?;
    let out = match panels.filter(|p| p.fits(isa, n, k)) {
        // B is not read when the panels fit.
        Some(p) => threads::install(|| {
            let none = BSrc::Kn(&[], 0);
            gemm_vec(isa, (m, n, k), &xd, k, &none, Some(p), bd.as_deref())
        }),
        None => {
            let wc = w.contiguous()?;
            let wd = crate::ops::wdata("linear", &wc)?;
            threads::install(|| {
                let src = BSrc::Nk(wd, k);
                gemm_vec(isa, (m, n, k), &xd, k, &src, None, bd.as_deref())
            })
        }
    };
    let mut shape = xs.to_vec();
    *shape.last_mut().unwrap_or(&mut 0) = n;
    Tensor::from_vec(out, &shape)
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

/// The CPU body of [`matmul`] (the CPU backend runs it on checked operands).
pub(crate) fn matmul_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (batch, m, k, n) = crate::backend::check::matmul_dims(a, b)?;
    let ad = f32_data(a)?;
    let bd = f32_data(b)?;
    let out = threads::install(|| crate::cpu::products::matmul(&ad, &bd, [batch, m, k, n]));
    let mut shape = a.shape().to_vec();
    if let Some(l) = shape.last_mut() {
        *l = n;
    }
    Tensor::from_vec(out, &shape)
}
