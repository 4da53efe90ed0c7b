use rayon::prelude::*;

use super::{f32_data, route};
use crate::backend::Op;
use crate::cpu::{self, rows};
use crate::{threads, Result, Tensor};

/// Which RMSNorm scale convention to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmsStyle {
    /// `x / rms(x) · w`.
    Plain,
    /// Gemma's `x / rms(x) · (1 + w)`.
    OnePlus,
}

/// The width of the normalised rows (the check step has matched the weights to it).
fn rows(x: &Tensor) -> usize {
    x.shape().last().copied().unwrap_or(0)
}

/// RMSNorm over the last dimension: `x · rsqrt(mean(x²) + eps) · w` (or `(1 + w)`), in f32.
pub fn rms_norm(x: &Tensor, w: Option<&Tensor>, eps: f32, style: RmsStyle) -> Result<Tensor> {
    route!(
        "rms_norm",
        [x, w],
        Op::RmsNorm {
            x: x.clone(),
            w: w.cloned(),
            eps,
            style
        }
    );
    let d = rows(x);
    let xd = f32_data(x)?;
    let mut out = vec![0f32; xd.len()];
    let wd = w.map(f32_data).transpose()?;
    if d == 0 {
        return Tensor::from_vec(out, x.shape());
    }
    let isa = cpu::current();
    threads::install(|| {
        out.par_chunks_mut(d)
            .zip(xd.par_chunks(d))
            .for_each(|(o, r)| {
                let ms = rows::sumsq(isa, r) / d as f32;
                let inv = 1.0 / (ms + eps).sqrt();
                match (&wd, style) {
                    (Some(w), RmsStyle::Plain) => rows::norm_gain(isa, o, r, inv, w),
                    (Some(w), RmsStyle::OnePlus) => rows::norm_gain1p(isa, o, r, inv, w),
                    (None, _) => {
                        o.copy_from_slice(r);
                        rows::scale(isa, o, inv);
                    }
                }
            })
    });
    Tensor::from_vec(out, x.shape())
}

/// LayerNorm over the last dimension with optional affine weight and bias.
pub fn layer_norm(x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    route!(
        "layer_norm",
        [x, w, b],
        Op::LayerNorm {
            x: x.clone(),
            w: w.cloned(),
            b: b.cloned(),
            eps
        }
    );
    let d = rows(x);
    let mut out = f32_data(x)?.into_owned();
    let wd = w.map(f32_data).transpose()?;
    let bd = b.map(f32_data).transpose()?;
    if d == 0 {
        return Tensor::from_vec(out, x.shape());
    }
    let isa = cpu::current();
    threads::install(|| {
        out.par_chunks_mut(d).for_each(|r| {
            let mean = rows::sum(isa, r) / d as f32;
            let var = rows::sumsq_dev(isa, r, mean) / d as f32;
            let inv = 1.0 / (var + eps).sqrt();
            rows::layer_norm_row(isa, r, mean, inv, wd.as_deref(), bd.as_deref());
        })
    });
    Tensor::from_vec(out, x.shape())
}

/// Dynamic tanh over the last dimension: `γ ⊙ tanh(α·x) + β` (α a scalar).
pub fn dyt(x: &Tensor, alpha: f32, gamma: &Tensor, beta: &Tensor) -> Result<Tensor> {
    route!(
        "dyt",
        [x, gamma, beta],
        Op::Dyt {
            x: x.clone(),
            alpha,
            gamma: gamma.clone(),
            beta: beta.clone()
        }
    );
    let d = rows(x);
    let mut out = vec![0f32; x.elem_count()];
    let g = f32_data(gamma)?;
    let b = f32_data(beta)?;
    if d == 0 {
        return Tensor::from_vec(out, x.shape());
    }
    let xs = f32_data(x)?;
    let isa = cpu::current();
    threads::install(|| {
        out.par_chunks_mut(d)
            .zip(xs.par_chunks(d))
            .for_each(|(o, r)| cpu::dyt_on(isa, o, r, alpha, &g, &b))
    });
    Tensor::from_vec(out, x.shape())
}
