//! Element-wise, broadcast and row ops on slices: the CPU bodies of `aria_core::ops`'s unary,
//! binary, GLU, softmax, embedding, RoPE and normalisation ops. Work is split over the rayon pool
//! the call runs on, only between independent elements or rows (element-wise work in chunks of a
//! fixed size), so results never depend on the thread count. Each function reads the selected
//! ISA path ([`crate::current`]) once, when it starts.

pub use aria_tensor::backend::check::broadcast_strides;
use rayon::prelude::*;

use crate::{rows, Isa};

/// Elements per parallel chunk of element-wise work (a fixed size, so results never depend on
/// the thread count).
pub const CHUNK: usize = 4096;

/// `f` applied to every element in place.
pub fn map(v: &mut [f32], f: impl Fn(f32) -> f32 + Sync) {
    v.par_chunks_mut(CHUNK)
        .for_each(|c| c.iter_mut().for_each(|e| *e = f(*e)));
}

/// A row kernel applied to every chunk of `v` in place (the kernels work element by element, so
/// the chunking never shows in the result).
pub fn map_rows(v: &mut [f32], f: impl Fn(Isa, &mut [f32]) + Sync) {
    let isa = crate::current();
    v.par_chunks_mut(CHUNK).for_each(|c| f(isa, c));
}

/// A gate kernel of [`glu`] (`rows::swiglu`, `rows::geglu`, `rows::geglu_tanh`,
/// `rows::sin_pi_glu`): `o ← value ⊙ act(gate)`.
pub type GateKernel = fn(Isa, &mut [f32], &[f32], &[f32]);

/// Gated linear unit over rows of `d2 = 2F` values: the first half is the value, the second the
/// gate; returns rows of `F`.
pub fn glu(x: &[f32], d2: usize, gate: GateKernel) -> Vec<f32> {
    let f = d2 / 2;
    let n = x.len() / d2.max(1);
    let mut out = vec![0f32; n * f];
    if f == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(f).enumerate().for_each(|(r, o)| {
        let (val, g) = x[r * d2..(r + 1) * d2].split_at(f);
        gate(isa, o, val, g);
    });
    out
}

/// `f(a, b)` element by element with NumPy broadcasting: `a` and `b` are contiguous with shapes
/// `sa` and `sb`, `shape` is their (checked) broadcast shape.
pub fn binary_map(
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
    shape: &[usize],
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let mut out = vec![0f32; n];
    if sa == shape && sb == shape {
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
            let s = c * CHUNK;
            for ((v, x), y) in o.iter_mut().zip(&a[s..]).zip(&b[s..]) {
                *v = f(*x, *y);
            }
        });
        return out;
    }
    // General case: iterate over rows of the last dimension.
    let ta = broadcast_strides(sa, shape);
    let tb = broadcast_strides(sb, shape);
    let last = *shape.last().unwrap_or(&1);
    if last == 0 {
        return out;
    }
    out.par_chunks_mut(last).enumerate().for_each(|(row, o)| {
        let mut rem = row;
        let (mut ia, mut ib) = (0usize, 0usize);
        for d in (0..shape.len().saturating_sub(1)).rev() {
            let i = rem % shape[d];
            rem /= shape[d];
            ia += i * ta[d];
            ib += i * tb[d];
        }
        let (la, lb) = (ta[shape.len() - 1], tb[shape.len() - 1]);
        match (la, lb) {
            (1, 1) => {
                for ((v, x), y) in o.iter_mut().zip(&a[ia..]).zip(&b[ib..]) {
                    *v = f(*x, *y);
                }
            }
            (1, 0) => {
                let y = b[ib];
                o.iter_mut().zip(&a[ia..]).for_each(|(v, x)| *v = f(*x, y));
            }
            (0, 1) => {
                let x = a[ia];
                o.iter_mut().zip(&b[ib..]).for_each(|(v, y)| *v = f(x, *y));
            }
            _ => {
                for (j, v) in o.iter_mut().enumerate() {
                    *v = f(a[ia + j * la], b[ib + j * lb]);
                }
            }
        }
    });
    out
}

/// Softmax of every `d`-row in place (max-subtracted, f32).
pub fn softmax_rows(v: &mut [f32], d: usize) {
    if d == 0 {
        return;
    }
    let isa = crate::current();
    v.par_chunks_mut(d).for_each(|r| {
        let mx = rows::max(isa, r);
        let s = rows::exp_sub_sum(isa, r, mx);
        rows::scale(isa, r, 1.0 / s);
    });
}

/// Rows `ids` (checked to lie inside the table) of a `[V, d]` table, widened to f32.
pub fn gather_rows(table: &crate::gemm::WData<'_>, ids: &[i64], d: usize) -> Vec<f32> {
    let mut out = vec![0f32; ids.len() * d];
    if d > 0 {
        out.par_chunks_mut(d)
            .zip(ids)
            .for_each(|(row, &id)| table.read(id as usize * d, row));
    }
    out
}

/// Rotate-half RoPE in place on the first `r` values of every `d`-row of `v`, `n` rows per
/// sequence (row `i` is position `i % n`), with tables `cos`, `sin` of `r` columns.
pub fn rope_rows(v: &mut [f32], cos: &[f32], sin: &[f32], n: usize, d: usize, r: usize) {
    if d == 0 || n == 0 {
        return;
    }
    let isa = crate::current();
    v.par_chunks_mut(d).enumerate().for_each(|(row, e)| {
        let p = row % n;
        rows::rope_half(isa, e, &cos[p * r..(p + 1) * r], &sin[p * r..(p + 1) * r]);
    });
}

/// The gain of [`rms_norm`].
#[derive(Debug, Clone, Copy)]
pub enum RmsGain<'a> {
    /// No gain.
    None,
    /// `x / rms(x) · w`.
    Plain(&'a [f32]),
    /// Gemma's `x / rms(x) · (1 + w)`.
    OnePlus(&'a [f32]),
}

/// RMSNorm of every `d`-row: `x · rsqrt(mean(x²) + eps)` times the gain, in f32.
pub fn rms_norm(x: &[f32], d: usize, eps: f32, gain: RmsGain<'_>) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if d == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d))
        .for_each(|(o, r)| {
            let ms = rows::sumsq(isa, r) / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            match gain {
                RmsGain::Plain(w) => rows::norm_gain(isa, o, r, inv, w),
                RmsGain::OnePlus(w) => rows::norm_gain1p(isa, o, r, inv, w),
                RmsGain::None => {
                    o.copy_from_slice(r);
                    rows::scale(isa, o, inv);
                }
            }
        });
    out
}

/// LayerNorm of every `d`-row in place, with the optional affine weight and bias.
pub fn layer_norm(v: &mut [f32], d: usize, eps: f32, w: Option<&[f32]>, b: Option<&[f32]>) {
    if d == 0 {
        return;
    }
    let isa = crate::current();
    v.par_chunks_mut(d).for_each(|r| {
        let mean = rows::sum(isa, r) / d as f32;
        let var = rows::sumsq_dev(isa, r, mean) / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        rows::layer_norm_row(isa, r, mean, inv, w, b);
    });
}

/// Dynamic tanh of every `d`-row: `γ ⊙ tanh(α·x) + β`.
pub fn dyt(x: &[f32], d: usize, alpha: f32, gamma: &[f32], beta: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if d == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d))
        .for_each(|(o, r)| crate::dyt_on(isa, o, r, alpha, gamma, beta));
    out
}
