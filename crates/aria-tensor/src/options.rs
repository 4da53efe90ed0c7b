//! The option types of the op set: what the [`Op`](crate::backend::Op) variants carry besides
//! their tensors (the `ops` functions of `aria-core` take them as arguments).

use crate::Tensor;

/// How a key mask is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMaskMode {
    /// The official CPU semantics (PyTorch SDPA after `v ← v ⊙ mask`): masked keys keep their
    /// weight in the softmax denominator but contribute zero values.
    #[default]
    ZeroValues,
    /// True masking: masked keys are excluded from the softmax. A query with no valid key
    /// outputs zeros.
    Exclude,
}

/// Options of attention (`aria_core::ops::attention`).
#[derive(Debug, Clone, Copy)]
pub struct AttnOpts<'a> {
    /// Multiplier of `q·k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft-capping `c·tanh(s/c)` applied after scaling.
    pub softcap: Option<f32>,
    /// Key validity mask `[B, Nk]` (any dtype; non-zero = valid).
    pub key_mask: Option<&'a Tensor>,
    /// How `key_mask` is applied.
    pub mask_mode: KeyMaskMode,
    /// Band: query `i` sees keys `j` with `i - left <= j <= i + right` (self-attention).
    pub window: Option<(usize, usize)>,
    /// The two products may round `q`, `k`, the probabilities and `v` to bf16 (f32
    /// accumulation; scaling, masking and the softmax stay f32). A permission, not an order: a
    /// backend takes it where it has a faster unit for bf16 products (the CPU: the AMX tile
    /// unit, see `aria_core::ops::attention_amx`) and computes in f32 elsewhere. Models set it for a bf16
    /// precision mode; they never ask which unit runs it.
    pub bf16_products: bool,
}

impl<'a> AttnOpts<'a> {
    /// Plain attention with the given scale.
    pub fn new(scale: f32) -> Self {
        AttnOpts {
            scale,
            softcap: None,
            key_mask: None,
            mask_mode: KeyMaskMode::ZeroValues,
            window: None,
            bf16_products: false,
        }
    }
}

/// The gate activation of a gated linear unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GluAct {
    /// SwiGLU.
    Silu,
    /// GeGLU, exact GELU.
    Gelu,
    /// GeGLU, tanh GELU.
    GeluTanh,
    /// `sin(π·x)` gate (SAME-L sinusoidal blocks).
    SinPi,
}

/// Which RMSNorm scale convention to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmsStyle {
    /// `x / rms(x) · w`.
    Plain,
    /// Gemma's `x / rms(x) · (1 + w)`.
    OnePlus,
}

/// The layout of `fourier_features` (`aria_core::ops::fourier_features`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FourierLayout {
    /// `[cos(a_0) … cos(a_{F−1}), sin(a_0) … sin(a_{F−1})]` (`ExpoFourierFeatures`, the DiT
    /// timestep embedding): `2F` features.
    CosSin,
    /// `[v, sin(a_0) … sin(a_{F−1}), cos(a_0) … cos(a_{F−1})]` (`LearnedPositionalEmbedding`):
    /// `2F + 1` features.
    ValueSinCos,
}

/// The dynamic-tanh norm of `qkv_heads` (`aria_core::ops::qkv_heads`): `γ ⊙ tanh(α·x) + β` over the head dimension.
#[derive(Debug, Clone, Copy)]
pub struct HeadNorm<'a> {
    /// α.
    pub alpha: f32,
    /// γ `[Dh]`.
    pub gamma: &'a Tensor,
    /// β `[Dh]`.
    pub beta: &'a Tensor,
}
