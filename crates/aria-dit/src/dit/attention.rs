//! DiT self- and cross-attention, standard and differential, with RMS QK-norm and partial RoPE.
//!
//! Projections stay in `[B, N, E]` layout; one fused pass per head group (QK-norm, RoPE) writes
//! the head-major `[B, H, N, D]` operands that [`ops::attention`] reads. Differential attention
//! evaluates `Attn(q, k, v) − Attn(q_d, k_d, v)` ([`ops::attention_diff`]) with the same QK-norm
//! gains for both branches and a shared `v`.

use aria_core::ops::{self, AttnOpts, KeyMaskMode};
use aria_core::{Tensor, WeightLoader};

use super::layers::{f32s, merge_heads, split_heads, Linear, Rope};
use crate::Result;

/// Key-padding handling of one self-attention call.
pub(crate) struct SelfMask<'a> {
    /// `[B, N]` validity (memory tokens included, always valid).
    pub(crate) key_mask: &'a Tensor,
    pub(crate) mode: KeyMaskMode,
    /// `[B·N]` rows whose output is zeroed (true masking only).
    pub(crate) zero_rows: Option<&'a [bool]>,
}

fn load_gamma(vb: &WeightLoader, name: &str, d: usize) -> Result<Vec<f32>> {
    Ok(vb.get(&format!("{name}.gamma"), &[d])?.to_vec_f32()?)
}

/// `self_attn` of a block: fused `to_qkv` (3E, or 5E = q, k, v, q_diff, k_diff), `to_out`.
#[derive(Debug, Clone)]
pub(crate) struct SelfAttention {
    pub(crate) to_qkv: Linear,
    pub(crate) to_out: Linear,
    q_gamma: Vec<f32>,
    k_gamma: Vec<f32>,
    heads: usize,
    head_dim: usize,
    differential: bool,
}

impl SelfAttention {
    pub(crate) fn load(
        vb: &WeightLoader,
        path: &str,
        e: usize,
        heads: usize,
        differential: bool,
    ) -> Result<Self> {
        let d = e / heads.max(1);
        let chunks = if differential { 5 } else { 3 };
        Ok(SelfAttention {
            to_qkv: Linear::load(
                vb,
                "to_qkv",
                &format!("{path}.to_qkv"),
                chunks * e,
                e,
                false,
                false,
            )?,
            to_out: Linear::load(vb, "to_out", &format!("{path}.to_out"), e, e, false, false)?,
            q_gamma: load_gamma(vb, "q_norm", d)?,
            k_gamma: load_gamma(vb, "k_norm", d)?,
            heads,
            head_dim: d,
            differential,
        })
    }

    /// `u [B, N, E]` → `[B, N, E]`.
    pub(crate) fn forward(
        &self,
        u: &Tensor,
        rope: &Rope,
        mask: Option<&SelfMask<'_>>,
    ) -> Result<Tensor> {
        let (b, n) = (u.shape()[0], u.shape()[1]);
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let qkv = self.to_qkv.forward(u)?; // [B, N, (3|5)E]
        let width = qkv.shape()[2];
        let src = f32s(&qkv)?;
        let heads = |col: usize, gamma: Option<&[f32]>, rope: Option<&Rope>| -> Result<Tensor> {
            let v = split_heads(&src, width, col, h, d, n, gamma, rope);
            Ok(Tensor::from_vec(v, &[b, h, n, d])?)
        };
        let q = heads(0, Some(&self.q_gamma), Some(rope))?;
        let k = heads(e, Some(&self.k_gamma), Some(rope))?;
        let v = heads(2 * e, None, None)?;
        let mut opts = AttnOpts::new(1.0 / (d as f32).sqrt());
        if let Some(m) = mask {
            opts.key_mask = Some(m.key_mask);
            opts.mask_mode = m.mode;
        }
        let a = if self.differential {
            let qd = heads(3 * e, Some(&self.q_gamma), Some(rope))?;
            let kd = heads(4 * e, Some(&self.k_gamma), Some(rope))?;
            ops::attention_diff(&q, &k, &qd, &kd, &v, &opts)?
        } else {
            ops::attention(&q, &k, &v, &opts)?
        };
        let merged = merge_heads(&f32s(&a)?, None, b, h, n, d, mask.and_then(|m| m.zero_rows));
        self.to_out.forward(&Tensor::from_vec(merged, &[b, n, e])?)
    }
}

/// Keys and values of one cross-attention layer for a given context, computed once per
/// generation: `k` (and `k_diff`) normalised, all `[B, H, Nc, D]` views.
#[derive(Debug, Clone)]
pub(crate) struct CrossKv {
    k: Tensor,
    k_diff: Option<Tensor>,
    v: Tensor,
}

/// `cross_attn` of a block: `to_q` (E, or 2E = q, q_diff), `to_kv` (2E = k, v; or 3E = k,
/// k_diff, v), `to_out`; no RoPE, no mask.
#[derive(Debug, Clone)]
pub(crate) struct CrossAttention {
    pub(crate) to_q: Linear,
    pub(crate) to_kv: Linear,
    pub(crate) to_out: Linear,
    q_gamma: Vec<f32>,
    k_gamma: Vec<f32>,
    heads: usize,
    head_dim: usize,
    differential: bool,
}

impl CrossAttention {
    pub(crate) fn load(
        vb: &WeightLoader,
        path: &str,
        e: usize,
        heads: usize,
        differential: bool,
    ) -> Result<Self> {
        let d = e / heads.max(1);
        let (qc, kvc) = if differential { (2, 3) } else { (1, 2) };
        Ok(CrossAttention {
            to_q: Linear::load(vb, "to_q", &format!("{path}.to_q"), qc * e, e, false, false)?,
            to_kv: Linear::load(
                vb,
                "to_kv",
                &format!("{path}.to_kv"),
                kvc * e,
                e,
                false,
                false,
            )?,
            to_out: Linear::load(vb, "to_out", &format!("{path}.to_out"), e, e, false, false)?,
            q_gamma: load_gamma(vb, "q_norm", d)?,
            k_gamma: load_gamma(vb, "k_norm", d)?,
            heads,
            head_dim: d,
            differential,
        })
    }

    /// Keys/values for the projected context `c [B, Nc, E]`.
    pub(crate) fn prepare(&self, c: &Tensor) -> Result<CrossKv> {
        let (b, nc) = (c.shape()[0], c.shape()[1]);
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let kv = self.to_kv.forward(c)?;
        let width = kv.shape()[2];
        let src = f32s(&kv)?;
        let heads = |col: usize, gamma: Option<&[f32]>| -> Result<Tensor> {
            let v = split_heads(&src, width, col, h, d, nc, gamma, None);
            Ok(Tensor::from_vec(v, &[b, h, nc, d])?)
        };
        let k = heads(0, Some(&self.k_gamma))?;
        let (k_diff, v_col) = if self.differential {
            (Some(heads(e, Some(&self.k_gamma))?), 2 * e)
        } else {
            (None, e)
        };
        let v = heads(v_col, None)?;
        Ok(CrossKv { k, k_diff, v })
    }

    /// `u [B, N, E]` attending to prepared keys/values → `[B, N, E]`.
    pub(crate) fn forward(&self, u: &Tensor, kv: &CrossKv) -> Result<Tensor> {
        let (b, n) = (u.shape()[0], u.shape()[1]);
        let (h, d) = (self.heads, self.head_dim);
        let e = h * d;
        let q = self.to_q.forward(u)?;
        let width = q.shape()[2];
        let src = f32s(&q)?;
        let heads = |col: usize| -> Result<Tensor> {
            let v = split_heads(&src, width, col, h, d, n, Some(&self.q_gamma), None);
            Ok(Tensor::from_vec(v, &[b, h, n, d])?)
        };
        let opts = AttnOpts::new(1.0 / (d as f32).sqrt());
        let a = match (&kv.k_diff, self.differential) {
            (Some(kd), true) => {
                ops::attention_diff(&heads(0)?, &kv.k, &heads(e)?, kd, &kv.v, &opts)?
            }
            _ => ops::attention(&heads(0)?, &kv.k, &kv.v, &opts)?,
        };
        let merged = merge_heads(&f32s(&a)?, None, b, h, n, d, None);
        self.to_out.forward(&Tensor::from_vec(merged, &[b, n, e])?)
    }
}
