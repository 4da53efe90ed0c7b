use rayon::prelude::*;

use super::{exp_u20, lanes_sum, round, LANES};

/// The softmax numerators of PyTorch's CPU flash attention for one row of scaled, masked scores
/// (`−∞` for masked keys), in place: `exp(s − max)` by [`exp_u20`] on whole 8-lane vectors and
/// by the C library's `exp` on the remaining keys, each rounded to bf16 (what multiplies `v`),
/// and returns the row sum of the unrounded values (lanes summed per vector position, then
/// [`lanes_sum`], then the tail). A row with no finite score is zeroed and its sum is 0.
pub fn flash_softmax_row(sc: &mut [f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if matches!(crate::current(), crate::Isa::Avx2 | crate::Isa::Avx512) {
        // SAFETY: `crate::current` only returns paths this CPU runs; both imply AVX2 + FMA.
        return unsafe { softmax_row_avx2(sc) };
    }
    softmax_row_body(sc)
}

/// [`softmax_row_body`] compiled for AVX2 + FMA (the fused multiply-adds of [`exp_u20`] become
/// instructions instead of library calls).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(sc: &mut [f32]) -> f32 {
    softmax_row_body(sc)
}

#[inline(always)]
fn softmax_row_body(sc: &mut [f32]) -> f32 {
    let max = sc.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    if max == f32::NEG_INFINITY {
        sc.fill(0.0);
        return 0.0;
    }
    let vec_end = sc.len() / LANES * LANES;
    let mut lanes = [0f32; LANES];
    for chunk in sc[..vec_end].chunks_exact_mut(LANES) {
        for (l, e) in lanes.iter_mut().zip(chunk.iter_mut()) {
            let x = exp_u20(*e - max);
            *l += x;
            *e = round(x);
        }
    }
    let mut total = lanes_sum(&lanes);
    for e in sc[vec_end..].iter_mut() {
        let x = (*e - max).exp();
        total += x;
        *e = round(x);
    }
    total
}

/// The dimensions of [`flash_attention`]: `q` is `[b, h, n, d]`, `k` and `v` `[b, h, kn, d]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashDims {
    /// Batch rows.
    pub b: usize,
    /// Heads.
    pub h: usize,
    /// Queries.
    pub n: usize,
    /// Keys (at most [`FLASH_KV_BLOCK`]).
    pub kn: usize,
    /// Head dimension.
    pub d: usize,
}

/// PyTorch's CPU flash attention (`scaled_dot_product_attention` without dropout) on bf16
/// inputs, for sequences within one [`FLASH_KV_BLOCK`]-key block (longer ones rescale the
/// softmax between blocks, which this does not reproduce; the caller checks the size).
///
/// `q, k, v` are contiguous f32 slices holding bf16 values, shaped as [`FlashDims`] says;
/// `allowed(b, i, j)` says whether query `i` of batch row `b` may attend key `j` (the mask's
/// `−∞` otherwise). Per query row: `q·kᵀ` as left-to-right f32 sums over the head dimension,
/// times `scale`; [`flash_softmax_row`]; `p·v` as left-to-right f32 sums over the keys; times
/// `1/sum`, rounded to bf16. A row with no allowed key gives zeros, as the kernel does. Heads
/// run in parallel on the rayon pool it is called on.
pub fn flash_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: FlashDims,
    scale: f32,
    allowed: impl Fn(usize, usize, usize) -> bool + Sync,
) -> Vec<f32> {
    let FlashDims { b, h, n, kn, d } = dims;
    let mut out = vec![0f32; b * h * n * d];
    if d == 0 || n == 0 {
        return out;
    }
    let isa = crate::current();
    out.par_chunks_mut(n * d).enumerate().for_each(|(bh, ob)| {
        let bi = bh / h;
        let head = Head {
            q: &q[bh * n * d..(bh + 1) * n * d],
            k: &k[bh * kn * d..(bh + 1) * kn * d],
            v: &v[bh * kn * d..(bh + 1) * kn * d],
            kn,
            d,
            scale,
        };
        let allowed = |i: usize, j: usize| allowed(bi, i, j);
        #[cfg(target_arch = "x86_64")]
        if matches!(isa, crate::Isa::Avx2 | crate::Isa::Avx512) {
            // SAFETY: `crate::current` only returns paths this CPU runs; both imply AVX2 + FMA.
            unsafe { head_avx2(&head, &allowed, ob) };
            return;
        }
        let _ = isa;
        head_body(&head, &allowed, ob);
    });
    out
}

/// Keys of one block of PyTorch's CPU flash attention.
pub const FLASH_KV_BLOCK: usize = aria_tensor::backend::check::FLASH_KV_BLOCK;

/// One (batch, head) of [`flash_attention`].
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    kn: usize,
    d: usize,
    scale: f32,
}

/// [`head_body`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn head_avx2(hd: &Head<'_>, allowed: &dyn Fn(usize, usize) -> bool, out: &mut [f32]) {
    head_body(hd, allowed, out)
}

#[inline(always)]
fn head_body(hd: &Head<'_>, allowed: &dyn Fn(usize, usize) -> bool, out: &mut [f32]) {
    let (kn, d) = (hd.kn, hd.d);
    // kᵀ, so that the scores of all keys advance together (each still a left-to-right sum over
    // the head dimension).
    let mut kt = vec![0f32; d * kn];
    for (j, kr) in hd.k.chunks_exact(d).enumerate() {
        for (c, x) in kr.iter().enumerate() {
            kt[c * kn + j] = *x;
        }
    }
    let mut sc = vec![0f32; kn];
    for (i, o) in out.chunks_exact_mut(d).enumerate() {
        let qr = &hd.q[i * d..(i + 1) * d];
        sc.fill(0.0);
        for (qc, kc) in qr.iter().zip(kt.chunks_exact(kn.max(1))) {
            for (e, k) in sc.iter_mut().zip(kc) {
                *e += k * qc;
            }
        }
        for (j, e) in sc.iter_mut().enumerate() {
            *e = if allowed(i, j) {
                *e * hd.scale
            } else {
                f32::NEG_INFINITY
            };
        }
        let total = softmax_row_body(&mut sc);
        if total == 0.0 {
            o.fill(0.0);
            continue;
        }
        let recip = 1.0 / total;
        // p·v: every output dimension a left-to-right sum over the keys.
        o.fill(0.0);
        for (p, vr) in sc.iter().zip(hd.v.chunks_exact(d)) {
            for (oc, x) in o.iter_mut().zip(vr) {
                *oc += p * x;
            }
        }
        for oc in o.iter_mut() {
            *oc = round(*oc * recip);
        }
    }
}
