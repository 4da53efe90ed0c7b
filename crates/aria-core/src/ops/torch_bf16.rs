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
use crate::ops::{binary_map, f32_data, linear_dims, map, route, wdata, AttnOpts};
use crate::{threads, Result, Tensor};

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

/// The CPU body of [`linear`] (the CPU backend runs it on checked operands).
pub(crate) fn linear_host(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (m, kd, n) = linear_dims(x, w, bias)?;
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let (xd, wd) = (
        wdata("torch_bf16::linear", &x)?,
        wdata("torch_bf16::linear", &w)?,
    );
    let bv = bias.map(f32_data).transpose()?;
    let out = threads::install(|| k::linear(&xd, &wd, bv.as_deref(), m, kd, n));
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Tensor::from_vec(out, &shape)
}

/// PyTorch's CPU flash attention (`scaled_dot_product_attention` without dropout) on bf16
/// inputs, for sequences within one [`FLASH_KV_BLOCK`]-key block (longer ones rescale the
/// softmax between blocks, which this does not reproduce: it returns an error).
///
/// `q, k, v` are `[B, H, N, D]` f32 tensors holding bf16 values; `allowed(b, i, j)` says whether
/// query `i` of batch row `b` may attend key `j` ([`aria_cpu::torch_bf16::flash_attention`]).
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
    allowed: impl Fn(usize, usize, usize) -> bool + Sync,
) -> Result<Tensor> {
    crate::backend::check::flash_dims(q, k, v)?;
    let s = q.shape().to_vec();
    let dims = k::FlashDims {
        b: s[0],
        h: s[1],
        n: s[2],
        kn: k.shape()[2],
        d: s[3],
    };
    let (qc, kc, vc) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (qv, kv, vv) = (f32_data(&qc)?, f32_data(&kc)?, f32_data(&vc)?);
    let allowed = &allowed;
    let out = threads::install(|| k::flash_attention(&qv, &kv, &vv, dims, scale, allowed));
    Tensor::from_vec(out, &s)
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

/// The CPU body of [`attention`] (the CPU backend runs it on checked operands).
pub(crate) fn attention_host(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    // Checked: no soft-cap, the shapes, a key mask [B, Nk] applied by exclusion.
    let nk = k.dim(2)?;
    let valid: Option<Vec<bool>> = match opts.key_mask {
        None => None,
        Some(m) => Some(f32_data(m)?.iter().map(|&x| x != 0.0).collect()),
    };
    let (left, right) = opts.window.unwrap_or((usize::MAX, usize::MAX));
    flash_attention(q, k, v, opts.scale, |bi, i, j| {
        valid.as_ref().is_none_or(|m| m[bi * nk + j])
            && (j >= i || i - j <= left)
            && (j <= i || j - i <= right)
    })
}

/// Round every element to bf16 (the result stays an f32 tensor holding bf16 values): the
/// rounding PyTorch applies when an f32 result is stored in a bf16 tensor. An op of the set
/// (`torch_bf16_round`).
pub fn round_tensor(x: &Tensor) -> Result<Tensor> {
    route!("torch_bf16_round", [x], Op::TorchBf16Round { x: x.clone() })
}

/// The CPU body of [`round_tensor`] (the CPU backend runs it on checked operands).
pub(crate) fn round_tensor_host(x: &Tensor) -> Result<Tensor> {
    map(x, round)
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

/// The CPU body of [`binary`] (the CPU backend runs it on checked operands).
pub(crate) fn binary_host(a: &Tensor, b: &Tensor, f: BinaryOp) -> Result<Tensor> {
    match f {
        BinaryOp::Add => binary_map("torch_bf16::add", a, b, |x, y| round(x + y)),
        BinaryOp::Sub => binary_map("torch_bf16::sub", a, b, |x, y| round(x - y)),
        BinaryOp::Mul => binary_map("torch_bf16::mul", a, b, |x, y| round(x * y)),
        BinaryOp::Div => binary_map("torch_bf16::div", a, b, |x, y| round(x / y)),
    }
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

/// The CPU body of [`rms_norm`] (the CPU backend runs it on checked operands).
pub(crate) fn rms_norm_host(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.shape().last().copied().unwrap_or(0);
    let w1p: Vec<f32> = f32_data(w)?.iter().map(|w| 1.0 + w).collect();
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let out = threads::install(|| k::rms_norm_rows(&xd, &w1p, d, eps));
    Tensor::from_vec(out, x.shape())
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

/// The CPU body of [`gelu_tanh`] (the CPU backend runs it on checked operands).
pub(crate) fn gelu_tanh_host(x: &Tensor) -> Result<Tensor> {
    map(x, k::gelu_tanh)
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

/// The CPU body of [`rope`] (the CPU backend runs it on checked operands).
pub(crate) fn rope_host(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let (c, sn) = (f32_data(cos)?, f32_data(sin)?);
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let out = threads::install(|| k::rope_rows(&xd, &c, &sn, n, d));
    Tensor::from_vec(out, s)
}

#[cfg(test)]
mod tests;
