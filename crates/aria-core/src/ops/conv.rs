use rayon::prelude::*;

use super::f32_data;
use crate::{CoreError, Result, Tensor};

/// 1-D convolution, stride 1: `x [B, Cin, L]`, `w [Cout, Cin, K]`, optional `b [Cout]`,
/// `padding` zeros on each side → `[B, Cout, L + 2·padding − K + 1]`.
pub fn conv1d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, padding: usize) -> Result<Tensor> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 3 || ws.len() != 3 || ws[1] != xs[1] {
        return Err(CoreError::shape("conv1d", "need x [B, Cin, L] and w [Cout, Cin, K]", &[xs, ws]));
    }
    let (bn, cin, l) = (xs[0], xs[1], xs[2]);
    let (cout, k) = (ws[0], ws[2]);
    if let Some(b) = b {
        if b.shape() != [cout] {
            return Err(CoreError::shape("conv1d", "bias must be [Cout]", &[xs, ws, b.shape()]));
        }
    }
    if l + 2 * padding < k || k == 0 {
        return Err(CoreError::shape("conv1d", "input shorter than the kernel", &[xs, ws]));
    }
    let lo = l + 2 * padding - k + 1;
    let xd = f32_data(x)?;
    let wd = f32_data(w)?;
    let bd = b.map(f32_data).transpose()?;
    let mut out = vec![0f32; bn * cout * lo];
    if lo > 0 {
        out.par_chunks_mut(lo).enumerate().for_each(|(row, o)| {
            let (bi, co) = (row / cout, row % cout);
            let bias = bd.as_ref().map_or(0.0, |b| b[co]);
            for (t, ov) in o.iter_mut().enumerate() {
                let mut s = 0f32;
                for ci in 0..cin {
                    let xr = &xd[(bi * cin + ci) * l..(bi * cin + ci + 1) * l];
                    let wr = &wd[(co * cin + ci) * k..(co * cin + ci + 1) * k];
                    for (kk, wv) in wr.iter().enumerate() {
                        let pos = t + kk;
                        if pos >= padding && pos - padding < l {
                            s += wv * xr[pos - padding];
                        }
                    }
                }
                *ov = s + bias;
            }
        });
    }
    Tensor::from_vec(out, &[bn, cout, lo])
}

/// Fold weight normalisation: `W = g · v / ‖v‖₂`, the norm over every dim but the first
/// (`g [Cout, 1, 1]`, `v [Cout, ..]`), computed in f32.
pub fn weight_norm(g: &Tensor, v: &Tensor) -> Result<Tensor> {
    let vs = v.shape();
    let cout = *vs.first().ok_or_else(|| CoreError::shape("weight_norm", "v is a scalar", &[vs]))?;
    if g.elem_count() != cout {
        return Err(CoreError::shape("weight_norm", "g must hold one value per output channel", &[g.shape(), vs]));
    }
    let gd = f32_data(g)?;
    let mut vd = f32_data(v)?.into_owned();
    let per = v.elem_count() / cout.max(1);
    if per > 0 {
        for (o, row) in vd.chunks_mut(per).enumerate() {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            let s = gd[o] / n;
            row.iter_mut().for_each(|x| *x *= s);
        }
    }
    Tensor::from_vec(vd, vs)
}
