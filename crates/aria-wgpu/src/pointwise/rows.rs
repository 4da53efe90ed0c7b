//! Row reductions over the last dimension: softmax, RMSNorm, LayerNorm, the unbiased std, and
//! RMSNorm with the adaLN modulation (`norm.wgsl`).

use super::{f32_in, f32_opt, f32_view2, go, go_binds, last_dim, per_chunk, with_last, Grid, NORM};
use crate::{Bind, Uniforms, WgpuBackend};
use aria_tensor::options::RmsStyle;
use aria_tensor::{DType, Result, Tensor};

/// Rows of `d` in `x` (0 when `d` is 0: nothing to do).
fn row_count(x: &Tensor, d: usize) -> usize {
    x.elem_count().checked_div(d).unwrap_or(0)
}

pub(super) fn softmax(be: &WgpuBackend, x: &Tensor) -> Result<Tensor> {
    let d = last_dim("softmax", x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let rows = row_count(x, d);
    if rows == 0 {
        return Ok(out);
    }
    let xc = be.operand_as_f32(x)?;
    let run = |bs: &[Bind<'_>], rows: usize, xo: u32| {
        let u = Uniforms::new().size("rows", rows)?.size("d", d)?.u32(xo);
        go_binds(be, &NORM, "softmax", bs, u, Grid::Rows(rows))
    };
    if !per_chunk(be, &[&out, &xc], |bs, n| run(bs, n / d, 0))? {
        run(&[Bind::T(&out), Bind::T(&xc)], rows, be.binding_of(&xc)?.1)?;
    }
    Ok(out)
}

pub(super) fn rms_norm(
    be: &WgpuBackend,
    x: &Tensor,
    w: Option<&Tensor>,
    eps: f32,
    style: RmsStyle,
) -> Result<Tensor> {
    let d = last_dim("rms_norm", x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let rows = row_count(x, d);
    if rows == 0 {
        return Ok(out);
    }
    let xc = be.operand_as_f32(x)?;
    let (wc, wo) = f32_opt(be, w)?;
    let wb = Bind::Opt(wc.as_ref());
    let run = |bs: &[Bind<'_>], rows: usize, xo: u32| {
        let u = Uniforms::new()
            .size("rows", rows)?
            .size("d", d)?
            .u32(xo)
            .u32(wo)
            .u32(u32::from(wc.is_some()))
            .u32(u32::from(style == RmsStyle::OnePlus))
            .f32(eps);
        go_binds(be, &NORM, "rms_norm", bs, u, Grid::Rows(rows))
    };
    if !per_chunk(be, &[&out, &xc], |bs, n| run(&[bs[0], bs[1], wb], n / d, 0))? {
        let xo = be.binding_of(&xc)?.1;
        run(&[Bind::T(&out), Bind::T(&xc), wb], rows, xo)?;
    }
    Ok(out)
}

pub(super) fn layer_norm(
    be: &WgpuBackend,
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f32,
) -> Result<Tensor> {
    let d = last_dim("layer_norm", x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let rows = row_count(x, d);
    if rows == 0 {
        return Ok(out);
    }
    let xc = be.operand_as_f32(x)?;
    let (wc, wo) = f32_opt(be, w)?;
    let (bc, bo) = f32_opt(be, b)?;
    let (wb, bb) = (Bind::Opt(wc.as_ref()), Bind::Opt(bc.as_ref()));
    let run = |bs: &[Bind<'_>], rows: usize, xo: u32| {
        let u = Uniforms::new()
            .size("rows", rows)?
            .size("d", d)?
            .u32(xo)
            .u32(wo)
            .u32(u32::from(wc.is_some()))
            .u32(bo)
            .u32(u32::from(bc.is_some()))
            .f32(eps);
        go_binds(be, &NORM, "layer_norm", bs, u, Grid::Rows(rows))
    };
    if !per_chunk(be, &[&out, &xc], |bs, n| {
        run(&[bs[0], bs[1], wb, bb], n / d, 0)
    })? {
        let xo = be.binding_of(&xc)?.1;
        run(&[Bind::T(&out), Bind::T(&xc), wb, bb], rows, xo)?;
    }
    Ok(out)
}

pub(super) fn std_last(be: &WgpuBackend, x: &Tensor) -> Result<Tensor> {
    let l = last_dim("std_last", x)?;
    let shape = with_last(x.shape(), 1);
    let rows: usize = shape.iter().product();
    let out = be.alloc(&shape, DType::F32)?;
    if rows == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let u = Uniforms::new().size("rows", rows)?.size("d", l)?.u32(xo);
    go(
        be,
        &NORM,
        "std_last",
        &out,
        &[Bind::T(&xc)],
        u,
        Grid::Rows(rows),
    )?;
    Ok(out)
}

pub(super) fn rms_norm_modulate(
    be: &WgpuBackend,
    x: &Tensor,
    gamma: &Tensor,
    eps: f32,
    scale_shift: Option<&(Tensor, Tensor)>,
) -> Result<Tensor> {
    const OP: &str = "rms_norm_modulate";
    let [b, n, e] = aria_tensor::backend::check::dims3(OP, "x", x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    let rows = b * n;
    if rows == 0 || e == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (gc, go_) = f32_in(be, gamma)?;
    let (sc, sh) = match scale_shift {
        Some((sc, sh)) => (Some(f32_view2(be, sc)?), Some(f32_view2(be, sh)?)),
        None => (None, None),
    };
    let view = |v: &Option<(Tensor, u32, [u32; 2])>| v.as_ref().map_or((0, [0, 0]), |v| (v.1, v.2));
    let ((so, ss), (ho, hs)) = (view(&sc), view(&sh));
    let u = Uniforms::new()
        .size("rows", rows)?
        .size("e", e)?
        .u32(xo)
        .u32(go_)
        .u32(u32::from(sc.is_some()))
        .size("n", n)?
        .f32(eps)
        .u32(so)
        .u32(ss[0])
        .u32(ss[1])
        .u32(ho)
        .u32(hs[0])
        .u32(hs[1]);
    go(
        be,
        &NORM,
        "rms_norm_modulate",
        &out,
        &[
            Bind::T(&xc),
            Bind::T(&gc),
            Bind::Opt(sc.as_ref().map(|v| &v.0)),
            Bind::Opt(sh.as_ref().map(|v| &v.0)),
        ],
        u,
        Grid::Rows(rows),
    )?;
    Ok(out)
}
