//! DiT self- and cross-attention, standard and differential, with RMS QK-norm and partial RoPE.
//!
//! Projections stay in `[B, N, E]` layout; [`ops::split_heads`] makes one fused pass per head
//! group (QK-norm, RoPE) writing the head-major `[B, H, N, D]` operands that [`ops::attention`]
//! reads. Differential attention evaluates `Attn(q, k, v) − Attn(q_d, k_d, v)`
//! ([`ops::attention_diff`]) with the same QK-norm gains for both branches and a shared `v`.

use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, AttnOpts, KeyMaskMode};
use aria_core::{Device, Tensor, WeightLoader};

use super::layers::{move_to, param, Rope, QK_NORM_EPS};
use super::rows::UniqueRows;
use crate::config::QkNorm;
use crate::Result;

/// Key-padding handling of one self-attention call.
pub(crate) struct SelfMask<'a> {
    /// `[B, N]` validity (memory tokens included, always valid).
    pub(crate) key_mask: &'a Tensor,
    pub(crate) mode: KeyMaskMode,
    /// `[B, N]`: rows whose entry is zero get a zero output (true masking only).
    pub(crate) zero_rows: Option<&'a Tensor>,
}

/// The `q_norm` / `k_norm` gains of an attention layer (`None` without QK-norm).
#[derive(Debug, Clone)]
struct QkGains {
    q: Tensor,
    k: Tensor,
}

impl QkGains {
    fn load(vb: &WeightLoader, kind: QkNorm, d: usize) -> Result<Option<Self>> {
        Ok(match kind {
            QkNorm::None => None,
            QkNorm::Rms => Some(QkGains {
                q: param(vb, "q_norm.gamma", &[d])?,
                k: param(vb, "k_norm.gamma", &[d])?,
            }),
        })
    }

    fn to_device(gains: &mut Option<Self>, device: &Device) -> Result<()> {
        if let Some(g) = gains {
            move_to(&mut g.q, device)?;
            move_to(&mut g.k, device)?;
        }
        Ok(())
    }
}

fn norm(g: Option<&Tensor>) -> Option<(&Tensor, f32)> {
    g.map(|g| (g, QK_NORM_EPS))
}

/// `self_attn` of a block: fused `to_qkv` (3E, or 5E = q, k, v, q_diff, k_diff), `to_out`.
#[derive(Debug, Clone)]
pub(crate) struct SelfAttention {
    pub(crate) to_qkv: Linear,
    pub(crate) to_out: Linear,
    gains: Option<QkGains>,
    heads: usize,
    head_dim: usize,
    differential: bool,
    /// The attention's products may round to bf16 ([`AttnOpts::bf16_products`]).
    pub(crate) bf16_products: bool,
}

impl SelfAttention {
    pub(crate) fn load(
        vb: &WeightLoader,
        e: usize,
        heads: usize,
        qk_norm: QkNorm,
        differential: bool,
    ) -> Result<Self> {
        let d = e / heads.max(1);
        let chunks = if differential { 5 } else { 3 };
        Ok(SelfAttention {
            to_qkv: Linear::load(&vb.pp("to_qkv"), e, chunks * e, Bias::No)?,
            to_out: Linear::load(&vb.pp("to_out"), e, e, Bias::No)?,
            gains: QkGains::load(vb, qk_norm, d)?,
            heads,
            head_dim: d,
            differential,
            bf16_products: false,
        })
    }

    pub(crate) fn move_to_device(&mut self, device: &Device) -> Result<()> {
        QkGains::to_device(&mut self.gains, device)
    }

    /// `u [B, N, E]` → `[B, N, E]`.
    pub(crate) fn forward(
        &self,
        u: &Tensor,
        rope: &Rope,
        mask: Option<&SelfMask<'_>>,
    ) -> Result<Tensor> {
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let qkv = self.to_qkv.forward(u)?; // [B, N, (3|5)E]
        let (gq, gk) = (
            self.gains.as_ref().map(|g| &g.q),
            self.gains.as_ref().map(|g| &g.k),
        );
        let r = Some((&rope.cos, &rope.sin));
        let heads =
            |col: usize, g: Option<&Tensor>, r| ops::split_heads(&qkv, col, h, d, norm(g), r);
        let q = heads(0, gq, r)?;
        let k = heads(e, gk, r)?;
        let v = heads(2 * e, None, None)?;
        let mut opts = AttnOpts::new(1.0 / (d as f32).sqrt());
        opts.bf16_products = self.bf16_products;
        if let Some(m) = mask {
            opts.key_mask = Some(m.key_mask);
            opts.mask_mode = m.mode;
        }
        let a = if self.differential {
            let qd = heads(3 * e, gq, r)?;
            let kd = heads(4 * e, gk, r)?;
            ops::attention_diff(&q, &k, &qd, &kd, &v, &opts)?
        } else {
            ops::attention(&q, &k, &v, &opts)?
        };
        let merged = ops::merge_heads(&a, mask.and_then(|m| m.zero_rows))?;
        Ok(self.to_out.forward(&merged)?)
    }
}

/// Keys and values of one cross-attention layer for a given context, computed once per
/// generation: `k` (and `k_diff`) normalised, all `[B, H, Nc, D]`.
#[derive(Debug, Clone)]
pub(crate) struct CrossKv {
    k: Tensor,
    k_diff: Option<Tensor>,
    v: Tensor,
}

impl CrossKv {
    /// Keys, differential keys (where present) and values.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> Vec<&Tensor> {
        let mut v = vec![&self.k];
        v.extend(&self.k_diff);
        v.push(&self.v);
        v
    }
}

/// `cross_attn` of a block: `to_q` (E, or 2E = q, q_diff), `to_kv` (2E = k, v; or 3E = k,
/// k_diff, v), `to_out`; no RoPE, no mask.
#[derive(Debug, Clone)]
pub(crate) struct CrossAttention {
    pub(crate) to_q: Linear,
    pub(crate) to_kv: Linear,
    pub(crate) to_out: Linear,
    gains: Option<QkGains>,
    heads: usize,
    head_dim: usize,
    differential: bool,
    /// The attention's products may round to bf16 ([`AttnOpts::bf16_products`]).
    pub(crate) bf16_products: bool,
}

impl CrossAttention {
    pub(crate) fn load(
        vb: &WeightLoader,
        e: usize,
        heads: usize,
        qk_norm: QkNorm,
        differential: bool,
    ) -> Result<Self> {
        let d = e / heads.max(1);
        let (qc, kvc) = if differential { (2, 3) } else { (1, 2) };
        Ok(CrossAttention {
            to_q: Linear::load(&vb.pp("to_q"), e, qc * e, Bias::No)?,
            to_kv: Linear::load(&vb.pp("to_kv"), e, kvc * e, Bias::No)?,
            to_out: Linear::load(&vb.pp("to_out"), e, e, Bias::No)?,
            gains: QkGains::load(vb, qk_norm, d)?,
            heads,
            head_dim: d,
            differential,
            bf16_products: false,
        })
    }

    pub(crate) fn move_to_device(&mut self, device: &Device) -> Result<()> {
        QkGains::to_device(&mut self.gains, device)
    }

    /// Keys/values for the projected context `c [B, Nc, E]`, or for its distinct rows `c [1, U,
    /// E]` with `uniq` saying where each of the `B × Nc` rows went.
    pub(crate) fn prepare(&self, c: &Tensor, uniq: Option<&UniqueRows>) -> Result<CrossKv> {
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let kv = self.to_kv.forward(c)?;
        let kv = match uniq {
            Some(u) => u.expand(&kv)?,
            None => kv,
        };
        let gk = self.gains.as_ref().map(|g| &g.k);
        let heads =
            |col: usize, g: Option<&Tensor>| ops::split_heads(&kv, col, h, d, norm(g), None);
        let k = heads(0, gk)?;
        let (k_diff, v_col) = if self.differential {
            (Some(heads(e, gk)?), 2 * e)
        } else {
            (None, e)
        };
        let v = heads(v_col, None)?;
        Ok(CrossKv { k, k_diff, v })
    }

    /// `u [B, N, E]` attending to prepared keys/values → `[B, N, E]`.
    pub(crate) fn forward(&self, u: &Tensor, kv: &CrossKv) -> Result<Tensor> {
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let q = self.to_q.forward(u)?;
        let gq = self.gains.as_ref().map(|g| &g.q);
        let heads = |col: usize| ops::split_heads(&q, col, h, d, norm(gq), None);
        let mut opts = AttnOpts::new(1.0 / (d as f32).sqrt());
        opts.bf16_products = self.bf16_products;
        let a = match (&kv.k_diff, self.differential) {
            (Some(kd), true) => {
                ops::attention_diff(&heads(0)?, &kv.k, &heads(e)?, kd, &kv.v, &opts)?
            }
            _ => ops::attention(&heads(0)?, &kv.k, &kv.v, &opts)?,
        };
        let merged = ops::merge_heads(&a, None)?;
        Ok(self.to_out.forward(&merged)?)
    }
}
