//! The SAME transformer block: DyT norms, (differential) self-attention with DyT QK-norm and
//! partial rotary embeddings, and a gated feed-forward (SiLU or `sin(πx)` gate).

use aria_core::ops::{self, GluAct};
use aria_core::{Tensor, WeightLoader};
use rayon::prelude::*;

use crate::config::SameConfig;
use crate::error::{CodecError, Result};

/// `γ ⊙ tanh(α·x) + β`.
#[derive(Debug, Clone)]
pub(crate) struct Dyt {
    alpha: f32,
    gamma: Tensor,
    beta: Tensor,
}

impl Dyt {
    fn load(w: &WeightLoader, dim: usize) -> Result<Self> {
        Ok(Dyt {
            alpha: w
                .get_as("alpha", &[1], aria_core::DType::F32)?
                .to_vec_f32()?[0],
            gamma: w.get_as("gamma", &[dim], aria_core::DType::F32)?,
            beta: w.get_as("beta", &[dim], aria_core::DType::F32)?,
        })
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::dyt(x, self.alpha, &self.gamma, &self.beta)?)
    }
}

/// One transformer block of a SAME resampling stage.
#[derive(Debug)]
pub(crate) struct Block {
    pre_norm: Dyt,
    to_qkv: Tensor,
    to_out: Tensor,
    q_norm: (f32, Vec<f32>, Vec<f32>),
    k_norm: (f32, Vec<f32>, Vec<f32>),
    ff_norm: Dyt,
    w0: Tensor,
    b0: Tensor,
    w2: Tensor,
    b2: Tensor,
    inv_freq: Vec<f32>,
    gate: GluAct,
    heads: usize,
    dh: usize,
    differential: bool,
}

fn vec_dyt(w: &WeightLoader, dh: usize) -> Result<(f32, Vec<f32>, Vec<f32>)> {
    let d = Dyt::load(w, dh)?;
    Ok((d.alpha, d.gamma.to_vec_f32()?, d.beta.to_vec_f32()?))
}

impl Block {
    /// Load block `j` of a stage from `w` (prefix `...transformers.{j}`).
    pub(crate) fn load(w: &WeightLoader, cfg: &SameConfig, j: usize) -> Result<Self> {
        let d = cfg.width();
        let dh = cfg.dim_heads;
        let inner = (d as f64 * cfg.ff_mult) as usize;
        let nproj = if cfg.differential { 5 } else { 3 };
        let a = w.pp("self_attn");
        let inv_freq = w
            .get_as("rope.inv_freq", &[dh / 4], aria_core::DType::F32)?
            .to_vec_f32()?;
        Ok(Block {
            pre_norm: Dyt::load(&w.pp("pre_norm"), d)?,
            to_qkv: a.get("to_qkv.weight", &[nproj * d, d])?,
            to_out: a.get("to_out.weight", &[d, d])?,
            q_norm: vec_dyt(&a.pp("q_norm"), dh)?,
            k_norm: vec_dyt(&a.pp("k_norm"), dh)?,
            ff_norm: Dyt::load(&w.pp("ff_norm"), d)?,
            w0: w.get("ff.ff.0.proj.weight", &[2 * inner, d])?,
            b0: w.get("ff.ff.0.proj.bias", &[2 * inner])?,
            w2: w.get("ff.ff.2.weight", &[d, inner])?,
            b2: w.get("ff.ff.2.bias", &[d])?,
            inv_freq,
            gate: if cfg.is_sinusoidal(j) {
                GluAct::SinPi
            } else {
                GluAct::Silu
            },
            heads: cfg.heads(),
            dh,
            differential: cfg.differential,
        })
    }

    /// `x [Bc, N, D]` → `[Bc, N, D]`. RoPE positions are `pos0 .. pos0 + N`; `window` is the
    /// attention band `(left, right)` in tokens (none: full attention within each sequence).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        pos0: usize,
        window: Option<(usize, usize)>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        if s.len() != 3 {
            return Err(CodecError::Invalid(format!(
                "transformer block input must be [B, N, D], got {s:?}"
            )));
        }
        let (bc, n) = (s[0], s[1]);
        let u = self.pre_norm.apply(x)?;
        let qkv = ops::linear(&u, &self.to_qkv, None)?;
        drop(u);
        let qkv = qkv.contiguous()?;
        let qkv = qkv.as_slice::<f32>()?;
        let (cos, sin) = rope_tables(&self.inv_freq, pos0, n);
        let np = if self.differential { 5 } else { 3 };
        let geo = Geo {
            bc,
            n,
            np,
            h: self.heads,
            dh: self.dh,
        };
        let shape = [bc, self.heads, n, self.dh];
        let q = geo.heads(qkv, 0, Some(&self.q_norm), Some((&cos, &sin)));
        let k = geo.heads(qkv, 1, Some(&self.k_norm), Some((&cos, &sin)));
        let v = geo.heads(qkv, 2, None, None);
        let scale = 1.0 / (self.dh as f32).sqrt();
        let mut o = band_attention(&q, &k, &v, &shape, scale, window);
        if self.differential {
            drop((q, k));
            let qd = geo.heads(qkv, 3, Some(&self.q_norm), Some((&cos, &sin)));
            let kd = geo.heads(qkv, 4, Some(&self.k_norm), Some((&cos, &sin)));
            let od = band_attention(&qd, &kd, &v, &shape, scale, window);
            o.par_chunks_mut(4096)
                .zip(od.par_chunks(4096))
                .for_each(|(a, b)| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x -= y);
                });
        }
        let o = Tensor::from_vec(o, &shape)?;
        let merged =
            o.permute(&[0, 2, 1, 3])?
                .contiguous()?
                .reshape(&[bc, n, self.heads * self.dh])?;
        let a = ops::linear(&merged, &self.to_out, None)?;
        let h = ops::add(x, &a)?;
        drop(a);
        let u = self.ff_norm.apply(&h)?;
        let p = ops::linear(&u, &self.w0, Some(&self.b0))?;
        drop(u);
        let g = ops::glu(&p, self.gate)?;
        drop(p);
        let f = ops::linear(&g, &self.w2, Some(&self.b2))?;
        Ok(ops::add(&h, &f)?)
    }
}

struct Geo {
    bc: usize,
    n: usize,
    np: usize,
    h: usize,
    dh: usize,
}

impl Geo {
    /// Projection `idx` of the fused `[Bc, N, np·H·dh]` output as `[Bc, H, N, dh]`, with an
    /// optional DyT over the head dim followed by rotary embedding of the first `2·len(inv_freq)`
    /// dims.
    fn heads(
        &self,
        qkv: &[f32],
        idx: usize,
        norm: Option<&(f32, Vec<f32>, Vec<f32>)>,
        rope: Option<(&[f32], &[f32])>,
    ) -> Vec<f32> {
        let Geo { bc, n, np, h, dh } = *self;
        let d = h * dh;
        let mut out = vec![0f32; bc * h * n * dh];
        if out.is_empty() {
            return out;
        }
        // The path is read here: a `with_isa` override is per thread and the rows run on workers.
        let isa = aria_core::cpu::current();
        out.par_chunks_mut(n * dh).enumerate().for_each(|(bh, o)| {
            let (b, hh) = (bh / h, bh % h);
            for t in 0..n {
                let src = &qkv[(b * n + t) * np * d + idx * d + hh * dh..][..dh];
                let dst = &mut o[t * dh..(t + 1) * dh];
                match norm {
                    Some((alpha, g, be)) => aria_core::cpu::dyt_on(isa, dst, src, *alpha, g, be),
                    None => dst.copy_from_slice(src),
                }
                if let Some((cos, sin)) = rope {
                    let r = cos.len() / n.max(1);
                    let half = r / 2;
                    let (c, s) = (&cos[t * r..(t + 1) * r], &sin[t * r..(t + 1) * r]);
                    for i in 0..half {
                        let (x1, x2) = (dst[i], dst[i + half]);
                        dst[i] = x1 * c[i] + -x2 * s[i];
                        dst[i + half] = x2 * c[i + half] + x1 * s[i + half];
                    }
                }
            }
        });
        out
    }
}

/// Rotary tables for positions `pos0 .. pos0 + n`: `cos, sin` of `[p·f ; p·f]` (f32), each
/// `[n, 2·len(f)]` flattened. The angle of a position does not depend on `pos0`, so windows
/// that use absolute positions reproduce the whole-sequence tables bit for bit.
pub(crate) fn rope_tables(inv_freq: &[f32], pos0: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let f = inv_freq.len();
    let r = 2 * f;
    let mut c = vec![0f32; n * r];
    let mut s = vec![0f32; n * r];
    for t in 0..n {
        let p = (pos0 + t) as f32;
        for (i, fi) in inv_freq.iter().enumerate() {
            let (sa, ca) = (p * fi).sin_cos();
            c[t * r + i] = ca;
            c[t * r + i + f] = ca;
            s[t * r + i] = sa;
            s[t * r + i + f] = sa;
        }
    }
    (c, s)
}

/// Dot product with eight interleaved accumulators, reduced in a fixed order: the result
/// depends only on the two vectors, never on where they sit in a larger computation.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Softmax attention `softmax(q·kᵀ·scale)·v` per head on `[Bc, H, N, dh]` buffers, where query
/// `i` sees keys `max(0, i − l) ..= min(N − 1, i + r)` for a band `(l, r)` (all keys without
/// one). Each output row is computed from its own keys only, in key order, so a row gives the
/// same bits whatever sequence, window or chunk it is computed in — the property windowed
/// decoding relies on. (Attention is a small part of the SAME cost; this stays simple.)
fn band_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: &[usize; 4],
    scale: f32,
    window: Option<(usize, usize)>,
) -> Vec<f32> {
    let [_, _, n, dh] = *shape;
    let mut out = vec![0f32; q.len()];
    if out.is_empty() {
        return out;
    }
    out.par_chunks_mut(n * dh).enumerate().for_each(|(bh, ob)| {
        let base = bh * n * dh;
        let (qb, kb, vb) = (
            &q[base..base + n * dh],
            &k[base..base + n * dh],
            &v[base..base + n * dh],
        );
        let mut p = Vec::with_capacity(n);
        for i in 0..n {
            let (lo, hi) = match window {
                Some((l, r)) => (i.saturating_sub(l), (i + r + 1).min(n)),
                None => (0, n),
            };
            let qi = &qb[i * dh..(i + 1) * dh];
            p.clear();
            let mut mx = f32::NEG_INFINITY;
            for j in lo..hi {
                let s = dot(qi, &kb[j * dh..(j + 1) * dh]) * scale;
                mx = mx.max(s);
                p.push(s);
            }
            let mut den = 0f32;
            for e in p.iter_mut() {
                *e = (*e - mx).exp();
                den += *e;
            }
            let inv = 1.0 / den;
            let o = &mut ob[i * dh..(i + 1) * dh];
            for (jj, e) in p.iter().enumerate() {
                let w = e * inv;
                let vj = &vb[(lo + jj) * dh..(lo + jj + 1) * dh];
                for (x, y) in o.iter_mut().zip(vj) {
                    *x += w * y;
                }
            }
        }
    });
    out
}
