//! The reference's bf16 arithmetic on the CPU, reproduced on f32 tensors.
//!
//! The official pipeline loads the text encoder in its checkpoint dtype (bf16) and runs it with
//! PyTorch's CPU kernels. Every intermediate tensor is then bf16, and each operation computes in
//! f32 and rounds its result to bf16 once:
//!
//! * matrix products accumulate bf16 × bf16 products in f32 and round the output; the products
//!   of two bf16 values are exact in f32, so the summation order is all that is left, and it is
//!   reproduced too ([`aria_core::ops::torch_bf16`]): with random weights the encoder is chaotic enough
//!   that one flipped bf16 ulp early on changes half of the output elements by an ulp;
//! * element-wise ops (`·`, `+`, GELU, the RoPE products and sum) widen, compute, round;
//! * RMSNorm widens to f32 for the whole norm and rounds once (`(x·w).to(bf16)`, Gemma style),
//!   the mean of squares summed in the order of PyTorch's vectorised reduction ([`sum`]);
//! * SDPA runs PyTorch's CPU flash-attention kernel: `q·kᵀ` in f32, scale and mask, row max,
//!   `exp` by the kernel's fast polynomial ([`exp_u20`]), the row sum over the f32 values, the
//!   *unnormalised* probabilities rounded to bf16 before the product with `v` (f32
//!   accumulation), and the output scaled by `1/sum` and rounded.
//!
//! The orders are those of PyTorch 2.7's ATen kernels on an AVX2 CPU without oneDNN's bf16
//! matrix products (oneDNN takes over `linear` only on AVX-512 machines), which is the machine
//! class the official fixtures were produced on: with them the encoder reproduces the
//! reference's bf16 `last_hidden_state` bit for bit. Tensors here are f32 tensors holding
//! bf16-representable values.

use aria_core::ops;
pub use aria_core::ops::torch_bf16::{exp_u20, flash_attention, linear, round, sum};
use aria_core::Tensor;
use rayon::prelude::*;

use crate::Result;

/// Keys of one block of the reference's CPU flash attention; longer sequences rescale the
/// softmax between blocks, which [`flash_attention`] does not reproduce.
pub use aria_core::ops::torch_bf16::FLASH_KV_BLOCK as MAX_KEYS;

/// Round every element of a tensor to bf16 (the result stays an f32 tensor).
pub fn round_tensor(t: &Tensor) -> Result<Tensor> {
    Ok(ops::map(t, round)?)
}

/// Gemma's RMSNorm on bf16 input: `x · rsqrt(mean(x²) + eps) · (1 + w)` in f32, rounded once.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let d = w.elem_count();
    let wv: Vec<f32> = w.to_vec_f32()?.iter().map(|w| 1.0 + w).collect();
    let mut v = x.contiguous()?.to_vec_f32()?;
    if d > 0 {
        v.par_chunks_mut(d).for_each(|r| {
            let sq: Vec<f32> = r.iter().map(|e| e * e).collect();
            let ms = sum(&sq) / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for (e, w) in r.iter_mut().zip(&wv) {
                *e = round(*e * inv * w);
            }
        });
    }
    Ok(Tensor::from_vec(v, x.shape())?)
}

/// `tanh` as SLEEF's vectorised `tanhf` (the reference's) returns it: like the C library's to
/// within an ulp, and exactly ±1 beyond |x| > 8.664339742. Only the saturation shows after bf16
/// rounding: just below −5 the GELU is −0 there, not −1.5e-7.
#[inline]
pub fn tanh(x: f32) -> f32 {
    if x.abs() > 8.664_34 {
        1f32.copysign(x)
    } else {
        x.tanh()
    }
}

/// `gelu_pytorch_tanh` of one value as PyTorch's CPU kernel computes it for bf16 inputs (f32
/// math in this operation order), rounded to bf16.
pub fn gelu_tanh_value(v: f32) -> f32 {
    const BETA: f32 = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    const KAPPA: f32 = 0.044715;
    let cube = v * v * v;
    let inner = BETA * (v + KAPPA * cube);
    round(0.5 * v * (1.0 + tanh(inner)))
}

/// [`gelu_tanh_value`] of every bf16 value, indexed by its bits (built once, 256 KiB).
fn gelu_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| gelu_tanh_value(half::bf16::from_bits(b).to_f32()))
            .collect()
    })
}

/// [`gelu_tanh_value`] of every element; bf16 inputs (all of them on the bf16 path) are looked
/// up in a table of the 65 536 possible results.
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    let table = gelu_table();
    Ok(ops::map(x, |v| {
        let b = half::bf16::from_f32(v);
        if b.to_f32() == v {
            table[b.to_bits() as usize]
        } else {
            gelu_tanh_value(v)
        }
    })?)
}

/// Rotary embedding (rotate-half over the whole head) with bf16 tables and bf16 rounding after
/// each product and after the sum: `q·cos + rotate_half(q)·sin` as three bf16 operations.
/// `x` is `[.., N, D]`, `cos`/`sin` are `[N, D]` (already rounded to bf16).
pub fn rope(x: &Tensor, cos: &[f32], sin: &[f32]) -> Result<Tensor> {
    let s = x.shape().to_vec();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let half = d / 2;
    let mut v = x.contiguous()?.to_vec_f32()?;
    if d > 0 && n > 0 {
        for (row, e) in v.chunks_mut(d).enumerate() {
            let p = row % n;
            let (c, sn) = (&cos[p * d..(p + 1) * d], &sin[p * d..(p + 1) * d]);
            for i in 0..half {
                let (a, b) = (e[i], e[i + half]);
                e[i] = round(round(a * c[i]) + round(-b * sn[i]));
                e[i + half] = round(round(b * c[i + half]) + round(a * sn[i + half]));
            }
        }
    }
    Ok(Tensor::from_vec(v, &s)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_saturates_like_sleef() {
        assert_eq!(tanh(8.7), 1.0);
        assert_eq!(tanh(-8.7), -1.0);
        assert!(tanh(8.6) < 1.0);
        // Hence the GELU of −5.0625 is −0 in bf16, as the reference computes it.
        let g = gelu_tanh(&Tensor::from_vec(vec![-5.0625f32], &[1]).unwrap()).unwrap();
        assert_eq!(g.to_vec_f32().unwrap()[0], 0.0);
    }
}
