use rayon::prelude::*;

use super::route;
use super::{f32_data, require_float};
use crate::backend::Op;
use crate::cpu::gemm::{gemm, gemm_vec, BSrc, PackedB};
use crate::{cpu, threads, CoreError, Result, Tensor};

/// Check the shapes of a [`linear`] call (`x [.., K]`, `w [N, K]`, `b [N]`) and return
/// `(M, K, N)` with `M` the product of `x`'s leading dimensions. Shared by every backend.
pub fn linear_dims(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<(usize, usize, usize)> {
    let (xs, ws) = (x.shape(), w.shape());
    let k = *xs
        .last()
        .ok_or_else(|| CoreError::shape("linear", "x is a scalar", &[xs, ws]))?;
    if ws.len() != 2 || ws[1] != k {
        return Err(CoreError::shape(
            "linear",
            "w must be [N, K] with K = x's last dim",
            &[xs, ws],
        ));
    }
    let n = ws[0];
    if let Some(b) = b {
        if b.shape() != [n] {
            return Err(CoreError::shape(
                "linear",
                "bias must be [N]",
                &[xs, ws, b.shape()],
            ));
        }
    }
    Ok((xs[..xs.len() - 1].iter().product(), k, n))
}

/// `y = x·Wᵀ + b`: `x [.., K]` (f32), `w [N, K]` (f32, f16 or bf16, e.g. memory-mapped),
/// `b [N]`; returns `[.., N]` f32. Runs on the backend `x` lives on.
///
/// On the CPU, weight panels are converted to f32 while they are packed, so f16/bf16 weights
/// cost no extra memory; each output is `Σ_k x·w` accumulated in K order (FMA on SIMD paths)
/// plus the bias.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    linear_with(x, w, b, None)
}

/// The weight `w [N, K]` of a linear layer packed for the CPU matrix product of the current
/// path (`None` for a tensor on a device backend, or not a rank-2 float tensor).
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

/// [`linear`] with the weight's panels packed in advance by [`pack_weight`] (used when they fit
/// the product and the path; the result is bit-identical to [`linear`]'s).
pub(crate) fn linear_with(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    panels: Option<&PackedB>,
) -> Result<Tensor> {
    route!(
        "linear",
        [x, w, b],
        Op::Linear {
            x: x.clone(),
            w: w.clone(),
            b: b.cloned()
        }
    );
    require_float("linear", x)?;
    require_float("linear", w)?;
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
    );
    let (as_, bs) = (a.shape(), b.shape());
    if as_.len() < 2 || bs.len() != as_.len() || as_[..as_.len() - 2] != bs[..bs.len() - 2] {
        return Err(CoreError::shape(
            "matmul",
            "need [.., M, K] and [.., K, N]",
            &[as_, bs],
        ));
    }
    let r = as_.len();
    let (m, k, n) = (as_[r - 2], as_[r - 1], bs[r - 1]);
    if bs[r - 2] != k {
        return Err(CoreError::shape(
            "matmul",
            "inner dimensions differ",
            &[as_, bs],
        ));
    }
    let batch: usize = as_[..r - 2].iter().product();
    let ad = f32_data(a)?;
    let bd = f32_data(b)?;
    let isa = cpu::current();
    let mut out = vec![0f32; batch * m * n];
    if m * n > 0 {
        threads::install(|| {
            out.par_chunks_mut(m * n).enumerate().for_each(|(bi, o)| {
                let bsrc = BSrc::Kn(&bd[bi * k * n..(bi + 1) * k * n], n);
                gemm(isa, m, n, k, &ad[bi * m * k..(bi + 1) * m * k], k, &bsrc, o);
            });
        });
    }
    let mut shape = as_.to_vec();
    shape[r - 1] = n;
    Tensor::from_vec(out, &shape)
}
