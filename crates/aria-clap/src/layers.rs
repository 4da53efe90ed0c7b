//! Layers shared by the towers (and by other BERT-family encoders of the workspace): a
//! LayerNorm with its weights, and the post-LayerNorm transformer encoder layer of BERT and
//! RoBERTa.

use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, AttnOpts, KeyMaskMode};
use aria_core::{DType, Tensor, WeightLoader};

use crate::Result;

/// A LayerNorm over the last axis, with weight and bias.
#[derive(Debug)]
pub struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f32,
}

impl LayerNorm {
    /// Load `weight` and `bias` (`[d]`, widened to f32) from `vb`.
    pub fn load(vb: &WeightLoader, d: usize, eps: f32) -> Result<Self> {
        Ok(LayerNorm {
            w: vb.get_as("weight", &[d], DType::F32)?,
            b: vb.get_as("bias", &[d], DType::F32)?,
            eps,
        })
    }

    /// Normalize `x` over its last axis.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::layer_norm(x, Some(&self.w), Some(&self.b), self.eps)?)
    }
}

/// One encoder layer of BERT / RoBERTa (the `transformers` names: `attention.self.{query,key,
/// value}`, `attention.output.{dense,LayerNorm}`, `intermediate.dense`,
/// `output.{dense,LayerNorm}`): self-attention, residual, LayerNorm; exact-GELU feed-forward,
/// residual, LayerNorm.
#[derive(Debug)]
pub struct EncoderLayer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln1: LayerNorm,
    up: Linear,
    down: Linear,
    ln2: LayerNorm,
}

impl EncoderLayer {
    /// Load a layer of width `hidden` and feed-forward width `intermediate`.
    pub fn load(vb: &WeightLoader, hidden: usize, intermediate: usize, eps: f32) -> Result<Self> {
        let (h, f) = (hidden, intermediate);
        let sa = vb.pp("attention.self");
        Ok(EncoderLayer {
            q: Linear::load(&sa.pp("query"), h, h, Bias::Yes)?,
            k: Linear::load(&sa.pp("key"), h, h, Bias::Yes)?,
            v: Linear::load(&sa.pp("value"), h, h, Bias::Yes)?,
            o: Linear::load(&vb.pp("attention.output.dense"), h, h, Bias::Yes)?,
            ln1: LayerNorm::load(&vb.pp("attention.output.LayerNorm"), h, eps)?,
            up: Linear::load(&vb.pp("intermediate.dense"), h, f, Bias::Yes)?,
            down: Linear::load(&vb.pp("output.dense"), f, h, Bias::Yes)?,
            ln2: LayerNorm::load(&vb.pp("output.LayerNorm"), h, eps)?,
        })
    }

    /// `x [B, N, H]`, `mask [B, N]` (1 = token, 0 = padding: excluded as a key, as the
    /// reference's additive `finfo.min` mask does).
    pub fn forward(&self, x: &Tensor, mask: &Tensor, heads: usize) -> Result<Tensor> {
        let (b, n, h) = (x.dim(0)?, x.dim(1)?, x.dim(2)?);
        let hd = h / heads;
        let split =
            |t: Tensor| -> Result<Tensor> { Ok(t.reshape(&[b, n, heads, hd])?.transpose(1, 2)?) };
        let q = split(self.q.forward(x)?)?;
        let k = split(self.k.forward(x)?)?;
        let v = split(self.v.forward(x)?)?;
        let mut opts = AttnOpts::new(1.0 / (hd as f32).sqrt());
        opts.key_mask = Some(mask);
        opts.mask_mode = KeyMaskMode::Exclude;
        let a = ops::attention(&q, &k, &v, &opts)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape(&[b, n, h])?;
        let x = self.ln1.forward(&ops::add(&self.o.forward(&a)?, x)?)?;
        let f = self.down.forward(&ops::gelu(&self.up.forward(&x)?)?)?;
        self.ln2.forward(&ops::add(&f, &x)?)
    }

    /// Pack every linear layer's weight as bf16 panels (see [`crate::Precision::Bf16Dot`]).
    pub fn pack_bf16(&mut self) -> Result<()> {
        for l in [
            &mut self.q,
            &mut self.k,
            &mut self.v,
            &mut self.o,
            &mut self.up,
            &mut self.down,
        ] {
            crate::precision::pack_bf16(l)?;
        }
        Ok(())
    }
}
