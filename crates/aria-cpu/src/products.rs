//! Batched products on slices: the CPU bodies of `aria_core::ops::{matmul, conv1d}`, one batch
//! item per task on the rayon pool the call runs on, each a [`gemm`] of the selected path.

pub use aria_tensor::backend::check::ConvDims;
use rayon::prelude::*;

use crate::gemm::{gemm, BSrc};

/// `[batch, m, k] · [batch, k, n] → [batch, m, n]`.
pub fn matmul(a: &[f32], b: &[f32], [batch, m, k, n]: [usize; 4]) -> Vec<f32> {
    let mut out = vec![0f32; batch * m * n];
    if m * n == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(m * n).enumerate().for_each(|(bi, o)| {
        let bsrc = BSrc::Kn(&b[bi * k * n..(bi + 1) * k * n], n);
        gemm(isa, m, n, k, &a[bi * m * k..(bi + 1) * m * k], k, &bsrc, o);
    });
    out
}

/// 1-D convolution, stride 1, as a packed matrix product over the implicit im2col matrix (no
/// copy of the input): each output is `Σ_{ci, k} w·x` in that order plus the bias.
pub fn conv1d(x: &[f32], w: &[f32], bias: Option<&[f32]>, dims: ConvDims) -> Vec<f32> {
    let ConvDims {
        b,
        cin,
        l,
        cout,
        k,
        lo,
        padding,
    } = dims;
    let mut out = vec![0f32; b * cout * lo];
    if lo == 0 || cout == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(cout * lo)
        .enumerate()
        .for_each(|(bi, o)| {
            let src = BSrc::Conv {
                x: &x[bi * cin * l..(bi + 1) * cin * l],
                l,
                kw: k,
                pad: padding,
            };
            gemm(isa, cout, lo, cin * k, w, cin * k, &src, o);
            if let Some(bd) = bias {
                for (row, b) in o.chunks_mut(lo).zip(bd.iter()) {
                    row.iter_mut().for_each(|v| *v += b);
                }
            }
        });
    out
}
