//! Building blocks of the DiT: linear layers that can carry a merged LoRA weight, the small
//! conditioning MLPs, and fused row-wise kernels (norm + adaLN modulation, gated residual add,
//! QK-norm + RoPE, head merge) that keep the `[B, N, E]` layout and make one pass each.

use std::borrow::Cow;

use aria_core::{ops, Tensor, WeightLoader};
use rayon::prelude::*;

use crate::{DitError, Result};

/// RMSNorm epsilon of the DiT block norms (`pre_norm`, `cross_attend_norm`, `ff_norm`).
pub(crate) const BLOCK_NORM_EPS: f32 = 1e-5;
/// RMSNorm epsilon of the attention QK-norms.
pub(crate) const QK_NORM_EPS: f32 = 1e-6;

/// The f32 elements of `t`: borrowed when it is a contiguous f32 CPU tensor.
pub(crate) fn f32s(t: &Tensor) -> Result<Cow<'_, [f32]>> {
    if t.dtype() == aria_core::DType::F32 && t.is_contiguous() && t.device().is_cpu() {
        Ok(Cow::Borrowed(t.as_slice::<f32>()?))
    } else {
        Ok(Cow::Owned(t.to_cpu()?.to_vec_f32()?))
    }
}

/// A linear (or kernel-1 Conv1d) layer `y = x·Wᵀ + b`. The checkpoint weight stays as loaded
/// (typically memory-mapped); a LoRA merge is held separately in `merged` and used instead while
/// present.
#[derive(Debug, Clone)]
pub struct Linear {
    path: String,
    base: Tensor,
    merged: Option<Tensor>,
    bias: Option<Tensor>,
    stored_shape: Vec<usize>,
}

impl Linear {
    /// Load `name.weight` (`[out, in]`, or `[out, in, 1]` for a kernel-1 convolution when
    /// `conv` is set) and optionally `name.bias` from `vb`; `path` is the module path recorded for
    /// LoRA matching (relative to the DiT root, e.g. `transformer.layers.0.self_attn.to_qkv`).
    pub(crate) fn load(
        vb: &WeightLoader,
        name: &str,
        path: &str,
        out_dim: usize,
        in_dim: usize,
        bias: bool,
        conv: bool,
    ) -> Result<Self> {
        let stored_shape = if conv {
            vec![out_dim, in_dim, 1]
        } else {
            vec![out_dim, in_dim]
        };
        let w = vb.get(&format!("{name}.weight"), &stored_shape)?;
        let base = if conv {
            w.reshape(&[out_dim, in_dim])?
        } else {
            w
        };
        let bias = if bias {
            Some(vb.get(&format!("{name}.bias"), &[out_dim])?)
        } else {
            None
        };
        Ok(Linear {
            path: path.to_string(),
            base,
            merged: None,
            bias,
            stored_shape,
        })
    }

    /// The module path (relative to the DiT root, as in LoRA files after `model.`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The checkpoint weight `[out, in]` (a kernel-1 convolution's `[out, in, 1]` reshaped).
    pub fn base_weight(&self) -> &Tensor {
        &self.base
    }

    /// The weight in use: the merged one if a LoRA is applied, the checkpoint weight otherwise.
    pub fn weight(&self) -> &Tensor {
        self.merged.as_ref().unwrap_or(&self.base)
    }

    /// The shape of the weight as stored in the checkpoint.
    pub fn stored_shape(&self) -> &[usize] {
        &self.stored_shape
    }

    /// Install (or with `None`, drop) a merged weight of the base weight's shape.
    pub fn set_merged(&mut self, w: Option<Tensor>) -> Result<()> {
        if let Some(w) = &w {
            if w.shape() != self.base.shape() {
                return Err(DitError::Input {
                    what: format!("merged weight of `{}`", self.path),
                    reason: format!("shape {:?}, expected {:?}", w.shape(), self.base.shape()),
                });
            }
        }
        self.merged = w;
        Ok(())
    }

    /// Whether a merged weight is installed.
    pub fn is_merged(&self) -> bool {
        self.merged.is_some()
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.base.shape()[0]
    }

    /// `x·Wᵀ + b`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::linear(x, self.weight(), self.bias.as_ref())?)
    }
}

/// `Linear → SiLU → Linear` (the DiT's conditioning projections).
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    pub(crate) l0: Linear,
    pub(crate) l2: Linear,
}

impl Mlp {
    /// `name.0`, `name.2` under `vb`; `path` is the module path of `name` from the DiT root.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn load(
        vb: &WeightLoader,
        name: &str,
        path: &str,
        in_dim: usize,
        hidden: usize,
        out_dim: usize,
        bias: bool,
    ) -> Result<Self> {
        Ok(Mlp {
            l0: Linear::load(
                vb,
                &format!("{name}.0"),
                &format!("{path}.0"),
                hidden,
                in_dim,
                bias,
                false,
            )?,
            l2: Linear::load(
                vb,
                &format!("{name}.2"),
                &format!("{path}.2"),
                out_dim,
                hidden,
                bias,
                false,
            )?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = ops::silu(&self.l0.forward(x)?)?;
        self.l2.forward(&h)
    }
}

/// Per-batch adaLN modulation of a `[B, N, E]` stream: `scale` and `shift` are `[B, E]` slices.
pub(crate) struct Modulation<'a> {
    pub(crate) scale: &'a [f32],
    pub(crate) shift: &'a [f32],
}

/// Row-wise RMSNorm (`(x · rsqrt(mean(x²) + eps)) · γ`) of `x [rows, e]`, followed by the adaLN
/// modulation `y · (1 + scale) + shift` when given (`rows = B·n`).
pub(crate) fn rms_norm_modulate(
    x: &[f32],
    e: usize,
    n: usize,
    gamma: &[f32],
    eps: f32,
    modulation: Option<&Modulation<'_>>,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if e == 0 {
        return out;
    }
    out.par_chunks_mut(e)
        .zip(x.par_chunks(e))
        .enumerate()
        .for_each(|(row, (o, xr))| {
            let ms = xr.iter().map(|v| v * v).sum::<f32>() / e as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            match modulation {
                Some(m) => {
                    let b = row / n.max(1);
                    let sc = &m.scale[b * e..(b + 1) * e];
                    let sh = &m.shift[b * e..(b + 1) * e];
                    for i in 0..e {
                        let y = xr[i] * inv * gamma[i];
                        o[i] = y * (1.0 + sc[i]) + sh[i];
                    }
                }
                None => {
                    for i in 0..e {
                        o[i] = xr[i] * inv * gamma[i];
                    }
                }
            }
        });
    out
}

/// `h += u ⊙ g` in place, row-wise over `[B, n, e]`, where `g [B, e]` is the already evaluated
/// gate factor `sigmoid(1 − gate)` (or no gate: `h += u`). Rows with `skip[row]` set are left unchanged.
pub(crate) fn gated_residual_add(
    h: &mut [f32],
    u: &[f32],
    e: usize,
    n: usize,
    gate: Option<&[f32]>,
    skip: Option<&[bool]>,
) {
    if e == 0 {
        return;
    }
    h.par_chunks_mut(e)
        .zip(u.par_chunks(e))
        .enumerate()
        .for_each(|(row, (hr, ur))| {
            if skip.is_some_and(|s| s[row]) {
                return;
            }
            match gate {
                Some(g) => {
                    let b = row / n.max(1);
                    let gr = &g[b * e..(b + 1) * e];
                    for i in 0..e {
                        hr[i] += ur[i] * gr[i];
                    }
                }
                None => {
                    for i in 0..e {
                        hr[i] += ur[i];
                    }
                }
            }
        });
}

/// RoPE tables for the rotated head dims: `cos`, `sin` `[n, r]`.
pub(crate) struct Rope {
    pub(crate) cos: Vec<f32>,
    pub(crate) sin: Vec<f32>,
    pub(crate) r: usize,
}

/// From a projection `src [B, n, width]`, take the `h·d`-wide chunk starting at column `col`,
/// split it into `h` heads of `d` and return them head-major (`[B, h, n, d]`, contiguous, as the
/// attention kernels read them), optionally RMS-normalising each head vector with `gamma` (`[d]`)
/// and applying RoPE on the first `rope.r` dims (position = token index), all in one pass.
#[allow(clippy::too_many_arguments)]
pub(crate) fn split_heads(
    src: &[f32],
    width: usize,
    col: usize,
    h: usize,
    d: usize,
    n: usize,
    gamma: Option<&[f32]>,
    rope: Option<&Rope>,
) -> Vec<f32> {
    let rows = src.len().checked_div(width).unwrap_or(0);
    let mut out = vec![0f32; rows * h * d];
    if h == 0 || d == 0 || n == 0 {
        return out;
    }
    out.par_chunks_mut(d).enumerate().for_each(|(idx, oh)| {
        let p = idx % n;
        let bh = idx / n;
        let (bi, hi) = (bh / h, bh % h);
        let start = (bi * n + p) * width + col + hi * d;
        let sh = &src[start..start + d];
        match gamma {
            Some(g) => {
                let ms = sh.iter().map(|v| v * v).sum::<f32>() / d as f32;
                let inv = 1.0 / (ms + QK_NORM_EPS).sqrt();
                for i in 0..d {
                    oh[i] = sh[i] * inv * g[i];
                }
            }
            None => oh.copy_from_slice(sh),
        }
        if let Some(rp) = rope {
            let half = rp.r / 2;
            let c = &rp.cos[p * rp.r..(p + 1) * rp.r];
            let sn = &rp.sin[p * rp.r..(p + 1) * rp.r];
            for i in 0..half {
                let (a, b) = (oh[i], oh[i + half]);
                oh[i] = a * c[i] - b * sn[i];
                oh[i + half] = b * c[i + half] + a * sn[i + half];
            }
        }
    });
    out
}

#[cfg(test)]
/// A `[B, h, n, d]` view of the `e = h·d` columns starting at `col` of a `[B, n, width]` tensor.
pub(crate) fn head_view(t: &Tensor, col: usize, e: usize, h: usize) -> Result<Tensor> {
    let s = t.shape();
    let (b, n) = (s[0], s[1]);
    let v = t.narrow(2, col, e)?;
    // [B, n, e] (strided) → [B, n, h, d] → [B, h, n, d]; the split of the last dim is a view.
    let d = e / h.max(1);
    let st = v.strides().to_vec();
    let split = Tensor::from_storage(
        v.storage().clone(),
        v.dtype(),
        vec![b, n, h, d],
        vec![st[0], st[1], d * st[2], st[2]],
        v.offset(),
    )?;
    Ok(split.permute(&[0, 2, 1, 3])?)
}

/// Merge attention heads `a [B, h, n, d]` (minus `sub` of the same shape, for differential
/// attention) into `[B, n, h·d]`; rows flagged in `zero_rows` (`[B·n]`) become zero.
pub(crate) fn merge_heads(
    a: &[f32],
    sub: Option<&[f32]>,
    b: usize,
    h: usize,
    n: usize,
    d: usize,
    zero_rows: Option<&[bool]>,
) -> Vec<f32> {
    let e = h * d;
    let mut out = vec![0f32; b * n * e];
    if e == 0 {
        return out;
    }
    out.par_chunks_mut(e).enumerate().for_each(|(row, o)| {
        if zero_rows.is_some_and(|z| z[row]) {
            return;
        }
        let (bi, i) = (row / n.max(1), row % n.max(1));
        for hi in 0..h {
            let src = ((bi * h + hi) * n + i) * d;
            let dst = &mut o[hi * d..(hi + 1) * d];
            match sub {
                Some(s) => {
                    for j in 0..d {
                        dst[j] = a[src + j] - s[src + j];
                    }
                }
                None => dst.copy_from_slice(&a[src..src + d]),
            }
        }
    });
    out
}

/// Swap the last two axes of a contiguous `[B, r, c]` buffer → `[B, c, r]`.
pub(crate) fn transpose_last2(x: &[f32], b: usize, r: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0f32; b * r * c];
    if r == 0 || c == 0 {
        return out;
    }
    out.par_chunks_mut(r).enumerate().for_each(|(idx, o)| {
        let (bi, ci) = (idx / c, idx % c);
        let base = bi * r * c;
        for (ri, v) in o.iter_mut().enumerate() {
            *v = x[base + ri * c + ci];
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_norm_rope_matches_ops() -> Result<()> {
        // B=1, n=3, two heads of d=4, rope on 2 dims; compare with rms_norm + rope from ops.
        let (n, h, d) = (3usize, 2usize, 4usize);
        let e = h * d;
        let src: Vec<f32> = (0..n * 2 * e)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let gamma = vec![0.5f32, 1.0, 1.5, 2.0];
        let inv = Tensor::from_vec(vec![0.25f32], &[1])?;
        let (c, s) = ops::rope_tables(&inv, n)?;
        let rope = Rope {
            cos: c.to_vec_f32()?,
            sin: s.to_vec_f32()?,
            r: 2,
        };
        let got = split_heads(&src, 2 * e, e, h, d, n, Some(&gamma), Some(&rope));
        let t = Tensor::from_vec(src, &[1, n, 2 * e])?;
        let v = head_view(&t, e, e, h)?; // [1, h, n, d]
        let g = Tensor::from_vec(gamma, &[d])?;
        let normed = ops::rms_norm(&v, Some(&g), QK_NORM_EPS, ops::RmsStyle::Plain)?;
        let roped = ops::rope(&normed, &c, &s)?; // [1, h, n, d]
        assert_eq!(got, roped.to_vec_f32()?);
        let plain = split_heads(&t.to_vec_f32()?, 2 * e, e, h, d, n, None, None);
        assert_eq!(plain, v.contiguous()?.to_vec_f32()?);
        Ok(())
    }

    #[test]
    fn transpose_and_merge() {
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
        assert_eq!(
            transpose_last2(&x, 1, 2, 3),
            vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        // a [1, 2 heads, 1 token, 2]
        let a = vec![1.0, 2.0, 3.0, 4.0];
        let s = vec![0.5, 0.5, 0.5, 0.5];
        assert_eq!(
            merge_heads(&a, Some(&s), 1, 2, 1, 2, None),
            vec![0.5, 1.5, 2.5, 3.5]
        );
        assert_eq!(
            merge_heads(&a, None, 1, 2, 1, 2, Some(&[true])),
            vec![0.0; 4]
        );
    }
}
