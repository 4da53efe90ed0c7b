use rayon::prelude::*;

use super::f32_data;
use crate::{CoreError, Result, Tensor};

/// How a key mask is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMaskMode {
    /// The official CPU semantics (PyTorch SDPA after `v ← v ⊙ mask`): masked keys keep their
    /// weight in the softmax denominator but contribute zero values.
    #[default]
    ZeroValues,
    /// True masking: masked keys are excluded from the softmax. A query with no valid key
    /// outputs zeros.
    Exclude,
}

/// Options of [`attention`].
#[derive(Debug, Clone, Copy)]
pub struct AttnOpts<'a> {
    /// Multiplier of `q·k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft-capping `c·tanh(s/c)` applied after scaling.
    pub softcap: Option<f32>,
    /// Key validity mask `[B, Nk]` (any dtype; non-zero = valid).
    pub key_mask: Option<&'a Tensor>,
    /// How `key_mask` is applied.
    pub mask_mode: KeyMaskMode,
    /// Band: query `i` sees keys `j` with `i - left <= j <= i + right` (self-attention).
    pub window: Option<(usize, usize)>,
}

impl<'a> AttnOpts<'a> {
    /// Plain attention with the given scale.
    pub fn new(scale: f32) -> Self {
        AttnOpts { scale, softcap: None, key_mask: None, mask_mode: KeyMaskMode::ZeroValues, window: None }
    }
}

/// Fused scaled-dot-product attention.
///
/// `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]` (f32; any strides, so head-split views
/// of `[B, N, H, D]` projections can be passed without copying) → `[B, H, Nq, Dv]` contiguous.
/// Softmax is computed in f32 with the maximum subtracted.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return Err(CoreError::shape("attention", "q, k, v must be 4-D [B, H, N, D]", &[qs, ks, vs]));
    }
    let (b, h, nq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (nk, dv) = (ks[2], vs[3]);
    if ks[0] != b || ks[1] != h || ks[3] != d || vs[0] != b || vs[1] != h || vs[2] != nk {
        return Err(CoreError::shape("attention", "q, k, v disagree", &[qs, ks, vs]));
    }
    let mask: Option<Vec<bool>> = match opts.key_mask {
        Some(m) => {
            if m.shape() != [b, nk] {
                return Err(CoreError::shape("attention", "key_mask must be [B, Nk]", &[qs, ks, m.shape()]));
            }
            Some(m.to_vec_f32()?.iter().map(|&x| x != 0.0).collect())
        }
        None => None,
    };
    if opts.window.is_some() && nq != nk {
        return Err(CoreError::shape("attention", "a window needs Nq == Nk", &[qs, ks]));
    }
    let q = q.contiguous()?;
    let k = k.contiguous()?;
    let v = v.contiguous()?;
    let qd = f32_data(&q)?;
    let kd = f32_data(&k)?;
    let vd = f32_data(&v)?;
    let mut out = vec![0f32; b * h * nq * dv];
    if dv == 0 {
        return Tensor::from_vec(out, &[b, h, nq, dv]);
    }
    out.par_chunks_mut(dv).enumerate().for_each(|(row, o)| {
        let bh = row / nq.max(1);
        let i = row % nq.max(1);
        let bi = bh / h.max(1);
        let qr = &qd[row * d..(row + 1) * d];
        let kb = &kd[bh * nk * d..(bh + 1) * nk * d];
        let vb = &vd[bh * nk * dv..(bh + 1) * nk * dv];
        let (lo, hi) = match opts.window {
            Some((l, r)) => (i.saturating_sub(l), (i + r + 1).min(nk)),
            None => (0, nk),
        };
        let mut scores = Vec::with_capacity(hi.saturating_sub(lo));
        let mut mx = f32::NEG_INFINITY;
        for j in lo..hi {
            let valid = mask.as_ref().is_none_or(|m| m[bi * nk + j]);
            if !valid && opts.mask_mode == KeyMaskMode::Exclude {
                scores.push(f32::NEG_INFINITY);
                continue;
            }
            let mut s = crate::cpu::dot(qr, &kb[j * d..(j + 1) * d]) * opts.scale;
            if let Some(c) = opts.softcap {
                s = c * (s / c).tanh();
            }
            mx = mx.max(s);
            scores.push(s);
        }
        if mx == f32::NEG_INFINITY {
            return;
        }
        let mut den = 0f32;
        for s in scores.iter_mut() {
            *s = (*s - mx).exp();
            den += *s;
        }
        let inv = 1.0 / den;
        for (jj, &p) in scores.iter().enumerate() {
            let j = lo + jj;
            if mask.as_ref().is_some_and(|m| !m[bi * nk + j]) {
                continue;
            }
            let w = p * inv;
            for (oo, vv) in o.iter_mut().zip(&vb[j * dv..(j + 1) * dv]) {
                *oo += w * vv;
            }
        }
    });
    Tensor::from_vec(out, &[b, h, nq, dv])
}
