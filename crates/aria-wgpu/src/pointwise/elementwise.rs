//! Elementwise kernels: activations, scalar maps, broadcasting binaries, GLU, axpby, DyT, and
//! the conditioning ops (Fourier features, masked-row fill).

use super::{
    f32_in, f32_opt, go, go_binds, last_dim, out_parts, parts, per_chunk, view_span, with_last,
    Grid, ELEMENTWISE, TEXT,
};
use crate::{be_err, Bind, Uniforms, WgpuBackend};
use aria_tensor::backend::{BinaryOp, UnaryOp};
use aria_tensor::options::{FourierLayout, GluAct};
use aria_tensor::{DType, Result, Tensor};

/// Activation codes of `elementwise.wgsl::act`.
fn unary_code(f: UnaryOp) -> Result<u32> {
    Ok(match f {
        UnaryOp::Silu => 0,
        UnaryOp::Sigmoid => 1,
        UnaryOp::Tanh => 2,
        UnaryOp::SinPi => 3,
        UnaryOp::Gelu => 4,
        UnaryOp::GeluTanh => 5,
        #[allow(unreachable_patterns)]
        _ => return Err(be_err(format!("unary {f:?} has no kernel"))),
    })
}

pub(super) fn unary(be: &WgpuBackend, x: &Tensor, f: UnaryOp) -> Result<Tensor> {
    let code = unary_code(f)?;
    let xc = be.operand_as_f32(x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let run = |b: &[Bind<'_>], n: usize, off: u32| {
        let u = Uniforms::new().size("n", n)?.u32(off).u32(code);
        go_binds(be, &ELEMENTWISE, "unary", b, u, Grid::Elems(n))
    };
    if !per_chunk(be, &[&out, &xc], |b, n| run(b, n, 0))? {
        let off = be.binding_of(&xc)?.1;
        run(&[Bind::T(&out), Bind::T(&xc)], xc.elem_count(), off)?;
    }
    Ok(out)
}

/// `x·a + b`, or `x·a` when `b` is `None`.
pub(super) fn affine(be: &WgpuBackend, x: &Tensor, a: f32, b: Option<f32>) -> Result<Tensor> {
    let xc = be.operand_as_f32(x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let run = |bs: &[Bind<'_>], n: usize, off: u32| {
        let u = Uniforms::new()
            .size("n", n)?
            .u32(off)
            .u32(0)
            .u32(u32::from(b.is_some()))
            .f32(a)
            .f32(b.unwrap_or(0.0));
        go_binds(be, &ELEMENTWISE, "affine", bs, u, Grid::Elems(n))
    };
    if !per_chunk(be, &[&out, &xc], |bs, n| run(bs, n, 0))? {
        let off = be.binding_of(&xc)?.1;
        run(&[Bind::T(&out), Bind::T(&xc)], xc.elem_count(), off)?;
    }
    Ok(out)
}

/// The strides of view `t` read as `out` (0 on broadcast and missing dimensions).
fn view_strides(t: &Tensor, out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let (s, st) = (t.shape(), t.strides());
    (0..r)
        .map(|i| {
            if i + s.len() < r {
                0
            } else {
                let j = i + s.len() - r;
                if s[j] == 1 {
                    0
                } else {
                    st[j]
                }
            }
        })
        .collect()
}

/// An f32 operand read in place with its own strides when it is an f32 view on the device,
/// converted contiguous otherwise.
fn strided_f32(be: &WgpuBackend, t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F32 && matches!(&**t.storage(), aria_tensor::storage::Storage::Device(_))
    {
        be.storage_of(t)?;
        Ok(t.clone())
    } else {
        be.operand_as_f32(t)
    }
}

pub(super) fn binary(be: &WgpuBackend, a: &Tensor, b: &Tensor, f: BinaryOp) -> Result<Tensor> {
    let shape = aria_tensor::backend::check::broadcast_shape("binary", a.shape(), b.shape())?;
    let code = match f {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        #[allow(unreachable_patterns)]
        _ => return Err(be_err(format!("binary {f:?} has no kernel"))),
    };
    let (ad, bd) = (strided_f32(be, a)?, strided_f32(be, b)?);
    let out = be.alloc(&shape, DType::F32)?;
    let n = out.elem_count();
    if n == 0 {
        return Ok(out);
    }
    // Rank ≤ 6 for the kernel: drop size-1 dimensions, then fold neighbours while that keeps
    // both layouts affine.
    let (mut dims, mut sa, mut sb) = (
        shape.clone(),
        view_strides(&ad, &shape),
        view_strides(&bd, &shape),
    );
    let mut i = 0;
    while dims.len() > 6 && i < dims.len() {
        if dims[i] == 1 {
            dims.remove(i);
            sa.remove(i);
            sb.remove(i);
        } else {
            i += 1;
        }
    }
    let mut i = 0;
    while dims.len() > 6 && i + 1 < dims.len() {
        let ok = sa[i] == sa[i + 1] * dims[i + 1] && sb[i] == sb[i + 1] * dims[i + 1];
        if ok {
            dims[i + 1] *= dims[i];
            dims.remove(i);
            sa.remove(i);
            sb.remove(i);
        } else {
            i += 1;
        }
    }
    if dims.len() > 6 {
        return Err(be_err(format!(
            "binary: broadcasting {:?} with {:?} needs more than 6 dimensions",
            a.shape(),
            b.shape()
        )));
    }
    let (a_off, b_off) = (ad.offset(), bd.offset());
    let head = |m: usize| -> Result<Uniforms> {
        let mut u = Uniforms::new()
            .size("n", m)?
            .u32(dims.len() as u32)
            .u32(code)
            .size("a offset", a_off)?;
        for k in 0..6 {
            u = u.size("shape", dims.get(k).copied().unwrap_or(1))?;
        }
        for k in 0..6 {
            u = u.size("stride", sa.get(k).copied().unwrap_or(0))?;
        }
        for k in 0..6 {
            u = u.size("stride", sb.get(k).copied().unwrap_or(0))?;
        }
        u.size("b offset", b_off)
    };
    // Past one binding, each output buffer is computed from each pair of operand buffers it
    // reads (the kernel skips elements whose operands lie elsewhere).
    let (va, vb) = (view_strides(&ad, &shape), view_strides(&bd, &shape));
    for (obuf, e0, e1) in out_parts(be, &out)? {
        let pa = parts(be, &ad, view_span(&shape, &va, a_off, e0, e1))?;
        let pb = parts(be, &bd, view_span(&shape, &vb, b_off, e0, e1))?;
        for &(abuf, a_lo, a_hi) in &pa {
            for &(bbuf, b_lo, b_hi) in &pb {
                let w = head(e1 - e0)?
                    .size("first element", e0)?
                    .u32(a_lo)
                    .u32(a_hi)
                    .u32(b_lo)
                    .u32(b_hi);
                go_binds(
                    be,
                    &ELEMENTWISE,
                    "binary",
                    &[Bind::Buf(obuf), Bind::Buf(abuf), Bind::Buf(bbuf)],
                    w,
                    Grid::Elems(e1 - e0),
                )?;
            }
        }
    }
    Ok(out)
}

pub(super) fn glu(be: &WgpuBackend, x: &Tensor, act: GluAct) -> Result<Tensor> {
    let d2 = last_dim("glu", x)?;
    let code = match act {
        GluAct::Silu => 0,
        GluAct::SinPi => 3,
        GluAct::Gelu => 4,
        GluAct::GeluTanh => 5,
    };
    let f = d2 / 2;
    let (xc, off) = f32_in(be, x)?;
    let out = be.alloc(&with_last(x.shape(), f), DType::F32)?;
    let n = out.elem_count();
    let u = Uniforms::new()
        .size("n", n)?
        .u32(off)
        .u32(code)
        .size("F", f)?;
    go(
        be,
        &ELEMENTWISE,
        "glu",
        &out,
        &[Bind::T(&xc)],
        u,
        Grid::Elems(n),
    )?;
    Ok(out)
}

pub(super) fn axpby(
    be: &WgpuBackend,
    a: &[f32],
    x: &Tensor,
    b: &[f32],
    y: &Tensor,
) -> Result<Tensor> {
    let items = x.shape().first().copied().unwrap_or(1);
    let xc = be.operand_as_f32(x)?;
    let yc = be.operand_as_f32(y)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let n = out.elem_count();
    if n == 0 {
        return Ok(out);
    }
    // The coefficients are host values of the op: one small upload, `[a.., b..]`.
    let coef: Vec<f32> = a.iter().chain(b).copied().collect();
    let cbuf = be.buffer_from(bytemuck::cast_slice(&coef))?;
    let per = n / items.max(1);
    let run = |bs: &[Bind<'_>], m: usize, xo: u32, yo: u32, first: usize| {
        let u = Uniforms::new()
            .size("n", m)?
            .size("per item", per)?
            .u32(xo)
            .u32(yo)
            .size("items", items)?
            .size("first element", first)?;
        go_binds(be, &ELEMENTWISE, "axpby", bs, u, Grid::Elems(m))
    };
    let mut first = 0;
    let chunked = per_chunk(be, &[&out, &xc, &yc], |bs, m| {
        run(&[bs[0], bs[1], bs[2], Bind::Buf(&cbuf)], m, 0, 0, first)?;
        first += m;
        Ok(())
    })?;
    if !chunked {
        let (xo, yo) = (be.binding_of(&xc)?.1, be.binding_of(&yc)?.1);
        let binds = [Bind::T(&out), Bind::T(&xc), Bind::T(&yc), Bind::Buf(&cbuf)];
        run(&binds, n, xo, yo, 0)?;
    }
    Ok(out)
}

pub(super) fn dyt(
    be: &WgpuBackend,
    x: &Tensor,
    alpha: f32,
    gamma: &Tensor,
    beta: &Tensor,
) -> Result<Tensor> {
    let d = last_dim("dyt", x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let n = out.elem_count();
    if n == 0 {
        return Ok(out);
    }
    let xc = be.operand_as_f32(x)?;
    let (gc, go_) = f32_in(be, gamma)?;
    let (bc, bo) = f32_in(be, beta)?;
    let run = |bs: &[Bind<'_>], m: usize, xo: u32| {
        let u = Uniforms::new()
            .size("n", m)?
            .u32(xo)
            .size("d", d)?
            .f32(alpha)
            .u32(go_)
            .u32(bo);
        go_binds(be, &ELEMENTWISE, "dyt", bs, u, Grid::Elems(m))
    };
    // Past one binding the buffers hold whole rows, so the column index is the same.
    let (gb, bb) = (Bind::T(&gc), Bind::T(&bc));
    if !per_chunk(be, &[&out, &xc], |bs, m| run(&[bs[0], bs[1], gb, bb], m, 0))? {
        let xo = be.binding_of(&xc)?.1;
        run(&[Bind::T(&out), Bind::T(&xc), gb, bb], n, xo)?;
    }
    Ok(out)
}

pub(super) fn fourier_features(
    be: &WgpuBackend,
    values: &Tensor,
    freqs: &Tensor,
    layout: FourierLayout,
) -> Result<Tensor> {
    let (n, f) = (values.elem_count(), freqs.elem_count());
    let (dim, code) = match layout {
        FourierLayout::CosSin => (2 * f, 0u32),
        FourierLayout::ValueSinCos => (2 * f + 1, 1),
    };
    let out = be.alloc(&[n, dim], DType::F32)?;
    let work = n * f.max(1);
    if n == 0 || dim == 0 {
        return Ok(out);
    }
    let (vc, vo) = f32_in(be, values)?;
    let (fc, fo) = f32_in(be, freqs)?;
    let u = Uniforms::new()
        .size("n", work)?
        .size("F", f)?
        .u32(code)
        .u32(vo)
        .u32(fo);
    go(
        be,
        &TEXT,
        "fourier_features",
        &out,
        &[Bind::T(&vc), Bind::T(&fc)],
        u,
        Grid::Elems(work),
    )?;
    Ok(out)
}

pub(super) fn fill_masked_rows(
    be: &WgpuBackend,
    x: &Tensor,
    mask: &Tensor,
    fill: Option<&Tensor>,
) -> Result<Tensor> {
    let s = x.shape();
    let d = s.last().copied().unwrap_or(0);
    let out = be.alloc(s, DType::F32)?;
    let n = out.elem_count();
    if n == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (mc, mo) = f32_in(be, mask)?;
    let (fc, fo) = f32_opt(be, fill)?;
    let u = Uniforms::new()
        .size("n", n)?
        .size("d", d)?
        .u32(xo)
        .u32(mo)
        .u32(u32::from(fc.is_some()))
        .u32(fo);
    go(
        be,
        &TEXT,
        "fill_masked_rows",
        &out,
        &[Bind::T(&xc), Bind::T(&mc), Bind::Opt(fc.as_ref())],
        u,
        Grid::Elems(n),
    )?;
    Ok(out)
}
