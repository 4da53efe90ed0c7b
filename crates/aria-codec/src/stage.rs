//! A SAME transformer resampling stage (stride 16) in the encoder or decoder direction.

use aria_core::nn::{Bias, Conv1d};
use aria_core::{ops, DType, Device, Tensor, WeightLoader};

use crate::block::Block;
use crate::config::{SameAttention, SameConfig};
use crate::error::{CodecError, Result};
use crate::noise::Draw;

/// Direction of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Encoder,
    Decoder,
}

/// One resampling stage: mapping, learned new tokens, transformer blocks.
#[derive(Debug)]
pub(crate) struct Stage {
    pub(crate) cfg: SameConfig,
    dir: Dir,
    /// The weight-normalised mapping convolution (kernel 1 or 3, "same" padding).
    mapping: Conv1d,
    /// `[k, D]`, `k = 1` (variable stride) or the number of new tokens per cell.
    new_tokens: Tensor,
    blocks: Vec<Block>,
    /// Where the weights live (noise draws are moved there).
    device: Device,
}

/// `t` broadcast to `shape` (NumPy rules: trailing dimensions aligned, size-1 or missing ones
/// repeated) as a stride-0 view, without copying.
fn broadcast(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let (s, st) = (t.shape(), t.strides());
    let lead = shape
        .len()
        .checked_sub(s.len())
        .ok_or_else(|| CodecError::Invalid(format!("cannot broadcast {s:?} to {shape:?}")))?;
    let mut strides = vec![0; shape.len()];
    for (i, (&n, &d)) in s.iter().zip(&shape[lead..]).enumerate() {
        if n == d {
            strides[lead + i] = st[i];
        } else if n != 1 {
            return Err(CodecError::Invalid(format!(
                "cannot broadcast {s:?} to {shape:?}"
            )));
        }
    }
    Ok(Tensor::from_storage(
        t.storage().clone(),
        t.dtype(),
        shape.to_vec(),
        strides,
        t.offset(),
    )?)
}

impl Stage {
    pub(crate) fn load(w: &WeightLoader, cfg: &SameConfig, dir: Dir) -> Result<Self> {
        let d = cfg.width();
        let (cin, cout) = match dir {
            Dir::Encoder => (cfg.io_channels, d),
            Dir::Decoder => (d, cfg.io_channels),
        };
        let bias = if cfg.mapping_bias {
            Bias::Yes
        } else {
            Bias::No
        };
        let mapping =
            Conv1d::load_weight_norm(&w.pp("mapping"), cin, cout, cfg.mapping_kernel(), bias)?;
        let seg = match dir {
            Dir::Encoder => 1,
            Dir::Decoder => cfg.stride(),
        };
        let nt_rows = if cfg.variable_stride { 1 } else { seg };
        let new_tokens = w
            .get_as("new_tokens", &[1, nt_rows, d], DType::F32)?
            .reshape(&[nt_rows, d])?;
        let blocks = (0..cfg.depth())
            .map(|j| Block::load(&w.pp(format!("transformers.{j}")), cfg, j))
            .collect::<Result<Vec<_>>>()?;
        Ok(Stage {
            cfg: cfg.clone(),
            dir,
            mapping,
            new_tokens,
            blocks,
            device: Device::Cpu,
        })
    }

    /// Every matrix of the stage: the mapping (over unfolded windows) and the blocks'.
    pub(crate) fn linears_mut(&mut self) -> Vec<&mut aria_core::nn::Linear> {
        let mut v = vec![self.mapping.linear_mut()];
        for b in &mut self.blocks {
            v.extend(b.linears_mut());
        }
        v
    }

    /// Drop the resident pages of the memory-mapped weights of the blocks.
    pub(crate) fn release_pages(&self) -> Result<usize> {
        let mut n = self.mapping.release_pages()?;
        for b in &self.blocks {
            n += b.release_pages()?;
        }
        Ok(n)
    }

    /// Move every weight and parameter to `device`.
    pub(crate) fn move_to(&mut self, device: &Device) -> Result<()> {
        self.mapping.linear_mut().to_device(device)?;
        self.new_tokens = device.put(&self.new_tokens)?;
        for b in &mut self.blocks {
            b.move_to(device)?;
        }
        self.device = device.clone();
        Ok(())
    }

    /// New tokens per cell (decoder: stride, encoder: 1).
    fn seg(&self) -> usize {
        match self.dir {
            Dir::Encoder => 1,
            Dir::Decoder => self.cfg.stride(),
        }
    }

    /// The `[batch, cells, seg, D]` new tokens, plus `mask_noise · ε` when noise is on and
    /// `mask_noise > 0` (`pos0`: absolute index of the first cell, for keyed noise). Without
    /// noise the result is a broadcast view of the learned tokens.
    fn new_token_block(
        &self,
        batch: usize,
        cells: usize,
        pos0: usize,
        noise: Draw<'_>,
    ) -> Result<Tensor> {
        let d = self.cfg.width();
        let seg = self.seg();
        let mut noise = noise;
        if self.cfg.mask_noise > 0.0 {
            let shape = [batch * cells, seg, d];
            if let Some(eps) = noise.rows(1, batch, pos0, cells, seg * d, &shape)? {
                let eps = self.device.put(&Tensor::from_vec(eps, &shape)?)?;
                let scaled = ops::mul_scalar(&eps, self.cfg.mask_noise)?;
                // new_tokens [1 or seg, D] broadcast over the cells.
                return Ok(ops::add(&self.new_tokens, &scaled)?.reshape(&[batch, cells, seg, d])?);
            }
        }
        broadcast(&self.new_tokens, &[batch, cells, seg, d])
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
        let mut run = |blocks: &[Block], mut x: Tensor, pos0, win| -> Result<Tensor> {
            for blk in blocks {
                x = blk.forward(&x, pos0, win)?;
                if let Some(t) = trace.as_deref_mut() {
                    t.push(x.clone());
                }
            }
            Ok(x)
        };
        let SameAttention::Chunked {
            chunk_size: _,
            midpoint_shift,
        } = self.cfg.attention
        else {
            return run(&self.blocks, x, pos0, self.cfg.band_tokens());
        };
        let eff = self.cfg.cells_per_chunk().unwrap_or(1) * self.cfg.cell();
        if l % eff != 0 {
            return Err(CodecError::Invalid(format!(
                "sequence of {l} tokens is not a multiple of the chunk ({eff})"
            )));
        }
        let split = if midpoint_shift {
            self.cfg.depth() / 2
        } else {
            self.blocks.len()
        };
        let (first, second) = self.blocks.split_at(split);
        // Each chunk is one sequence of the batch: full attention within it.
        let x = run(first, x.reshape(&[b * l / eff, eff, d])?, 0, None)?;
        if second.is_empty() {
            return Ok(x.reshape(&[b, l, d])?);
        }
        // Midpoint shift: the sequence extended by copies of its first and last half chunk,
        // chunked again (chunk borders now at the old chunks' midpoints).
        let shift = eff / 2;
        let x = x.reshape(&[b, l, d])?;
        let ext = Tensor::cat(
            &[&x.narrow(1, 0, shift)?, &x, &x.narrow(1, l - shift, shift)?],
            1,
        )?;
        drop(x);
        let l2 = l + 2 * shift;
        let x = run(second, ext.reshape(&[b * l2 / eff, eff, d])?, 0, None)?;
        Ok(x.reshape(&[b, l2, d])?.narrow(1, shift, l)?.contiguous()?)
    }

    /// Decoder direction: `z [B, T, D]` latent tokens → patch tokens `[B, stride·T', out]`, where
    /// `T'` is `T` rounded up to whole chunks (chunked attention) with zero tokens.
    ///
    /// With `span = Some((c0, c1))` only the cells `c0..c1` of the padded sequence go through the
    /// blocks and the mapping (patch tokens `[B, stride·(c1 − c0), out]`), while the noise is
    /// drawn for the whole sequence as without a span. `c0` and `c1 − c0` must be multiples of
    /// the chunk (in cells); cells near the span's edges then differ from a whole decode's
    /// (see [`crate::window`] for how far), the others have its bits.
    pub(crate) fn decode(
        &self,
        z: &Tensor,
        pos_latent0: usize,
        noise: Draw<'_>,
        trace: Option<&mut Vec<Tensor>>,
        span: Option<(usize, usize)>,
    ) -> Result<Tensor> {
        let s = z.shape().to_vec();
        let (b, t, d) = (s[0], s[1], s[2]);
        let modulo = self.cfg.cells_per_chunk().unwrap_or(1);
        let tp = t.div_ceil(modulo) * modulo;
        let (c0, c1) = span.unwrap_or((0, tp));
        if c0 >= c1 || c1 > tp || c0 % modulo != 0 || (c1 - c0) % modulo != 0 {
            return Err(CodecError::Invalid(format!(
                "decode span {c0}..{c1} of {tp} cells is empty, out of range or not whole chunks \
                 of {modulo}"
            )));
        }
        let n = c1 - c0;
        let seg = self.seg();
        let cell = 1 + seg;
        let mut nt = self.new_token_block(b, tp, pos_latent0, noise)?;
        // Cells [latent token, seg new tokens]; latents past T are zero tokens.
        let mut zp = ops::pad(z, 1, 0, tp - t)?.reshape(&[b, tp, 1, d])?;
        if n < tp {
            nt = nt.narrow(1, c0, n)?;
            zp = zp.narrow(1, c0, n)?;
        }
        let x = Tensor::cat(&[&zp, &nt], 2)?.reshape(&[b, n * cell, d])?;
        drop((zp, nt));
        let y = self.transformer(x, (pos_latent0 + c0) * cell, trace)?;
        let keep = y
            .reshape(&[b, n, cell, d])?
            .narrow(2, 1, seg)?
            .reshape(&[b, n * seg, d])?;
        drop(y);
        Ok(self.mapping.forward(&keep)?)
    }

    /// Encoder direction: patch tokens `x [B, L, in]` → `[B, n, D]` (one token per latent).
    pub(crate) fn encode(
        &self,
        x: &Tensor,
        noise: Draw<'_>,
        trace: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        let l = s[1];
        let b = s[0];
        let stride = self.cfg.stride();
        let modulo = match self.cfg.attention {
            SameAttention::Band { .. } => stride,
            SameAttention::Chunked { chunk_size, .. } => chunk_size,
        };
        let lp = l.div_ceil(modulo) * modulo;
        let x = ops::pad(x, 1, 0, lp - l)?;
        let m = self.mapping.forward(&x)?;
        drop(x);
        let d = self.cfg.width();
        let n = lp / stride;
        let cell = stride + 1;
        let nt = self.new_token_block(b, n, 0, noise)?;
        // Cells [stride patch tokens, one new token].
        let m = m.reshape(&[b, n, stride, d])?;
        let seq = Tensor::cat(&[&m, &nt], 2)?.reshape(&[b, n * cell, d])?;
        drop((m, nt));
        let y = self.transformer(seq, 0, trace)?;
        Ok(y.reshape(&[b, n, cell, d])?
            .narrow(2, stride, 1)?
            .reshape(&[b, n, d])?)
    }
}
