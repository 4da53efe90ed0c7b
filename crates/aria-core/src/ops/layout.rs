//! Data-layout ops: copies that rearrange elements without arithmetic.

use super::{f32_data, route};
use crate::backend::Op;
use crate::{threads, Result, Tensor};

/// Sliding windows of a token-major sequence for a "same" convolution: `x [B, L, C]` →
/// `[B, L, k·C]`, where row `t` holds `x[t − k/2] … x[t + k/2]` (window position major) and
/// positions outside `0..L` are zeros. `k` must be odd.
pub fn unfold(x: &Tensor, k: usize) -> Result<Tensor> {
    route!("unfold", [x], Op::Unfold { x: x.clone(), k })
}

/// The CPU body of [`unfold`] (the CPU backend runs it on checked operands).
pub(crate) fn unfold_host(x: &Tensor, k: usize) -> Result<Tensor> {
    // Checked: `x [B, L, C]`, `k` odd.
    let s = x.shape();
    let (b, l, c) = (s[0], s[1], s[2]);
    let xd = f32_data(x)?;
    let col = threads::install(|| crate::cpu::layout::unfold(&xd, [b, l, c], k));
    Tensor::from_vec(col, &[b, l, k * c])
}
