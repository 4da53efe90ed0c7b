use super::{f32_data, route};
use crate::backend::Op;
use crate::cpu::rowwise::{self, RmsGain};
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
    )
}

/// The CPU body of [`rms_norm`] (the CPU backend runs it on checked operands).
pub(crate) fn rms_norm_host(
    x: &Tensor,
    w: Option<&Tensor>,
    eps: f32,
    style: RmsStyle,
) -> Result<Tensor> {
    let d = rows(x);
    let xd = f32_data(x)?;
    let wd = w.map(f32_data).transpose()?;
    let gain = match (&wd, style) {
        (Some(w), RmsStyle::Plain) => RmsGain::Plain(w),
        (Some(w), RmsStyle::OnePlus) => RmsGain::OnePlus(w),
        (None, _) => RmsGain::None,
    };
    let out = threads::install(|| rowwise::rms_norm(&xd, d, eps, gain));
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
    )
}

/// The CPU body of [`layer_norm`] (the CPU backend runs it on checked operands).
pub(crate) fn layer_norm_host(
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f32,
) -> Result<Tensor> {
    let d = rows(x);
    let mut out = f32_data(x)?.into_owned();
    let wd = w.map(f32_data).transpose()?;
    let bd = b.map(f32_data).transpose()?;
    threads::install(|| rowwise::layer_norm(&mut out, d, eps, wd.as_deref(), bd.as_deref()));
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
    )
}

/// The CPU body of [`dyt`] (the CPU backend runs it on checked operands).
pub(crate) fn dyt_host(x: &Tensor, alpha: f32, gamma: &Tensor, beta: &Tensor) -> Result<Tensor> {
    let d = rows(x);
    let g = f32_data(gamma)?;
    let b = f32_data(beta)?;
    let xs = f32_data(x)?;
    let out = threads::install(|| rowwise::dyt(&xs, d, alpha, &g, &b));
    Tensor::from_vec(out, x.shape())
}
