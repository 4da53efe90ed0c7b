use super::route;
use crate::backend::Op;
use crate::ops::RmsStyle;
use crate::{Result, Tensor};

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
