//! The CPU bodies of the `torch_bf16_*` ops (PyTorch's bf16 CPU arithmetic, bit for bit) and
//! [`flash_attention`] with a mask closure, over the kernels of [`crate::torch_bf16`].

use super::{binary_map, f32_data, map, wdata};
use crate::threads;
use crate::torch_bf16 as k;
use aria_tensor::backend::check::linear_dims;
use aria_tensor::backend::BinaryOp;
use aria_tensor::options::AttnOpts;
use aria_tensor::{Result, Tensor};
use k::round;

/// The CPU body of `aria_core::ops::torch_bf16::linear`, on checked operands.
pub fn linear_host(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
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

/// The CPU body of `aria_core::ops::torch_bf16::attention`, on checked operands.
pub fn attention_host(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
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

/// The CPU body of `aria_core::ops::torch_bf16::round_tensor`, on checked operands.
pub fn round_tensor_host(x: &Tensor) -> Result<Tensor> {
    map(x, round)
}

/// The CPU body of `aria_core::ops::torch_bf16::binary`, on checked operands.
pub fn binary_host(a: &Tensor, b: &Tensor, f: BinaryOp) -> Result<Tensor> {
    match f {
        BinaryOp::Add => binary_map("torch_bf16::add", a, b, |x, y| round(x + y)),
        BinaryOp::Sub => binary_map("torch_bf16::sub", a, b, |x, y| round(x - y)),
        BinaryOp::Mul => binary_map("torch_bf16::mul", a, b, |x, y| round(x * y)),
        BinaryOp::Div => binary_map("torch_bf16::div", a, b, |x, y| round(x / y)),
        _ => Err(aria_tensor::CoreError::Unsupported {
            op: "torch_bf16_binary",
            backend: "cpu".into(),
        }),
    }
}

/// The CPU body of `aria_core::ops::torch_bf16::rms_norm`, on checked operands.
pub fn rms_norm_host(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.shape().last().copied().unwrap_or(0);
    let w1p: Vec<f32> = f32_data(w)?.iter().map(|w| 1.0 + w).collect();
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let out = threads::install(|| k::rms_norm_rows(&xd, &w1p, d, eps));
    Tensor::from_vec(out, x.shape())
}

/// The CPU body of `aria_core::ops::torch_bf16::gelu_tanh`, on checked operands.
pub fn gelu_tanh_host(x: &Tensor) -> Result<Tensor> {
    map(x, k::gelu_tanh)
}

/// The CPU body of `aria_core::ops::torch_bf16::rope`, on checked operands.
pub fn rope_host(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let (c, sn) = (f32_data(cos)?, f32_data(sin)?);
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let out = threads::install(|| k::rope_rows(&xd, &c, &sn, n, d));
    Tensor::from_vec(out, s)
}

/// PyTorch's CPU flash attention (`scaled_dot_product_attention` without dropout) on bf16
/// inputs, for sequences within one [`FLASH_KV_BLOCK`](crate::torch_bf16::FLASH_KV_BLOCK)-key block (longer ones rescale the
/// softmax between blocks, which this does not reproduce: it returns an error).
///
/// `q, k, v` are `[B, H, N, D]` f32 tensors holding bf16 values; `allowed(b, i, j)` says whether
/// query `i` of batch row `b` may attend key `j` ([`crate::torch_bf16::flash_attention`]).
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
    allowed: impl Fn(usize, usize, usize) -> bool + Sync,
) -> Result<Tensor> {
    aria_tensor::backend::check::flash_dims(q, k, v)?;
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
