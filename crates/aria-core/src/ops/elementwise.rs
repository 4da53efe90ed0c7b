use super::route;
use crate::backend::{BinaryOp, Op, UnaryOp};
use crate::ops::GluAct;
use crate::{Result, Tensor};

/// `x · sigmoid(x)`.
pub fn silu(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::Silu
        }
    )
}

/// `1 / (1 + e^-x)`.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::Sigmoid
        }
    )
}

/// `tanh(x)`.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::Tanh
        }
    )
}

/// `sin(π·x)` with π written as the reference does (3.14159265359, which rounds to the same f32
/// as `f32::consts::PI`); the product is rounded to f32 before the sine.
pub fn sin_pi(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::SinPi
        }
    )
}

/// Exact GELU `x·Φ(x)` (erf form).
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::Gelu
        }
    )
}

/// GELU, tanh approximation (`gelu_pytorch_tanh`).
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    route!(
        "unary",
        [x],
        Op::Unary {
            x: x.clone(),
            f: UnaryOp::GeluTanh
        }
    )
}

/// `x · s`.
pub fn mul_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("mul_scalar", [x], Op::MulScalar { x: x.clone(), s })
}

/// `x + s`.
pub fn add_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("add_scalar", [x], Op::AddScalar { x: x.clone(), s })
}

/// `x · a + b`.
pub fn affine(x: &Tensor, a: f32, b: f32) -> Result<Tensor> {
    route!("affine", [x], Op::Affine { x: x.clone(), a, b })
}

/// Gated linear unit over the last dimension `[.., 2F] → [.., F]`: first half is the value,
/// second half the gate: `value ⊙ act(gate)`.
pub fn glu(x: &Tensor, act: GluAct) -> Result<Tensor> {
    route!("glu", [x], Op::Glu { x: x.clone(), act })
}

/// `a + b` (broadcasting).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    route!(
        "binary",
        [a, b],
        Op::Binary {
            a: a.clone(),
            b: b.clone(),
            f: BinaryOp::Add
        }
    )
}

/// `a − b` (broadcasting).
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    route!(
        "binary",
        [a, b],
        Op::Binary {
            a: a.clone(),
            b: b.clone(),
            f: BinaryOp::Sub
        }
    )
}

/// `a ⊙ b` (broadcasting).
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    route!(
        "binary",
        [a, b],
        Op::Binary {
            a: a.clone(),
            b: b.clone(),
            f: BinaryOp::Mul
        }
    )
}

/// `a / b` (broadcasting).
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    route!(
        "binary",
        [a, b],
        Op::Binary {
            a: a.clone(),
            b: b.clone(),
            f: BinaryOp::Div
        }
    )
}

/// Softmax over the last dimension (max-subtracted, f32).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    route!("softmax", [x], Op::Softmax { x: x.clone() })
}

/// Gather rows of `table [V, D]` (any float dtype, typically memory-mapped) for `ids` (an
/// integer tensor of any shape) → `[..ids, D]` f32. Only the requested rows are read.
pub fn embedding(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    route!(
        "embedding",
        [ids, table],
        Op::Embedding {
            ids: ids.clone(),
            table: table.clone()
        }
    )
}

/// RoPE tables for positions `0..n`: `cos, sin` of `[p·f ; p·f]` with `f = inv_freq`, each
/// `[n, 2·len(inv_freq)]` f32 (computed in f32 as the reference does).
pub fn rope_tables(inv_freq: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
    let f = inv_freq.to_vec_f32()?;
    let r = 2 * f.len();
    let mut c = vec![0f32; n * r];
    let mut s = vec![0f32; n * r];
    for p in 0..n {
        for (i, fi) in f.iter().enumerate() {
            let a = p as f32 * fi;
            let (sa, ca) = a.sin_cos();
            c[p * r + i] = ca;
            c[p * r + i + f.len()] = ca;
            s[p * r + i] = sa;
            s[p * r + i + f.len()] = sa;
        }
    }
    Ok((Tensor::from_vec(c, &[n, r])?, Tensor::from_vec(s, &[n, r])?))
}

/// Rotary embedding, rotate-half convention, on the first `R` dims of the last axis, where
/// `cos, sin` are `[N, R]` from [`rope_tables`]. `x` is `[.., N, D]` (any strides); dims `R..D`
/// pass through. Returns a contiguous tensor.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    route!(
        "rope",
        [x, cos, sin],
        Op::Rope {
            x: x.clone(),
            cos: cos.clone(),
            sin: sin.clone()
        }
    )
}
