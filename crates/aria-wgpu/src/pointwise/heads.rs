//! Rotary embedding, the transformers' fused head and residual ops, and guidance
//! (`rope.wgsl`, `fused.wgsl`, `guidance.wgsl`).

use super::{f32_in, f32_opt, f32_view2, go, Grid, FUSED, GUIDANCE, ROPE};
use crate::{Bind, Uniforms, WgpuBackend};
use aria_core::{CoreError, DType, Result, Tensor};

/// The rotated width `R` of tables `[≥ n, R]` (even, at most `d`), with the CPU ops' errors.
fn rope_width(
    op: &'static str,
    why: &str,
    x: &Tensor,
    n: usize,
    d: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<usize> {
    let cs = cos.shape();
    if cs.len() != 2 || cs[0] < n || cs[1] > d || !cs[1].is_multiple_of(2) || sin.shape() != cs {
        return Err(CoreError::shape(
            op,
            why.to_string(),
            &[x.shape(), cs, sin.shape()],
        ));
    }
    Ok(cs[1])
}

pub(super) fn rope(be: &WgpuBackend, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    if s.len() < 2 {
        return Err(CoreError::shape("rope", "x must be [.., N, D]", &[s]));
    }
    let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
    let why = "tables must be [>=N, R] with R even, R <= D";
    let r = rope_width("rope", why, x, n, d, cos, sin)?;
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
    if inv_freq.rank() != 1 {
        return Err(CoreError::shape(
            "rope_table",
            "inv_freq must be [F]",
            &[inv_freq.shape()],
        ));
    }
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
    let &[b, n, e] = h.shape() else {
        return Err(CoreError::shape(OP, "h must be 3-D", &[h.shape()]));
    };
    let &[ub, nu, ue] = u.shape() else {
        return Err(CoreError::shape(OP, "u must be 3-D", &[u.shape()]));
    };
    if ub != b || ue != e || nu > n {
        return Err(CoreError::shape(
            OP,
            "u must be [B, Nu <= N, E]",
            &[h.shape(), u.shape()],
        ));
    }
    if let Some(g) = gate {
        if g.shape() != [b, e] {
            return Err(CoreError::shape(
                OP,
                format!("gate must be [{b}, {e}]"),
                &[g.shape()],
            ));
        }
    }
    if let Some(m) = row_mask {
        if m.shape() != [b, n] {
            return Err(CoreError::shape(
                OP,
                format!("row mask must be [{b}, {n}]"),
                &[m.shape()],
            ));
        }
    }
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
    let &[b, n, w] = x.shape() else {
        return Err(CoreError::shape(OP, "x must be 3-D", &[x.shape()]));
    };
    if col + heads * d > w {
        return Err(CoreError::shape(
            OP,
            format!(
                "columns {col}..{} of a width-{w} projection",
                col + heads * d
            ),
            &[x.shape()],
        ));
    }
    if let Some((g, _)) = norm {
        if g.elem_count() != d {
            return Err(CoreError::shape(
                OP,
                format!("norm gain must have head_dim = {d} elements"),
                &[g.shape()],
            ));
        }
    }
    let why = "rope tables must be [>=N, R] with R even, R <= head_dim";
    let r = match rope {
        Some((c, s)) => rope_width(OP, why, x, n, d, c, s)?,
        None => 0,
    };
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
    if let Some(m) = row_mask {
        if m.shape() != [b, n] {
            return Err(CoreError::shape(
                OP,
                format!("row mask must be [{b}, {n}]"),
                &[m.shape()],
            ));
        }
    }
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
    const OP: &str = "qkv_heads";
    let s = x.shape();
    let bad = |why: &str| {
        let mut shapes = vec![s];
        if let Some((c, _)) = rope {
            shapes.push(c.shape());
        }
        CoreError::shape(OP, why.to_string(), &shapes)
    };
    if s.len() != 3
        || parts == 0
        || heads == 0
        || part >= parts
        || !s[2].is_multiple_of(parts * heads)
    {
        return Err(bad("x must be [B, N, parts·H·Dh] with part < parts"));
    }
    let (b, n, dh) = (s[0], s[1], s[2] / (parts * heads));
    if let Some((g, bt)) = norm {
        if g.elem_count() != dh || bt.elem_count() != dh {
            return Err(CoreError::shape(
                OP,
                "norm gamma and beta must be [Dh]",
                &[s, g.shape(), bt.shape()],
            ));
        }
    }
    let r = match rope {
        Some((c, sn)) => {
            let cs = c.shape();
            if cs.len() != 2
                || cs[0] < n
                || cs[1] > dh
                || !cs[1].is_multiple_of(2)
                || sn.shape() != cs
            {
                return Err(bad("cos and sin must be [>=N, R] with R even and R <= Dh"));
            }
            cs[1]
        }
        None => 0,
    };
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
    let &[b, c, t] = x.shape() else {
        return Err(CoreError::shape(OP, "x must be 3-D", &[x.shape()]));
    };
    if v_cond.shape() != x.shape() || v_uncond.shape() != x.shape() || sigma.len() != b {
        return Err(CoreError::shape(
            OP,
            format!(
                "x, v_cond, v_uncond must match, with {b} sigmas (got {})",
                sigma.len()
            ),
            &[x.shape(), v_cond.shape(), v_uncond.shape()],
        ));
    }
    if let Some(m) = mask {
        if m.shape() != [b, t] {
            return Err(CoreError::shape(
                OP,
                format!("row mask must be [{b}, {t}]"),
                &[m.shape()],
            ));
        }
    }
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
