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
//! All dimensions are read from the folder's `config.json` (`encoder` sub-config). Weights stay
//! in the file's dtype (bf16 for released models) in the memory map: each matrix product
//! converts weight panels on the fly, and the embedding gathers only the requested rows, so no
//! f32 copy of the model is kept.
//!
//! **Compute precision.** The reference loads the encoder with transformers' `dtype="auto"`:
//! the `dtype` (or `torch_dtype`) of `config.json`, else the weights' dtype — bf16 for the
//! released folder — and computes in it. [`Precision::Bf16`] reproduces that arithmetic
//! (f32 kernels, every result rounded to bf16 where PyTorch's CPU kernels round, see
//! [`bf16`]); it is the default when the folder says bf16, so a whole `generate()` can be
//! replayed exactly. [`Precision::F32`] computes in f32 throughout: closer to exact arithmetic
//! (the bf16 path differs from an fp64 evaluation by ~1e-2 relative, f32 by ~1e-5), at the
//! same speed. [`T5GemmaEncoder::set_precision`] chooses.
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

use aria_core::ops::{self, AttnOpts, KeyMaskMode, RmsStyle};
use aria_core::{DType, Tensor, WeightLoader};
use serde_json::Value;

use crate::tokenizer::TokenBatch;
use crate::{DitError, Result};

pub mod bf16;

/// The arithmetic the encoder computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 throughout.
    #[default]
    F32,
    /// The reference's bf16 arithmetic on the CPU (see [`bf16`]).
    Bf16,
}

/// Which attention implementation the reference would use (decides the logit soft-cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnImplementation {
    /// PyTorch SDPA, the transformers default: no logit soft-cap.
    #[default]
    Sdpa,
    /// The eager implementation: logit soft-cap `c·tanh(s/c)` with `attn_logit_softcapping`.
    Eager,
}

/// The kind of attention of one encoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerType {
    /// Full bidirectional attention.
    Full,
    /// Bidirectional attention limited to `|i − j| < sliding_window`.
    Sliding,
}

/// The encoder hyper-parameters (`config.json` → `encoder`).
#[derive(Debug, Clone, PartialEq)]
pub struct T5GemmaConfig {
    /// Model width (768 for b-b).
    pub hidden_size: usize,
    /// Number of layers (12).
    pub num_hidden_layers: usize,
    /// Query heads (12).
    pub num_attention_heads: usize,
    /// Key/value heads (12; fewer means grouped-query attention).
    pub num_key_value_heads: usize,
    /// Head width (64).
    pub head_dim: usize,
    /// MLP inner width (2048).
    pub intermediate_size: usize,
    /// Embedding rows (256 000).
    pub vocab_size: usize,
    /// RMSNorm epsilon (1e-6).
    pub rms_norm_eps: f32,
    /// RoPE base (10 000).
    pub rope_theta: f64,
    /// Logit soft-cap value used by the eager implementation (50), if any.
    pub attn_logit_softcapping: Option<f32>,
    /// Scores are multiplied by `query_pre_attn_scalar^-½` (64 ⇒ 1/8).
    pub query_pre_attn_scalar: f64,
    /// Window of sliding-attention layers (4096).
    pub sliding_window: Option<usize>,
    /// Per-layer attention kind.
    pub layer_types: Vec<LayerType>,
    /// Biases on the attention projections (false).
    pub attention_bias: bool,
    /// `attn_implementation` of the file (absent ⇒ SDPA).
    pub attn_implementation: AttnImplementation,
    /// The compute dtype the file asks for (`dtype` / `torch_dtype`, top level or `encoder`):
    /// `Some(Bf16)` for `bfloat16`, `Some(F32)` for `float32`, `None` when absent (the
    /// weights' dtype decides).
    pub dtype: Option<Precision>,
}

fn cfg_err(path: &Path, reason: String) -> DitError {
    DitError::Config {
        path: path.to_path_buf(),
        reason,
    }
}

impl T5GemmaConfig {
    /// Read `config.json` of a T5Gemma folder (the `encoder` sub-config; a file without one is
    /// read as an encoder config itself).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| cfg_err(path, e.to_string()))?;
        let root: Value = serde_json::from_str(&text).map_err(|e| cfg_err(path, e.to_string()))?;
        Self::from_json(&root, path)
    }

    /// Parse an already read `config.json` (`path` names it in errors).
    pub fn from_json(root: &Value, path: &Path) -> Result<Self> {
        let (enc, pre) = match root.get("encoder") {
            Some(e) if e.is_object() => (e, "encoder."),
            _ => (root, ""),
        };
        let err = |k: &str, why: &str| cfg_err(path, format!("`{pre}{k}`: {why}"));
        let usize_key = |k: &str| -> Result<usize> {
            let v = enc.get(k).ok_or_else(|| err(k, "missing key"))?;
            v.as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| err(k, "must be a non-negative integer"))
        };
        let f64_key = |k: &str, default: Option<f64>| -> Result<f64> {
            match enc.get(k) {
                None | Some(Value::Null) => default.ok_or_else(|| err(k, "missing key")),
                Some(v) => v.as_f64().ok_or_else(|| err(k, "must be a number")),
            }
        };
        let hidden_size = usize_key("hidden_size")?;
        let num_hidden_layers = usize_key("num_hidden_layers")?;
        let num_attention_heads = usize_key("num_attention_heads")?;
        let num_key_value_heads = match enc.get("num_key_value_heads") {
            None => num_attention_heads,
            Some(_) => usize_key("num_key_value_heads")?,
        };
        let head_dim = usize_key("head_dim")?;
        let intermediate_size = usize_key("intermediate_size")?;
        let vocab_size = usize_key("vocab_size")?;
        let rms_norm_eps = f64_key("rms_norm_eps", Some(1e-6))? as f32;
        let rope_theta = match enc.get("rope_parameters").and_then(|r| r.get("rope_theta")) {
            Some(v) => v
                .as_f64()
                .ok_or_else(|| err("rope_parameters.rope_theta", "must be a number"))?,
            None => f64_key("rope_theta", Some(10000.0))?,
        };
        if let Some(t) = enc.get("rope_parameters").and_then(|r| r.get("rope_type")) {
            if t.as_str() != Some("default") {
                return Err(err(
                    "rope_parameters.rope_type",
                    "only `default` RoPE is supported",
                ));
            }
        }
        let attn_logit_softcapping = match enc.get("attn_logit_softcapping") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .ok_or_else(|| err("attn_logit_softcapping", "must be a number"))?
                    as f32,
            ),
        };
        let query_pre_attn_scalar = f64_key("query_pre_attn_scalar", Some(head_dim as f64))?;
        let sliding_window = match enc.get("sliding_window") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| err("sliding_window", "must be an integer"))?
                    as usize,
            ),
        };
        let layer_types = match enc.get("layer_types") {
            None => (0..num_hidden_layers)
                .map(|i| {
                    if i % 2 == 0 {
                        LayerType::Sliding
                    } else {
                        LayerType::Full
                    }
                })
                .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| match t.as_str() {
                    Some("full_attention") => Ok(LayerType::Full),
                    Some("sliding_attention") => Ok(LayerType::Sliding),
                    _ => Err(err("layer_types", &format!("unknown layer type {t}"))),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(err("layer_types", "must be a list")),
        };
        if layer_types.len() != num_hidden_layers {
            return Err(err(
                "layer_types",
                &format!(
                    "{} entries for {num_hidden_layers} layers",
                    layer_types.len()
                ),
            ));
        }
        let attention_bias = enc
            .get("attention_bias")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if let Some(act) = enc.get("hidden_activation") {
            if act.as_str() != Some("gelu_pytorch_tanh") {
                return Err(err(
                    "hidden_activation",
                    &format!("{act} is not supported (gelu_pytorch_tanh)"),
                ));
            }
        }
        let imp = enc
            .get("attn_implementation")
            .or_else(|| root.get("attn_implementation"));
        let attn_implementation = match imp {
            None | Some(Value::Null) => AttnImplementation::Sdpa,
            Some(v) => match v.as_str() {
                Some("sdpa") => AttnImplementation::Sdpa,
                Some("eager") => AttnImplementation::Eager,
                _ => {
                    return Err(cfg_err(
                        path,
                        format!("`attn_implementation`: {v} is not supported (`sdpa` or `eager`)"),
                    ))
                }
            },
        };
        let dt = ["dtype", "torch_dtype"]
            .iter()
            .find_map(|k| root.get(*k).or_else(|| enc.get(*k)))
            .filter(|v| !v.is_null());
        let dtype = match dt {
            None => None,
            Some(v) => match v.as_str() {
                Some("bfloat16") => Some(Precision::Bf16),
                Some("float32") => Some(Precision::F32),
                _ => {
                    return Err(cfg_err(
                        path,
                        format!("`dtype`: {v} is not supported (`bfloat16` or `float32`)"),
                    ))
                }
            },
        };
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
            || head_dim % 2 != 0
            || hidden_size == 0
        {
            return Err(err(
                "num_attention_heads",
                &format!(
                    "{num_attention_heads} heads, {num_key_value_heads} key/value heads, head_dim {head_dim}: \
                     heads must be a non-zero multiple of key/value heads and head_dim even"
                ),
            ));
        }
        Ok(T5GemmaConfig {
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            rms_norm_eps,
            rope_theta,
            attn_logit_softcapping,
            query_pre_attn_scalar,
            sliding_window,
            layer_types,
            attention_bias,
            attn_implementation,
            dtype,
        })
    }

    /// The embedding normaliser `√hidden_size`, rounded to f32 (the compute dtype).
    pub fn normalizer(&self) -> f32 {
        (self.hidden_size as f64).sqrt() as f32
    }

    /// RoPE inverse frequencies `1 / θ^(2i/head_dim)`, computed in f32 as the reference does.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        let d = self.head_dim as f32;
        (0..self.head_dim / 2)
            .map(|i| {
                let e = (2 * i) as f32 / d;
                let p = (self.rope_theta as f32 as f64).powf(e as f64) as f32;
                1.0 / p
            })
            .collect()
    }
}

/// One encoder layer's weights (projection weights as stored, norms as f32).
#[derive(Debug, Clone)]
struct Layer {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    qkv_bias: Option<[Tensor; 4]>,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    pre_attn: Tensor,
    post_attn: Tensor,
    pre_ff: Tensor,
    post_ff: Tensor,
    kind: LayerType,
}

/// The T5Gemma encoder.
#[derive(Debug, Clone)]
pub struct T5GemmaEncoder {
    cfg: T5GemmaConfig,
    folder: PathBuf,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    inv_freq: Tensor,
    attn_impl: AttnImplementation,
    precision: Precision,
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
        let name = |s: &str| format!("{prefix}{s}");
        let h = cfg.hidden_size;
        let (nh, nkv, hd, ff) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            cfg.intermediate_size,
        );
        let embed = loader.get_any(&name("embed_tokens.weight"))?;
        let es = embed.shape().to_vec();
        if es.len() != 2 || es[1] != h {
            return Err(cfg_err(
                file,
                format!(
                    "`{}` has shape {es:?}, expected [vocab, {h}] (hidden_size)",
                    name("embed_tokens.weight")
                ),
            ));
        }
        if es[0] != cfg.vocab_size {
            return Err(cfg_err(
                &folder.join("config.json"),
                format!(
                    "`encoder.vocab_size` is {} but `{}` in {} has {} rows",
                    cfg.vocab_size,
                    name("embed_tokens.weight"),
                    file.display(),
                    es[0]
                ),
            ));
        }
        let norm_w = |n: &str| -> Result<Tensor> { Ok(loader.get_as(&name(n), &[h], DType::F32)?) };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for (i, &kind) in cfg.layer_types.iter().enumerate() {
            let p = |s: &str| format!("layers.{i}.{s}");
            let w = |s: &str, shape: &[usize]| -> Result<Tensor> {
                Ok(loader.get(&name(&p(s)), shape)?)
            };
            let qkv_bias = if cfg.attention_bias {
                Some([
                    loader.get_as(&name(&p("self_attn.q_proj.bias")), &[nh * hd], DType::F32)?,
                    loader.get_as(&name(&p("self_attn.k_proj.bias")), &[nkv * hd], DType::F32)?,
                    loader.get_as(&name(&p("self_attn.v_proj.bias")), &[nkv * hd], DType::F32)?,
                    loader.get_as(&name(&p("self_attn.o_proj.bias")), &[h], DType::F32)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                q: w("self_attn.q_proj.weight", &[nh * hd, h])?,
                k: w("self_attn.k_proj.weight", &[nkv * hd, h])?,
                v: w("self_attn.v_proj.weight", &[nkv * hd, h])?,
                o: w("self_attn.o_proj.weight", &[h, nh * hd])?,
                qkv_bias,
                gate: w("mlp.gate_proj.weight", &[ff, h])?,
                up: w("mlp.up_proj.weight", &[ff, h])?,
                down: w("mlp.down_proj.weight", &[h, ff])?,
                pre_attn: norm_w(&p("pre_self_attn_layernorm.weight"))?,
                post_attn: norm_w(&p("post_self_attn_layernorm.weight"))?,
                pre_ff: norm_w(&p("pre_feedforward_layernorm.weight"))?,
                post_ff: norm_w(&p("post_feedforward_layernorm.weight"))?,
                kind,
            });
        }
        let norm = norm_w("norm.weight")?;
        let inv = cfg.rope_inv_freq();
        let inv_freq = Tensor::from_vec(inv.clone(), &[inv.len()])?;
        let precision = cfg.dtype.unwrap_or(if embed.dtype() == DType::BF16 {
            Precision::Bf16
        } else {
            Precision::F32
        });
        Ok(T5GemmaEncoder {
            attn_impl: cfg.attn_implementation,
            precision,
            cfg,
            folder: folder.to_path_buf(),
            embed,
            layers,
            norm,
            inv_freq,
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

    /// Whether every matrix and the embedding table are used straight from the memory-mapped
    /// file (no converted copy), as they are for a well-aligned safetensors file.
    pub fn weights_mapped(&self) -> bool {
        self.embed.is_mapped()
            && self.layers.iter().all(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .iter()
                    .all(|w| w.is_mapped())
            })
    }

    /// The attention implementation in use.
    pub fn attn_implementation(&self) -> AttnImplementation {
        self.attn_impl
    }

    /// Override the attention implementation (and with it the logit soft-cap).
    pub fn set_attn_implementation(&mut self, imp: AttnImplementation) {
        self.attn_impl = imp;
    }

    /// The compute precision in use (by default the one the folder's reference would use).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Choose the compute precision.
    pub fn set_precision(&mut self, p: Precision) {
        self.precision = p;
    }

    /// The logit soft-cap applied by the current implementation.
    pub fn softcap(&self) -> Option<f32> {
        match self.attn_impl {
            AttnImplementation::Sdpa => None,
            AttnImplementation::Eager => self.cfg.attn_logit_softcapping.filter(|&c| c > 0.0),
        }
    }

    /// `last_hidden_state [B, L, hidden]` (f32) for a token batch.
    pub fn encode(&self, tokens: &TokenBatch) -> Result<Tensor> {
        self.forward(&tokens.ids_tensor()?, &tokens.mask_tensor()?)
    }

    /// `last_hidden_state [B, L, hidden]` (f32) for `ids [B, L]` (integer) and `mask [B, L]`
    /// (non-zero = real token). Every position is computed; keys with mask 0 are excluded.
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
        let bf = self.precision == Precision::Bf16;
        // The result of every operation, rounded to bf16 on the bf16 path.
        let r = |t: Tensor| -> Result<Tensor> {
            if bf {
                bf16::round_tensor(&t)
            } else {
                Ok(t)
            }
        };
        // `hidden_size ** 0.5` as a tensor of the compute dtype.
        let normalizer = if bf {
            bf16::round(c.normalizer())
        } else {
            c.normalizer()
        };
        let mut x = r(ops::mul_scalar(
            &ops::embedding(ids, &self.embed)?,
            normalizer,
        )?)?;
        let (cos, sin) = ops::rope_tables(&self.inv_freq, l)?;
        let (cos_b, sin_b) = if bf {
            let round = |t: &Tensor| -> Result<Vec<f32>> {
                Ok(t.to_vec_f32()?.into_iter().map(bf16::round).collect())
            };
            (round(&cos)?, round(&sin)?)
        } else {
            (Vec::new(), Vec::new())
        };
        let scale = c.query_pre_attn_scalar.powf(-0.5) as f32;
        let eps = c.rms_norm_eps;
        let softcap = self.softcap();
        if bf && softcap.is_some() {
            return Err(DitError::Input {
                what: "T5Gemma".into(),
                reason: "the bf16 path reproduces SDPA attention (no logit soft-cap); \
                         use f32 precision for the eager implementation"
                    .into(),
            });
        }
        if bf && l > bf16::MAX_KEYS {
            return Err(DitError::Input {
                what: "T5Gemma".into(),
                reason: format!(
                    "the bf16 path reproduces one {}-key block of the reference's attention; \
                     {l} tokens need f32 precision",
                    bf16::MAX_KEYS
                ),
            });
        }
        let mask_v: Vec<f32> = if bf { mask.to_vec_f32()? } else { Vec::new() };
        let norm = |t: &Tensor, w: &Tensor| -> Result<Tensor> {
            if bf {
                bf16::rms_norm(t, w, eps)
            } else {
                Ok(ops::rms_norm(t, Some(w), eps, RmsStyle::OnePlus)?)
            }
        };
        let lin = |t: &Tensor, w: &Tensor, bias: Option<&Tensor>| -> Result<Tensor> {
            if bf {
                Ok(bf16::linear(t, w, bias)?)
            } else {
                Ok(ops::linear(t, w, bias)?)
            }
        };
        for layer in &self.layers {
            // Self-attention block.
            let u = norm(&x, &layer.pre_attn)?;
            let bias = |i: usize| layer.qkv_bias.as_ref().map(|bs| &bs[i]);
            let heads = |t: Tensor, n: usize| -> Result<Tensor> {
                Ok(t.reshape(&[b, l, n, hd])?.transpose(1, 2)?)
            };
            let q = heads(lin(&u, &layer.q, bias(0))?, nh)?;
            let k = heads(lin(&u, &layer.k, bias(1))?, nkv)?;
            let v = heads(lin(&u, &layer.v, bias(2))?, nkv)?;
            let (q, k) = if bf {
                (
                    bf16::rope(&q, &cos_b, &sin_b)?,
                    bf16::rope(&k, &cos_b, &sin_b)?,
                )
            } else {
                (ops::rope(&q, &cos, &sin)?, ops::rope(&k, &cos, &sin)?)
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
            let a = if bf {
                let w = window.map_or(usize::MAX, |(lo, _)| lo);
                bf16::flash_attention(&q, &k, &v, scale, |bi, i, j| {
                    mask_v[bi * l + j] != 0.0 && i.abs_diff(j) <= w
                })?
            } else {
                let opts = AttnOpts {
                    scale,
                    softcap,
                    key_mask: Some(mask),
                    mask_mode: KeyMaskMode::Exclude,
                    window,
                };
                ops::attention(&q, &k, &v, &opts)?
            };
            let a = a.transpose(1, 2)?.contiguous()?.reshape(&[b, l, nh * hd])?;
            let o = lin(&a, &layer.o, bias(3))?;
            let o = norm(&o, &layer.post_attn)?;
            x = r(ops::add(&x, &o)?)?;
            // Feed-forward block.
            let u = norm(&x, &layer.pre_ff)?;
            let gate = lin(&u, &layer.gate, None)?;
            let g = if bf {
                bf16::gelu_tanh(&gate)?
            } else {
                ops::gelu_tanh(&gate)?
            };
            let up = lin(&u, &layer.up, None)?;
            let f = lin(&r(ops::mul(&g, &up)?)?, &layer.down, None)?;
            let f = norm(&f, &layer.post_ff)?;
            x = r(ops::add(&x, &f)?)?;
        }
        let out = norm(&x, &self.norm)?;
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
