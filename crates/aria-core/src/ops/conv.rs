use super::route;
use crate::backend::Op;
use crate::{CoreError, Result, Tensor};

/// 1-D convolution, stride 1: `x [B, Cin, L]`, `w [Cout, Cin, K]`, optional `b [Cout]`,
/// `padding` zeros on each side → `[B, Cout, L + 2·padding − K + 1]`.
///
/// Runs as a packed matrix product over the implicit im2col matrix (no copy of the input);
/// each output is `Σ_{ci, k} w·x` in that order plus the bias.
pub fn conv1d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, padding: usize) -> Result<Tensor> {
    route!(
        "conv1d",
        [x, w, b],
        Op::Conv1d {
            x: x.clone(),
            w: w.clone(),
            b: b.cloned(),
            padding
        }
    )
}

/// Fold weight normalisation: `W = g · v / ‖v‖₂`, the norm over every dim but the first
/// (`g [Cout, 1, 1]`, `v [Cout, ..]`), computed in f32.
pub fn weight_norm(g: &Tensor, v: &Tensor) -> Result<Tensor> {
    let vs = v.shape();
    let cout = *vs
        .first()
        .ok_or_else(|| CoreError::shape("weight_norm", "v is a scalar", &[vs]))?;
    if g.elem_count() != cout {
        return Err(CoreError::shape(
            "weight_norm",
            "g must hold one value per output channel",
            &[g.shape(), vs],
        ));
    }
    let gd = g.to_vec_f32()?;
    let mut vd = v.to_vec_f32()?;
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
