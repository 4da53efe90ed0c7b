//! One DiT transformer block (adaLN path): modulated self-attention with the
//! `sigmoid(1 − gate)` residual gate, unmodulated cross-attention, the per-layer local
//! (inpainting) conditioning add, and the modulated SwiGLU feed-forward.

use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, GluAct};
use aria_core::{Device, Tensor, WeightLoader};

use super::attention::{CrossAttention, CrossKv, SelfAttention, SelfMask};
use super::layers::{move_to, param, Mlp, Rope, BLOCK_NORM_EPS};
use crate::config::QkNorm;
use crate::Result;

/// `transformer.layers.{i}`.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pre_norm: Tensor,
    pub(crate) self_attn: SelfAttention,
    cross_norm: Tensor,
    pub(crate) cross_attn: CrossAttention,
    ff_norm: Tensor,
    pub(crate) ff0: Linear,
    pub(crate) ff2: Linear,
    /// `[6E]`: offsets of (scale, shift, gate) × (self, ff) added to the adaLN vector.
    scale_shift_gate: Tensor,
    pub(crate) to_local_embed: Option<Mlp>,
    e: usize,
}

/// Per-call inputs of a block other than the stream itself.
pub(crate) struct BlockInputs<'a> {
    /// Output of the global-condition embedder `[B, 6E]`.
    pub(crate) ada: &'a Tensor,
    pub(crate) rope: &'a Rope,
    pub(crate) mask: Option<&'a SelfMask<'a>>,
    pub(crate) cross: &'a CrossKv,
    /// This layer's local embedding `[B, T, E]`, added to the last `T` tokens.
    pub(crate) local: Option<&'a Tensor>,
    /// `[B, N]`: rows whose entry is zero drop their FF output (true masking only).
    pub(crate) skip_rows: Option<&'a Tensor>,
}

/// The shapes of a block.
pub(crate) struct BlockDims {
    pub(crate) e: usize,
    pub(crate) heads: usize,
    pub(crate) ff_inner: usize,
    pub(crate) local_dim: usize,
    pub(crate) qk_norm: QkNorm,
    pub(crate) differential: bool,
}

impl Block {
    pub(crate) fn load(vb: &WeightLoader, dims: &BlockDims) -> Result<Self> {
        let e = dims.e;
        let to_local_embed = if dims.local_dim > 0 {
            Some(Mlp::load(
                &vb.pp("to_local_embed"),
                dims.local_dim,
                e,
                e,
                Bias::Yes,
            )?)
        } else {
            None
        };
        Ok(Block {
            pre_norm: param(vb, "pre_norm.gamma", &[e])?,
            self_attn: SelfAttention::load(
                &vb.pp("self_attn"),
                e,
                dims.heads,
                dims.qk_norm,
                dims.differential,
            )?,
            cross_norm: param(vb, "cross_attend_norm.gamma", &[e])?,
            cross_attn: CrossAttention::load(
                &vb.pp("cross_attn"),
                e,
                dims.heads,
                dims.qk_norm,
                dims.differential,
            )?,
            ff_norm: param(vb, "ff_norm.gamma", &[e])?,
            ff0: Linear::load(&vb.pp("ff.ff.0.proj"), e, 2 * dims.ff_inner, Bias::Yes)?,
            ff2: Linear::load(&vb.pp("ff.ff.2"), dims.ff_inner, e, Bias::Yes)?,
            scale_shift_gate: param(vb, "to_scale_shift_gate", &[6 * e])?,
            to_local_embed,
            e,
        })
    }

    /// Move the block's parameters (not its linear layers: see `Dit::linears_mut`).
    pub(crate) fn move_to_device(&mut self, device: &Device) -> Result<()> {
        for t in [
            &mut self.pre_norm,
            &mut self.cross_norm,
            &mut self.ff_norm,
            &mut self.scale_shift_gate,
        ] {
            move_to(t, device)?;
        }
        self.self_attn.move_to_device(device)?;
        self.cross_attn.move_to_device(device)
    }

    /// The local embedding `λ = W₂·silu(W₁·ℓ + b₁) + b₂` of `ℓ [B, T, Dl]` → `[B, T, E]`.
    pub(crate) fn local_embed(&self, l: &Tensor) -> Result<Option<Tensor>> {
        self.to_local_embed
            .as_ref()
            .map(|m| m.forward(l))
            .transpose()
    }

    /// The residual stream `h [B, N, E]` after this block.
    pub(crate) fn forward(&self, h: &Tensor, inp: &BlockInputs<'_>) -> Result<Tensor> {
        let e = self.e;
        // (scale, shift, gate) × (self, ff): to_scale_shift_gate + ada, per batch row; the gate
        // factors sigmoid(1 − gate) for all six parts at once (only parts 2 and 5 are used).
        let p = ops::add(inp.ada, &self.scale_shift_gate)?; // [B, 6E]
        let part = |c: usize| p.narrow(1, c * e, e);
        let gates = ops::sigmoid(&ops::affine(&p, -1.0, 1.0)?)?;
        let gate = |c: usize| gates.narrow(1, c * e, e);

        // Self-attention with adaLN.
        let u = ops::rms_norm_modulate(
            h,
            &self.pre_norm,
            BLOCK_NORM_EPS,
            Some((&part(0)?, &part(1)?)),
        )?;
        let a = self.self_attn.forward(&u, inp.rope, inp.mask)?;
        let h = ops::gated_residual_add(h, &a, Some(&gate(2)?), None)?;

        // Cross-attention, no modulation, no gate.
        let u = ops::rms_norm_modulate(&h, &self.cross_norm, BLOCK_NORM_EPS, None)?;
        let c = self.cross_attn.forward(&u, inp.cross)?;
        let mut h = ops::gated_residual_add(&h, &c, None, None)?;

        // Local conditioning on the last T tokens (memory tokens get nothing).
        if let Some(l) = inp.local {
            h = ops::gated_residual_add(&h, l, None, None)?;
        }

        // Feed-forward with adaLN.
        let u = ops::rms_norm_modulate(
            &h,
            &self.ff_norm,
            BLOCK_NORM_EPS,
            Some((&part(3)?, &part(4)?)),
        )?;
        let f = self.ff0.forward(&u)?;
        let f = self.ff2.forward(&ops::glu(&f, GluAct::Silu)?)?;
        Ok(ops::gated_residual_add(
            &h,
            &f,
            Some(&gate(5)?),
            inp.skip_rows,
        )?)
    }
}
