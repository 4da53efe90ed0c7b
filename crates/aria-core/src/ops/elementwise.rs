use rayon::prelude::*;

use super::{f32_data, route};
use crate::backend::{BinaryOp, Op, UnaryOp};
use crate::cpu::{self, rows};
use crate::{threads, CoreError, DType, Result, Tensor};

/// Elements per parallel chunk of elementwise ops (a fixed size, so results never depend on the
/// thread count).
const CHUNK: usize = 4096;

/// Apply `f` to every element (f32 result, same shape).
pub fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    threads::install(|| {
        v.par_chunks_mut(CHUNK)
            .for_each(|c| c.iter_mut().for_each(|e| *e = f(*e)))
    });
    Tensor::from_vec(v, x.shape())
}

/// Apply a row kernel to every chunk of a copy of `x` (the kernels work element by element, so
/// the chunking never shows in the result).
fn map_rows(x: &Tensor, f: impl Fn(cpu::Isa, &mut [f32]) + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    let isa = cpu::current();
    threads::install(|| v.par_chunks_mut(CHUNK).for_each(|c| f(isa, c)));
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
    );
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
    );
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
    );
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
    );
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
    );
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
    );
    map_rows(x, rows::gelu_tanh)
}

/// `x · s`.
pub fn mul_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("mul_scalar", [x], Op::MulScalar { x: x.clone(), s });
    map_rows(x, |isa, c| rows::scale(isa, c, s))
}

/// `x + s`.
pub fn add_scalar(x: &Tensor, s: f32) -> Result<Tensor> {
    route!("add_scalar", [x], Op::AddScalar { x: x.clone(), s });
    // `v·1 + s` is `v + s` bit for bit.
    map_rows(x, |isa, c| rows::affine(isa, c, 1.0, s))
}

/// `x · a + b`.
pub fn affine(x: &Tensor, a: f32, b: f32) -> Result<Tensor> {
    route!("affine", [x], Op::Affine { x: x.clone(), a, b });
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
    route!("glu", [x], Op::Glu { x: x.clone(), act });
    // Checked: the last dimension exists and is even.
    let s = x.shape();
    let d2 = s.last().copied().unwrap_or(0);
    let f = d2 / 2;
    let xd = f32_data(x)?;
    let rows = x.elem_count() / d2.max(1);
    let mut out = vec![0f32; rows * f];
    let isa = cpu::current();
    if f > 0 {
        threads::install(|| {
            out.par_chunks_mut(f).enumerate().for_each(|(r, o)| {
                let xr = &xd[r * d2..(r + 1) * d2];
                let (val, gate) = xr.split_at(f);
                match act {
                    GluAct::Silu => rows::swiglu(isa, o, val, gate),
                    GluAct::Gelu => rows::geglu(isa, o, val, gate),
                    GluAct::GeluTanh => rows::geglu_tanh(isa, o, val, gate),
                    GluAct::SinPi => rows::sin_pi_glu(isa, o, val, gate),
                }
            })
        });
    }
    let mut shape = s.to_vec();
    if let Some(l) = shape.last_mut() {
        *l = f;
    }
    Tensor::from_vec(out, &shape)
}

use crate::backend::check::broadcast_shape;

fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let cs = crate::tensor::contiguous_strides(shape);
    (0..r)
        .map(|i| {
            if i + shape.len() < r {
                0
            } else {
                let j = i + shape.len() - r;
                if shape[j] == 1 {
                    0
                } else {
                    cs[j]
                }
            }
        })
        .collect()
}

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
    let n: usize = shape.iter().product();
    if a.shape() == shape.as_slice() && b.shape() == shape.as_slice() {
        let mut out = vec![0f32; n];
        threads::install(|| {
            out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                let s = c * CHUNK;
                for ((v, x), y) in o.iter_mut().zip(&ad[s..]).zip(&bd[s..]) {
                    *v = f(*x, *y);
                }
            })
        });
        return Tensor::from_vec(out, &shape);
    }
    // General case: iterate over rows of the last dimension.
    let sa = broadcast_strides(a.shape(), &shape);
    let sb = broadcast_strides(b.shape(), &shape);
    let last = *shape.last().unwrap_or(&1);
    let mut out = vec![0f32; n];
    if last > 0 {
        threads::install(|| {
            out.par_chunks_mut(last).enumerate().for_each(|(row, o)| {
                let mut rem = row;
                let (mut ia, mut ib) = (0usize, 0usize);
                for d in (0..shape.len().saturating_sub(1)).rev() {
                    let i = rem % shape[d];
                    rem /= shape[d];
                    ia += i * sa[d];
                    ib += i * sb[d];
                }
                let (la, lb) = (sa[shape.len() - 1], sb[shape.len() - 1]);
                match (la, lb) {
                    (1, 1) => {
                        for ((v, x), y) in o.iter_mut().zip(&ad[ia..]).zip(&bd[ib..]) {
                            *v = f(*x, *y);
                        }
                    }
                    (1, 0) => {
                        let y = bd[ib];
                        o.iter_mut().zip(&ad[ia..]).for_each(|(v, x)| *v = f(*x, y));
                    }
                    (0, 1) => {
                        let x = ad[ia];
                        o.iter_mut().zip(&bd[ib..]).for_each(|(v, y)| *v = f(x, *y));
                    }
                    _ => {
                        for (j, v) in o.iter_mut().enumerate() {
                            *v = f(ad[ia + j * la], bd[ib + j * lb]);
                        }
                    }
                }
            })
        });
    }
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
    );
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
    );
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
    );
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
    );
    binary_map("div", a, b, |x, y| x / y)
}

/// Softmax over the last dimension (max-subtracted, f32).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    route!("softmax", [x], Op::Softmax { x: x.clone() });
    let d = x.shape().last().copied().unwrap_or(0);
    let mut v = f32_data(x)?.into_owned();
    let isa = cpu::current();
    if d > 0 {
        threads::install(|| {
            v.par_chunks_mut(d).for_each(|r| {
                let mx = rows::max(isa, r);
                let s = rows::exp_sub_sum(isa, r, mx);
                rows::scale(isa, r, 1.0 / s);
            })
        });
    }
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
    );
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
    let mut out = vec![0f32; idv.len() * d];
    if d > 0 {
        threads::install(|| {
            out.par_chunks_mut(d)
                .zip(&idv)
                .for_each(|(row, &id)| td.read(id as usize * d, row));
        });
    }
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
    );
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let r = cos.shape()[1];
    let c = f32_data(cos)?;
    let sn = f32_data(sin)?;
    let xc = x.contiguous()?;
    let mut v = f32_data(&xc)?.into_owned();
    let isa = cpu::current();
    if d > 0 && n > 0 {
        threads::install(|| {
            v.par_chunks_mut(d).enumerate().for_each(|(row, e)| {
                let p = row % n;
                rows::rope_half(isa, e, &c[p * r..(p + 1) * r], &sn[p * r..(p + 1) * r]);
            })
        });
    }
    Tensor::from_vec(v, s)
}
