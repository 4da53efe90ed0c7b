//! The fused row ops of the diffusion transformer and its samplers, on slices: the CPU bodies of
//! `aria_core::ops::{rms_norm_modulate, gated_residual_add, split_heads, merge_heads, axpby,
//! apg_guidance, cfg_rescale}` (whose docs give the formulas). Each makes one pass over its rows
//! and splits work only between independent rows on the rayon pool it is called on, so results
//! never depend on the thread count.
//!
//! The reductions and the per-element work use the dispatched row kernels ([`crate::rows`]:
//! `sumsq`, `norm_gain`, `norm_gain_modulate`, `add_mul_to`, `rope_half`, `axpby`); the
//! per-element kernels use separate multiplies and adds in the scalar formula's order (never an
//! FMA), so every ISA path gives the same bits for them. Head split/merge are data movement
//! (`copy_from_slice`); `apg_guidance` stays portable (its f64 reductions in element order
//! define its bits).

use rayon::prelude::*;

use crate::rows;

/// RMSNorm of every `e`-row of `x` (`n` rows per batch item) with gain `g`, then when given the
/// modulation `y·(1 + scale[b]) + shift[b]` of batch item `b` (`scale`, `shift`: `[B, e]`).
pub fn rms_norm_modulate(
    x: &[f32],
    n: usize,
    e: usize,
    g: &[f32],
    eps: f32,
    scale_shift: Option<(&[f32], &[f32])>,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if e == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(e)
        .zip(x.par_chunks(e))
        .enumerate()
        .for_each(|(row, (o, xr))| {
            let inv = 1.0 / (rows::sumsq(isa, xr) / e as f32 + eps).sqrt();
            match scale_shift {
                Some((sc, sh)) => {
                    let bi = row / n;
                    let sc = &sc[bi * e..(bi + 1) * e];
                    let sh = &sh[bi * e..(bi + 1) * e];
                    rows::norm_gain_modulate(isa, o, xr, inv, g, sc, sh);
                }
                None => rows::norm_gain(isa, o, xr, inv, g),
            }
        });
    out
}

/// `h + u ⊙ gate[b]` (or `h + u`) in place on `h` (`[B, n, e]`), `u` (`[B, nu, e]`, `nu ≤ n`)
/// added to the last `nu` rows of each item; rows whose `mask` entry (`[B, n]`) is false keep `h`.
pub fn gated_residual_add(
    h: &mut [f32],
    u: &[f32],
    n: usize,
    nu: usize,
    e: usize,
    gate: Option<&[f32]>,
    mask: Option<&[bool]>,
) {
    if e == 0 || nu == 0 {
        return;
    }
    let skip = n - nu;
    let isa = crate::current();
    h.par_chunks_mut(e).enumerate().for_each(|(row, hr)| {
        let (bi, p) = (row / n, row % n);
        if p < skip || mask.is_some_and(|m| !m[row]) {
            return;
        }
        let ur = &u[(bi * nu + p - skip) * e..][..e];
        match gate {
            Some(g) => rows::add_mul_to(isa, hr, ur, &g[bi * e..(bi + 1) * e]),
            None => rows::add_to(isa, hr, ur),
        }
    });
}

/// The head split of `aria_core::ops::split_heads`: columns `col..col + heads·d` of every row of
/// `src` (`[b, n, w]`) into `[b, heads, n, d]`, each head vector RMS-normalised with `norm =
/// (γ, eps)` and rotated with `rope = (cos, sin, r)` (tables of `r` columns) when given.
#[allow(clippy::too_many_arguments)]
pub fn split_heads(
    src: &[f32],
    [b, n, w]: [usize; 3],
    col: usize,
    heads: usize,
    d: usize,
    norm: Option<(&[f32], f32)>,
    rope: Option<(&[f32], &[f32], usize)>,
) -> Vec<f32> {
    let mut out = vec![0f32; b * heads * n * d];
    if d == 0 || n == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(d).enumerate().for_each(|(idx, oh)| {
        let (bh, p) = (idx / n, idx % n);
        let (bi, hi) = (bh / heads, bh % heads);
        let sh = &src[(bi * n + p) * w + col + hi * d..][..d];
        match norm {
            Some((g, eps)) => {
                let inv = 1.0 / (rows::sumsq(isa, sh) / d as f32 + eps).sqrt();
                rows::norm_gain(isa, oh, sh, inv, g);
            }
            None => oh.copy_from_slice(sh),
        }
        if let Some((c, s, r)) = rope {
            rows::rope_half(isa, oh, &c[p * r..(p + 1) * r], &s[p * r..(p + 1) * r]);
        }
    });
    out
}

/// `[b, h, n, d]` heads merged into `[b, n, h·d]`; rows whose `mask` entry (`[b, n]`) is false
/// become zeros.
pub fn merge_heads(a: &[f32], [b, h, n, d]: [usize; 4], mask: Option<&[bool]>) -> Vec<f32> {
    let e = h * d;
    let mut out = vec![0f32; b * n * e];
    if e == 0 || n == 0 {
        return out;
    }
    out.par_chunks_mut(e).enumerate().for_each(|(row, o)| {
        if mask.is_some_and(|m| !m[row]) {
            return;
        }
        let (bi, i) = (row / n, row % n);
        for hi in 0..h {
            let src = ((bi * h + hi) * n + i) * d;
            o[hi * d..(hi + 1) * d].copy_from_slice(&a[src..src + d]);
        }
    });
    out
}

/// `a[i]·x + b[i]·y` over `items` equal parts of `x` and `y`.
pub fn axpby(a: &[f32], x: &[f32], b: &[f32], y: &[f32], items: usize) -> Vec<f32> {
    let per = x.len() / items.max(1);
    let mut out = vec![0f32; x.len()];
    if per == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(per).enumerate().for_each(|(i, o)| {
        let (xr, yr) = (&x[i * per..(i + 1) * per], &y[i * per..(i + 1) * per]);
        rows::axpby(isa, o, a[i], xr, b[i], yr);
    });
    out
}

/// The scalars of [`apg_guidance`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guidance {
    /// The CFG scale.
    pub cfg_scale: f32,
    /// The APG projection's weight (0: plain CFG).
    pub apg_scale: f32,
    /// The norm clamp τ (≤ 0: none).
    pub norm_threshold: f32,
}

/// Classifier-free guidance with APG of `aria_core::ops::apg_guidance` for `[b, c, t]` slices,
/// per item at noise level `sigma[i]`, with the validity `mask` (`[b, t]`); f64 norms and dot
/// product accumulated in element order.
pub fn apg_guidance(
    x: &[f32],
    vc: &[f32],
    vu: &[f32],
    [b, c, t]: [usize; 3],
    sigma: &[f32],
    m: Option<&[bool]>,
    g: Guidance,
) -> Vec<f32> {
    let Guidance {
        cfg_scale,
        apg_scale,
        norm_threshold,
    } = g;
    let per = c * t;
    let mut out = vec![0f32; b * per];
    if per == 0 {
        return out;
    }
    // One item per task: the f64 reductions run in element order inside it.
    out.par_chunks_mut(per).enumerate().for_each(|(bi, o)| {
        let s = sigma[bi];
        let r = bi * per..(bi + 1) * per;
        let xs = &x[r.clone()];
        let dc: Vec<f32> = xs
            .iter()
            .zip(&vc[r.clone()])
            .map(|(x, v)| x - v * s)
            .collect();
        let du: Vec<f32> = xs.iter().zip(&vu[r]).map(|(x, v)| x - v * s).collect();
        let mut diff: Vec<f32> = dc.iter().zip(&du).map(|(a, b)| a - b).collect();
        let mk: Vec<f32> = match m {
            Some(m) => (0..per)
                .map(|i| if m[bi * t + i % t] { 1.0 } else { 0.0 })
                .collect(),
            None => vec![1.0; per],
        };
        if norm_threshold > 0.0 {
            let norm = diff
                .iter()
                .zip(&mk)
                .map(|(d, m)| ((d * m) as f64).powi(2))
                .sum::<f64>()
                .sqrt() as f32;
            let f = (norm_threshold / norm).min(1.0);
            diff.iter_mut().for_each(|d| *d *= f);
        }
        let used: Vec<f32> = if apg_scale == 0.0 {
            diff
        } else {
            let (v1, floor): (Vec<f32>, f32) = if m.is_some() {
                (dc.iter().zip(&mk).map(|(a, m)| a * m).collect(), 1e-8)
            } else {
                (dc.clone(), 1e-12)
            };
            let norm =
                (v1.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt() as f32).max(floor);
            let v1n: Vec<f32> = v1.iter().map(|v| v / norm).collect();
            let dot = diff
                .iter()
                .zip(&v1n)
                .map(|(a, b)| (a * b) as f64)
                .sum::<f64>() as f32;
            let orth: Vec<f32> = if m.is_some() {
                diff.iter()
                    .zip(&v1n)
                    .zip(&mk)
                    .map(|((d, u), m)| (d - dot * u) * m)
                    .collect()
            } else {
                diff.iter().zip(&v1n).map(|(d, u)| d - dot * u).collect()
            };
            if apg_scale == 1.0 {
                orth
            } else {
                orth.iter()
                    .zip(&diff)
                    .map(|(o, d)| apg_scale * o + (1.0 - apg_scale) * d)
                    .collect()
            }
        };
        for i in 0..per {
            let d = dc[i] + (cfg_scale - 1.0) * used[i];
            o[i] = (xs[i] - d) / s;
        }
    });
    out
}

/// CFG rescale of `aria_core::ops::cfg_rescale` for `[nb, c, t]` slices: unbiased channel
/// standard deviations per item and position in f64, the ratio rounded to f32.
pub fn cfg_rescale(v: &[f32], vc: &[f32], [nb, c, t]: [usize; 3], phi: f32) -> Vec<f32> {
    let std = |d: &[f32], b: usize, p: usize| {
        let at = |k: usize| d[(b * c + k) * t + p] as f64;
        let mean = (0..c).map(at).sum::<f64>() / c as f64;
        let var = (0..c).map(|k| (at(k) - mean).powi(2)).sum::<f64>() / (c as f64 - 1.0);
        var.sqrt()
    };
    let mut out = v.to_vec();
    for b in 0..nb {
        for p in 0..t {
            let ratio = (std(vc, b, p) / std(v, b, p)) as f32;
            for k in 0..c {
                let i = (b * c + k) * t + p;
                out[i] = phi * (v[i] * ratio) + (1.0 - phi) * v[i];
            }
        }
    }
    out
}

/// The DyT QK-norm of [`qkv_heads`]: `γ ⊙ tanh(α·x) + β` over the head dimension.
#[derive(Debug, Clone, Copy)]
pub struct DytNorm<'a> {
    /// α.
    pub alpha: f32,
    /// γ `[dh]`.
    pub gamma: &'a [f32],
    /// β `[dh]`.
    pub beta: &'a [f32],
}

/// The fused head split of `aria_core::ops::qkv_heads`: block `part` of `parts` blocks of
/// `heads·dh` features of every token of `x` (`[b, n, parts·heads·dh]`) as `[b, heads, n, dh]`,
/// each head row normed by `norm` and then rotated by `rope = (cos, sin, r)` (row `t` of the
/// tables is token `t`) when given.
#[allow(clippy::too_many_arguments)]
pub fn qkv_heads(
    x: &[f32],
    [b, n, dh]: [usize; 3],
    parts: usize,
    part: usize,
    heads: usize,
    norm: Option<DytNorm<'_>>,
    rope: Option<(&[f32], &[f32], usize)>,
) -> Vec<f32> {
    let d = heads * dh;
    let mut out = vec![0f32; b * heads * n * dh];
    if out.is_empty() {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(n * dh).enumerate().for_each(|(bh, o)| {
        let (bi, hh) = (bh / heads, bh % heads);
        for t in 0..n {
            let src = &x[(bi * n + t) * parts * d + part * d + hh * dh..][..dh];
            let dst = &mut o[t * dh..(t + 1) * dh];
            match norm {
                Some(nm) => crate::dyt_on(isa, dst, src, nm.alpha, nm.gamma, nm.beta),
                None => dst.copy_from_slice(src),
            }
            if let Some((c, sn, r)) = rope {
                rows::rope_half(isa, dst, &c[t * r..(t + 1) * r], &sn[t * r..(t + 1) * r]);
            }
        }
    });
    out
}
