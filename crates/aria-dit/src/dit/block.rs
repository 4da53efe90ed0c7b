//! One DiT transformer block (adaLN path): modulated self-attention with the
//! `sigmoid(1 − gate)` residual gate, unmodulated cross-attention, the per-layer local
//! (inpainting) conditioning add, and the modulated SwiGLU feed-forward.

use aria_core::ops::{self, GluAct};
use aria_core::{Tensor, WeightLoader};

use super::attention::{CrossAttention, CrossKv, SelfAttention, SelfMask};
use super::layers::{
    f32s, gated_residual_add, rms_norm_modulate, Linear, Mlp, Modulation, Rope, BLOCK_NORM_EPS,
};
use crate::Result;

/// `transformer.layers.{i}`.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pre_norm: Vec<f32>,
    pub(crate) self_attn: SelfAttention,
    cross_norm: Vec<f32>,
    pub(crate) cross_attn: CrossAttention,
    ff_norm: Vec<f32>,
    pub(crate) ff0: Linear,
    pub(crate) ff2: Linear,
    scale_shift_gate: Vec<f32>,
    pub(crate) to_local_embed: Option<Mlp>,
    e: usize,
}

/// Per-call inputs of a block other than the stream itself.
pub(crate) struct BlockInputs<'a> {
    /// Output of the global-condition embedder `[B, 6E]`.
    pub(crate) ada: &'a [f32],
    pub(crate) rope: &'a Rope,
    pub(crate) mask: Option<&'a SelfMask<'a>>,
    pub(crate) cross: &'a CrossKv,
    /// This layer's local embedding `[B, T, E]`, added to the last `T` tokens.
    pub(crate) local: Option<&'a [f32]>,
    /// `[B·N]` rows whose FF output is dropped (true masking only).
    pub(crate) skip_rows: Option<&'a [bool]>,
}

impl Block {
    pub(crate) fn load(
        vb: &WeightLoader,
        path: &str,
        e: usize,
        heads: usize,
        ff_inner: usize,
        local_dim: usize,
        differential: bool,
    ) -> Result<Self> {
        let g = |name: &str| -> Result<Vec<f32>> {
            Ok(vb.get(&format!("{name}.gamma"), &[e])?.to_vec_f32()?)
        };
        let to_local_embed = if local_dim > 0 {
            Some(Mlp {
                l0: Linear::load(
                    vb,
                    "to_local_embed.0",
                    &format!("{path}.to_local_embed.0"),
                    e,
                    local_dim,
                    true,
                    false,
                )?,
                l2: Linear::load(
                    vb,
                    "to_local_embed.2",
                    &format!("{path}.to_local_embed.2"),
                    e,
                    e,
                    true,
                    false,
                )?,
            })
        } else {
            None
        };
        Ok(Block {
            pre_norm: g("pre_norm")?,
            self_attn: SelfAttention::load(
                &vb.pp("self_attn"),
                &format!("{path}.self_attn"),
                e,
                heads,
                differential,
            )?,
            cross_norm: g("cross_attend_norm")?,
            cross_attn: CrossAttention::load(
                &vb.pp("cross_attn"),
                &format!("{path}.cross_attn"),
                e,
                heads,
                differential,
            )?,
            ff_norm: g("ff_norm")?,
            ff0: Linear::load(
                vb,
                "ff.ff.0.proj",
                &format!("{path}.ff.ff.0.proj"),
                2 * ff_inner,
                e,
                true,
                false,
            )?,
            ff2: Linear::load(
                vb,
                "ff.ff.2",
                &format!("{path}.ff.ff.2"),
                e,
                ff_inner,
                true,
                false,
            )?,
            scale_shift_gate: vb.get("to_scale_shift_gate", &[6 * e])?.to_vec_f32()?,
            to_local_embed,
            e,
        })
    }

    /// The local embedding `λ = W₂·silu(W₁·ℓ + b₁) + b₂` of `ℓ [B, T, Dl]` → `[B, T, E]`.
    pub(crate) fn local_embed(&self, l: &Tensor) -> Result<Option<Tensor>> {
        self.to_local_embed
            .as_ref()
            .map(|m| m.forward(l))
            .transpose()
    }

    /// Update the residual stream `h [B, N, E]` in place.
    pub(crate) fn forward(
        &self,
        h: &mut [f32],
        b: usize,
        n: usize,
        inp: &BlockInputs<'_>,
    ) -> Result<()> {
        let e = self.e;
        // (scale, shift, gate) × (self, ff) from to_scale_shift_gate + ada, per batch row.
        let mut parts: [Vec<f32>; 6] = Default::default();
        for (c, part) in parts.iter_mut().enumerate() {
            part.reserve(b * e);
            for bi in 0..b {
                let a = &inp.ada[bi * 6 * e + c * e..bi * 6 * e + (c + 1) * e];
                let s = &self.scale_shift_gate[c * e..(c + 1) * e];
                part.extend(a.iter().zip(s).map(|(a, s)| s + a));
            }
        }
        let gate = |g: &[f32]| -> Vec<f32> {
            g.iter()
                .map(|&v| 1.0 / (1.0 + (-(1.0 - v)).exp()))
                .collect()
        };
        let (gate_self, gate_ff) = (gate(&parts[2]), gate(&parts[5]));
        let shape = [b, n, e];

        // Self-attention with adaLN.
        let m = Modulation {
            scale: &parts[0],
            shift: &parts[1],
        };
        let u = rms_norm_modulate(h, e, n, &self.pre_norm, BLOCK_NORM_EPS, Some(&m));
        let a = self
            .self_attn
            .forward(&Tensor::from_vec(u, &shape)?, inp.rope, inp.mask)?;
        gated_residual_add(h, &f32s(&a)?, e, n, Some(&gate_self), None);

        // Cross-attention, no modulation, no gate.
        let u = rms_norm_modulate(h, e, n, &self.cross_norm, BLOCK_NORM_EPS, None);
        let c = self
            .cross_attn
            .forward(&Tensor::from_vec(u, &shape)?, inp.cross)?;
        gated_residual_add(h, &f32s(&c)?, e, n, None, None);

        // Local conditioning on the last T tokens (memory tokens get nothing).
        if let Some(l) = inp.local {
            let t = l.len() / (b * e).max(1);
            let p = n - t;
            for bi in 0..b {
                let dst = &mut h[(bi * n + p) * e..(bi * n + n) * e];
                let src = &l[bi * t * e..(bi + 1) * t * e];
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
            }
        }

        // Feed-forward with adaLN.
        let m = Modulation {
            scale: &parts[3],
            shift: &parts[4],
        };
        let u = rms_norm_modulate(h, e, n, &self.ff_norm, BLOCK_NORM_EPS, Some(&m));
        let f = self.ff0.forward(&Tensor::from_vec(u, &shape)?)?;
        let f = self.ff2.forward(&ops::glu(&f, GluAct::Silu)?)?;
        gated_residual_add(h, &f32s(&f)?, e, n, Some(&gate_ff), inp.skip_rows);
        Ok(())
    }
}
