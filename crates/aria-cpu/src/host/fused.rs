use super::f32_data;
use crate::fused as kernel;
use crate::threads;
use aria_tensor::backend::check::dims3;
use aria_tensor::{CoreError, Result, Tensor};

/// A per-row validity mask `[B, N]` (checked) as booleans.
fn mask_rows(m: Option<&Tensor>) -> Result<Option<Vec<bool>>> {
    let Some(m) = m else { return Ok(None) };
    Ok(Some(f32_data(m)?.iter().map(|&v| v != 0.0).collect()))
}

/// The CPU body of `aria_core::ops::rms_norm_modulate`, on checked operands.
pub fn rms_norm_modulate_host(
    x: &Tensor,
    gamma: &Tensor,
    eps: f32,
    scale_shift: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    const OP: &str = "rms_norm_modulate";
    let [_, n, e] = dims3(OP, "x", x)?;
    let xd = f32_data(x)?;
    let g = f32_data(gamma)?;
    let ss = scale_shift
        .map(|(sc, sh)| Ok::<_, CoreError>((f32_data(sc)?, f32_data(sh)?)))
        .transpose()?;
    let ss = ss.as_ref().map(|(a, b)| (&a[..], &b[..]));
    let out = threads::install(|| kernel::rms_norm_modulate(&xd, n, e, &g, eps, ss));
    Tensor::from_vec(out, x.shape())
}

/// The CPU body of `aria_core::ops::gated_residual_add`, on checked operands.
pub fn gated_residual_add_host(
    h: &Tensor,
    u: &Tensor,
    gate: Option<&Tensor>,
    row_mask: Option<&Tensor>,
) -> Result<Tensor> {
    const OP: &str = "gated_residual_add";
    let [_, n, e] = dims3(OP, "h", h)?;
    let [_, nu, _] = dims3(OP, "u", u)?;
    let g = gate.map(f32_data).transpose()?;
    let mask = mask_rows(row_mask)?;
    let mut out = f32_data(h)?.into_owned();
    let ud = f32_data(u)?;
    threads::install(|| {
        kernel::gated_residual_add(&mut out, &ud, n, nu, e, g.as_deref(), mask.as_deref())
    });
    Tensor::from_vec(out, h.shape())
}

/// The CPU body of `aria_core::ops::split_heads`, on checked operands.
pub fn split_heads_host(
    x: &Tensor,
    col: usize,
    heads: usize,
    head_dim: usize,
    norm: Option<(&Tensor, f32)>,
    rope: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    const OP: &str = "split_heads";
    let [b, n, w] = dims3(OP, "x", x)?;
    let d = head_dim;
    let gamma = match norm {
        Some((g, eps)) => Some((f32_data(g)?, eps)),
        None => None,
    };
    let tables = match rope {
        Some((c, s)) => Some((f32_data(c)?, f32_data(s)?, c.shape()[1])),
        None => None,
    };
    let src = f32_data(x)?;
    let out = threads::install(|| {
        kernel::split_heads(
            &src,
            [b, n, w],
            col,
            heads,
            d,
            gamma.as_ref().map(|(g, eps)| (&g[..], *eps)),
            tables.as_ref().map(|(c, s, r)| (&c[..], &s[..], *r)),
        )
    });
    Tensor::from_vec(out, &[b, heads, n, d])
}

/// The CPU body of `aria_core::ops::merge_heads`, on checked operands.
pub fn merge_heads_host(x: &Tensor, row_mask: Option<&Tensor>) -> Result<Tensor> {
    const OP: &str = "merge_heads";
    let &[b, h, n, d] = x.shape() else {
        return Err(CoreError::shape(OP, "x must be [B, H, N, D]", &[x.shape()]));
    };
    let mask = mask_rows(row_mask)?;
    let xc = x.contiguous()?;
    let a = f32_data(&xc)?;
    let out = threads::install(|| kernel::merge_heads(&a, [b, h, n, d], mask.as_deref()));
    Tensor::from_vec(out, &[b, n, h * d])
}

/// The CPU body of `aria_core::ops::axpby`, on checked operands.
pub fn axpby_host(a: &[f32], x: &Tensor, b: &[f32], y: &Tensor) -> Result<Tensor> {
    let items = x.shape().first().copied().unwrap_or(1);
    let xd = f32_data(x)?;
    let yd = f32_data(y)?;
    let out = threads::install(|| kernel::axpby(a, &xd, b, &yd, items));
    Tensor::from_vec(out, x.shape())
}

/// The CPU body of `aria_core::ops::apg_guidance`, on checked operands.
#[allow(clippy::too_many_arguments)]
pub fn apg_guidance_host(
    x: &Tensor,
    v_cond: &Tensor,
    v_uncond: &Tensor,
    sigma: &[f32],
    mask: Option<&Tensor>,
    cfg_scale: f32,
    apg_scale: f32,
    norm_threshold: f32,
) -> Result<Tensor> {
    const OP: &str = "apg_guidance";
    let [b, c, t] = dims3(OP, "x", x)?;
    let m = mask_rows(mask)?;
    let (xd, vc, vu) = (f32_data(x)?, f32_data(v_cond)?, f32_data(v_uncond)?);
    let g = kernel::Guidance {
        cfg_scale,
        apg_scale,
        norm_threshold,
    };
    let out =
        threads::install(|| kernel::apg_guidance(&xd, &vc, &vu, [b, c, t], sigma, m.as_deref(), g));
    Tensor::from_vec(out, x.shape())
}

/// The CPU body of `aria_core::ops::cfg_rescale`, on checked operands.
pub fn cfg_rescale_host(v: &Tensor, v_cond: &Tensor, phi: f32) -> Result<Tensor> {
    let [nb, c, t] = dims3("cfg_rescale", "v", v)?;
    let (vd, cd) = (f32_data(v)?, f32_data(v_cond)?);
    let out = kernel::cfg_rescale(&vd, &cd, [nb, c, t], phi);
    Tensor::from_vec(out, v.shape())
}
