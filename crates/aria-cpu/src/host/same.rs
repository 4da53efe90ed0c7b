use super::f32_data;
use crate::fused::{self as kernel, DytNorm};
use crate::threads;
use aria_tensor::options::HeadNorm;
use aria_tensor::{Result, Tensor};

/// The CPU body of `aria_core::ops::rope_table`, on checked operands.
pub fn rope_table_host(inv_freq: &Tensor, pos0: usize, n: usize) -> Result<Tensor> {
    let f = f32_data(inv_freq)?;
    let r = 2 * f.len();
    let mut out = vec![0f32; 2 * n * r];
    let (c, s) = out.split_at_mut(n * r);
    for t in 0..n {
        let p = (pos0 + t) as f32;
        for (i, fi) in f.iter().enumerate() {
            let (sa, ca) = (p * fi).sin_cos();
            c[t * r + i] = ca;
            c[t * r + i + f.len()] = ca;
            s[t * r + i] = sa;
            s[t * r + i + f.len()] = sa;
        }
    }
    Tensor::from_vec(out, &[2, n, r])
}

/// The CPU body of `aria_core::ops::qkv_heads`, on checked operands.
pub fn qkv_heads_host(
    x: &Tensor,
    parts: usize,
    part: usize,
    heads: usize,
    norm: Option<HeadNorm<'_>>,
    rope: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    let (b, n, dh) =
        aria_tensor::backend::check::qkv_dims(x, parts, part, heads, rope.map(|r| r.0))?;
    let nd = match norm {
        Some(nm) => Some((nm.alpha, f32_data(nm.gamma)?, f32_data(nm.beta)?)),
        None => None,
    };
    let rd = match rope {
        Some((c, sn)) => Some((f32_data(c)?, f32_data(sn)?, c.shape()[1])),
        None => None,
    };
    let xd = f32_data(x)?;
    let out = threads::install(|| {
        kernel::qkv_heads(
            &xd,
            [b, n, dh],
            parts,
            part,
            heads,
            nd.as_ref().map(|(alpha, gamma, beta)| DytNorm {
                alpha: *alpha,
                gamma,
                beta,
            }),
            rd.as_ref().map(|(c, s, r)| (&c[..], &s[..], *r)),
        )
    });
    Tensor::from_vec(out, &[b, heads, n, dh])
}

/// The CPU body of `aria_core::ops::std_last`, on checked operands.
pub fn std_last_host(x: &Tensor) -> Result<Tensor> {
    let s = x.shape();
    let l = s.last().copied().unwrap_or(0);
    let mut shape = s.to_vec();
    if let Some(last) = shape.last_mut() {
        *last = 1;
    }
    let xd = f32_data(x)?;
    let out: Vec<f32> = if l == 0 {
        vec![f32::NAN; x.elem_count()]
    } else {
        xd.chunks(l)
            .map(|row| {
                let mean = row.iter().sum::<f32>() / l as f32;
                let var =
                    row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / (l as f32 - 1.0);
                var.sqrt()
            })
            .collect()
    };
    Tensor::from_vec(out, &shape)
}
