//! A SAME transformer resampling stage (stride 16) in the encoder or decoder direction.

use aria_core::{ops, Tensor, WeightLoader};

use crate::block::Block;
use crate::config::SameConfig;
use crate::error::{CodecError, Result};
use crate::noise::Draw;

/// Direction of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Encoder,
    Decoder,
}

/// Mapping convolution folded to a matrix over im2col rows `[x[t−k/2] … x[t+k/2]]`.
#[derive(Debug)]
pub(crate) struct Mapping {
    w: Tensor,
    b: Option<Tensor>,
    k: usize,
    cin: usize,
}

impl Mapping {
    fn load(w: &WeightLoader, cin: usize, cout: usize, k: usize, bias: bool) -> Result<Self> {
        let g = w.get_as("weight_g", &[cout, 1, 1], aria_core::DType::F32)?;
        let v = w.get_as("weight_v", &[cout, cin, k], aria_core::DType::F32)?;
        let folded = ops::weight_norm(&g, &v)?;
        // [cout, cin, k] -> [cout, k, cin] -> [cout, k·cin]
        let w2 = folded
            .permute(&[0, 2, 1])?
            .contiguous()?
            .reshape(&[cout, k * cin])?;
        let b = if bias {
            Some(w.get_as("bias", &[cout], aria_core::DType::F32)?)
        } else {
            None
        };
        Ok(Mapping { w: w2, b, k, cin })
    }

    /// `x [B, L, cin]` (tokens) → `[B, L, cout]`, zero padding `k/2` on both sides of each
    /// sequence ("same" convolution).
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.k == 1 {
            return Ok(ops::linear(x, &self.w, self.b.as_ref())?);
        }
        let s = x.shape();
        let (b, l, c) = (s[0], s[1], s[2]);
        let xc = x.contiguous()?;
        let xd = xc.as_slice::<f32>()?;
        let k = self.k;
        let half = k / 2;
        let mut col = vec![0f32; b * l * k * c];
        for bi in 0..b {
            for t in 0..l {
                let row = &mut col[(bi * l + t) * k * c..][..k * c];
                for kk in 0..k {
                    let src = t + kk;
                    if src >= half && src - half < l {
                        let st = src - half;
                        row[kk * c..(kk + 1) * c].copy_from_slice(&xd[(bi * l + st) * c..][..c]);
                    }
                }
            }
        }
        let col = Tensor::from_vec(col, &[b, l, k * self.cin])?;
        Ok(ops::linear(&col, &self.w, self.b.as_ref())?)
    }
}

/// One resampling stage: mapping, learned new tokens, transformer blocks.
#[derive(Debug)]
pub(crate) struct Stage {
    pub(crate) cfg: SameConfig,
    dir: Dir,
    mapping: Mapping,
    /// `[k, D]`, `k = 1` (variable stride) or the number of new tokens per cell.
    new_tokens: Vec<f32>,
    nt_rows: usize,
    blocks: Vec<Block>,
}

impl Stage {
    pub(crate) fn load(w: &WeightLoader, cfg: &SameConfig, dir: Dir) -> Result<Self> {
        let d = cfg.width();
        let (cin, cout) = match dir {
            Dir::Encoder => (cfg.io_channels, d),
            Dir::Decoder => (d, cfg.io_channels),
        };
        let mapping = Mapping::load(
            &w.pp("mapping"),
            cin,
            cout,
            cfg.mapping_kernel(),
            cfg.mapping_bias,
        )?;
        let seg = match dir {
            Dir::Encoder => 1,
            Dir::Decoder => cfg.stride(),
        };
        let nt_rows = if cfg.variable_stride { 1 } else { seg };
        let new_tokens = w
            .get_as("new_tokens", &[1, nt_rows, d], aria_core::DType::F32)?
            .to_vec_f32()?;
        let blocks = (0..cfg.depth())
            .map(|j| Block::load(&w.pp(format!("transformers.{j}")), cfg, j))
            .collect::<Result<Vec<_>>>()?;
        Ok(Stage {
            cfg: cfg.clone(),
            dir,
            mapping,
            new_tokens,
            nt_rows,
            blocks,
        })
    }

    /// New tokens per cell (decoder: stride, encoder: 1).
    fn seg(&self) -> usize {
        match self.dir {
            Dir::Encoder => 1,
            Dir::Decoder => self.cfg.stride(),
        }
    }

    /// The `[batch · cells, seg, D]` new tokens, plus `mask_noise · ε` when noise is on and
    /// `mask_noise > 0` (`pos0`: absolute index of the first cell, for keyed noise).
    fn new_token_block(
        &self,
        batch: usize,
        cells: usize,
        pos0: usize,
        noise: Draw<'_>,
    ) -> Result<Vec<f32>> {
        let d = self.cfg.width();
        let seg = self.seg();
        let mut out = Vec::with_capacity(batch * cells * seg * d);
        for _ in 0..batch * cells {
            for j in 0..seg {
                let r = if self.nt_rows == 1 { 0 } else { j };
                out.extend_from_slice(&self.new_tokens[r * d..(r + 1) * d]);
            }
        }
        let mut noise = noise;
        if self.cfg.mask_noise > 0.0 {
            if let Some(eps) =
                noise.rows(1, batch, pos0, cells, seg * d, &[batch * cells, seg, d])?
            {
                let m = self.cfg.mask_noise;
                for (o, e) in out.iter_mut().zip(eps) {
                    *o += e * m;
                }
            }
        }
        Ok(out)
    }

    /// Attention band in tokens, if the stage uses sliding-window attention.
    fn window(&self) -> Option<(usize, usize)> {
        self.cfg
            .sliding_window
            .map(|[l, r]| (l * self.cfg.cell(), r * self.cfg.cell()))
    }

    /// Run the blocks on `x [B, L, D]` (`L` a multiple of the cell, and of the chunk for chunked
    /// attention). `pos0` is the RoPE position of the first token (sliding window only; chunks
    /// always use positions from 0). Block outputs (in the layout the block saw) are pushed to
    /// `trace`.
    fn transformer(
        &self,
        x: Tensor,
        pos0: usize,
        mut trace: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        let (b, l, d) = (s[0], s[1], s[2]);
        if let Some(win) = self.window() {
            let mut x = x;
            for blk in &self.blocks {
                x = blk.forward(&x, pos0, Some(win))?;
                if let Some(t) = trace.as_deref_mut() {
                    t.push(x.clone());
                }
            }
            return Ok(x);
        }
        let eff = self.cfg.cells_per_chunk() * self.cfg.cell();
        if l % eff != 0 {
            return Err(CodecError::Invalid(format!(
                "sequence of {l} tokens is not a multiple of the chunk ({eff})"
            )));
        }
        let (first, second) = if self.cfg.chunk_midpoint_shift {
            self.blocks.split_at(self.cfg.depth() / 2)
        } else {
            self.blocks.split_at(self.blocks.len())
        };
        let mut x = x.reshape(&[b * l / eff, eff, d])?;
        for blk in first {
            x = blk.forward(&x, 0, None)?;
            if let Some(t) = trace.as_deref_mut() {
                t.push(x.clone());
            }
        }
        if second.is_empty() {
            return Ok(x.reshape(&[b, l, d])?);
        }
        let shift = eff / 2;
        let xd = x.contiguous()?;
        let xs = xd.as_slice::<f32>()?;
        let l2 = l + 2 * shift;
        let mut y = Vec::with_capacity(b * l2 * d);
        for bi in 0..b {
            let seq = &xs[bi * l * d..(bi + 1) * l * d];
            y.extend_from_slice(&seq[..shift * d]);
            y.extend_from_slice(seq);
            y.extend_from_slice(&seq[(l - shift) * d..]);
        }
        drop(xd);
        let mut x = Tensor::from_vec(y, &[b * l2 / eff, eff, d])?;
        for blk in second {
            x = blk.forward(&x, 0, None)?;
            if let Some(t) = trace.as_deref_mut() {
                t.push(x.clone());
            }
        }
        Ok(x.reshape(&[b, l2, d])?.narrow(1, shift, l)?.contiguous()?)
    }

    /// Decoder direction: `z [B, T, D]` latent tokens → patch tokens `[B, stride·T', out]`, where
    /// `T'` is `T` rounded up to whole chunks (chunked attention) with zero tokens.
    pub(crate) fn decode(
        &self,
        z: &Tensor,
        pos_latent0: usize,
        noise: Draw<'_>,
        trace: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        let s = z.shape().to_vec();
        let (b, t, d) = (s[0], s[1], s[2]);
        let modulo = if self.window().is_some() {
            1
        } else {
            self.cfg.cells_per_chunk()
        };
        let tp = t.div_ceil(modulo) * modulo;
        let seg = self.seg();
        let cell = 1 + seg;
        let nt = self.new_token_block(b, tp, pos_latent0, noise)?;
        let zc = z.contiguous()?;
        let zd = zc.as_slice::<f32>()?;
        let mut x = vec![0f32; b * tp * cell * d];
        for bi in 0..b {
            for c in 0..tp {
                let base = ((bi * tp + c) * cell) * d;
                if c < t {
                    x[base..base + d].copy_from_slice(&zd[(bi * t + c) * d..][..d]);
                }
                x[base + d..base + cell * d]
                    .copy_from_slice(&nt[(bi * tp + c) * seg * d..][..seg * d]);
            }
        }
        drop(zc);
        let x = Tensor::from_vec(x, &[b, tp * cell, d])?;
        let y = self.transformer(x, pos_latent0 * cell, trace)?;
        let yd = y.as_slice::<f32>()?;
        let mut keep = Vec::with_capacity(b * tp * seg * d);
        for c in 0..b * tp {
            keep.extend_from_slice(&yd[(c * cell + 1) * d..(c + 1) * cell * d]);
        }
        let keep = Tensor::from_vec(keep, &[b, tp * seg, d])?;
        self.mapping.forward(&keep)
    }

    /// Encoder direction: patch tokens `x [B, L, in]` → `[B, n, D]` (one token per latent).
    pub(crate) fn encode(
        &self,
        x: &Tensor,
        noise: Draw<'_>,
        trace: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        let (b, l, cin) = (s[0], s[1], s[2]);
        let stride = self.cfg.stride();
        let modulo = if self.window().is_some() {
            stride
        } else {
            self.cfg.chunk_size
        };
        let lp = l.div_ceil(modulo) * modulo;
        let x = if lp != l {
            let pad = Tensor::zeros(&[b, lp - l, cin], aria_core::DType::F32);
            Tensor::cat(&[x, &pad], 1)?
        } else {
            x.clone()
        };
        let m = self.mapping.forward(&x)?;
        let d = self.cfg.width();
        let n = lp / stride;
        let cell = stride + 1;
        let nt = self.new_token_block(b, n, 0, noise)?;
        let md = m.as_slice::<f32>()?;
        let mut seq = Vec::with_capacity(b * n * cell * d);
        for c in 0..b * n {
            seq.extend_from_slice(&md[c * stride * d..(c + 1) * stride * d]);
            seq.extend_from_slice(&nt[c * d..(c + 1) * d]);
        }
        let seq = Tensor::from_vec(seq, &[b, n * cell, d])?;
        let y = self.transformer(seq, 0, trace)?;
        let yd = y.as_slice::<f32>()?;
        let mut out = Vec::with_capacity(b * n * d);
        for c in 0..b * n {
            out.extend_from_slice(&yd[(c * cell + stride) * d..(c + 1) * cell * d]);
        }
        Ok(Tensor::from_vec(out, &[b, n, d])?)
    }
}
