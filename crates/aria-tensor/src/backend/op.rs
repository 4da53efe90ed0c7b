//! The op set: every op a model runs, as one value a [`Backend`] can execute.
//!
//! Each function of `aria_core::ops` (and the data-moving methods of [`Tensor`]) builds its
//! [`Op`], runs the check step ([`Op::check`]) and asks [`device_of`] where its inputs live: it
//! hands the op to the [`Backend`] that owns a device operand, or to the CPU backend
//! (`aria_cpu::Cpu`) when every operand is a host tensor. An op a backend does not
//! implement comes back as [`CoreError::Unsupported`] naming the op and the backend: nothing is
//! ever downloaded to the CPU behind the caller's back.
//!
//! The CPU backend's `run` (`aria_cpu::Cpu`) is the reference of every op. A backend can use
//! it for ops it has no kernel for, after moving the operands itself, which is what the
//! counting test backend does.

use std::sync::Arc;

use crate::backend::{Backend, Device};
use crate::options::{AttnOpts, FourierLayout, GluAct, KeyMaskMode, RmsStyle};
use crate::{CoreError, DType, Result, Tensor};

/// Elementwise functions of one tensor (see [`Op::Unary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnaryOp {
    /// `x·σ(x)`.
    Silu,
    /// `σ(x) = 1/(1+e^{-x})`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `sin(π·x)` (π as the reference writes it).
    SinPi,
    /// Exact GELU (erf form).
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
}

/// Elementwise functions of two tensors with NumPy broadcasting (see [`Op::Binary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a − b`.
    Sub,
    /// `a ⊙ b`.
    Mul,
    /// `a / b`.
    Div,
}

/// The owned form of [`AttnOpts`] carried by [`Op::Attention`].
#[derive(Debug, Clone)]
pub struct AttnSpec {
    /// See [`AttnOpts::scale`].
    pub scale: f32,
    /// See [`AttnOpts::softcap`].
    pub softcap: Option<f32>,
    /// See [`AttnOpts::key_mask`].
    pub key_mask: Option<Tensor>,
    /// See [`AttnOpts::mask_mode`].
    pub mask_mode: KeyMaskMode,
    /// See [`AttnOpts::window`].
    pub window: Option<(usize, usize)>,
    /// See [`AttnOpts::bf16_products`].
    pub bf16_products: bool,
}

impl AttnSpec {
    /// Capture borrowed options.
    pub fn of(o: &AttnOpts<'_>) -> AttnSpec {
        AttnSpec {
            scale: o.scale,
            softcap: o.softcap,
            key_mask: o.key_mask.cloned(),
            mask_mode: o.mask_mode,
            window: o.window,
            bf16_products: o.bf16_products,
        }
    }

    /// The borrowed options.
    pub fn opts(&self) -> AttnOpts<'_> {
        AttnOpts {
            scale: self.scale,
            softcap: self.softcap,
            key_mask: self.key_mask.as_ref(),
            mask_mode: self.mask_mode,
            window: self.window,
            bf16_products: self.bf16_products,
        }
    }
}

/// Something that holds tensors an [`Op`] reads (used to visit every operand).
trait Operands {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>);
}

impl Operands for Tensor {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        out.push(self);
    }
}
impl<T: Operands> Operands for Option<T> {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        if let Some(t) = self {
            t.visit(out);
        }
    }
}
impl<T: Operands> Operands for Vec<T> {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        self.iter_mut().for_each(|t| t.visit(out));
    }
}
impl<A: Operands, B: Operands> Operands for (A, B) {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        self.0.visit(out);
        self.1.visit(out);
    }
}
impl Operands for AttnSpec {
    fn visit<'a>(&'a mut self, out: &mut Vec<&'a mut Tensor>) {
        self.key_mask.visit(out);
    }
}
macro_rules! no_operands {
    ($($t:ty),*) => {$(
        impl Operands for $t {
            fn visit<'a>(&'a mut self, _: &mut Vec<&'a mut Tensor>) {}
        }
    )*};
}
no_operands!(f32, usize, bool, DType, UnaryOp, BinaryOp, GluAct, RmsStyle);
no_operands!(
    FourierLayout,
    crate::format::WeightFormat,
    [usize; 2],
    super::Prepared
);

macro_rules! op_set {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident $name:literal { $($field:ident : $ty:ty),* $(,)? }
    ),* $(,)?) => {
        /// One call of the op set (operands owned: a [`Tensor`] clone is cheap).
        ///
        /// The variants are the whole contract between model code and a backend; see the table
        /// in [`crate::backend`].
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Op {
            $(
                $(#[doc = $doc])*
                #[allow(missing_docs)]
                $variant { $($field: $ty),* },
            )*
        }

        impl Op {
            /// The op's name (as in [`CoreError::Unsupported`]).
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$variant { .. } => $name,)*
                }
            }

            /// Every tensor operand, for a backend that moves or inspects them.
            pub fn operands_mut(&mut self) -> Vec<&mut Tensor> {
                let mut out = Vec::new();
                match self {
                    $(Op::$variant { $($field),* } => { $( $field.visit(&mut out); )* })*
                }
                out
            }

            /// The names of every op of the set, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];
        }
    };
}

op_set! {
    /// `y = x·Wᵀ + b` (`aria_core::ops::linear`); `prepared` is the backend's own layout of `w`, made
    /// once (`aria_core::ops::linear_prepared`), which never changes the result.
    Linear "linear" { x: Tensor, w: Tensor, b: Option<Tensor>, prepared: Option<super::Prepared> },
    /// `y = x·Wᵀ + b` with `W [rows, cols]` packed in `format`, optionally with int8 activations
    /// (`aria_core::ops::linear_packed`); `w` holds the blocks (CPU) or the backend's layout (device).
    LinearPacked "linear_packed" { x: Tensor, w: Tensor, format: crate::format::WeightFormat, w8a8: bool, shape: [usize; 2], b: Option<Tensor> },
    /// Batched `[.., M, K]·[.., K, N]` (`aria_core::ops::matmul`).
    Matmul "matmul" { a: Tensor, b: Tensor },
    /// 1-D convolution, stride 1 (`aria_core::ops::conv1d`).
    Conv1d "conv1d" { x: Tensor, w: Tensor, b: Option<Tensor>, padding: usize },
    /// Scaled-dot-product attention, full or banded, optionally differential
    /// (`aria_core::ops::attention`, `aria_core::ops::attention_diff`).
    Attention "attention" { q: Tensor, k: Tensor, v: Tensor, diff: Option<(Tensor, Tensor)>, opts: AttnSpec },
    /// An elementwise function (`aria_core::ops::silu`, `aria_core::ops::gelu`, ...).
    Unary "unary" { x: Tensor, f: UnaryOp },
    /// `x·a + b` with scalars (`aria_core::ops::affine`).
    Affine "affine" { x: Tensor, a: f32, b: f32 },
    /// `x·s` (`aria_core::ops::mul_scalar`).
    MulScalar "mul_scalar" { x: Tensor, s: f32 },
    /// `x + s` (`aria_core::ops::add_scalar`).
    AddScalar "add_scalar" { x: Tensor, s: f32 },
    /// Broadcasting `a ∘ b` (`aria_core::ops::add`, `aria_core::ops::sub`, `aria_core::ops::mul`, `aria_core::ops::div`).
    Binary "binary" { a: Tensor, b: Tensor, f: BinaryOp },
    /// Gated linear unit (`aria_core::ops::glu`).
    Glu "glu" { x: Tensor, act: GluAct },
    /// Softmax over the last dimension (`aria_core::ops::softmax_last`).
    Softmax "softmax" { x: Tensor },
    /// Row gather (`aria_core::ops::embedding`).
    Embedding "embedding" { ids: Tensor, table: Tensor },
    /// Rotary embedding, rotate-half (`aria_core::ops::rope`).
    Rope "rope" { x: Tensor, cos: Tensor, sin: Tensor },
    /// RMSNorm (`aria_core::ops::rms_norm`).
    RmsNorm "rms_norm" { x: Tensor, w: Option<Tensor>, eps: f32, style: RmsStyle },
    /// LayerNorm (`aria_core::ops::layer_norm`).
    LayerNorm "layer_norm" { x: Tensor, w: Option<Tensor>, b: Option<Tensor>, eps: f32 },
    /// Dynamic tanh (`aria_core::ops::dyt`).
    Dyt "dyt" { x: Tensor, alpha: f32, gamma: Tensor, beta: Tensor },
    /// Sliding "same" windows of a token-major sequence (`aria_core::ops::unfold`).
    Unfold "unfold" { x: Tensor, k: usize },
    /// A strided or broadcast view made contiguous ([`Tensor::contiguous`]).
    Contiguous "contiguous" { x: Tensor },
    /// A dtype conversion ([`Tensor::to_dtype`]).
    ToDtype "to_dtype" { x: Tensor, dtype: DType },
    /// Concatenation along a dimension ([`Tensor::cat`]).
    Cat "cat" { xs: Vec<Tensor>, dim: usize },
    /// RMSNorm with a gain, then the adaLN modulation (`aria_core::ops::rms_norm_modulate`).
    RmsNormModulate "rms_norm_modulate" { x: Tensor, gamma: Tensor, eps: f32, scale_shift: Option<(Tensor, Tensor)> },
    /// `h + u ⊙ gate` onto the last tokens, masked rows kept (`aria_core::ops::gated_residual_add`).
    GatedResidualAdd "gated_residual_add" { h: Tensor, u: Tensor, gate: Option<Tensor>, row_mask: Option<Tensor> },
    /// Heads of a projection's column block, with RMS QK-norm and RoPE (`aria_core::ops::split_heads`).
    SplitHeads "split_heads" { x: Tensor, col: usize, heads: usize, head_dim: usize, norm: Option<(Tensor, f32)>, rope: Option<(Tensor, Tensor)> },
    /// `[B, H, N, D]` → `[B, N, H·D]`, masked rows zeroed (`aria_core::ops::merge_heads`).
    MergeHeads "merge_heads" { x: Tensor, row_mask: Option<Tensor> },
    /// `a_i·x + b_i·y` per batch item (`aria_core::ops::axpby`).
    Axpby "axpby" { a: Vec<f32>, x: Tensor, b: Vec<f32>, y: Tensor },
    /// CFG with the APG projection (`aria_core::ops::apg_guidance`).
    ApgGuidance "apg_guidance" { x: Tensor, v_cond: Tensor, v_uncond: Tensor, sigma: Vec<f32>, mask: Option<Tensor>, cfg_scale: f32, apg_scale: f32, norm_threshold: f32 },
    /// CFG rescale toward the conditional velocity's channel spread (`aria_core::ops::cfg_rescale`).
    CfgRescale "cfg_rescale" { v: Tensor, v_cond: Tensor, phi: f32 },
    /// Zero padding along one dimension (`aria_core::ops::pad`).
    Pad "pad" { x: Tensor, dim: usize, before: usize, after: usize },
    /// Rotary tables at absolute positions (`aria_core::ops::rope_table`).
    RopeTable "rope_table" { inv_freq: Tensor, pos0: usize, n: usize },
    /// One projection of a fused q/k/v output as heads, with DyT and RoPE (`aria_core::ops::qkv_heads`).
    QkvHeads "qkv_heads" { x: Tensor, parts: usize, part: usize, heads: usize, alpha: f32, norm: Option<(Tensor, Tensor)>, rope: Option<(Tensor, Tensor)> },
    /// Unbiased standard deviation over the last dimension (`aria_core::ops::std_last`).
    StdLast "std_last" { x: Tensor },
    /// Fourier features of scalars (`aria_core::ops::fourier_features`).
    FourierFeatures "fourier_features" { values: Tensor, freqs: Tensor, layout: FourierLayout },
    /// Masked sequence rows replaced by a row or zeros (`aria_core::ops::fill_masked_rows`).
    FillMaskedRows "fill_masked_rows" { x: Tensor, mask: Tensor, fill: Option<Tensor> },
    /// PyTorch-AVX2 bf16 replay: `linear` (`aria_core::ops::torch_bf16::linear`).
    TorchBf16Linear "torch_bf16_linear" { x: Tensor, w: Tensor, b: Option<Tensor> },
    /// PyTorch-AVX2 bf16 replay: flash attention (`aria_core::ops::torch_bf16::attention`).
    TorchBf16Attention "torch_bf16_attention" { q: Tensor, k: Tensor, v: Tensor, opts: AttnSpec },
    /// PyTorch-AVX2 bf16 replay: Gemma RMSNorm (`aria_core::ops::torch_bf16::rms_norm`).
    TorchBf16RmsNorm "torch_bf16_rms_norm" { x: Tensor, w: Tensor, eps: f32 },
    /// PyTorch-AVX2 bf16 replay: rotary embedding (`aria_core::ops::torch_bf16::rope`).
    TorchBf16Rope "torch_bf16_rope" { x: Tensor, cos: Tensor, sin: Tensor },
    /// PyTorch-AVX2 bf16 replay: `gelu_pytorch_tanh` (`aria_core::ops::torch_bf16::gelu_tanh`).
    TorchBf16GeluTanh "torch_bf16_gelu_tanh" { x: Tensor },
    /// PyTorch-AVX2 bf16 replay: rounding to bf16 (`aria_core::ops::torch_bf16::round_tensor`).
    TorchBf16Round "torch_bf16_round" { x: Tensor },
    /// PyTorch-AVX2 bf16 replay: rounded `a ∘ b` (`aria_core::ops::torch_bf16::binary`).
    TorchBf16Binary "torch_bf16_binary" { a: Tensor, b: Tensor, f: BinaryOp },
}

/// The backend that owns any of `tensors` (`None`: all on the CPU). Tensors on two different
/// backends are an error. CPU tensors mixed with device tensors are passed to the backend,
/// which decides (the counting test backend counts them as implicit uploads).
pub fn device_of(
    op: &'static str,
    tensors: &[Option<&Tensor>],
) -> Result<Option<Arc<dyn Backend>>> {
    let mut found: Option<Arc<dyn Backend>> = None;
    for t in tensors.iter().flatten() {
        if let Device::Backend(b) = t.device() {
            match &found {
                None => found = Some(b),
                Some(f) if f.name() == b.name() => {}
                Some(f) => {
                    return Err(CoreError::Backend {
                        backend: f.name().to_string(),
                        reason: format!("{op}: operands live on {} and on {}", f.name(), b.name()),
                    })
                }
            }
        }
    }
    Ok(found)
}
