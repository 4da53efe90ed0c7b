use super::f32_data;
use crate::rowwise::{self, RmsGain};
use crate::threads;
use aria_tensor::options::RmsStyle;
use aria_tensor::{Result, Tensor};

/// The width of the normalised rows (the check step has matched the weights to it).
fn rows(x: &Tensor) -> usize {
    x.shape().last().copied().unwrap_or(0)
}

/// The CPU body of `aria_core::ops::rms_norm`, on checked operands.
pub fn rms_norm_host(x: &Tensor, w: Option<&Tensor>, eps: f32, style: RmsStyle) -> Result<Tensor> {
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

/// The CPU body of `aria_core::ops::layer_norm`, on checked operands.
pub fn layer_norm_host(
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

/// The CPU body of `aria_core::ops::dyt`, on checked operands.
pub fn dyt_host(x: &Tensor, alpha: f32, gamma: &Tensor, beta: &Tensor) -> Result<Tensor> {
    let d = rows(x);
    let g = f32_data(gamma)?;
    let b = f32_data(beta)?;
    let xs = f32_data(x)?;
    let out = threads::install(|| rowwise::dyt(&xs, d, alpha, &g, &b));
    Tensor::from_vec(out, x.shape())
}
