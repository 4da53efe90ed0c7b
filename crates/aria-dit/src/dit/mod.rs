//! The SA3 diffusion transformer (`DiffusionTransformer` with a `ContinuousTransformer`), for both
//! structures: standard attention (small-music, small-sfx) and differential attention (medium).
//!
//! ```text
//! x [B,C,T] ─► x + P_pre⋆x ─► project_in ─► [memory tokens ; h] ─► L × Block ─► drop memory
//!           ─► project_out ─► y + P_post⋆y ─► v [B,C,T]
//! t ─► expo features ─► to_timestep_embed ─┐
//! global_cond ─► to_global_embed ──────────┴► + ─► global_cond_embedder ─► adaLN [B,6E]
//! cross_attn_cond ─► to_cond_embed ─► per-layer cross K/V (once per generation)
//! local_add_cond ─► per-layer to_local_embed (once per generation)
//! ```
//!
//! Everything that depends only on the conditioning (cross-attention keys/values, the projected
//! global condition, the local embeddings) is computed once by [`Dit::prepare`] into a
//! [`DitContext`] and reused by every step ([`Dit::forward_ctx`]); [`Dit::forward`] does both for
//! a single evaluation.
//!
//! Padding masks follow [`KeyMaskMode`]: [`KeyMaskMode::ZeroValues`] is the official CPU path
//! (padded values zeroed, padded keys still in the softmax denominator, padded tokens still run
//! everything); [`KeyMaskMode::Exclude`] is the official CUDA (flash-attn varlen) path: padded keys
//! are excluded, and padded query rows get zero self-attention and feed-forward outputs.

mod attention;
mod block;
mod features;
mod layers;

use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::ops::{self, KeyMaskMode};
use aria_core::{Tensor, WeightLoader};

use crate::config::DitConfig;
use crate::{DitError, Result};

use attention::{CrossKv, SelfMask};
use block::{Block, BlockInputs};
pub use features::{linspace_f32_fma, timestep_features};
pub use layers::Linear;
use layers::{f32s, transpose_last2, Mlp, Rope};

/// Conditioning inputs of the DiT (as built by the conditioners, see the spec §4.2).
#[derive(Debug, Clone, Copy)]
pub struct DitConditioning<'a> {
    /// Cross-attention tokens `[B, Nc, cond_token_dim]`.
    pub cross_attn_cond: &'a Tensor,
    /// Global condition `[B, global_cond_dim]`.
    pub global_cond: &'a Tensor,
    /// Local-add condition `[B, local_add_cond_dim, T]` (mask channel first); `None` skips the
    /// per-layer local MLP (the official code does the same when the input is absent).
    pub local_add_cond: Option<&'a Tensor>,
}

/// The conditioning-dependent state of a generation: computed once by [`Dit::prepare`], reused
/// by every [`Dit::forward_ctx`] call.
#[derive(Debug, Clone)]
pub struct DitContext {
    batch: usize,
    version: u64,
    global: Tensor,
    cross: Vec<CrossKv>,
    local: Option<(usize, Vec<Tensor>)>,
}

impl DitContext {
    /// Batch size the context was prepared for.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Latent length `T` of the local condition, if any.
    pub fn local_len(&self) -> Option<usize> {
        self.local.as_ref().map(|(t, _)| *t)
    }
}

/// Per-call options of [`Dit::forward_ctx`].
#[derive(Clone, Copy, Default)]
pub struct ForwardOptions<'a> {
    /// How the padding mask acts (default: the official CPU semantics).
    pub mask_mode: KeyMaskMode,
    /// Activation hook called after every block ([`HookSite::Residual`]).
    pub hook: Option<&'a dyn ActivationHook>,
    /// Sampler step index, passed to the hook.
    pub step: Option<usize>,
    /// `Some(b)` when the batch is `[cond (b); uncond (b)]`, passed to the hook.
    pub guidance_rows: Option<usize>,
    /// Return the residual stream after every block (`[B, M+T, E]`, memory tokens first).
    pub collect_hidden: bool,
}

/// Result of [`Dit::forward_ctx`].
#[derive(Debug, Clone)]
pub struct DitOutput {
    /// Velocity estimate `[B, C, T]`.
    pub v: Tensor,
    /// Hidden state after each block when requested (empty otherwise).
    pub hidden: Vec<Tensor>,
}

/// The diffusion transformer (`model.model.*` of an SA3 checkpoint).
#[derive(Debug, Clone)]
pub struct Dit {
    cfg: DitConfig,
    to_timestep_embed: Mlp,
    to_cond_embed: Mlp,
    to_global_embed: Mlp,
    preprocess_conv: Linear,
    postprocess_conv: Linear,
    project_in: Linear,
    project_out: Linear,
    inv_freq: Tensor,
    memory: Vec<f32>,
    global_cond_embedder: Mlp,
    blocks: Vec<Block>,
    pub(crate) version: u64,
}

fn input_err(what: &str, reason: String) -> DitError {
    DitError::Input {
        what: what.to_string(),
        reason,
    }
}

impl Dit {
    /// Load from `vb` positioned at the DiT root (`loader.pp("model.model")` for a full SA3
    /// checkpoint); key names are those of the official file.
    pub fn load(cfg: &DitConfig, vb: &WeightLoader) -> Result<Self> {
        if cfg.global_cond_type != "adaLN" {
            return Err(input_err(
                "DitConfig.global_cond_type",
                format!("`{}` is not supported (adaLN only)", cfg.global_cond_type),
            ));
        }
        if cfg.patch_size != 1 {
            return Err(input_err(
                "DitConfig.patch_size",
                format!("{} is not supported (1 only)", cfg.patch_size),
            ));
        }
        let e = cfg.embed_dim;
        if cfg.num_heads == 0 || e % cfg.num_heads != 0 {
            return Err(input_err(
                "DitConfig.num_heads",
                format!("{} does not divide embed_dim {e}", cfg.num_heads),
            ));
        }
        if let Some(q) = &cfg.attn_kwargs.qk_norm {
            if q != "rms" {
                return Err(input_err(
                    "DitConfig.attn_kwargs.qk_norm",
                    format!("`{q}` is not supported (rms only)"),
                ));
            }
        }
        let io = cfg.io_channels;
        let tr = vb.pp("transformer");
        let conv = |name: &str| Linear::load(vb, name, name, io, io, false, true);
        let lin = |vb: &WeightLoader, name: &str, path: &str, o: usize, i: usize| {
            Linear::load(vb, name, path, o, i, false, false)
        };
        let d = cfg.head_dim();
        let inv_freq = tr.get_any("rotary_pos_emb.inv_freq")?;
        let rot = 2 * inv_freq.elem_count();
        if inv_freq.rank() != 1 || rot > d || rot % 2 != 0 {
            return Err(input_err(
                "transformer.rotary_pos_emb.inv_freq",
                format!("shape {:?} does not fit head dim {d}", inv_freq.shape()),
            ));
        }
        let m = cfg.num_memory_tokens;
        let memory = if m > 0 {
            tr.get("memory_tokens", &[m, e])?.to_vec_f32()?
        } else {
            Vec::new()
        };
        let ff_inner = cfg.ff_kwargs.mult * e;
        let blocks = (0..cfg.depth)
            .map(|i| {
                let path = format!("transformer.layers.{i}");
                Block::load(
                    &tr.pp(format!("layers.{i}")),
                    &path,
                    e,
                    cfg.num_heads,
                    ff_inner,
                    cfg.local_add_cond_dim,
                    cfg.attn_kwargs.differential,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let global_cond_embedder = Mlp::load(
            &tr,
            "global_cond_embedder",
            "transformer.global_cond_embedder",
            e,
            e,
            6 * e,
            true,
        )?;
        Ok(Dit {
            cfg: cfg.clone(),
            to_timestep_embed: Mlp::load(
                vb,
                "to_timestep_embed",
                "to_timestep_embed",
                cfg.timestep_features_dim,
                e,
                e,
                true,
            )?,
            to_cond_embed: Mlp::load(
                vb,
                "to_cond_embed",
                "to_cond_embed",
                cfg.cond_token_dim,
                e,
                e,
                false,
            )?,
            to_global_embed: Mlp::load(
                vb,
                "to_global_embed",
                "to_global_embed",
                cfg.global_cond_dim,
                e,
                e,
                false,
            )?,
            preprocess_conv: conv("preprocess_conv")?,
            postprocess_conv: conv("postprocess_conv")?,
            project_in: lin(&tr, "project_in", "transformer.project_in", e, io)?,
            project_out: lin(&tr, "project_out", "transformer.project_out", io, e)?,
            inv_freq,
            memory,
            global_cond_embedder,
            blocks,
            version: 0,
        })
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &DitConfig {
        &self.cfg
    }

    /// Every linear / kernel-1 convolution layer, in checkpoint order of appearance.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut v: Vec<&Linear> = vec![
            &self.to_timestep_embed.l0,
            &self.to_timestep_embed.l2,
            &self.to_cond_embed.l0,
            &self.to_cond_embed.l2,
            &self.to_global_embed.l0,
            &self.to_global_embed.l2,
            &self.preprocess_conv,
            &self.postprocess_conv,
            &self.project_in,
            &self.project_out,
            &self.global_cond_embedder.l0,
            &self.global_cond_embedder.l2,
        ];
        for b in &self.blocks {
            v.extend([
                &b.self_attn.to_qkv,
                &b.self_attn.to_out,
                &b.cross_attn.to_q,
                &b.cross_attn.to_kv,
                &b.cross_attn.to_out,
                &b.ff0,
                &b.ff2,
            ]);
            if let Some(m) = &b.to_local_embed {
                v.extend([&m.l0, &m.l2]);
            }
        }
        v
    }

    /// Mutable access to every linear layer (see [`Dit::linears`]). Changing weights invalidates
    /// contexts prepared before: call [`Dit::mark_weights_changed`] afterwards.
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v: Vec<&mut Linear> = vec![
            &mut self.to_timestep_embed.l0,
            &mut self.to_timestep_embed.l2,
            &mut self.to_cond_embed.l0,
            &mut self.to_cond_embed.l2,
            &mut self.to_global_embed.l0,
            &mut self.to_global_embed.l2,
            &mut self.preprocess_conv,
            &mut self.postprocess_conv,
            &mut self.project_in,
            &mut self.project_out,
            &mut self.global_cond_embedder.l0,
            &mut self.global_cond_embedder.l2,
        ];
        for b in &mut self.blocks {
            v.push(&mut b.self_attn.to_qkv);
            v.push(&mut b.self_attn.to_out);
            v.push(&mut b.cross_attn.to_q);
            v.push(&mut b.cross_attn.to_kv);
            v.push(&mut b.cross_attn.to_out);
            v.push(&mut b.ff0);
            v.push(&mut b.ff2);
            if let Some(m) = &mut b.to_local_embed {
                v.push(&mut m.l0);
                v.push(&mut m.l2);
            }
        }
        v
    }

    /// Record that weights changed (contexts prepared earlier are then refused).
    pub fn mark_weights_changed(&mut self) {
        self.version += 1;
    }

    /// Compute the conditioning-dependent state once: the text-conditioning hook
    /// ([`HookSite::TextConditioning`]), the projected context and every layer's cross-attention
    /// keys/values, the projected global condition and every layer's local embedding.
    pub fn prepare(
        &self,
        cond: &DitConditioning<'_>,
        hook: Option<&dyn ActivationHook>,
    ) -> Result<DitContext> {
        aria_core::threads::install(|| self.prepare_inner(cond, hook))
    }

    fn prepare_inner(
        &self,
        cond: &DitConditioning<'_>,
        hook: Option<&dyn ActivationHook>,
    ) -> Result<DitContext> {
        let c = cond.cross_attn_cond;
        let g = cond.global_cond;
        let cs = c.shape();
        if cs.len() != 3 || cs[2] != self.cfg.cond_token_dim {
            return Err(input_err(
                "cross_attn_cond",
                format!("shape {cs:?}, expected [B, N, {}]", self.cfg.cond_token_dim),
            ));
        }
        let b = cs[0];
        if g.shape() != [b, self.cfg.global_cond_dim] {
            return Err(input_err(
                "global_cond",
                format!(
                    "shape {:?}, expected [{b}, {}]",
                    g.shape(),
                    self.cfg.global_cond_dim
                ),
            ));
        }
        let c = run_hook(
            hook,
            &HookContext::new(HookSite::TextConditioning),
            c.clone(),
        )?;
        let ctx_tokens = self.to_cond_embed.forward(&c)?;
        let cross = self
            .blocks
            .iter()
            .map(|bl| bl.cross_attn.prepare(&ctx_tokens))
            .collect::<Result<Vec<_>>>()?;
        let global = self.to_global_embed.forward(g)?;
        let local = match cond.local_add_cond {
            Some(l) if self.cfg.local_add_cond_dim > 0 => {
                let ls = l.shape();
                if ls.len() != 3 || ls[0] != b || ls[1] != self.cfg.local_add_cond_dim {
                    return Err(input_err(
                        "local_add_cond",
                        format!(
                            "shape {ls:?}, expected [{b}, {}, T]",
                            self.cfg.local_add_cond_dim
                        ),
                    ));
                }
                let t = ls[2];
                let lt = Tensor::from_vec(transpose_last2(&f32s(l)?, b, ls[1], t), &[b, t, ls[1]])?;
                let per_layer = self
                    .blocks
                    .iter()
                    .map(|bl| {
                        bl.local_embed(&lt)?.ok_or_else(|| {
                            input_err("local_add_cond", "a layer has no to_local_embed".into())
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some((t, per_layer))
            }
            _ => None,
        };
        Ok(DitContext {
            batch: b,
            version: self.version,
            global,
            cross,
            local,
        })
    }

    /// One evaluation with a prepared context: `x [B, C, T]`, `t` (one value per batch row),
    /// `padding_mask [B, T]` (non-zero = valid).
    pub fn forward_ctx(
        &self,
        x: &Tensor,
        t: &[f32],
        ctx: &DitContext,
        padding_mask: Option<&Tensor>,
        opts: &ForwardOptions<'_>,
    ) -> Result<DitOutput> {
        aria_core::threads::install(|| self.forward_inner(x, t, ctx, padding_mask, opts))
    }

    fn forward_inner(
        &self,
        x: &Tensor,
        t: &[f32],
        ctx: &DitContext,
        padding_mask: Option<&Tensor>,
        opts: &ForwardOptions<'_>,
    ) -> Result<DitOutput> {
        let (io, e, m) = (
            self.cfg.io_channels,
            self.cfg.embed_dim,
            self.cfg.num_memory_tokens,
        );
        let xs = x.shape();
        if xs.len() != 3 || xs[1] != io {
            return Err(input_err(
                "x",
                format!("shape {xs:?}, expected [B, {io}, T]"),
            ));
        }
        let (b, tl) = (xs[0], xs[2]);
        if ctx.version != self.version {
            return Err(input_err(
                "DitContext",
                "prepared before the weights changed (LoRA); prepare it again".into(),
            ));
        }
        if ctx.batch != b || t.len() != b {
            return Err(input_err(
                "x / t",
                format!(
                    "batch {b}, t has {} values, context prepared for {}",
                    t.len(),
                    ctx.batch
                ),
            ));
        }
        if let Some(lt) = ctx.local_len() {
            if lt != tl {
                return Err(input_err(
                    "local_add_cond",
                    format!("length {lt} differs from x's {tl}"),
                ));
            }
        }
        let n = m + tl;

        // adaLN vector from global condition + timestep embedding.
        let tau = features::timestep_features(t, self.cfg.timestep_features_dim)?;
        let temb = self.to_timestep_embed.forward(&tau)?;
        let gsum = ops::add(&ctx.global, &temb)?;
        let ada = self.global_cond_embedder.forward(&gsum)?;
        let ada = f32s(&ada)?;

        // Pre-conv residual, project in, prepend memory tokens.
        let xt = Tensor::from_vec(transpose_last2(&f32s(x)?, b, io, tl), &[b, tl, io])?;
        let pre = self.preprocess_conv.forward(&xt)?;
        let x1 = ops::add(&pre, &xt)?;
        let h0 = self.project_in.forward(&x1)?;
        let h0 = f32s(&h0)?;
        let mut h = vec![0f32; b * n * e];
        for bi in 0..b {
            let dst = &mut h[bi * n * e..(bi + 1) * n * e];
            dst[..m * e].copy_from_slice(&self.memory);
            dst[m * e..].copy_from_slice(&h0[bi * tl * e..(bi + 1) * tl * e]);
        }

        let (cos, sin) = ops::rope_tables(&self.inv_freq, n)?;
        let rope = Rope {
            cos: cos.to_vec_f32()?,
            sin: sin.to_vec_f32()?,
            r: cos.shape()[1],
        };

        // Extended padding mask (memory tokens valid).
        let ext = match padding_mask {
            Some(pm) => {
                if pm.shape() != [b, tl] {
                    return Err(input_err(
                        "padding_mask",
                        format!("shape {:?}, expected [{b}, {tl}]", pm.shape()),
                    ));
                }
                let pv = pm.to_vec_f32()?;
                let mut valid = vec![true; b * n];
                for bi in 0..b {
                    for i in 0..tl {
                        valid[bi * n + m + i] = pv[bi * tl + i] != 0.0;
                    }
                }
                Some(valid)
            }
            None => None,
        };
        let key_mask = ext
            .as_ref()
            .map(|v| {
                Tensor::from_vec(
                    v.iter().map(|&x| if x { 1f32 } else { 0.0 }).collect(),
                    &[b, n],
                )
            })
            .transpose()?;
        let invalid: Option<Vec<bool>> = match (&ext, opts.mask_mode) {
            (Some(v), KeyMaskMode::Exclude) => Some(v.iter().map(|x| !x).collect()),
            _ => None,
        };
        let self_mask = key_mask.as_ref().map(|km| SelfMask {
            key_mask: km,
            mode: opts.mask_mode,
            zero_rows: invalid.as_deref(),
        });

        let mut hidden = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let inputs = BlockInputs {
                ada: &ada,
                rope: &rope,
                mask: self_mask.as_ref(),
                cross: &ctx.cross[i],
                local: match &ctx.local {
                    Some((_, l)) => Some(l[i].as_slice::<f32>()?),
                    None => None,
                },
                skip_rows: invalid.as_deref(),
            };
            block.forward(&mut h, b, n, &inputs)?;
            if let Some(hk) = opts.hook.filter(|hk| hk.wants(HookSite::Residual(i))) {
                let hctx = HookContext {
                    site: HookSite::Residual(i),
                    step: opts.step,
                    sigma: Some(t),
                    prefix_tokens: m,
                    token_mask: key_mask.as_ref(),
                    guidance_rows: opts.guidance_rows,
                };
                let ht = run_hook(
                    Some(hk),
                    &hctx,
                    Tensor::from_vec(std::mem::take(&mut h), &[b, n, e])?,
                )?;
                h = ht.to_vec_f32()?;
            }
            if opts.collect_hidden {
                hidden.push(Tensor::from_vec(h.clone(), &[b, n, e])?);
            }
        }

        // Drop memory tokens, project out, post-conv residual, back to [B, C, T].
        let mut ht = vec![0f32; b * tl * e];
        for bi in 0..b {
            ht[bi * tl * e..(bi + 1) * tl * e]
                .copy_from_slice(&h[(bi * n + m) * e..(bi + 1) * n * e]);
        }
        let y = self
            .project_out
            .forward(&Tensor::from_vec(ht, &[b, tl, e])?)?;
        let post = self.postprocess_conv.forward(&y)?;
        let out = ops::add(&post, &y)?;
        let v = Tensor::from_vec(transpose_last2(&f32s(&out)?, b, tl, io), &[b, io, tl])?;
        Ok(DitOutput { v, hidden })
    }

    /// One evaluation from raw inputs (prepares the context, then runs [`Dit::forward_ctx`] with
    /// default options): `x [B, C, T]`, `t [B]`, `cross_attn_cond [B, Nc, Dc]`, `global_cond
    /// [B, Dg]`, `local_add_cond [B, Dl, T]`, `padding_mask [B, T]` → `v [B, C, T]`.
    pub fn forward(
        &self,
        x: &Tensor,
        t: &Tensor,
        cross_attn_cond: &Tensor,
        global_cond: &Tensor,
        local_add_cond: Option<&Tensor>,
        padding_mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let cond = DitConditioning {
            cross_attn_cond,
            global_cond,
            local_add_cond,
        };
        let ctx = self.prepare(&cond, None)?;
        Ok(self
            .forward_ctx(
                x,
                &t.to_vec_f32()?,
                &ctx,
                padding_mask,
                &ForwardOptions::default(),
            )?
            .v)
    }

    /// [`Dit::forward`] that also returns the hidden state after every block (`[B, M+T, E]`).
    pub fn forward_with_hidden(
        &self,
        x: &Tensor,
        t: &Tensor,
        cross_attn_cond: &Tensor,
        global_cond: &Tensor,
        local_add_cond: Option<&Tensor>,
        padding_mask: Option<&Tensor>,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let cond = DitConditioning {
            cross_attn_cond,
            global_cond,
            local_add_cond,
        };
        let ctx = self.prepare(&cond, None)?;
        let opts = ForwardOptions {
            collect_hidden: true,
            ..Default::default()
        };
        let out = self.forward_ctx(x, &t.to_vec_f32()?, &ctx, padding_mask, &opts)?;
        Ok((out.v, out.hidden))
    }
}
