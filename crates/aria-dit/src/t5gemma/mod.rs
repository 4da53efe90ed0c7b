//! The T5Gemma encoder (b-b-ul2 for SA3): a bidirectional Gemma-2 style transformer whose
//! `last_hidden_state` is the prompt embedding.
//!
//! ```text
//! ids ─► Emb[ids]·√H ─► L × { h += RMS₁(Attn(RMS₀(h)));  h += RMS₃(MLP(RMS₂(h))) } ─► RMS_final
//! RMS(x; w) = x·rsqrt(mean(x²) + eps)·(1 + w)     MLP(u) = down(gelu_tanh(gate(u)) ⊙ up(u))
//! Attn: q, k, v projections, RoPE (rotate-half over the full head), scores·query_pre_attn_scalar^-½,
//!       optional logit soft-cap, keys with mask 0 excluded, softmax, ·v, o projection
//! ```
//!
//! All dimensions are read from the folder's `config.json` (`encoder` sub-config, typed once
//! by [`T5GemmaConfig`]). Every weight matrix is an [`aria_core::nn::Linear`] loaded under its
//! checkpoint key; weights stay in the file's dtype (bf16 for released models) in the memory
//! map: each matrix product converts weight panels on the fly, and the embedding gathers only
//! the requested rows, so no f32 copy of the model is kept. The forward pass is tensor code
//! over [`aria_core::ops`], so it runs wherever the weights live
//! ([`T5GemmaEncoder::to_device`]).
//!
//! **Compute precision.** The reference loads the encoder with transformers' `dtype="auto"`:
//! the `dtype` (or `torch_dtype`) of `config.json`, else the weights' dtype — bf16 for the
//! released folder — and computes in it. This encoder computes in f32 by default
//! ([`Precision::F32`]): bf16 weights are widened to f32 inside the matrix products with f32
//! accumulation, the closest to exact arithmetic (it differs from an fp64 evaluation by ~4e-5
//! relative where the reference's bf16 path differs by ~8e-3). [`Precision::Bf16Dot`] keeps f32
//! everywhere but holds the matrices in the `bf16_panels` weight format
//! ([`WeightFormat::Bf16Panels`], packed once,
//! [`T5GemmaEncoder::prepare`]) and lets the attention's products round to bf16
//! ([`AttnOpts::bf16_products`]): the backend picks the unit (the CPU: the AMX tile unit where it
//! has one, else `vdpbf16ps`, else its emulation), the encoder never asks which.
//! [`Precision::Bf16`] replays the reference's bf16 arithmetic as
//! PyTorch computes it on AVX2-class CPUs (f32 kernels, every result rounded to bf16 where
//! PyTorch's CPU kernels round, in their summation orders: the ops of
//! [`aria_core::ops::torch_bf16`]), so that a whole `generate()` can be replayed exactly; it is
//! an explicit choice ([`T5GemmaEncoder::set_precision`]), and
//! [`T5GemmaEncoder::reference_precision`] says which arithmetic the folder's reference uses.
//!
//! **Attention implementation and the logit soft-cap.** The reference loads the encoder with
//! the transformers default attention implementation, SDPA, which silently ignores
//! `attn_logit_softcapping`; only the `eager` implementation applies the cap (50). This encoder
//! follows `attn_implementation` in `config.json` (top level or in the `encoder` sub-config):
//! absent or `sdpa` ⇒ no soft-cap (the official default path), `eager` ⇒ soft-cap.
//! [`T5GemmaEncoder::set_attn_implementation`] overrides it.
//!
//! Tensor names are matched by suffix: the encoder is found by its `embed_tokens.weight` (an
//! `encoder.` or `model.encoder.` prefix, or none), so full encoder-decoder files work too.
//!
//! Rows whose keys are all masked (no valid token) produce zero attention output instead of NaN;
//! such rows are replaced by the conditioner's padding embedding anyway.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aria_core::nn::{self, Bias, Linear, Weight, WeightFormat};
use aria_core::ops::{self, torch_bf16, AttnOpts, KeyMaskMode, RmsStyle};
use aria_core::{DType, Device, Tensor, WeightLoader};

use crate::tokenizer::TokenBatch;
use crate::{DitError, Result};

mod config;

use config::cfg_err;
pub use config::{
    AttnImplementation, HiddenActivation, LayerType, Precision, RopeType, T5GemmaConfig,
};

/// Keys of one block of the reference's CPU flash attention: the bf16 replay covers sequences
/// up to this length (longer ones rescale the softmax between blocks, not reproduced).
pub const BF16_MAX_KEYS: usize = torch_bf16::FLASH_KV_BLOCK;

/// Positions the RoPE tables are computed for at load (longer inputs compute theirs per call).
const ROPE_ROWS: usize = 512;

/// One layer's self-attention projections.
#[derive(Debug, Clone)]
struct SelfAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
}

/// One layer's gated MLP.
#[derive(Debug, Clone)]
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// One encoder layer (norm weights `[hidden]` f32).
#[derive(Debug, Clone)]
struct Layer {
    self_attn: SelfAttention,
    mlp: Mlp,
    pre_self_attn_layernorm: Tensor,
    post_self_attn_layernorm: Tensor,
    pre_feedforward_layernorm: Tensor,
    post_feedforward_layernorm: Tensor,
    kind: LayerType,
}

impl Layer {
    fn linears(&self) -> [&Linear; 7] {
        let (a, m) = (&self.self_attn, &self.mlp);
        [
            &a.q_proj,
            &a.k_proj,
            &a.v_proj,
            &a.o_proj,
            &m.gate_proj,
            &m.up_proj,
            &m.down_proj,
        ]
    }

    fn linears_mut(&mut self) -> [&mut Linear; 7] {
        let (a, m) = (&mut self.self_attn, &mut self.mlp);
        [
            &mut a.q_proj,
            &mut a.k_proj,
            &mut a.v_proj,
            &mut a.o_proj,
            &mut m.gate_proj,
            &mut m.up_proj,
            &mut m.down_proj,
        ]
    }

    fn norms_mut(&mut self) -> [&mut Tensor; 4] {
        [
            &mut self.pre_self_attn_layernorm,
            &mut self.post_self_attn_layernorm,
            &mut self.pre_feedforward_layernorm,
            &mut self.post_feedforward_layernorm,
        ]
    }
}

/// RoPE `cos`/`sin` tables `[ROPE_ROWS, head_dim]`, in f32 and rounded to bf16 (the replay's).
#[derive(Debug, Clone)]
struct RopeTables {
    cos: Tensor,
    sin: Tensor,
    cos_bf16: Tensor,
    sin_bf16: Tensor,
}

impl RopeTables {
    /// Tables for positions `0..n` (`inv_freq` a CPU tensor).
    fn new(inv_freq: &Tensor, n: usize) -> Result<Self> {
        let (cos, sin) = ops::rope_tables(inv_freq, n)?;
        Ok(RopeTables {
            cos_bf16: torch_bf16::round_tensor(&cos)?,
            sin_bf16: torch_bf16::round_tensor(&sin)?,
            cos,
            sin,
        })
    }

    fn rows(&self) -> usize {
        self.cos.shape()[0]
    }

    fn move_to(&mut self, device: &Device) -> Result<()> {
        for t in [
            &mut self.cos,
            &mut self.sin,
            &mut self.cos_bf16,
            &mut self.sin_bf16,
        ] {
            *t = device.put(t)?;
        }
        Ok(())
    }
}

/// One layer's matrices for [`Precision::Bf16Dot`], as layers whose weights are in the
/// `bf16_panels` format (on the encoder's device: a backend packs its own layout at upload,
/// and one without the format refuses naming it): the query, key and value projections as one
/// product, the output projection, the MLP's up and gate projections as one product
/// (`[up; gate]`, the order [`ops::glu`] splits), the down projection. `None` where a matrix is
/// packed in another format already, or has a bias (the layer's own path runs).
#[derive(Debug)]
struct LayerDot {
    qkv: Option<Linear>,
    o: Option<Linear>,
    up_gate: Option<Linear>,
    down: Option<Linear>,
}

impl LayerDot {
    fn pack(layer: &Layer, device: &Device) -> Result<LayerDot> {
        fn dense(l: &Linear) -> Option<&Tensor> {
            l.effective_weight().filter(|_| l.bias().is_none())
        }
        let stack = |part: &str, ls: &[&Linear]| -> Result<Option<Linear>> {
            let ws: Option<Vec<&Tensor>> = ls.iter().map(|l| dense(l)).collect();
            let Some(ws) = ws else {
                return Ok(None);
            };
            // Packed from host data (a weight already on a device is read back once).
            let w = nn::pack_stacked(WeightFormat::Bf16Panels, &ws)?;
            for l in ls {
                l.weight().release_pages()?;
            }
            let name = format!("{}[{part}]", ls[0].name());
            let mut lin = Linear::new(name, Weight::Packed(w), None)?;
            lin.to_device(device)?;
            Ok(Some(lin))
        };
        let (a, m) = (&layer.self_attn, &layer.mlp);
        Ok(LayerDot {
            qkv: stack("qkv", &[&a.q_proj, &a.k_proj, &a.v_proj])?,
            o: stack("o", &[&a.o_proj])?,
            up_gate: stack("up_gate", &[&m.up_proj, &m.gate_proj])?,
            down: stack("down", &[&m.down_proj])?,
        })
    }

    fn nbytes(&self) -> usize {
        [&self.qkv, &self.o, &self.up_gate, &self.down]
            .into_iter()
            .flatten()
            .map(|l| l.weight().nbytes())
            .sum()
    }
}

/// The layers' [`LayerDot`]s, made on first use and dropped with the pages.
#[derive(Debug, Default)]
struct DotCache(Mutex<Option<Arc<[LayerDot]>>>);

impl Clone for DotCache {
    fn clone(&self) -> Self {
        DotCache(Mutex::new(self.get()))
    }
}

impl DotCache {
    fn get(&self) -> Option<Arc<[LayerDot]>> {
        self.0.lock().ok().and_then(|g| g.clone())
    }

    /// Drop the packed weights; returns their bytes.
    fn clear(&self) -> usize {
        let old = self.0.lock().ok().and_then(|mut g| g.take());
        old.map_or(0, |v| v.iter().map(LayerDot::nbytes).sum())
    }

    fn set(&self, v: Arc<[LayerDot]>) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some(v);
        }
    }
}

/// The T5Gemma encoder.
#[derive(Debug, Clone)]
pub struct T5GemmaEncoder {
    cfg: T5GemmaConfig,
    folder: PathBuf,
    embed_tokens: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// RoPE inverse frequencies (host: tables for long inputs are built from them).
    inv_freq: Tensor,
    rope: RopeTables,
    attn_impl: AttnImplementation,
    precision: Precision,
    reference_precision: Precision,
    device: Device,
    dot: DotCache,
}

/// Find the encoder's name prefix by the suffix `embed_tokens.weight` (decoder tensors skipped).
fn encoder_prefix(loader: &WeightLoader, file: &Path) -> Result<String> {
    let suffix = "embed_tokens.weight";
    let mut cands: Vec<String> = loader
        .names()
        .into_iter()
        .filter(|n| n.ends_with(suffix) && !n.contains("decoder"))
        .map(|n| n[..n.len() - suffix.len()].to_string())
        .collect();
    cands.sort_by_key(|p| (!p.contains("encoder"), p.len()));
    cands.into_iter().next().ok_or_else(|| {
        cfg_err(
            file,
            format!("no encoder `{suffix}` tensor (tensor names are matched by suffix)"),
        )
    })
}

impl T5GemmaEncoder {
    /// Load the encoder of a T5Gemma folder (`config.json` + `model.safetensors`).
    pub fn load(folder: impl AsRef<Path>) -> Result<Self> {
        let folder = folder.as_ref();
        let cfg = T5GemmaConfig::from_file(folder.join("config.json"))?;
        let file = folder.join("model.safetensors");
        if !file.is_file() {
            return Err(cfg_err(&file, "text-encoder weights not found".into()));
        }
        let loader = WeightLoader::open_checkpoint(&file)?;
        Self::from_loader(cfg, &loader, folder, &file)
    }

    /// Build the encoder from a configuration and a loader over its weights (`folder` and
    /// `file` only name them in errors).
    pub fn from_loader(
        cfg: T5GemmaConfig,
        loader: &WeightLoader,
        folder: &Path,
        file: &Path,
    ) -> Result<Self> {
        let prefix = encoder_prefix(loader, file)?;
        let vb = loader.pp(prefix.trim_end_matches('.'));
        let h = cfg.hidden_size;
        let (q, kv, ff) = (
            cfg.num_attention_heads * cfg.head_dim,
            cfg.num_key_value_heads * cfg.head_dim,
            cfg.intermediate_size,
        );
        let key = "embed_tokens.weight";
        let embed_tokens = vb.get_any(key)?;
        let es = embed_tokens.shape().to_vec();
        if es.len() != 2 || es[1] != h {
            return Err(cfg_err(
                file,
                format!(
                    "`{}` has shape {es:?}, expected [vocab, {h}] (hidden_size)",
                    vb.full_name(key)
                ),
            ));
        }
        if es[0] != cfg.vocab_size {
            return Err(cfg_err(
                &folder.join("config.json"),
                format!(
                    "`encoder.vocab_size` is {} but `{}` in {} has {} rows",
                    cfg.vocab_size,
                    vb.full_name(key),
                    file.display(),
                    es[0]
                ),
            ));
        }
        let norm_w = |vb: &WeightLoader, n: &str| -> Result<Tensor> {
            Ok(vb.pp(n).get_as("weight", &[h], DType::F32)?)
        };
        let bias = if cfg.attention_bias {
            Bias::Yes
        } else {
            Bias::No
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for (i, &kind) in cfg.layer_types.iter().enumerate() {
            let lv = vb.pp(format!("layers.{i}"));
            let (a, m) = (lv.pp("self_attn"), lv.pp("mlp"));
            layers.push(Layer {
                self_attn: SelfAttention {
                    q_proj: Linear::load(&a.pp("q_proj"), h, q, bias)?,
                    k_proj: Linear::load(&a.pp("k_proj"), h, kv, bias)?,
                    v_proj: Linear::load(&a.pp("v_proj"), h, kv, bias)?,
                    o_proj: Linear::load(&a.pp("o_proj"), q, h, bias)?,
                },
                mlp: Mlp {
                    gate_proj: Linear::load(&m.pp("gate_proj"), h, ff, Bias::No)?,
                    up_proj: Linear::load(&m.pp("up_proj"), h, ff, Bias::No)?,
                    down_proj: Linear::load(&m.pp("down_proj"), ff, h, Bias::No)?,
                },
                pre_self_attn_layernorm: norm_w(&lv, "pre_self_attn_layernorm")?,
                post_self_attn_layernorm: norm_w(&lv, "post_self_attn_layernorm")?,
                pre_feedforward_layernorm: norm_w(&lv, "pre_feedforward_layernorm")?,
                post_feedforward_layernorm: norm_w(&lv, "post_feedforward_layernorm")?,
                kind,
            });
        }
        let norm = norm_w(&vb, "norm")?;
        let inv = cfg.rope_inv_freq();
        let inv_freq = Tensor::from_vec(inv.clone(), &[inv.len()])?;
        let rope = RopeTables::new(&inv_freq, ROPE_ROWS)?;
        let reference_precision = cfg.dtype.unwrap_or(if embed_tokens.dtype() == DType::BF16 {
            Precision::Bf16
        } else {
            Precision::F32
        });
        Ok(T5GemmaEncoder {
            attn_impl: cfg.attn_implementation,
            precision: Precision::F32,
            reference_precision,
            cfg,
            folder: folder.to_path_buf(),
            embed_tokens,
            layers,
            norm,
            inv_freq,
            rope,
            device: Device::Cpu,
            dot: DotCache::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &T5GemmaConfig {
        &self.cfg
    }

    /// The folder the encoder was loaded from.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Every weight matrix, layer by layer (`q, k, v, o, gate, up, down`).
    pub fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.layers.iter().flat_map(|l| l.linears())
    }

    /// Every weight matrix, mutable (to pack weights or set adapters).
    pub fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers.iter_mut().flat_map(|l| l.linears_mut())
    }

    /// Whether every matrix and the embedding table are used straight from the memory-mapped
    /// file (no converted copy), as they are for a well-aligned safetensors file.
    pub fn weights_mapped(&self) -> bool {
        self.embed_tokens.is_mapped()
            && self
                .linears()
                .all(|l| l.weight().dense().is_some_and(Tensor::is_mapped))
    }

    /// Drop the resident pages of every weight borrowed from the memory-mapped file
    /// (embedding table, matrices, norms; see [`Tensor::release_pages`]), e.g. once the
    /// prompts of a request are encoded: the encoder stays usable, and its next
    /// [`Self::encode`] reads the weights from the file again (from the page cache when it
    /// still holds them). Returns the bytes released.
    ///
    /// The matrices packed for [`Precision::Bf16Dot`] are dropped too (the next encode packs
    /// them again from the file).
    pub fn release_pages(&self) -> Result<usize> {
        let mut n = self.dot.clear();
        n += self.embed_tokens.release_pages()? + self.norm.release_pages()?;
        for l in &self.layers {
            for lin in l.linears() {
                n += lin.release_pages()?;
            }
            for t in [
                &l.pre_self_attn_layernorm,
                &l.post_self_attn_layernorm,
                &l.pre_feedforward_layernorm,
                &l.post_feedforward_layernorm,
            ] {
                n += t.release_pages()?;
            }
        }
        Ok(n)
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Move every weight and parameter tensor (embedding table, matrices, norms, RoPE tables)
    /// to `device`; [`Self::forward`] then expects its inputs there ([`Self::encode`] uploads
    /// them).
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.dot.clear();
        self.embed_tokens = device.put(&self.embed_tokens)?;
        for l in &mut self.layers {
            for lin in l.linears_mut() {
                lin.to_device(device)?;
            }
            for n in l.norms_mut() {
                *n = device.put(n)?;
            }
        }
        self.norm = device.put(&self.norm)?;
        self.rope.move_to(device)?;
        self.device = device.clone();
        Ok(())
    }

    /// The attention implementation in use.
    pub fn attn_implementation(&self) -> AttnImplementation {
        self.attn_impl
    }

    /// Override the attention implementation (and with it the logit soft-cap).
    pub fn set_attn_implementation(&mut self, imp: AttnImplementation) {
        self.attn_impl = imp;
    }

    /// The compute precision in use ([`Precision::F32`] unless set).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The arithmetic the folder's reference computes in (`dtype="auto"`: the `dtype` of
    /// `config.json`, else the weights' dtype); [`Precision::Bf16`] replays it where it is bf16.
    pub fn reference_precision(&self) -> Precision {
        self.reference_precision
    }

    /// Choose the compute precision ([`Precision::Bf16`]: the replay of the reference's bf16
    /// arithmetic; [`Precision::Bf16Dot`]: bf16 products with f32 accumulation, packed on the
    /// next [`Self::encode`] or by [`Self::prepare`]).
    pub fn set_precision(&mut self, p: Precision) {
        if !p.packs_bf16() {
            self.dot.clear();
        }
        self.precision = p;
    }

    /// Make what the current precision needs before the first encode: for
    /// [`Precision::Bf16Dot`], every layer matrix packed into the `bf16_panels` format (as large
    /// as bf16 weights) on the encoder's device, after which the pages of the mapped dense
    /// weights are released. Returns the bytes packed (0 when nothing was to be done). An error
    /// naming the format where the encoder's backend does not run it.
    pub fn prepare(&self) -> Result<usize> {
        if !self.precision.packs_bf16() {
            return Ok(0);
        }
        Ok(self.dot_weights()?.iter().map(LayerDot::nbytes).sum())
    }

    /// The packed matrices of [`Precision::Bf16Dot`] (packed now when absent).
    fn dot_weights(&self) -> Result<Arc<[LayerDot]>> {
        if let Some(v) = self.dot.get() {
            return Ok(v);
        }
        let v = self
            .layers
            .iter()
            .map(|l| LayerDot::pack(l, &self.device))
            .collect::<Result<Vec<_>>>()?;
        let v: Arc<[LayerDot]> = v.into();
        self.dot.set(v.clone());
        Ok(v)
    }

    /// The logit soft-cap applied by the current implementation.
    pub fn softcap(&self) -> Option<f32> {
        match self.attn_impl {
            AttnImplementation::Sdpa => None,
            AttnImplementation::Eager => self.cfg.attn_logit_softcapping.filter(|&c| c > 0.0),
        }
    }

    /// `last_hidden_state [B, L, hidden]` (f32, on the encoder's device) for a token batch (its
    /// ids and mask are uploaded to that device first).
    pub fn encode(&self, tokens: &TokenBatch) -> Result<Tensor> {
        let (ids, mask) = tokens.to_device(&self.device)?;
        self.forward(&ids, &mask)
    }

    /// `last_hidden_state [B, L, hidden]` (f32) for `ids [B, L]` (integer) and `mask [B, L]`
    /// (non-zero = real token), both on the encoder's device. Every position is computed; keys
    /// with mask 0 are excluded.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let s = ids.shape();
        if s.len() != 2 || mask.shape() != s {
            return Err(DitError::Input {
                what: "T5Gemma input".into(),
                reason: format!(
                    "ids {:?} and mask {:?} must both be [batch, len]",
                    s,
                    mask.shape()
                ),
            });
        }
        let (b, l) = (s[0], s[1]);
        let c = &self.cfg;
        let (h, nh, nkv, hd) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        let softcap = self.softcap();
        let dot = match self.precision {
            Precision::Bf16Dot => Some(self.dot_weights()?),
            _ => None,
        };
        let ar = Arith {
            bf16: self.precision == Precision::Bf16,
            eps: c.rms_norm_eps,
        };
        if ar.bf16 && softcap.is_some() {
            return Err(DitError::Input {
                what: "T5Gemma".into(),
                reason: "the bf16 path reproduces SDPA attention (no logit soft-cap); \
                         use f32 precision for the eager implementation"
                    .into(),
            });
        }
        if ar.bf16 && l > BF16_MAX_KEYS {
            return Err(DitError::Input {
                what: "T5Gemma".into(),
                reason: format!(
                    "the bf16 path reproduces one {BF16_MAX_KEYS}-key block of the reference's \
                     attention; {l} tokens need f32 precision"
                ),
            });
        }
        // Tables for longer inputs than the cached ones are built now and uploaded.
        let long;
        let rope = if l <= self.rope.rows() {
            &self.rope
        } else {
            let mut t = RopeTables::new(&self.inv_freq, l)?;
            t.move_to(&self.device)?;
            long = t;
            &long
        };
        let (cos, sin) = if ar.bf16 {
            (&rope.cos_bf16, &rope.sin_bf16)
        } else {
            (&rope.cos, &rope.sin)
        };
        // `hidden_size ** 0.5` as a scalar of the compute dtype.
        let normalizer = ar.scalar(c.normalizer());
        let mut x = ar.round(ops::mul_scalar(
            &ops::embedding(ids, &self.embed_tokens)?,
            normalizer,
        )?)?;
        let scale = c.query_pre_attn_scalar.powf(-0.5) as f32;
        let heads = |t: Tensor, n: usize| -> Result<Tensor> {
            Ok(t.reshape(&[b, l, n, hd])?.transpose(1, 2)?)
        };
        for (li, layer) in self.layers.iter().enumerate() {
            let ld = dot.as_deref().map(|d| &d[li]);
            // Self-attention block.
            let at = &layer.self_attn;
            let u = ar.norm(&x, &layer.pre_self_attn_layernorm)?;
            let (q, k, v) = match ld.and_then(|d| d.qkv.as_ref()) {
                Some(w) => {
                    // Heads split from the fused projection in one pass each, RoPE applied on
                    // the way (the same kernel as `ops::rope`).
                    let y = w.forward(&u)?;
                    let (nq, nk) = (nh * hd, nkv * hd);
                    let split = |col: usize, n: usize, rope: bool| {
                        ops::split_heads(&y, col, n, hd, None, rope.then_some((cos, sin)))
                    };
                    (
                        split(0, nh, true)?,
                        split(nq, nkv, true)?,
                        split(nq + nk, nkv, false)?,
                    )
                }
                None => {
                    let q = ar.linear(&at.q_proj, &u)?;
                    let k = ar.linear(&at.k_proj, &u)?;
                    let v = ar.linear(&at.v_proj, &u)?;
                    (
                        ar.rope(&heads(q, nh)?, cos, sin)?,
                        ar.rope(&heads(k, nkv)?, cos, sin)?,
                        heads(v, nkv)?,
                    )
                }
            };
            let (k, v) = if nkv == nh {
                (k, v)
            } else {
                (repeat_kv(&k, nh / nkv)?, repeat_kv(&v, nh / nkv)?)
            };
            let window = match (layer.kind, c.sliding_window) {
                (LayerType::Sliding, Some(w)) if w > 0 && l > w => Some((w - 1, w - 1)),
                _ => None,
            };
            let opts = AttnOpts {
                scale,
                softcap,
                key_mask: Some(mask),
                mask_mode: KeyMaskMode::Exclude,
                window,
                bf16_products: dot.is_some(),
            };
            let a = ar.attention(&q, &k, &v, &opts)?;
            let a = a.transpose(1, 2)?.contiguous()?.reshape(&[b, l, nh * hd])?;
            let o = match ld.and_then(|d| d.o.as_ref()) {
                Some(w) => w.forward(&a)?,
                None => ar.linear(&at.o_proj, &a)?,
            };
            let o = ar.norm(&o, &layer.post_self_attn_layernorm)?;
            x = ar.add(&x, &o)?;
            // Feed-forward block.
            let m = &layer.mlp;
            let u = ar.norm(&x, &layer.pre_feedforward_layernorm)?;
            let h = match ld.and_then(|d| d.up_gate.as_ref()) {
                Some(w) => ops::glu(&w.forward(&u)?, ops::GluAct::GeluTanh)?,
                None => {
                    let g = ar.gelu_tanh(&ar.linear(&m.gate_proj, &u)?)?;
                    ar.mul(&g, &ar.linear(&m.up_proj, &u)?)?
                }
            };
            let f = match ld.and_then(|d| d.down.as_ref()) {
                Some(w) => w.forward(&h)?,
                None => ar.linear(&m.down_proj, &h)?,
            };
            let f = ar.norm(&f, &layer.post_feedforward_layernorm)?;
            x = ar.add(&x, &f)?;
        }
        let out = ar.norm(&x, &self.norm)?;
        debug_assert_eq!(out.shape(), &[b, l, h]);
        Ok(out)
    }

    /// Floating-point operations of one forward pass over `batch × len` tokens (matrix products
    /// and attention only).
    pub fn flops(&self, batch: usize, len: usize) -> f64 {
        let c = &self.cfg;
        let (h, q, kv, f) = (
            c.hidden_size as f64,
            (c.num_attention_heads * c.head_dim) as f64,
            (c.num_key_value_heads * c.head_dim) as f64,
            c.intermediate_size as f64,
        );
        let t = (batch * len) as f64;
        let per_token = 2.0 * (h * q * 2.0 + h * kv * 2.0 + 3.0 * h * f);
        let attn = 2.0 * 2.0 * (batch as f64) * (len as f64) * (len as f64) * q;
        c.num_hidden_layers as f64 * (t * per_token + attn)
    }
}

/// The arithmetic of one forward: f32 ops, or the bf16 replay ([`torch_bf16`]) where every
/// result is rounded to bf16 as the reference's kernels round it.
struct Arith {
    bf16: bool,
    eps: f32,
}

impl Arith {
    /// A Python float as a scalar of the compute dtype.
    fn scalar(&self, v: f32) -> f32 {
        if self.bf16 {
            torch_bf16::round(v)
        } else {
            v
        }
    }

    /// The result of an f32 op stored in a tensor of the compute dtype.
    fn round(&self, t: Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::round_tensor(&t)?
        } else {
            t
        })
    }

    fn norm(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::rms_norm(x, w, self.eps)?
        } else {
            ops::rms_norm(x, Some(w), self.eps, RmsStyle::OnePlus)?
        })
    }

    fn linear(&self, l: &Linear, x: &Tensor) -> Result<Tensor> {
        if !self.bf16 {
            return Ok(l.forward(x)?);
        }
        let w = l.effective_weight().ok_or_else(|| DitError::Input {
            what: format!("T5Gemma layer `{}`", l.name()),
            reason: format!(
                "the bf16 replay needs a dense weight, this one is {}",
                l.weight().kind()
            ),
        })?;
        Ok(torch_bf16::linear(x, w, l.bias())?)
    }

    fn rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::rope(x, cos, sin)?
        } else {
            ops::rope(x, cos, sin)?
        })
    }

    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, o: &AttnOpts<'_>) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::attention(q, k, v, o)?
        } else {
            ops::attention(q, k, v, o)?
        })
    }

    fn gelu_tanh(&self, x: &Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::gelu_tanh(x)?
        } else {
            ops::gelu_tanh(x)?
        })
    }

    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::add(a, b)?
        } else {
            ops::add(a, b)?
        })
    }

    fn mul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Ok(if self.bf16 {
            torch_bf16::mul(a, b)?
        } else {
            ops::mul(a, b)?
        })
    }
}

/// `[B, Hkv, N, D]` → `[B, Hkv·n, N, D]`, each key/value head repeated `n` times in place.
fn repeat_kv(x: &Tensor, n: usize) -> Result<Tensor> {
    let s = x.shape().to_vec();
    let parts: Vec<Tensor> = (0..s[1])
        .map(|hh| x.narrow(1, hh, 1))
        .collect::<aria_core::Result<_>>()?;
    let mut rep = Vec::with_capacity(s[1] * n);
    for p in &parts {
        for _ in 0..n {
            rep.push(p);
        }
    }
    Ok(Tensor::cat(&rep, 1)?)
}
