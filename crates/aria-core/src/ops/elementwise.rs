use super::{f32_data, route};
use crate::backend::{BinaryOp, Op, UnaryOp};
use crate::cpu::{self, rows, rowwise};
use crate::{threads, CoreError, DType, Result, Tensor};

/// Apply `f` to every element (f32 result, same shape).
pub fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    let f = &f;
    threads::install(|| rowwise::map(&mut v, f));
    Tensor::from_vec(v, x.shape())
}

/// Apply a row kernel to every chunk of a copy of `x` ([`aria_cpu::rowwise::map_rows`]).
fn map_rows(x: &Tensor, f: impl Fn(cpu::Isa, &mut [f32]) + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    let f = &f;
    threads::install(|| rowwise::map_rows(&mut v, f));
    Tensor::from_vec(v, x.shape())
}

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

/// The CPU body of [`silu`] (the CPU backend runs it on checked operands).
pub(crate) fn silu_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::silu)
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

/// The CPU body of [`sigmoid`] (the CPU backend runs it on checked operands).
pub(crate) fn sigmoid_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::sigmoid)
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

/// The CPU body of [`tanh`] (the CPU backend runs it on checked operands).
pub(crate) fn tanh_host(x: &Tensor) -> Result<Tensor> {
    // `f32::tanh` on every path: the codec's soft clip is pinned to its bits.
    map(x, f32::tanh)
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

/// The CPU body of [`sin_pi`] (the CPU backend runs it on checked operands).
pub(crate) fn sin_pi_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::sin_pi)
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

/// The CPU body of [`gelu`] (the CPU backend runs it on checked operands).
pub(crate) fn gelu_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::gelu)
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

/// The CPU body of [`gelu_tanh`] (the CPU backend runs it on checked operands).
pub(crate) fn gelu_tanh_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::gelu_tanh)
}

/// `x · s`.
pub fn mul_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("mul_scalar", [x], Op::MulScalar { x: x.clone(), s })
}

/// The CPU body of [`mul_scalar`] (the CPU backend runs it on checked operands).
pub(crate) fn mul_scalar_host(x: &Tensor, s: f32) -> Result<Tensor> {
    map_rows(x, |isa, c| rows::scale(isa, c, s))
}

/// `x + s`.
pub fn add_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("add_scalar", [x], Op::AddScalar { x: x.clone(), s })
}

/// The CPU body of [`add_scalar`] (the CPU backend runs it on checked operands).
pub(crate) fn add_scalar_host(x: &Tensor, s: f32) -> Result<Tensor> {
    // `v·1 + s` is `v + s` bit for bit.
    map_rows(x, |isa, c| rows::affine(isa, c, 1.0, s))
}

/// `x · a + b`.
pub fn affine(x: &Tensor, a: f32, b: f32) -> Result<Tensor> {
    route!("affine", [x], Op::Affine { x: x.clone(), a, b })
}

/// The CPU body of [`affine`] (the CPU backend runs it on checked operands).
pub(crate) fn affine_host(x: &Tensor, a: f32, b: f32) -> Result<Tensor> {
    map_rows(x, |isa, c| rows::affine(isa, c, a, b))
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

/// Gated linear unit over the last dimension `[.., 2F] → [.., F]`: first half is the value,
/// second half the gate: `value ⊙ act(gate)`.
pub fn glu(x: &Tensor, act: GluAct) -> Result<Tensor> {
    route!("glu", [x], Op::Glu { x: x.clone(), act })
}

/// The CPU body of [`glu`] (the CPU backend runs it on checked operands).
pub(crate) fn glu_host(x: &Tensor, act: GluAct) -> Result<Tensor> {
    // Checked: the last dimension exists and is even.
    let s = x.shape();
    let d2 = s.last().copied().unwrap_or(0);
    let f = d2 / 2;
    let xd = f32_data(x)?;
    let gate: rowwise::GateKernel = match act {
        GluAct::Silu => rows::swiglu,
        GluAct::Gelu => rows::geglu,
        GluAct::GeluTanh => rows::geglu_tanh,
        GluAct::SinPi => rows::sin_pi_glu,
    };
    let out = threads::install(|| rowwise::glu(&xd, d2, gate));
    let mut shape = s.to_vec();
    if let Some(l) = shape.last_mut() {
        *l = f;
    }
    Tensor::from_vec(out, &shape)
}

use crate::backend::check::broadcast_shape;

/// Elementwise binary op with NumPy broadcasting (f32 result).
pub fn binary_map(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<Tensor> {
    let shape = broadcast_shape(op, a.shape(), b.shape())?;
    let ad = f32_data(a)?;
    let bd = f32_data(b)?;
    let f = &f;
    let out = threads::install(|| rowwise::binary_map(&ad, a.shape(), &bd, b.shape(), &shape, f));
    Tensor::from_vec(out, &shape)
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

/// The CPU body of [`add`] (the CPU backend runs it on checked operands).
pub(crate) fn add_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("add", a, b, |x, y| x + y)
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

/// The CPU body of [`sub`] (the CPU backend runs it on checked operands).
pub(crate) fn sub_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("sub", a, b, |x, y| x - y)
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

/// The CPU body of [`mul`] (the CPU backend runs it on checked operands).
pub(crate) fn mul_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("mul", a, b, |x, y| x * y)
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

/// The CPU body of [`div`] (the CPU backend runs it on checked operands).
pub(crate) fn div_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("div", a, b, |x, y| x / y)
}

/// Softmax over the last dimension (max-subtracted, f32).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    route!("softmax", [x], Op::Softmax { x: x.clone() })
}

/// The CPU body of [`softmax_last`] (the CPU backend runs it on checked operands).
pub(crate) fn softmax_last_host(x: &Tensor) -> Result<Tensor> {
    let d = x.shape().last().copied().unwrap_or(0);
    let mut v = f32_data(x)?.into_owned();
    threads::install(|| rowwise::softmax_rows(&mut v, d));
    Tensor::from_vec(v, x.shape())
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

/// The CPU body of [`embedding`] (the CPU backend runs it on checked operands).
pub(crate) fn embedding_host(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    let ts = table.shape();
    let (vocab, d) = (ts[0], ts[1]);
    let idv: Vec<i64> = match ids.dtype() {
        DType::I64 => ids.to_vec::<i64>()?,
        _ => ids.to_vec_f32()?.iter().map(|&x| x as i64).collect(),
    };
    if let Some(&id) = idv.iter().find(|&&id| id < 0 || id as usize >= vocab) {
        return Err(CoreError::Invalid(format!(
            "embedding: id {id} outside a vocabulary of {vocab}"
        )));
    }
    let table = table.contiguous()?;
    let td = crate::ops::wdata("embedding", &table)?;
    let out = threads::install(|| rowwise::gather_rows(&td, &idv, d));
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    Tensor::from_vec(out, &shape)
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

/// The CPU body of [`rope`] (the CPU backend runs it on checked operands).
pub(crate) fn rope_host(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let r = cos.shape()[1];
    let c = f32_data(cos)?;
    let sn = f32_data(sin)?;
    let xc = x.contiguous()?;
    let mut v = f32_data(&xc)?.into_owned();
    threads::install(|| rowwise::rope_rows(&mut v, &c, &sn, n, d, r));
    Tensor::from_vec(v, s)
}
