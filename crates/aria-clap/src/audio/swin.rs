//! The Swin stages of HTSAT: window attention with a learned relative-position bias, the cyclic
//! shift of every second block (with its region mask), the MLP, and patch merging.
//!
//! Token rearrangements (pad + roll + window partition, its inverse, the 2×2 merge) are row
//! gathers ([`ops::embedding`] over the `[B·N, C]` token table) with index lists computed once
//! at load; padding positions read an appended zero row.

use aria_core::nn::{Bias, Linear, Weight};
use aria_core::ops;
use aria_core::{DType, Tensor, WeightLoader};

use super::Norm;
use crate::{ClapError, Result};

/// The additive mask value the reference puts between tokens of different shifted regions.
const REGION_MASK: f32 = -100.0;

/// How one block's tokens are arranged into windows (per batch item).
#[derive(Debug, Clone)]
struct Windows {
    /// Window side.
    side: usize,
    /// Windows per row of the padded grid.
    per_row: usize,
    /// Windows per item.
    count: usize,
    /// For each window token (window-major, row-major inside): its source token, or `None` for
    /// a padding position.
    src: Vec<Option<usize>>,
    /// For each token of the grid: its position in the window order.
    dst: Vec<usize>,
}

impl Windows {
    /// Windows of side `ws` over an `r × r` grid padded to a multiple of `ws`, after a cyclic
    /// shift of the padded grid by `−shift` along both axes.
    fn new(r: usize, ws: usize, shift: usize) -> Self {
        let rp = r.div_ceil(ws) * ws;
        let nw = rp / ws;
        let mut src = vec![None; rp * rp];
        let mut dst = vec![0; r * r];
        for y in 0..rp {
            for x in 0..rp {
                let pos = ((y / ws) * nw + x / ws) * ws * ws + (y % ws) * ws + x % ws;
                let (sy, sx) = ((y + shift) % rp, (x + shift) % rp);
                if sy < r && sx < r {
                    src[pos] = Some(sy * r + sx);
                    dst[sy * r + sx] = pos;
                }
            }
        }
        Windows {
            side: ws,
            per_row: nw,
            count: nw * nw,
            src,
            dst,
        }
    }

    fn padded(&self) -> bool {
        self.src.iter().any(Option::is_none)
    }

    /// The region label (0..9) of every window token of the shifted, padded grid.
    fn region_labels(&self, shift: usize) -> Vec<u8> {
        let (ws, nw) = (self.side, self.per_row);
        let rp = nw * ws;
        let region = |v: usize| -> u8 {
            if v < rp - ws {
                0
            } else if v < rp - shift {
                1
            } else {
                2
            }
        };
        let mut labels = vec![0u8; self.src.len()];
        for y in 0..rp {
            for x in 0..rp {
                let pos = ((y / ws) * nw + x / ws) * ws * ws + (y % ws) * ws + x % ws;
                labels[pos] = region(y) * 3 + region(x);
            }
        }
        labels
    }
}

/// Gather ids for a batch of `b` items: `per_item[j]` is a token of the item's `n` tokens, or
/// `None` for the zero row at `b·n`.
fn batch_ids(per_item: &[Option<usize>], b: usize, n: usize) -> Result<Tensor> {
    let mut ids = Vec::with_capacity(b * per_item.len());
    for bi in 0..b {
        ids.extend(per_item.iter().map(|s| match s {
            Some(t) => (bi * n + t) as i64,
            None => (b * n) as i64,
        }));
    }
    let len = ids.len();
    Ok(Tensor::from_vec(ids, &[len])?)
}

/// Rows `ids` of the token table `x [B, N, C]` (plus a zero row at `B·N` when `zero_row`) →
/// `[len(ids), C]`.
fn gather(x: &Tensor, ids: &Tensor, zero_row: bool) -> Result<Tensor> {
    let s = x.shape();
    let c = s[s.len() - 1];
    let table = x.reshape(&[x.elem_count() / c.max(1), c])?;
    let table = if zero_row {
        ops::pad(&table, 0, 0, 1)?
    } else {
        table
    };
    Ok(ops::embedding(ids, &table)?)
}

/// One Swin block (`ClapAudioLayer`).
#[derive(Debug)]
struct Block {
    ln1: Norm,
    qkv: Linear,
    out: Linear,
    ln2: Norm,
    fc1: Linear,
    fc2: Linear,
    /// Relative-position bias plus the region mask, `[windows or 1, heads, n, n]`.
    bias: Tensor,
    shifted: bool,
}

impl Block {
    /// Block `vb` of a stage `s`, attending over the windows `win` (shifted by `shift`).
    fn load(
        vb: &WeightLoader,
        cfg: &crate::AudioConfig,
        s: &StageSpec,
        win: &Windows,
        shift: usize,
    ) -> Result<Self> {
        let (dim, heads, qkv_bias) = (s.dim, s.heads, cfg.qkv_bias);
        let mlp = (cfg.mlp_ratio * dim as f64) as usize;
        let eps = cfg.layer_norm_eps as f32;
        let sa = vb.pp("attention.self");
        let part = |name: &str| -> Result<(Tensor, Option<Tensor>)> {
            let p = sa.pp(name);
            let w = p.get("weight", &[dim, dim])?;
            let b = if qkv_bias {
                Some(p.get_as("bias", &[dim], DType::F32)?)
            } else {
                None
            };
            Ok((w, b))
        };
        let (q, k, v) = (part("query")?, part("key")?, part("value")?);
        let dt = q.0.dtype();
        let w = Tensor::cat(
            &[&q.0.to_dtype(dt)?, &k.0.to_dtype(dt)?, &v.0.to_dtype(dt)?],
            0,
        )?;
        let b = match (q.1, k.1, v.1) {
            (Some(qb), Some(kb), Some(vb)) => Some(Tensor::cat(&[&qb, &kb, &vb], 0)?),
            _ => None,
        };
        let qkv = Linear::new(
            sa.pp("qkv").prefix().trim_end_matches('.'),
            Weight::Dense(w),
            b,
        )?;

        let ws = win.side;
        let span = 2 * ws - 1;
        let table = sa
            .get_as(
                "relative_position_bias_table",
                &[span * span, heads],
                DType::F32,
            )?
            .to_vec::<f32>()?;
        let n = ws * ws;
        let mut rel = vec![0f32; heads * n * n];
        for i in 0..n {
            for j in 0..n {
                let (yi, xi, yj, xj) = (i / ws, i % ws, j / ws, j % ws);
                let idx = (yi + ws - 1 - yj) * span + (xi + ws - 1 - xj);
                for h in 0..heads {
                    rel[(h * n + i) * n + j] = table[idx * heads + h];
                }
            }
        }
        let bias = if shift > 0 {
            let labels = win.region_labels(shift);
            let mut all = Vec::with_capacity(win.count * heads * n * n);
            for w in 0..win.count {
                let lab = &labels[w * n..(w + 1) * n];
                for h in 0..heads {
                    for i in 0..n {
                        for j in 0..n {
                            let m = if lab[i] == lab[j] { 0.0 } else { REGION_MASK };
                            all.push(rel[(h * n + i) * n + j] + m);
                        }
                    }
                }
            }
            Tensor::from_vec(all, &[win.count, heads, n, n])?
        } else {
            Tensor::from_vec(rel, &[1, heads, n, n])?
        };
        Ok(Block {
            ln1: Norm::load(&vb.pp("layernorm_before"), dim, eps)?,
            qkv,
            out: Linear::load(&vb.pp("attention.output.dense"), dim, dim, Bias::Yes)?,
            ln2: Norm::load(&vb.pp("layernorm_after"), dim, eps)?,
            fc1: Linear::load(&vb.pp("intermediate.dense"), dim, mlp, Bias::Yes)?,
            fc2: Linear::load(&vb.pp("output.dense"), mlp, dim, Bias::Yes)?,
            bias,
            shifted: shift > 0,
        })
    }

    /// `x [B, N, C]` → `[B, N, C]`; `fwd`/`inv` are the gather ids of this block's windows.
    fn forward(&self, x: &Tensor, heads: usize, win: &Windows, ids: &WindowIds) -> Result<Tensor> {
        let (b, n_tok, c) = (x.dim(0)?, x.dim(1)?, x.dim(2)?);
        let d = c / heads;
        let n = win.side * win.side;
        let bw = b * win.count;
        let h = self.ln1.forward(x)?;
        let windows = gather(&h, &ids.fwd, ids.zero_row)?.reshape(&[bw, n, c])?;
        let qkv = self.qkv.forward(&windows)?;
        let q = ops::split_heads(&qkv, 0, heads, d, None, None)?;
        let k = ops::split_heads(&qkv, c, heads, d, None, None)?;
        let v = ops::split_heads(&qkv, 2 * c, heads, d, None, None)?;
        // The reference's order: (q·kᵀ) / √d, + bias (+ region mask), softmax, · v.
        let scores = ops::matmul(&q, &k.transpose(2, 3)?)?;
        let root = Tensor::full(&[1], (d as f64).sqrt() as f32);
        let scores = ops::div(&scores, &root)?.reshape(&[b, win.count, heads, n, n])?;
        let scores = ops::add(&scores, &self.bias)?.reshape(&[bw, heads, n, n])?;
        let probs = ops::softmax_last(&scores)?;
        let ctx = ops::merge_heads(&ops::matmul(&probs, &v)?, None)?;
        let attn = self.out.forward(&ctx)?;
        let back = gather(&attn, &ids.inv, false)?.reshape(&[b, n_tok, c])?;
        let x = ops::add(x, &back)?;
        let m = self
            .fc2
            .forward(&ops::gelu(&self.fc1.forward(&self.ln2.forward(&x)?)?)?)?;
        Ok(ops::add(&x, &m)?)
    }
}

/// Gather ids of one window layout for one batch size.
struct WindowIds {
    fwd: Tensor,
    inv: Tensor,
    zero_row: bool,
}

impl WindowIds {
    fn new(win: &Windows, b: usize, n_tok: usize) -> Result<Self> {
        let inv: Vec<Option<usize>> = win.dst.iter().map(|&p| Some(p)).collect();
        Ok(WindowIds {
            fwd: batch_ids(&win.src, b, n_tok)?,
            inv: batch_ids(&inv, b, win.src.len())?,
            zero_row: win.padded(),
        })
    }
}

/// Patch merging (`ClapAudioPatchMerging`): each 2×2 group of tokens concatenated in the order
/// (0,0), (1,0), (0,1), (1,1) (row, column), LayerNorm over `4C`, then `4C → 2C` without bias.
#[derive(Debug)]
struct Merge {
    norm: Norm,
    reduction: Linear,
    /// Source token of each `(output token, part)`, row-major.
    src: Vec<Option<usize>>,
}

impl Merge {
    fn load(vb: &WeightLoader, dim: usize, r: usize) -> Result<Self> {
        let half = r / 2;
        let mut src = Vec::with_capacity(half * half * 4);
        for i in 0..half {
            for j in 0..half {
                for (dy, dx) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    src.push(Some((2 * i + dy) * r + 2 * j + dx));
                }
            }
        }
        Ok(Merge {
            // The reference's merge norm is a plain `nn.LayerNorm` (eps 1e-5).
            norm: Norm::load(&vb.pp("norm"), 4 * dim, 1e-5)?,
            reduction: Linear::load(&vb.pp("reduction"), 4 * dim, 2 * dim, Bias::No)?,
            src,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, c) = (x.dim(0)?, x.dim(1)?, x.dim(2)?);
        let ids = batch_ids(&self.src, b, n)?;
        let g = gather(x, &ids, false)?.reshape(&[b, n / 4, 4 * c])?;
        self.reduction
            .forward(&self.norm.forward(&g)?)
            .map_err(Into::into)
    }
}

/// One stage (`ClapAudioStage`): blocks alternating plain and shifted windows, then an
/// optional patch merging.
#[derive(Debug)]
pub(super) struct Stage {
    heads: usize,
    blocks: Vec<Block>,
    plain: Windows,
    shifted: Option<Windows>,
    merge: Option<Merge>,
}

/// The settings of one stage.
pub(super) struct StageSpec {
    /// Token grid side at the stage's input.
    pub res: usize,
    /// Channel width.
    pub dim: usize,
    /// Blocks.
    pub depth: usize,
    /// Attention heads.
    pub heads: usize,
    /// Whether a patch merging follows.
    pub merge: bool,
}

impl Stage {
    /// Pack every linear layer's weight as bf16 panels (see [`crate::Precision::Bf16Dot`]).
    pub(super) fn pack_bf16(&mut self) -> Result<()> {
        for b in &mut self.blocks {
            for l in [&mut b.qkv, &mut b.out, &mut b.fc1, &mut b.fc2] {
                crate::precision::pack_bf16(l)?;
            }
        }
        if let Some(m) = &mut self.merge {
            crate::precision::pack_bf16(&mut m.reduction)?;
        }
        Ok(())
    }

    /// Load `layers.{i}` of the encoder.
    pub(super) fn load(vb: &WeightLoader, cfg: &crate::AudioConfig, s: &StageSpec) -> Result<Self> {
        let cw = cfg.window_size;
        // The reference shrinks the window to the grid when the grid is not larger, and then
        // does not shift; a grid smaller than the window leaves its bias table unusable.
        if s.res < cw {
            return Err(ClapError::config(
                "audio_config",
                format!(
                    "a stage grid of {r}×{r} tokens is smaller than window_size {cw} (the reference \
                     cannot run this configuration)",
                    r = s.res
                ),
            ));
        }
        let shift = if s.res <= cw { 0 } else { cw / 2 };
        let plain = Windows::new(s.res, cw, 0);
        let shifted = (shift > 0 && s.depth > 1).then(|| Windows::new(s.res, cw, shift));
        let blocks = (0..s.depth)
            .map(|j| {
                let (win, sh) = match (&shifted, j % 2) {
                    (Some(w), 1) => (w, shift),
                    _ => (&plain, 0),
                };
                Block::load(&vb.pp(format!("blocks.{j}")), cfg, s, win, sh)
            })
            .collect::<Result<Vec<_>>>()?;
        let merge = if s.merge {
            if !s.res.is_multiple_of(2) {
                return Err(ClapError::config(
                    "audio_config",
                    format!(
                        "patch merging of an odd {r}×{r} grid is not supported",
                        r = s.res
                    ),
                ));
            }
            Some(Merge::load(&vb.pp("downsample"), s.dim, s.res)?)
        } else {
            None
        };
        Ok(Stage {
            heads: s.heads,
            blocks,
            plain,
            shifted,
            merge,
        })
    }

    /// `x [B, N, C]` → (the stage output, the states before the merging).
    pub(super) fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, n) = (x.dim(0)?, x.dim(1)?);
        let plain_ids = WindowIds::new(&self.plain, b, n)?;
        let shifted_ids = match &self.shifted {
            Some(w) => Some(WindowIds::new(w, b, n)?),
            None => None,
        };
        let mut x = x.clone();
        for blk in &self.blocks {
            x = match (&self.shifted, &shifted_ids, blk.shifted) {
                (Some(w), Some(ids), true) => blk.forward(&x, self.heads, w, ids)?,
                _ => blk.forward(&x, self.heads, &self.plain, &plain_ids)?,
            };
        }
        let out = match &self.merge {
            Some(m) => m.forward(&x)?,
            None => x.clone(),
        };
        Ok((out, x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_order_is_a_permutation_with_its_inverse() {
        for (r, ws, shift) in [(8, 4, 0), (8, 4, 2), (10, 4, 2), (6, 6, 0)] {
            let w = Windows::new(r, ws, shift);
            assert_eq!(w.dst.len(), r * r);
            for (tok, &pos) in w.dst.iter().enumerate() {
                assert_eq!(w.src[pos], Some(tok));
            }
            let real = w.src.iter().filter(|s| s.is_some()).count();
            assert_eq!(real, r * r);
            assert_eq!(w.padded(), r % ws != 0);
        }
        // The unshifted single window of a grid as large as the window is the raster order.
        let w = Windows::new(8, 8, 0);
        assert!(w.src.iter().enumerate().all(|(i, s)| *s == Some(i)));
    }

    #[test]
    fn shifted_regions_follow_the_reference_slices() {
        // 8×8 grid, window 4, shift 2: rows/columns 0..4 are region 0, 4..6 region 1, 6..8
        // region 2 (in the shifted frame).
        let w = Windows::new(8, 4, 2);
        let labels = w.region_labels(2);
        // The first window (rows 0..4, columns 0..4) is one region.
        assert!(labels[..16].iter().all(|&l| l == 0));
        // The last window (rows 4..8, columns 4..8): regions by (row ≥ 6, column ≥ 6).
        let last = &labels[3 * 16..];
        for ty in 0..4 {
            for tx in 0..4 {
                let ry = if ty < 2 { 1 } else { 2 };
                let rx = if tx < 2 { 1 } else { 2 };
                assert_eq!(last[ty * 4 + tx], ry * 3 + rx);
            }
        }
    }
}
