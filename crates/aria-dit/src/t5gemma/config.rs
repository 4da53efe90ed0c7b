//! The T5Gemma encoder configuration (`config.json` → `encoder`), parsed once into typed values:
//! every string setting becomes an enum here, and an unknown value is an error naming the key
//! and the allowed values.

use std::path::Path;

use serde_json::Value;

use crate::{DitError, Result};

/// The arithmetic the encoder computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 arithmetic throughout on the stored weights (bf16 weights are widened to f32 inside
    /// the matrix products, f32 accumulation): the encoder's default and the closest to exact
    /// arithmetic.
    #[default]
    F32,
    /// f32 arithmetic except inside the matrix products, whose weights are held in the
    /// `bf16_panels` format ([`aria_core::nn::WeightFormat::Bf16Panels`]: inputs rounded to
    /// bf16, pairs multiplied with f32 accumulation), and the attention's products, which the
    /// backend may round to bf16 too ([`aria_core::ops::AttnOpts::bf16_products`]). The backend
    /// picks the unit: the CPU runs the matrices on the AMX tile unit where it has AMX-BF16 (its
    /// own rounding inside each tile product; the attention's products there too; 5.3e-3 from
    /// an fp64 evaluation on the fixtures, where the reference's bf16 default is at 8.0e-3),
    /// else with `vdpbf16ps` (AVX-512 BF16; twice the f32 rate on AMD cores), else in a
    /// bit-identical scalar emulation of it (tens of times slower than [`Precision::F32`]).
    /// The same bits for any thread count. The pipeline's default where the CPU runs it faster
    /// than f32, and still closer to exact arithmetic than the reference's bf16 path.
    Bf16Dot,
    /// A replay of PyTorch's bf16 CPU arithmetic on AVX2-class CPUs (no AVX-512 BF16), bit for
    /// bit: every result rounded to bf16 where its kernels round, in their summation orders
    /// (see [`aria_core::ops::torch_bf16`]). It reproduces the reference's conditioning
    /// exactly where the reference runs those kernels; CPUs with AVX-512 BF16 run other
    /// kernels in PyTorch (and differ from this replay by ~3e-4).
    Bf16,
}

impl Precision {
    /// Whether the encoder multiplies on weights packed into bf16 panels
    /// ([`Precision::Bf16Dot`]).
    pub fn packs_bf16(self) -> bool {
        self == Precision::Bf16Dot
    }
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

/// The kind of attention of one encoder layer (`layer_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerType {
    /// Full bidirectional attention (`full_attention`).
    Full,
    /// Bidirectional attention limited to `|i − j| < sliding_window` (`sliding_attention`).
    Sliding,
}

/// The MLP activation (`hidden_activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HiddenActivation {
    /// `gelu_pytorch_tanh`: GELU, tanh approximation.
    #[default]
    GeluPytorchTanh,
}

/// The RoPE variant (`rope_parameters.rope_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RopeType {
    /// `default`: rotate-half over the whole head with `θ^(−2i/d)` frequencies.
    #[default]
    Default,
}

/// The string spellings of a typed setting: `(config value, variant)`.
trait Spelled: Sized + Copy + 'static {
    const NAMES: &'static [(&'static str, Self)];
}

impl Spelled for AttnImplementation {
    const NAMES: &'static [(&'static str, Self)] = &[("sdpa", Self::Sdpa), ("eager", Self::Eager)];
}
impl Spelled for LayerType {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("full_attention", Self::Full),
        ("sliding_attention", Self::Sliding),
    ];
}
impl Spelled for HiddenActivation {
    const NAMES: &'static [(&'static str, Self)] = &[("gelu_pytorch_tanh", Self::GeluPytorchTanh)];
}
impl Spelled for RopeType {
    const NAMES: &'static [(&'static str, Self)] = &[("default", Self::Default)];
}
impl Spelled for Precision {
    const NAMES: &'static [(&'static str, Self)] =
        &[("bfloat16", Self::Bf16), ("float32", Self::F32)];
}

/// Parse `v` as one of `T`'s spellings; the error says what was found and what is allowed.
fn spelled<T: Spelled>(v: &Value) -> std::result::Result<T, String> {
    v.as_str()
        .and_then(|s| T::NAMES.iter().find(|(n, _)| *n == s).map(|(_, t)| *t))
        .ok_or_else(|| {
            let allowed: Vec<String> = T::NAMES.iter().map(|(n, _)| format!("`{n}`")).collect();
            format!("{v} is not supported (allowed: {})", allowed.join(", "))
        })
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
    /// RoPE variant (only `default`).
    pub rope_type: RopeType,
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
    /// The MLP activation.
    pub hidden_activation: HiddenActivation,
    /// `attn_implementation` of the file (absent ⇒ SDPA).
    pub attn_implementation: AttnImplementation,
    /// The compute dtype the file asks the reference for (`dtype` / `torch_dtype`, top level
    /// or `encoder`): `Some(Bf16)` for `bfloat16`, `Some(F32)` for `float32`, `None` when
    /// absent (the weights' dtype decides). It does not choose the encoder's arithmetic (f32
    /// unless [`Precision::Bf16`] is asked for); see `T5GemmaEncoder::reference_precision`.
    pub dtype: Option<Precision>,
}

pub(super) fn cfg_err(path: &Path, reason: String) -> DitError {
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
        // An optional typed setting of the encoder config (absent or null ⇒ the default).
        fn typed<T: Spelled + Default>(
            v: Option<&Value>,
            err: impl Fn(&str) -> DitError,
        ) -> Result<T> {
            match v {
                None | Some(Value::Null) => Ok(T::default()),
                Some(v) => spelled(v).map_err(|why| err(&why)),
            }
        }
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
        let rope = enc.get("rope_parameters");
        let rope_theta = match rope.and_then(|r| r.get("rope_theta")) {
            Some(v) => v
                .as_f64()
                .ok_or_else(|| err("rope_parameters.rope_theta", "must be a number"))?,
            None => f64_key("rope_theta", Some(10000.0))?,
        };
        let rope_type: RopeType = typed(rope.and_then(|r| r.get("rope_type")), |why| {
            err("rope_parameters.rope_type", why)
        })?;
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
                .enumerate()
                .map(|(i, t)| spelled(t).map_err(|why| err(&format!("layer_types[{i}]"), &why)))
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
        let attention_bias = match enc.get("attention_bias") {
            None | Some(Value::Null) => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| err("attention_bias", "must be true or false"))?,
        };
        let hidden_activation: HiddenActivation = typed(enc.get("hidden_activation"), |why| {
            err("hidden_activation", why)
        })?;
        // Top level or encoder: named without the `encoder.` prefix.
        let top = |k: &str| enc.get(k).or_else(|| root.get(k));
        let attn_implementation: AttnImplementation = typed(top("attn_implementation"), |why| {
            cfg_err(path, format!("`attn_implementation`: {why}"))
        })?;
        let dt = ["dtype", "torch_dtype"]
            .iter()
            .find_map(|k| root.get(*k).or_else(|| enc.get(*k)))
            .filter(|v| !v.is_null());
        let dtype = dt
            .map(|v| {
                spelled::<Precision>(v).map_err(|why| cfg_err(path, format!("`dtype`: {why}")))
            })
            .transpose()?;
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
            rope_type,
            attn_logit_softcapping,
            query_pre_attn_scalar,
            sliding_window,
            layer_types,
            attention_bias,
            hidden_activation,
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
