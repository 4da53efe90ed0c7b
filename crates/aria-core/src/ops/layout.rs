//! Data-layout ops: copies that rearrange elements without arithmetic.

use super::route;
use crate::backend::Op;
use crate::{Result, Tensor};

/// Sliding windows of a token-major sequence for a "same" convolution: `x [B, L, C]` →
/// `[B, L, k·C]`, where row `t` holds `x[t − k/2] … x[t + k/2]` (window position major) and
/// positions outside `0..L` are zeros. `k` must be odd.
pub fn unfold(x: &Tensor, k: usize) -> Result<Tensor> {
    route!("unfold", [x], Op::Unfold { x: x.clone(), k })
}
