//! PyTorch's bf16 CPU arithmetic, reproduced bit for bit on f32 tensors that hold bf16 values.
//!
//! A model run in bf16 by PyTorch rounds every op's result to bf16, and the *order* in which its
//! kernels add f32 partial results decides which way a value near a rounding boundary goes.
//! With random (or merely sensitive) weights one flipped ulp early in a network spreads to half
//! of its outputs, so a faithful replay needs the orders too. The kernels that reproduce them
//! (PyTorch 2.7's ATen orders on an AVX2 CPU) are in [`aria_cpu::torch_bf16`], on slices.
//!
//! The functions here are ops of the set (see [`crate::backend`]): [`linear`], [`attention`],
//! [`rms_norm`], [`rope`], [`gelu_tanh`], [`round_tensor`], [`add`] and [`mul`] each route to
//! the backend their operands live on (`torch_bf16_*` ops), so the replay runs wherever the f32
//! path runs; a backend without them returns `Unsupported`. On CPU tensors they run the
//! `aria_cpu` kernels.

use crate::backend::{AttnSpec, BinaryOp, Op};
use crate::cpu::torch_bf16 as k;
use crate::ops::{route, AttnOpts};

use crate::{Result, Tensor};
pub use aria_cpu::host::torch_bf16::flash_attention;

pub use k::{
    dot, exp_u20, flash_softmax_row, gelu_tanh_value, lanes_sum, round, seq_dot, sum, tanh,
    FLASH_KV_BLOCK, LANES,
};

/// `x · wᵀ (+ bias)` as PyTorch's bf16 `linear` computes it on the CPU without oneDNN: every
/// output is [`dot`] of an input row and a weight row (plus the bias in f32), rounded to bf16.
/// `x` is `[.., K]` holding bf16 values, `w` `[N, K]` in any float dtype (bf16 for a faithful
/// replay), `bias` `[N]`. Returns f32 holding bf16 values.
///
/// An op of the set (`torch_bf16_linear`).
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    route!(
        "torch_bf16_linear",
        [x, w, bias],
        Op::TorchBf16Linear {
            x: x.clone(),
            w: w.clone(),
            b: bias.cloned()
        }
    )
}

/// [`flash_attention`] as an op of the set (`torch_bf16_attention`), with the masking of
/// [`AttnOpts`]: keys whose `key_mask` entry is 0 are excluded ([`KeyMaskMode::Exclude`](crate::ops::KeyMaskMode::Exclude), the
/// only mode the kernel has) and a `window` limits query `i` to keys `i − left ..= i + right`.
/// The kernel has no logit soft-cap (SDPA ignores it): asking for one is an error.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    route!(
        "torch_bf16_attention",
        [q, k, v, opts.key_mask],
        Op::TorchBf16Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            opts: AttnSpec::of(opts)
        }
    )
}

/// Round every element to bf16 (the result stays an f32 tensor holding bf16 values): the
/// rounding PyTorch applies when an f32 result is stored in a bf16 tensor. An op of the set
/// (`torch_bf16_round`).
pub fn round_tensor(x: &Tensor) -> Result<Tensor> {
    route!("torch_bf16_round", [x], Op::TorchBf16Round { x: x.clone() })
}

/// `round(a ∘ b)` for `a, b` holding bf16 values (broadcasting): a bf16 `+`, `−`, `·` or `/` as
/// PyTorch computes it (widen, compute in f32, round). An op of the set (`torch_bf16_binary`).
pub fn binary(a: &Tensor, b: &Tensor, f: BinaryOp) -> Result<Tensor> {
    route!(
        "torch_bf16_binary",
        [a, b],
        Op::TorchBf16Binary {
            a: a.clone(),
            b: b.clone(),
            f
        }
    )
}

/// The bf16 `a + b` ([`binary`]).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, BinaryOp::Add)
}

/// The bf16 `a · b` ([`binary`]).
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(a, b, BinaryOp::Mul)
}

/// Gemma's RMSNorm on bf16 input, over the last dimension: `x · rsqrt(mean(x²) + eps) · (1 + w)`
/// in f32, rounded once ([`aria_cpu::torch_bf16::rms_norm_rows`]). An op of the set
/// (`torch_bf16_rms_norm`).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    route!(
        "torch_bf16_rms_norm",
        [x, w],
        Op::TorchBf16RmsNorm {
            x: x.clone(),
            w: w.clone(),
            eps
        }
    )
}

/// [`gelu_tanh_value`] of every element (bf16 inputs are looked up in a table of the 65 536
/// possible results). An op of the set (`torch_bf16_gelu_tanh`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    route!(
        "torch_bf16_gelu_tanh",
        [x],
        Op::TorchBf16GeluTanh { x: x.clone() }
    )
}

/// Rotary embedding (rotate-half over the whole head) with bf16 tables and bf16 rounding after
/// each product and after the sum: `x·cos + rotate_half(x)·sin` as three bf16 operations.
/// `x` is `[.., N, D]` (any strides), `cos`/`sin` are `[≥N, D]` holding bf16 values (row `p` for
/// position `p`). Returns a contiguous tensor. An op of the set (`torch_bf16_rope`).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    route!(
        "torch_bf16_rope",
        [x, cos, sin],
        Op::TorchBf16Rope {
            x: x.clone(),
            cos: cos.clone(),
            sin: sin.clone()
        }
    )
}

#[cfg(test)]
mod tests;
