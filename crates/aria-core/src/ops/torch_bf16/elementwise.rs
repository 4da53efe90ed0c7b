//! The element-wise and row ops of the bf16 replay: every result computed in f32 and rounded to
//! bf16 once, as PyTorch's CPU kernels do for bf16 tensors.

use rayon::prelude::*;

use super::{round, sum};
use crate::backend::{BinaryOp, Op};
use crate::ops::{binary_map, f32_data, map, route};
use crate::{threads, Result, Tensor};

/// Round every element to bf16 (the result stays an f32 tensor holding bf16 values): the
/// rounding PyTorch applies when an f32 result is stored in a bf16 tensor. An op of the set
/// (`torch_bf16_round`).
pub fn round_tensor(x: &Tensor) -> Result<Tensor> {
    route!("torch_bf16_round", [x], Op::TorchBf16Round { x: x.clone() });
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
    );
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
/// in f32, rounded once (`(x·w).to(bf16)`, Gemma style), the mean of squares summed in the
/// order of PyTorch's vectorised reduction ([`sum`]). An op of the set (`torch_bf16_rms_norm`).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    route!(
        "torch_bf16_rms_norm",
        [x, w],
        Op::TorchBf16RmsNorm {
            x: x.clone(),
            w: w.clone(),
            eps
        }
    );
    let d = x.shape().last().copied().unwrap_or(0);
    let wv: Vec<f32> = f32_data(w)?.iter().map(|w| 1.0 + w).collect();
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let mut out = vec![0f32; xd.len()];
    if d > 0 {
        threads::install(|| {
            out.par_chunks_mut(d).zip(xd.par_chunks(d)).for_each_init(
                || vec![0f32; d],
                |sq, (o, r)| {
                    for (s, e) in sq.iter_mut().zip(r) {
                        *s = e * e;
                    }
                    let ms = sum(sq) / d as f32;
                    let inv = 1.0 / (ms + eps).sqrt();
                    for ((o, e), w) in o.iter_mut().zip(r).zip(&wv) {
                        *o = round(*e * inv * w);
                    }
                },
            )
        });
    }
    Tensor::from_vec(out, x.shape())
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

/// [`gelu_tanh_value`] of every element; bf16 inputs (all of them in a replay) are looked up in
/// a table of the 65 536 possible results. An op of the set (`torch_bf16_gelu_tanh`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    route!(
        "torch_bf16_gelu_tanh",
        [x],
        Op::TorchBf16GeluTanh { x: x.clone() }
    );
    let table = gelu_table();
    map(x, |v| {
        let b = half::bf16::from_f32(v);
        if b.to_f32() == v {
            table[b.to_bits() as usize]
        } else {
            gelu_tanh_value(v)
        }
    })
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
    );
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let half = d / 2;
    let (c, sn) = (f32_data(cos)?, f32_data(sin)?);
    let xc = x.contiguous()?;
    let xd = f32_data(&xc)?;
    let mut out = vec![0f32; xd.len()];
    if d > 0 && n > 0 {
        threads::install(|| {
            out.par_chunks_mut(d)
                .zip(xd.par_chunks(d))
                .enumerate()
                .for_each(|(row, (o, e))| {
                    let p = row % n;
                    let (c, sn) = (&c[p * d..(p + 1) * d], &sn[p * d..(p + 1) * d]);
                    for i in 0..half {
                        let (a, b) = (e[i], e[i + half]);
                        o[i] = round(round(a * c[i]) + round(-b * sn[i]));
                        o[i + half] = round(round(b * c[i + half]) + round(a * sn[i + half]));
                    }
                })
        });
    }
    Tensor::from_vec(out, s)
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
        assert_eq!(g.to_vec_f32().unwrap()[0].to_bits(), (-0f32).to_bits());
    }

    /// The table lookup gives the formula's result for every bf16 input (and non-bf16 inputs
    /// take the formula).
    #[test]
    fn gelu_table_is_the_formula() {
        let v: Vec<f32> = (0..=u16::MAX)
            .step_by(7)
            .map(|b| half::bf16::from_bits(b).to_f32())
            .filter(|v| v.is_finite())
            .chain([0.123_456_79f32, -3.333_333_3])
            .collect();
        let g = gelu_tanh(&Tensor::from_vec(v.clone(), &[v.len()]).unwrap())
            .unwrap()
            .to_vec_f32()
            .unwrap();
        for (x, y) in v.iter().zip(&g) {
            assert_eq!(y.to_bits(), gelu_tanh_value(*x).to_bits(), "gelu({x})");
        }
    }

    /// RMSNorm rounds once per element; rope rounds after each product and the sum, on a
    /// strided input, with a table longer than the sequence.
    #[test]
    fn rms_norm_and_rope_reference_formulas() {
        let d = 24;
        let x: Vec<f32> = (0..3 * d)
            .map(|i| round(((i * 37 % 11) as f32 - 5.0) * 0.37))
            .collect();
        let w: Vec<f32> = (0..d).map(|i| round(i as f32 * 0.01 - 0.1)).collect();
        let xt = Tensor::from_vec(x.clone(), &[3, d]).unwrap();
        let wt = Tensor::from_vec(w.clone(), &[d]).unwrap();
        let got = rms_norm(&xt, &wt, 1e-6).unwrap().to_vec_f32().unwrap();
        for (r, row) in x.chunks(d).enumerate() {
            let sq: Vec<f32> = row.iter().map(|e| e * e).collect();
            let inv = 1.0 / (sum(&sq) / d as f32 + 1e-6).sqrt();
            for i in 0..d {
                let want = round(row[i] * inv * (1.0 + w[i]));
                assert_eq!(got[r * d + i].to_bits(), want.to_bits());
            }
        }
        // rope over [B=1, N=3, D] stored transposed ([D, N] memory), tables of 5 rows.
        let (n, half) = (3, d / 2);
        let cos: Vec<f32> = (0..5 * d).map(|i| round((i as f32 * 0.1).cos())).collect();
        let sin: Vec<f32> = (0..5 * d).map(|i| round((i as f32 * 0.1).sin())).collect();
        let (ct, st) = (
            Tensor::from_vec(cos.clone(), &[5, d]).unwrap(),
            Tensor::from_vec(sin.clone(), &[5, d]).unwrap(),
        );
        let xs = Tensor::from_vec(x.clone(), &[d, n])
            .unwrap()
            .transpose(0, 1)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let got = rope(&xs, &ct, &st).unwrap().to_vec_f32().unwrap();
        for p in 0..n {
            let e: Vec<f32> = (0..d).map(|i| x[i * n + p]).collect();
            for i in 0..half {
                let (a, b) = (e[i], e[i + half]);
                let c = &cos[p * d..];
                let s = &sin[p * d..];
                let lo = round(round(a * c[i]) + round(-b * s[i]));
                let hi = round(round(b * c[i + half]) + round(a * s[i + half]));
                assert_eq!(got[p * d + i].to_bits(), lo.to_bits());
                assert_eq!(got[p * d + i + half].to_bits(), hi.to_bits());
            }
        }
        let short = Tensor::from_vec(vec![0f32; 2 * d], &[2, d]).unwrap();
        assert!(rope(&xs, &short, &short).is_err());
    }
}
