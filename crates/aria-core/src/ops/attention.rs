use super::route;
use crate::backend::{AttnSpec, Op};
use crate::ops::AttnOpts;
use crate::{Result, Tensor};

/// Fused scaled-dot-product attention.
///
/// `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]` (f32; any strides, so head-split views
/// of `[B, N, H, D]` projections can be passed without copying) → `[B, H, Nq, Dv]` contiguous.
/// Softmax is computed in f32 with the maximum subtracted.
///
/// On the CPU this runs [`aria_cpu::attention::attention`]: queries in tiles, each computing its
/// row of scores (only the keys its rows can see: with a `window` the work is O(N · band), never
/// O(N²)), an exact max-subtracted softmax, and `P·V`, with the packed matrix micro-kernels.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: None,
            opts: AttnSpec::of(opts)
        }
    )
}

/// Differential attention `Attn(q, k, v) − Attn(q2, k2, v)` (same `v`, same options for both
/// halves), fused: the two probability rows are subtracted before one product with `v`.
///
/// Shapes as in [`attention`]; `q2` must match `q` and `k2` must match `k`.
pub fn attention_diff(
    q: &Tensor,
    k: &Tensor,
    q2: &Tensor,
    k2: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, q2, k2, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: Some((q2.clone(), k2.clone())),
            opts: AttnSpec::of(opts)
        }
    )
}
