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
mod rows;

use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::nn::{Bias, Linear};
use aria_core::ops::{self, KeyMaskMode};
use aria_core::{DType, Device, Tensor, WeightLoader};

use crate::config::{DitConfig, GlobalCondType};
use crate::{DitError, Result};

use attention::{CrossKv, SelfMask};
use block::{Block, BlockDims, BlockInputs};
pub use features::{linspace_f32_fma, timestep_features};
pub(crate) use layers::on_device;
use layers::{move_to, param, Mlp, Rope};
use rows::UniqueRows;

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
///
/// Every weight matrix is an [`aria_core::nn::Linear`] named by its full checkpoint key;
/// [`Dit::module_path`] gives the path relative to the DiT root that LoRA files use (after
/// `model.`). [`Dit::to_device`] moves every weight and parameter to a device backend; the
/// forward pass is then tensor code on that device (no host round trip).
#[derive(Debug, Clone)]
pub struct Dit {
    cfg: DitConfig,
    /// The loader prefix the DiT was loaded from (`model.model` in a full checkpoint).
    root: String,
    device: Device,
    to_timestep_embed: Mlp,
    to_cond_embed: Mlp,
    to_global_embed: Mlp,
    preprocess_conv: Linear,
    postprocess_conv: Linear,
    project_in: Linear,
    project_out: Linear,
    /// `[R/2]` rotary inverse frequencies.
    inv_freq: Tensor,
    /// `[F]` frequencies of the timestep features, for noise levels held in a tensor.
    timestep_freqs: Tensor,
    /// `[1, M, E]` memory tokens (`None` without memory tokens).
    memory: Option<Tensor>,
    global_cond_embedder: Mlp,
    blocks: Vec<Block>,
    pub(crate) version: u64,
}

/// The noise levels of one evaluation: host values, or a `[B]` f32 tensor on the model's device.
#[derive(Clone, Copy)]
enum Sigmas<'a> {
    Host(&'a [f32]),
    Tensor(&'a Tensor),
}

fn input_err(what: &str, reason: String) -> DitError {
    DitError::Input {
        what: what.to_string(),
        reason,
    }
}

impl Dit {
    /// Load from `vb` positioned at the DiT root (`loader.pp("model.model")` for a full SA3
    /// checkpoint); key names are those of the official file. The model starts on the CPU.
    pub fn load(cfg: &DitConfig, vb: &WeightLoader) -> Result<Self> {
        match cfg.global_cond_type {
            GlobalCondType::AdaLn => {}
        }
        if cfg.patch_size != 1 {
            return Err(input_err(
                "DitConfig.patch_size",
                format!("{} is not supported (1 only)", cfg.patch_size),
            ));
        }
        let e = cfg.embed_dim;
        if cfg.num_heads == 0 || !e.is_multiple_of(cfg.num_heads) {
            return Err(input_err(
                "DitConfig.num_heads",
                format!("{} does not divide embed_dim {e}", cfg.num_heads),
            ));
        }
        let io = cfg.io_channels;
        let tr = vb.pp("transformer");
        let d = cfg.head_dim();
        let inv_freq = tr
            .get_any("rotary_pos_emb.inv_freq")?
            .to_dtype(DType::F32)?;
        let rot = 2 * inv_freq.elem_count();
        if inv_freq.rank() != 1 || rot > d || rot % 2 != 0 {
            return Err(input_err(
                "transformer.rotary_pos_emb.inv_freq",
                format!("shape {:?} does not fit head dim {d}", inv_freq.shape()),
            ));
        }
        let m = cfg.num_memory_tokens;
        let memory = if m > 0 {
            Some(param(&tr, "memory_tokens", &[m, e])?.reshape(&[1, m, e])?)
        } else {
            None
        };
        let dims = BlockDims {
            e,
            heads: cfg.num_heads,
            ff_inner: cfg.ff_kwargs.mult * e,
            local_dim: cfg.local_add_cond_dim,
            qk_norm: cfg.attn_kwargs.qk_norm,
            differential: cfg.attn_kwargs.differential,
        };
        let blocks = (0..cfg.depth)
            .map(|i| Block::load(&tr.pp(format!("layers.{i}")), &dims))
            .collect::<Result<Vec<_>>>()?;
        let mlp = |name: &str, vb: &WeightLoader, i: usize, o: usize, bias: Bias| {
            Mlp::load(&vb.pp(name), i, e, o, bias)
        };
        let dit = Dit {
            cfg: cfg.clone(),
            root: vb.prefix().to_string(),
            device: Device::Cpu,
            to_timestep_embed: mlp(
                "to_timestep_embed",
                vb,
                cfg.timestep_features_dim,
                e,
                Bias::Yes,
            )?,
            to_cond_embed: mlp("to_cond_embed", vb, cfg.cond_token_dim, e, Bias::No)?,
            to_global_embed: mlp("to_global_embed", vb, cfg.global_cond_dim, e, Bias::No)?,
            preprocess_conv: Linear::load_conv1x1(&vb.pp("preprocess_conv"), io, io, Bias::No)?,
            postprocess_conv: Linear::load_conv1x1(&vb.pp("postprocess_conv"), io, io, Bias::No)?,
            project_in: Linear::load(&tr.pp("project_in"), io, e, Bias::No)?,
            project_out: Linear::load(&tr.pp("project_out"), e, io, Bias::No)?,
            inv_freq,
            timestep_freqs: Tensor::from_vec(
                crate::conditioner::expo_frequencies(
                    cfg.timestep_features_dim / 2,
                    crate::conditioner::EXPO_MIN_FREQ,
                    crate::conditioner::EXPO_MAX_FREQ,
                ),
                &[cfg.timestep_features_dim / 2],
            )?,
            memory,
            global_cond_embedder: mlp("global_cond_embedder", &tr, e, 6 * e, Bias::Yes)?,
            blocks,
            version: 0,
        };
        Ok(dit)
    }

    /// Keep the weights of the layers every sampling step runs packed for the CPU matrix
    /// product after their first use (`true`), or pack them in every call (`false`, the
    /// default); see [`Linear::set_prepack`]. Kept panels are a full f32 copy of the step
    /// weights (~1.5 GB at small-music shapes) for a few per cent of speed, so they are off
    /// unless asked for. The layers only [`Dit::prepare`] uses are never kept packed. Results
    /// are bit-identical either way.
    pub fn set_prepack(&mut self, on: bool) {
        let prep: std::collections::HashSet<String> = self
            .prepare_linears()
            .iter()
            .map(|l| l.name().to_string())
            .collect();
        for l in self.linears_mut() {
            l.set_prepack(on && !prep.contains(l.name()));
        }
    }

    /// The configuration the model was built with.
    pub fn config(&self) -> &DitConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Move every weight and parameter to `device` (adapters stay applied). Contexts prepared
    /// before are refused afterwards ([`Dit::prepare`] again on inputs on that device).
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        for l in self.linears_mut() {
            l.to_device(device)?;
        }
        move_to(&mut self.inv_freq, device)?;
        move_to(&mut self.timestep_freqs, device)?;
        if let Some(m) = &mut self.memory {
            move_to(m, device)?;
        }
        for b in &mut self.blocks {
            b.move_to_device(device)?;
        }
        self.device = device.clone();
        self.mark_weights_changed();
        Ok(())
    }

    /// The module path of one of this model's layers relative to the DiT root (e.g.
    /// `transformer.layers.0.self_attn.to_qkv`; LoRA files name it `model.<path>`).
    pub fn module_path<'a>(&self, layer: &'a Linear) -> &'a str {
        let name = layer.name();
        if self.root.is_empty() {
            return name;
        }
        name.strip_prefix(self.root.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .unwrap_or(name)
    }

    /// The layer at module path `path` (see [`Dit::module_path`]).
    pub fn linear(&self, path: &str) -> Option<&Linear> {
        self.linears()
            .into_iter()
            .find(|l| self.module_path(l) == path)
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

    /// Mutable access to every linear layer (see [`Dit::linears`]). Changing weights or
    /// adapters invalidates contexts prepared before: call [`Dit::mark_weights_changed`]
    /// afterwards.
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

    /// The layers only [`Dit::prepare`] uses: the context and global-condition embedders,
    /// every block's cross-attention key/value projection and local embedding.
    fn prepare_linears(&self) -> Vec<&Linear> {
        let mut v = vec![
            &self.to_cond_embed.l0,
            &self.to_cond_embed.l2,
            &self.to_global_embed.l0,
            &self.to_global_embed.l2,
        ];
        for b in &self.blocks {
            v.push(&b.cross_attn.to_kv);
            if let Some(m) = &b.to_local_embed {
                v.extend([&m.l0, &m.l2]);
            }
        }
        v
    }

    /// Drop the resident pages of the memory-mapped weights of the layers only
    /// [`Dit::prepare`] uses (cross-attention K/V projections, context, global and local
    /// embedders; see [`Linear::release_pages`]), once a request's context is prepared: the
    /// sampling steps never touch them, and the next `prepare` reads them from the file again.
    /// Returns the bytes released.
    pub fn release_prepare_pages(&self) -> Result<usize> {
        let mut n = 0;
        for l in self.prepare_linears() {
            n += l.release_pages()?;
        }
        Ok(n)
    }

    /// Drop the resident pages of every memory-mapped weight of the model (dense weights of a
    /// checkpoint, packed weights of a pre-quantized file), e.g. between the sampling steps
    /// and the decoding of a request; the next evaluation reads them from the file again.
    /// Owned weights (packed at load, converted, adapted) are untouched. Returns the bytes
    /// released.
    pub fn release_pages(&self) -> Result<usize> {
        let mut n = 0;
        for l in self.linears() {
            n += l.release_pages()?;
        }
        Ok(n)
    }

    /// Record that weights changed (contexts prepared earlier are then refused).
    pub fn mark_weights_changed(&mut self) {
        self.version += 1;
    }

    /// Let the attention products of every block round to bf16
    /// ([`AttnOpts::bf16_products`](aria_core::ops::AttnOpts::bf16_products)): a permission the
    /// backend takes where it has a faster unit for them (the CPU: the AMX tile unit) and
    /// ignores elsewhere. Off by default (the exact f32 attention).
    pub fn set_bf16_attention(&mut self, on: bool) {
        for b in &mut self.blocks {
            b.self_attn.bf16_products = on;
            b.cross_attn.bf16_products = on;
        }
    }

    /// Whether the attention products may round to bf16 ([`Self::set_bf16_attention`]).
    pub fn bf16_attention(&self) -> bool {
        self.blocks.iter().any(|b| b.self_attn.bf16_products)
    }

    /// Compute the conditioning-dependent state once: the text-conditioning hook
    /// ([`HookSite::TextConditioning`]), the projected context and every layer's cross-attention
    /// keys/values, the projected global condition and every layer's local embedding. The
    /// inputs must live on the model's device.
    ///
    /// On the CPU, context rows and local-condition rows that are equal bit for bit (the learned
    /// padding after a prompt's last token, text-to-audio's all-zero local condition) are
    /// projected once and copied out: the same bits as projecting each row.
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
        self.prepare_rows(cond, hook, true)
    }

    /// [`Dit::prepare`], projecting rows that are equal bit for bit once (`share_rows`) or
    /// each on its own (the tests' reference: both give the same bits).
    fn prepare_rows(
        &self,
        cond: &DitConditioning<'_>,
        hook: Option<&dyn ActivationHook>,
        share_rows: bool,
    ) -> Result<DitContext> {
        let unique = |x: &Tensor| -> Result<Option<UniqueRows>> {
            if share_rows {
                Ok(aria_core::ops::distinct_rows(x)?)
            } else {
                Ok(None)
            }
        };
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
        // Context rows equal bit for bit (the learned padding after the prompt's last token)
        // are projected once: the same bits as projecting each (see `rows`).
        let uc = unique(&c)?;
        let ctx_tokens = self
            .to_cond_embed
            .forward(uc.as_ref().map_or(&c, UniqueRows::rows))?;
        let cross = self
            .blocks
            .iter()
            .map(|bl| bl.cross_attn.prepare(&ctx_tokens, uc.as_ref()))
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
                // [B, Dl, T] → [B, T, Dl]
                let lt = l.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?;
                // Equal rows once (text-to-audio's local condition is all zeros).
                let ul = unique(&lt)?;
                let rows = ul.as_ref().map_or(&lt, UniqueRows::rows);
                let per_layer = self
                    .blocks
                    .iter()
                    .map(|bl| {
                        let y = bl.local_embed(rows)?.ok_or_else(|| {
                            input_err("local_add_cond", "a layer has no to_local_embed".into())
                        })?;
                        match &ul {
                            Some(u) => Ok(u.expand(&y)?),
                            None => Ok(y),
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some((ls[2], per_layer))
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
    /// `padding_mask [B, T]` (non-zero = valid). Inputs live on the model's device; the output
    /// does too.
    pub fn forward_ctx(
        &self,
        x: &Tensor,
        t: &[f32],
        ctx: &DitContext,
        padding_mask: Option<&Tensor>,
        opts: &ForwardOptions<'_>,
    ) -> Result<DitOutput> {
        aria_core::threads::install(|| {
            let key_mask = self.key_mask_of(x, padding_mask)?;
            self.forward_inner(x, Sigmas::Host(t), ctx, key_mask.as_ref(), opts)
        })
    }

    /// [`Dit::forward_ctx`] with the noise levels in a `[B]` f32 tensor on the model's device
    /// and the key mask already extended ([`Dit::key_mask_of`]): no value is read on the host
    /// and nothing is uploaded, so the evaluation can be recorded and replayed
    /// ([`aria_core::Backend::record`]). Hooks see `sigma: None`.
    pub(crate) fn forward_recordable(
        &self,
        x: &Tensor,
        t: &Tensor,
        ctx: &DitContext,
        key_mask: Option<&Tensor>,
        opts: &ForwardOptions<'_>,
    ) -> Result<DitOutput> {
        aria_core::threads::install(|| {
            self.forward_inner(x, Sigmas::Tensor(t), ctx, key_mask, opts)
        })
    }

    /// The self-attention key mask `[B, M + T]` for `x [B, C, T]` and `padding_mask [B, T]`
    /// (memory tokens valid), on the model's device; `None` without a padding mask.
    pub(crate) fn key_mask_of(
        &self,
        x: &Tensor,
        padding_mask: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        let (Some(pm), [b, _, tl]) = (padding_mask, x.shape()) else {
            return Ok(None);
        };
        let (b, tl, m) = (*b, *tl, self.cfg.num_memory_tokens);
        if pm.shape() != [b, tl] {
            return Err(input_err(
                "padding_mask",
                format!("shape {:?}, expected [{b}, {tl}]", pm.shape()),
            ));
        }
        let pm = pm.to_dtype(DType::F32)?;
        Ok(Some(if m > 0 {
            let ones = on_device(&Tensor::full(&[b, m], 1.0), &self.device)?;
            Tensor::cat(&[&ones, &pm], 1)?
        } else {
            pm
        }))
    }

    fn forward_inner(
        &self,
        x: &Tensor,
        t: Sigmas<'_>,
        ctx: &DitContext,
        key_mask: Option<&Tensor>,
        opts: &ForwardOptions<'_>,
    ) -> Result<DitOutput> {
        let (io, m) = (self.cfg.io_channels, self.cfg.num_memory_tokens);
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
                "prepared before the weights changed (LoRA, device); prepare it again".into(),
            ));
        }
        let t_len = match t {
            Sigmas::Host(v) => v.len(),
            Sigmas::Tensor(v) if v.rank() == 1 => v.elem_count(),
            Sigmas::Tensor(v) => {
                return Err(input_err(
                    "t",
                    format!("shape {:?}, expected [{b}]", v.shape()),
                ))
            }
        };
        if ctx.batch != b || t_len != b {
            return Err(input_err(
                "x / t",
                format!(
                    "batch {b}, t has {t_len} values, context prepared for {}",
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

        // adaLN vector from global condition + timestep embedding (host noise levels: the
        // features are computed on the host and copied to the model's device; a tensor of
        // them: by the same op where it lives).
        let tau = match t {
            Sigmas::Host(v) => on_device(
                &features::timestep_features(v, self.cfg.timestep_features_dim)?,
                &self.device,
            )?,
            Sigmas::Tensor(v) => {
                let dim = self.cfg.timestep_features_dim;
                if dim == 0 || !dim.is_multiple_of(2) {
                    return Err(input_err(
                        "timestep_features_dim",
                        format!("{dim} must be even and non-zero"),
                    ));
                }
                ops::fourier_features(v, &self.timestep_freqs, ops::FourierLayout::CosSin)?
            }
        };
        let temb = self.to_timestep_embed.forward(&tau)?;
        let gsum = ops::add(&ctx.global, &temb)?;
        let ada = self.global_cond_embedder.forward(&gsum)?;

        // Pre-conv residual, project in, prepend memory tokens.
        let xt = x.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?; // [B, T, C]
        let pre = self.preprocess_conv.forward(&xt)?;
        let x1 = ops::add(&pre, &xt)?;
        let h0 = self.project_in.forward(&x1)?;
        let mut h = match &self.memory {
            Some(mem) => {
                let mems = vec![mem; b];
                let mem_b = if b == 1 {
                    mem.clone()
                } else {
                    Tensor::cat(&mems, 0)?
                };
                Tensor::cat(&[&mem_b, &h0], 1)?
            }
            None => h0,
        };

        let table = ops::rope_table(&self.inv_freq, 0, n)?;
        let rope = Rope {
            cos: table.get(0)?,
            sin: table.get(1)?,
        };

        // The extended padding mask `[B, M + T]` (memory tokens valid), from `key_mask_of`.
        if let Some(km) = key_mask {
            if km.shape() != [b, n] {
                return Err(input_err(
                    "key mask",
                    format!("shape {:?}, expected [{b}, {n}]", km.shape()),
                ));
            }
        }
        // True masking: padded rows get zero self-attention and feed-forward outputs.
        let invalid = key_mask.filter(|_| opts.mask_mode == KeyMaskMode::Exclude);
        let self_mask = key_mask.map(|km| SelfMask {
            key_mask: km,
            mode: opts.mask_mode,
            zero_rows: invalid,
        });

        let mut hidden = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let inputs = BlockInputs {
                ada: &ada,
                rope: &rope,
                mask: self_mask.as_ref(),
                cross: &ctx.cross[i],
                local: ctx.local.as_ref().map(|(_, l)| &l[i]),
                skip_rows: invalid,
            };
            h = block.forward(&h, &inputs)?;
            if let Some(hk) = opts.hook.filter(|hk| hk.wants(HookSite::Residual(i))) {
                let hctx = HookContext {
                    site: HookSite::Residual(i),
                    step: opts.step,
                    sigma: match t {
                        Sigmas::Host(v) => Some(v),
                        Sigmas::Tensor(_) => None,
                    },
                    prefix_tokens: m,
                    token_mask: key_mask,
                    guidance_rows: opts.guidance_rows,
                };
                h = run_hook(Some(hk), &hctx, h)?;
            }
            if opts.collect_hidden {
                hidden.push(h.clone());
            }
        }

        // Drop memory tokens, project out, post-conv residual, back to [B, C, T].
        let y = self.project_out.forward(&h.narrow(1, m, tl)?)?;
        let post = self.postprocess_conv.forward(&y)?;
        let out = ops::add(&post, &y)?;
        let v = out.transpose(1, 2)?.contiguous()?;
        Ok(DitOutput { v, hidden })
    }

    /// One evaluation from raw inputs (prepares the context, then runs [`Dit::forward_ctx`] with
    /// default options): `x [B, C, T]`, `t [B]`, `cross_attn_cond [B, Nc, Dc]`, `global_cond
    /// [B, Dg]`, `local_add_cond [B, Dl, T]`, `padding_mask [B, T]` → `v [B, C, T]`. `t` is read
    /// on the host (a device `t` is downloaded).
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
