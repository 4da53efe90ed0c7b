use super::f32_data;
use crate::threads;
use aria_tensor::{Result, Tensor};

/// The CPU body of `aria_core::ops::unfold`, on checked operands.
pub fn unfold_host(x: &Tensor, k: usize) -> Result<Tensor> {
    // Checked: `x [B, L, C]`, `k` odd.
    let s = x.shape();
    let (b, l, c) = (s[0], s[1], s[2]);
    let xd = f32_data(x)?;
    let col = threads::install(|| crate::layout::unfold(&xd, [b, l, c], k));
    Tensor::from_vec(col, &[b, l, k * c])
}
