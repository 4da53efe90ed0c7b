use super::f32_data;
use crate as cpu;
use crate::threads;
use crate::{rows, rowwise};
use aria_tensor::backend::check::broadcast_shape;
use aria_tensor::options::GluAct;
use aria_tensor::{CoreError, DType, Result, Tensor};

/// Apply a row kernel to every chunk of a copy of `x` ([`aria_cpu::rowwise::map_rows`]).
fn map_rows(x: &Tensor, f: impl Fn(cpu::Isa, &mut [f32]) + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    let f = &f;
    threads::install(|| rowwise::map_rows(&mut v, f));
    Tensor::from_vec(v, x.shape())
}

/// The CPU body of `aria_core::ops::silu`, on checked operands.
pub fn silu_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::silu)
}

/// The CPU body of `aria_core::ops::sigmoid`, on checked operands.
pub fn sigmoid_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::sigmoid)
}

/// The CPU body of `aria_core::ops::tanh`, on checked operands.
pub fn tanh_host(x: &Tensor) -> Result<Tensor> {
    // `f32::tanh` on every path: the codec's soft clip is pinned to its bits.
    map(x, f32::tanh)
}

/// The CPU body of `aria_core::ops::sin_pi`, on checked operands.
pub fn sin_pi_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::sin_pi)
}

/// The CPU body of `aria_core::ops::gelu`, on checked operands.
pub fn gelu_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::gelu)
}

/// The CPU body of `aria_core::ops::gelu_tanh`, on checked operands.
pub fn gelu_tanh_host(x: &Tensor) -> Result<Tensor> {
    map_rows(x, rows::gelu_tanh)
}

/// The CPU body of `aria_core::ops::mul_scalar`, on checked operands.
pub fn mul_scalar_host(x: &Tensor, s: f32) -> Result<Tensor> {
    map_rows(x, |isa, c| rows::scale(isa, c, s))
}

/// The CPU body of `aria_core::ops::add_scalar`, on checked operands.
pub fn add_scalar_host(x: &Tensor, s: f32) -> Result<Tensor> {
    // `v·1 + s` is `v + s` bit for bit.
    map_rows(x, |isa, c| rows::affine(isa, c, 1.0, s))
}

/// The CPU body of `aria_core::ops::affine`, on checked operands.
pub fn affine_host(x: &Tensor, a: f32, b: f32) -> Result<Tensor> {
    map_rows(x, |isa, c| rows::affine(isa, c, a, b))
}

/// The CPU body of `aria_core::ops::glu`, on checked operands.
pub fn glu_host(x: &Tensor, act: GluAct) -> Result<Tensor> {
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

/// The CPU body of `aria_core::ops::add`, on checked operands.
pub fn add_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("add", a, b, |x, y| x + y)
}

/// The CPU body of `aria_core::ops::sub`, on checked operands.
pub fn sub_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("sub", a, b, |x, y| x - y)
}

/// The CPU body of `aria_core::ops::mul`, on checked operands.
pub fn mul_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("mul", a, b, |x, y| x * y)
}

/// The CPU body of `aria_core::ops::div`, on checked operands.
pub fn div_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary_map("div", a, b, |x, y| x / y)
}

/// The CPU body of `aria_core::ops::softmax_last`, on checked operands.
pub fn softmax_last_host(x: &Tensor) -> Result<Tensor> {
    let d = x.shape().last().copied().unwrap_or(0);
    let mut v = f32_data(x)?.into_owned();
    threads::install(|| rowwise::softmax_rows(&mut v, d));
    Tensor::from_vec(v, x.shape())
}

/// The CPU body of `aria_core::ops::embedding`, on checked operands.
pub fn embedding_host(ids: &Tensor, table: &Tensor) -> Result<Tensor> {
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
    let td = super::wdata("embedding", &table)?;
    let out = threads::install(|| rowwise::gather_rows(&td, &idv, d));
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    Tensor::from_vec(out, &shape)
}

/// The CPU body of `aria_core::ops::rope`, on checked operands.
pub fn rope_host(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
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

/// Apply `f` to every element (f32 result, same shape).
pub fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync) -> Result<Tensor> {
    let mut v = f32_data(x)?.into_owned();
    let f = &f;
    threads::install(|| rowwise::map(&mut v, f));
    Tensor::from_vec(v, x.shape())
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
    let f = &f;
    let out = threads::install(|| rowwise::binary_map(&ad, a.shape(), &bd, b.shape(), &shape, f));
    Tensor::from_vec(out, &shape)
}
