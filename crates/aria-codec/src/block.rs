//! The SAME transformer block: DyT norms, (differential) self-attention with DyT QK-norm and
//! partial rotary embeddings, and a gated feed-forward (SiLU or `sin(πx)` gate).

use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, AttnOpts, GluAct, HeadNorm};
use aria_core::{DType, Device, Tensor, WeightLoader};

use crate::config::SameConfig;
use crate::error::{CodecError, Result};

/// `γ ⊙ tanh(α·x) + β` over the last dimension.
#[derive(Debug, Clone)]
pub(crate) struct Dyt {
    alpha: f32,
    gamma: Tensor,
    beta: Tensor,
}

impl Dyt {
    fn load(w: &WeightLoader, dim: usize) -> Result<Self> {
        Ok(Dyt {
            alpha: w.get_as("alpha", &[1], DType::F32)?.to_scalar_f32()?,
            gamma: w.get_as("gamma", &[dim], DType::F32)?,
            beta: w.get_as("beta", &[dim], DType::F32)?,
        })
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::dyt(x, self.alpha, &self.gamma, &self.beta)?)
    }

    fn head_norm(&self) -> HeadNorm<'_> {
        HeadNorm {
            alpha: self.alpha,
            gamma: &self.gamma,
            beta: &self.beta,
        }
    }

    fn move_to(&mut self, device: &Device) -> Result<()> {
        self.gamma = device.put(&self.gamma)?;
        self.beta = device.put(&self.beta)?;
        Ok(())
    }
}

/// One transformer block of a SAME resampling stage.
#[derive(Debug)]
pub(crate) struct Block {
    pre_norm: Dyt,
    to_qkv: Linear,
    to_out: Linear,
    q_norm: Dyt,
    k_norm: Dyt,
    ff_norm: Dyt,
    ff_in: Linear,
    ff_out: Linear,
    /// `rope.inv_freq [Dh/4]`: rotary embedding of the first half of each head.
    inv_freq: Tensor,
    gate: GluAct,
    heads: usize,
    dh: usize,
    differential: bool,
}

impl Block {
    /// Load block `j` of a stage from `w` (prefix `...transformers.{j}`).
    pub(crate) fn load(w: &WeightLoader, cfg: &SameConfig, j: usize) -> Result<Self> {
        let d = cfg.width();
        let dh = cfg.dim_heads;
        let inner = (d as f64 * cfg.ff_mult) as usize;
        let nproj = if cfg.differential { 5 } else { 3 };
        let a = w.pp("self_attn");
        Ok(Block {
            pre_norm: Dyt::load(&w.pp("pre_norm"), d)?,
            to_qkv: Linear::load(&a.pp("to_qkv"), d, nproj * d, Bias::No)?,
            to_out: Linear::load(&a.pp("to_out"), d, d, Bias::No)?,
            q_norm: Dyt::load(&a.pp("q_norm"), dh)?,
            k_norm: Dyt::load(&a.pp("k_norm"), dh)?,
            ff_norm: Dyt::load(&w.pp("ff_norm"), d)?,
            ff_in: Linear::load(&w.pp("ff.ff.0.proj"), d, 2 * inner, Bias::Yes)?,
            ff_out: Linear::load(&w.pp("ff.ff.2"), inner, d, Bias::Yes)?,
            inv_freq: w.get_as("rope.inv_freq", &[dh / 4], DType::F32)?,
            gate: if cfg.is_sinusoidal(j) {
                GluAct::SinPi
            } else {
                GluAct::Silu
            },
            heads: cfg.heads(),
            dh,
            differential: cfg.differential,
        })
    }

    /// Move every weight and parameter to `device`.
    /// The block's matrices (to pack them).
    pub(crate) fn linears_mut(&mut self) -> [&mut Linear; 4] {
        [
            &mut self.to_qkv,
            &mut self.to_out,
            &mut self.ff_in,
            &mut self.ff_out,
        ]
    }

    /// Drop the resident pages of the memory-mapped matrices (see
    /// [`aria_core::nn::Linear::release_pages`]).
    pub(crate) fn release_pages(&self) -> Result<usize> {
        let mut n = 0;
        for l in [&self.to_qkv, &self.to_out, &self.ff_in, &self.ff_out] {
            n += l.release_pages()?;
        }
        Ok(n)
    }

    pub(crate) fn move_to(&mut self, device: &Device) -> Result<()> {
        for n in [
            &mut self.pre_norm,
            &mut self.q_norm,
            &mut self.k_norm,
            &mut self.ff_norm,
        ] {
            n.move_to(device)?;
        }
        for l in [
            &mut self.to_qkv,
            &mut self.to_out,
            &mut self.ff_in,
            &mut self.ff_out,
        ] {
            l.to_device(device)?;
        }
        self.inv_freq = device.put(&self.inv_freq)?;
        Ok(())
    }

    /// `x [Bc, N, D]` → `[Bc, N, D]`. RoPE positions are `pos0 .. pos0 + N`; `window` is the
    /// attention band `(left, right)` in tokens (none: full attention within each sequence).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        pos0: usize,
        window: Option<(usize, usize)>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        if s.len() != 3 {
            return Err(CodecError::Invalid(format!(
                "transformer block input must be [B, N, D], got {s:?}"
            )));
        }
        let n = s[1];
        let u = self.pre_norm.apply(x)?;
        let qkv = self.to_qkv.forward(&u)?;
        drop(u);
        let table = ops::rope_table(&self.inv_freq, pos0, n)?;
        let rope = (table.get(0)?, table.get(1)?);
        let rope = Some((&rope.0, &rope.1));
        let np = if self.differential { 5 } else { 3 };
        let (h, q_norm, k_norm) = (self.heads, self.q_norm.head_norm(), self.k_norm.head_norm());
        let q = ops::qkv_heads(&qkv, np, 0, h, Some(q_norm), rope)?;
        let k = ops::qkv_heads(&qkv, np, 1, h, Some(k_norm), rope)?;
        let v = ops::qkv_heads(&qkv, np, 2, h, None, None)?;
        let opts = AttnOpts {
            window,
            ..AttnOpts::new(1.0 / (self.dh as f32).sqrt())
        };
        let o = if self.differential {
            let q2 = ops::qkv_heads(&qkv, np, 3, h, Some(q_norm), rope)?;
            let k2 = ops::qkv_heads(&qkv, np, 4, h, Some(k_norm), rope)?;
            drop(qkv);
            ops::attention_diff(&q, &k, &q2, &k2, &v, &opts)?
        } else {
            drop(qkv);
            ops::attention(&q, &k, &v, &opts)?
        };
        drop((q, k, v));
        // Heads merged: [Bc, H, N, Dh] → [Bc, N, H·Dh] (one row-parallel copy).
        let merged = ops::merge_heads(&o, None)?;
        drop(o);
        let a = self.to_out.forward(&merged)?;
        drop(merged);
        let h = ops::add(x, &a)?;
        drop(a);
        let u = self.ff_norm.apply(&h)?;
        let p = self.ff_in.forward(&u)?;
        drop(u);
        let g = ops::glu(&p, self.gate)?;
        drop(p);
        let f = self.ff_out.forward(&g)?;
        Ok(ops::add(&h, &f)?)
    }
}
