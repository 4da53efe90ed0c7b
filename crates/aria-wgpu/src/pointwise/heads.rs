//! Rotary embedding, the transformers' fused head and residual ops, and guidance
//! (`rope.wgsl`, `fused.wgsl`, `guidance.wgsl`).

use super::{f32_in, f32_opt, f32_view2, go, Grid, FUSED, GUIDANCE, ROPE};
use crate::{Bind, Uniforms, WgpuBackend};
use aria_tensor::{CoreError, DType, Result, Tensor};

/// The rotated width `R` of checked rope tables `[≥ N, R]`.
fn table_width(cos: &Tensor) -> usize {
    cos.shape().get(1).copied().unwrap_or(0)
}

/// `[a, b, c]` of a checked 3-D tensor.
fn dims3(op: &'static str, t: &Tensor) -> Result<[usize; 3]> {
    aria_tensor::backend::check::dims3(op, "x", t)
}

pub(super) fn rope(be: &WgpuBackend, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    // Checked by the op set: `x [.., N, D]`, tables `[>= N, R]`.
    let s = x.shape();
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let r = table_width(cos);
    let out = be.alloc(s, DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (cc, co) = f32_in(be, cos)?;
    let (sc, so) = f32_in(be, sin)?;
    let u = Uniforms::new()
        .size("total", total)?
        .size("n", n)?
        .size("d", d)?
        .size("r", r)?
        .u32(xo)
        .u32(co)
        .u32(so);
    go(
        be,
        &ROPE,
        "rope",
        &out,
        &[Bind::T(&xc), Bind::T(&cc), Bind::T(&sc)],
        u,
        Grid::Elems(total),
    )?;
    Ok(out)
}

pub(super) fn rope_table(
    be: &WgpuBackend,
    inv_freq: &Tensor,
    pos0: usize,
    n: usize,
) -> Result<Tensor> {
    let f = inv_freq.elem_count();
    let out = be.alloc(&[2, n, 2 * f], DType::F32)?;
    let work = n * f;
    if work == 0 {
        return Ok(out);
    }
    let (ic, io) = f32_in(be, inv_freq)?;
    // Every position must fit 32 bits.
    super::u32_of("pos0 + n", pos0 + n)?;
    let u = Uniforms::new()
        .size("n·F", work)?
        .size("F", f)?
        .size("pos0", pos0)?
        .size("n", n)?
        .u32(io);
    go(
        be,
        &ROPE,
        "rope_table",
        &out,
        &[Bind::T(&ic)],
        u,
        Grid::Elems(work),
    )?;
    Ok(out)
}

pub(super) fn gated_residual_add(
    be: &WgpuBackend,
    h: &Tensor,
    u: &Tensor,
    gate: Option<&Tensor>,
    row_mask: Option<&Tensor>,
) -> Result<Tensor> {
    const OP: &str = "gated_residual_add";
    let [_, n, e] = dims3(OP, h)?;
    let [_, nu, _] = dims3(OP, u)?;
    let out = be.alloc(h.shape(), DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (hc, ho) = f32_in(be, h)?;
    let (uc, uo) = f32_in(be, u)?;
    let gv = gate.map(|g| f32_view2(be, g)).transpose()?;
    let (mc, mo) = f32_opt(be, row_mask)?;
    let (g_off, g_st) = gv.as_ref().map_or((0, [0, 0]), |v| (v.1, v.2));
    let prm = Uniforms::new()
        .size("total", total)?
        .size("n", n)?
        .size("nu", nu)?
        .size("e", e)?
        .u32(ho)
        .u32(uo)
        .u32(u32::from(gv.is_some()))
        .u32(g_off)
        .u32(g_st[0])
        .u32(g_st[1])
        .u32(u32::from(mc.is_some()))
        .u32(mo);
    go(
        be,
        &FUSED,
        "gated_residual_add",
        &out,
        &[
            Bind::T(&hc),
            Bind::T(&uc),
            Bind::Opt(gv.as_ref().map(|v| &v.0)),
            Bind::Opt(mc.as_ref()),
        ],
        prm,
        Grid::Elems(total),
    )?;
    Ok(out)
}

pub(super) fn split_heads(
    be: &WgpuBackend,
    x: &Tensor,
    col: usize,
    heads: usize,
    d: usize,
    norm: Option<&(Tensor, f32)>,
    rope: Option<&(Tensor, Tensor)>,
) -> Result<Tensor> {
    const OP: &str = "split_heads";
    let [b, n, w] = dims3(OP, x)?;
    let r = rope.map_or(0, |(c, _)| table_width(c));
    let out = be.alloc(&[b, heads, n, d], DType::F32)?;
    let vectors = b * heads * n;
    if vectors == 0 || d == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (gc, g_off) = f32_opt(be, norm.map(|n| &n.0))?;
    let (cc, co) = f32_opt(be, rope.map(|r| &r.0))?;
    let (sc, so) = f32_opt(be, rope.map(|r| &r.1))?;
    let u = Uniforms::new()
        .size("vectors", vectors)?
        .size("n", n)?
        .size("w", w)?
        .size("col", col)?
        .size("heads", heads)?
        .size("head_dim", d)?
        .u32(u32::from(norm.is_some()))
        .f32(norm.map_or(0.0, |n| n.1))
        .size("r", r)?
        .u32(xo)
        .u32(g_off)
        .u32(co)
        .u32(so);
    go(
        be,
        &FUSED,
        "split_heads",
        &out,
        &[
            Bind::T(&xc),
            Bind::Opt(gc.as_ref()),
            Bind::Opt(cc.as_ref()),
            Bind::Opt(sc.as_ref()),
        ],
        u,
        Grid::Rows(vectors),
    )?;
    Ok(out)
}

pub(super) fn merge_heads(
    be: &WgpuBackend,
    x: &Tensor,
    row_mask: Option<&Tensor>,
) -> Result<Tensor> {
    const OP: &str = "merge_heads";
    let &[b, h, n, d] = x.shape() else {
        return Err(CoreError::shape(OP, "x must be [B, H, N, D]", &[x.shape()]));
    };
    let out = be.alloc(&[b, n, h * d], DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (mc, mo) = f32_opt(be, row_mask)?;
    let u = Uniforms::new()
        .size("total", total)?
        .size("h", h)?
        .size("n", n)?
        .size("d", d)?
        .u32(xo)
        .u32(u32::from(mc.is_some()))
        .u32(mo);
    go(
        be,
        &FUSED,
        "merge_heads",
        &out,
        &[Bind::T(&xc), Bind::Opt(mc.as_ref())],
        u,
        Grid::Elems(total),
    )?;
    Ok(out)
}

pub(super) fn qkv_heads(
    be: &WgpuBackend,
    x: &Tensor,
    [parts, part, heads]: [usize; 3],
    alpha: f32,
    norm: Option<&(Tensor, Tensor)>,
    rope: Option<&(Tensor, Tensor)>,
) -> Result<Tensor> {
    let (b, n, dh) =
        aria_tensor::backend::check::qkv_dims(x, parts, part, heads, rope.map(|r| &r.0))?;
    let r = rope.map_or(0, |(c, _)| table_width(c));
    let out = be.alloc(&[b, heads, n, dh], DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (gc, g_off) = f32_opt(be, norm.map(|n| &n.0))?;
    let (bc, b_off) = f32_opt(be, norm.map(|n| &n.1))?;
    let (cc, co) = f32_opt(be, rope.map(|r| &r.0))?;
    let (sc, so) = f32_opt(be, rope.map(|r| &r.1))?;
    let u = Uniforms::new()
        .size("total", total)?
        .size("n", n)?
        .size("parts", parts)?
        .size("part", part)?
        .size("heads", heads)?
        .size("dh", dh)?
        .u32(u32::from(norm.is_some()))
        .f32(alpha)
        .size("r", r)?
        .u32(xo)
        .u32(g_off)
        .u32(b_off)
        .u32(co)
        .u32(so);
    go(
        be,
        &FUSED,
        "qkv_heads",
        &out,
        &[
            Bind::T(&xc),
            Bind::Opt(gc.as_ref()),
            Bind::Opt(cc.as_ref()),
            Bind::Opt(sc.as_ref()),
            Bind::Opt(bc.as_ref()),
        ],
        u,
        Grid::Elems(total),
    )?;
    Ok(out)
}

pub(super) fn apg_guidance(
    be: &WgpuBackend,
    [x, v_cond, v_uncond]: [&Tensor; 3],
    sigma: &[f32],
    mask: Option<&Tensor>,
    [cfg, apg, threshold]: [f32; 3],
) -> Result<Tensor> {
    const OP: &str = "apg_guidance";
    let [b, c, t] = dims3(OP, x)?;
    let out = be.alloc(x.shape(), DType::F32)?;
    if b * c * t == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let (cc, co) = f32_in(be, v_cond)?;
    let (uc, uo) = f32_in(be, v_uncond)?;
    let (mc, mo) = f32_opt(be, mask)?;
    // The noise levels are host values of the op: one small upload.
    let sbuf = be.buffer_from(bytemuck::cast_slice(sigma))?;
    let u = Uniforms::new()
        .size("items", b)?
        .size("c", c)?
        .size("t", t)?
        .f32(cfg)
        .f32(apg)
        .f32(threshold)
        .u32(u32::from(mc.is_some()))
        .u32(xo)
        .u32(co)
        .u32(uo)
        .u32(mo);
    go(
        be,
        &GUIDANCE,
        "apg_guidance",
        &out,
        &[
            Bind::T(&xc),
            Bind::T(&cc),
            Bind::T(&uc),
            Bind::Buf(&sbuf),
            Bind::Opt(mc.as_ref()),
        ],
        u,
        Grid::Rows(b),
    )?;
    Ok(out)
}

/// CFG rescale: one invocation per (item, position), the channel spreads in f32.
pub(super) fn cfg_rescale(
    be: &WgpuBackend,
    v: &Tensor,
    v_cond: &Tensor,
    phi: f32,
) -> Result<Tensor> {
    let [b, c, t] = dims3("cfg_rescale", v)?;
    let out = be.alloc(v.shape(), DType::F32)?;
    let cols = b * t;
    if cols == 0 || c == 0 {
        return Ok(out);
    }
    let (vc, vo) = f32_in(be, v)?;
    let (cc, co) = f32_in(be, v_cond)?;
    let u = Uniforms::new()
        .size("cols", cols)?
        .size("c", c)?
        .size("t", t)?
        .f32(phi)
        .u32(vo)
        .u32(co);
    go(
        be,
        &GUIDANCE,
        "cfg_rescale",
        &out,
        &[Bind::T(&vc), Bind::T(&cc)],
        u,
        Grid::Elems(cols),
    )?;
    Ok(out)
}
