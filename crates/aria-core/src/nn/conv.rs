//! [`Conv1d`]: a 1-D "same" convolution over token-major activations, as a [`Linear`] over
//! unfolded windows (so every weight kind of [`Linear`] works for convolutions too).

use super::linear::{Bias, Linear};
use super::weight::Weight;
use crate::{ops, CoreError, DType, Result, Tensor, WeightLoader};

/// A stride-1 convolution with odd kernel `k` and zero padding `k/2` on both sides, applied to
/// token-major input `x [B, L, in]` → `[B, L, out]`.
///
/// The checkpoint weight `[out, in, k]` is stored as the matrix `[out, k·in]` (window position
/// major), so the layer is `linear(unfold(x, k), W)`: each output is `Σ_{kk, c} w·x` in that
/// order plus the bias.
#[derive(Debug, Clone)]
pub struct Conv1d {
    linear: Linear,
    kernel: usize,
}

impl Conv1d {
    /// Load `weight [out, in, k]` (and `bias`) under `vb`'s prefix.
    pub fn load(
        vb: &WeightLoader,
        in_dim: usize,
        out_dim: usize,
        kernel: usize,
        bias: Bias,
    ) -> Result<Self> {
        let w = vb.get_as("weight", &[out_dim, in_dim, kernel], DType::F32)?;
        Self::from_weight(vb, w, bias)
    }

    /// Load a weight-normalised convolution (`weight_g [out, 1, 1]`, `weight_v [out, in, k]`),
    /// folding `W = g·v/‖v‖` at load.
    pub fn load_weight_norm(
        vb: &WeightLoader,
        in_dim: usize,
        out_dim: usize,
        kernel: usize,
        bias: Bias,
    ) -> Result<Self> {
        let g = vb.get_as("weight_g", &[out_dim, 1, 1], DType::F32)?;
        let v = vb.get_as("weight_v", &[out_dim, in_dim, kernel], DType::F32)?;
        Self::from_weight(vb, ops::weight_norm(&g, &v)?, bias)
    }

    fn from_weight(vb: &WeightLoader, w: Tensor, bias: Bias) -> Result<Self> {
        let s = w.shape().to_vec();
        let (out, inn, k) = (s[0], s[1], s[2]);
        if k % 2 == 0 {
            return Err(CoreError::Invalid(format!(
                "layer `{}`: kernel size {k} is even; only odd \"same\" kernels are supported",
                vb.prefix().trim_end_matches('.')
            )));
        }
        // [out, in, k] -> [out, k, in] -> [out, k·in]
        let w2 = w
            .permute(&[0, 2, 1])?
            .contiguous()?
            .reshape(&[out, k * inn])?;
        let b = match bias {
            Bias::Yes => Some(vb.get("bias", &[out])?),
            Bias::No => None,
        };
        let linear = Linear::new(vb.prefix().trim_end_matches('.'), Weight::Dense(w2), b)?;
        Ok(Conv1d { linear, kernel: k })
    }

    /// The kernel size.
    pub fn kernel(&self) -> usize {
        self.kernel
    }

    /// The layer as a linear map over unfolded windows (for packing or adapters).
    pub fn linear(&self) -> &Linear {
        &self.linear
    }

    /// Mutable access to the linear map (packing, adapters, moving to a device).
    pub fn linear_mut(&mut self) -> &mut Linear {
        &mut self.linear
    }

    /// Drop the resident pages of mapped weights (see [`Linear::release_pages`]).
    pub fn release_pages(&self) -> Result<usize> {
        self.linear.release_pages()
    }

    /// `x [B, L, in]` → `[B, L, out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.kernel == 1 {
            return self.linear.forward(x);
        }
        self.linear.forward(&ops::unfold(x, self.kernel)?)
    }
}
