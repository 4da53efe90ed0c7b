use rayon::prelude::*;

use super::{f32_data, require_float};
use crate::{backend::Device, CoreError, Result, Tensor};

/// `y = x·Wᵀ + b`: `x [.., K]` (f32), `w [N, K]` (f32, f16 or bf16, e.g. memory-mapped),
/// `b [N]`; returns `[.., N]` f32. Runs on the backend `x` lives on.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    if let Device::Backend(be) = x.device() {
        return be.linear(x, w, b);
    }
    require_float("linear", x)?;
    require_float("linear", w)?;
    let xs = x.shape();
    let ws = w.shape();
    let k = *xs.last().ok_or_else(|| CoreError::shape("linear", "x is a scalar", &[xs, ws]))?;
    if ws.len() != 2 || ws[1] != k {
        return Err(CoreError::shape("linear", "w must be [N, K] with K = x's last dim", &[xs, ws]));
    }
    let n = ws[0];
    if let Some(b) = b {
        if b.shape() != [n] {
            return Err(CoreError::shape("linear", "bias must be [N]", &[xs, ws, b.shape()]));
        }
    }
    let m = x.elem_count() / k.max(1);
    let xd = f32_data(x)?;
    let wd = f32_data(w)?;
    let bd = b.map(f32_data).transpose()?;
    let mut out = vec![0f32; m * n];
    if k > 0 {
        out.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
            let xr = &xd[i * k..(i + 1) * k];
            for (j, o) in row.iter_mut().enumerate() {
                *o = crate::cpu::dot(xr, &wd[j * k..(j + 1) * k]);
            }
        });
    }
    if let Some(bd) = bd {
        for row in out.chunks_mut(n.max(1)) {
            for (o, b) in row.iter_mut().zip(bd.iter()) {
                *o += b;
            }
        }
    }
    let mut shape = xs.to_vec();
    *shape.last_mut().unwrap_or(&mut 0) = n;
    Tensor::from_vec(out, &shape)
}

/// Batched matrix product `[.., M, K] · [.., K, N] → [.., M, N]` (f32; batch dims equal).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (as_, bs) = (a.shape(), b.shape());
    if as_.len() < 2 || bs.len() != as_.len() || as_[..as_.len() - 2] != bs[..bs.len() - 2] {
        return Err(CoreError::shape("matmul", "need [.., M, K] and [.., K, N]", &[as_, bs]));
    }
    let r = as_.len();
    let (m, k, n) = (as_[r - 2], as_[r - 1], bs[r - 1]);
    if bs[r - 2] != k {
        return Err(CoreError::shape("matmul", "inner dimensions differ", &[as_, bs]));
    }
    let batch: usize = as_[..r - 2].iter().product();
    let ad = f32_data(a)?;
    // B transposed so that each output is a contiguous dot product.
    let bt = b.transpose(r - 2, r - 1)?.contiguous()?.to_vec_f32()?;
    let mut out = vec![0f32; batch * m * n];
    if n > 0 && k > 0 {
        out.par_chunks_mut(n).enumerate().for_each(|(row, o)| {
            let bi = row / m.max(1);
            let ar = &ad[row * k..(row + 1) * k];
            let bb = &bt[bi * n * k..(bi + 1) * n * k];
            for (j, v) in o.iter_mut().enumerate() {
                *v = crate::cpu::dot(ar, &bb[j * k..(j + 1) * k]);
            }
        });
    }
    let mut shape = as_.to_vec();
    shape[r - 1] = n;
    Tensor::from_vec(out, &shape)
}
