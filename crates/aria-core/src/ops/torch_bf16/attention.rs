use rayon::prelude::*;

use super::{exp_u20, lanes_sum, round, LANES};
use crate::backend::{AttnSpec, Op};
use crate::cpu;
use crate::ops::{f32_data, route, AttnOpts};
use crate::{threads, Result, Tensor};

/// The softmax numerators of PyTorch's CPU flash attention for one row of scaled, masked scores
/// (`−∞` for masked keys), in place: `exp(s − max)` by [`exp_u20`] on whole 8-lane vectors and
/// by the C library's `exp` on the remaining keys, each rounded to bf16 (what multiplies `v`),
/// and returns the row sum of the unrounded values (lanes summed per vector position, then
/// [`lanes_sum`], then the tail). A row with no finite score is zeroed and its sum is 0.
pub fn flash_softmax_row(sc: &mut [f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if matches!(cpu::current(), cpu::Isa::Avx2 | cpu::Isa::Avx512) {
        // SAFETY: `cpu::current` only returns paths this CPU runs; both imply AVX2 + FMA.
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

/// PyTorch's CPU flash attention (`scaled_dot_product_attention` without dropout) on bf16
/// inputs, for sequences within one 512-key block (longer ones rescale the softmax between
/// blocks, which this does not reproduce: it returns an error).
///
/// `q, k, v` are `[B, H, N, D]` f32 tensors holding bf16 values; `allowed(b, i, j)` says whether
/// query `i` of batch row `b` may attend key `j` (the mask's `−∞` otherwise). Per query row:
/// `q·kᵀ` as left-to-right f32 sums over the head dimension, times `scale`;
/// [`flash_softmax_row`]; `p·v` as left-to-right f32 sums over the keys; times `1/sum`,
/// rounded to bf16. A row with no allowed key gives zeros, as the kernel does.
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
    allowed: impl Fn(usize, usize, usize) -> bool + Sync,
) -> Result<Tensor> {
    crate::backend::check::flash_dims(q, k, v)?;
    let s = q.shape().to_vec();
    let (b, h, n, d) = (s[0], s[1], s[2], s[3]);
    let kn = k.shape()[2];
    let (qc, kc, vc) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (qv, kv, vv) = (f32_data(&qc)?, f32_data(&kc)?, f32_data(&vc)?);
    let mut out = vec![0f32; b * h * n * d];
    if d == 0 || n == 0 {
        return Tensor::from_vec(out, &s);
    }
    let isa = cpu::current();
    threads::install(|| {
        out.par_chunks_mut(n * d).enumerate().for_each(|(bh, ob)| {
            let bi = bh / h;
            let head = Head {
                q: &qv[bh * n * d..(bh + 1) * n * d],
                k: &kv[bh * kn * d..(bh + 1) * kn * d],
                v: &vv[bh * kn * d..(bh + 1) * kn * d],
                kn,
                d,
                scale,
            };
            let allowed = |i: usize, j: usize| allowed(bi, i, j);
            #[cfg(target_arch = "x86_64")]
            if matches!(isa, cpu::Isa::Avx2 | cpu::Isa::Avx512) {
                // SAFETY: `cpu::current` only returns paths this CPU runs; both imply AVX2 + FMA.
                unsafe { head_avx2(&head, &allowed, ob) };
                return;
            }
            let _ = isa;
            head_body(&head, &allowed, ob);
        });
    });
    Tensor::from_vec(out, &s)
}

/// Keys of one block of PyTorch's CPU flash attention.
pub const FLASH_KV_BLOCK: usize = 512;

/// [`flash_attention`] as an op of the set (`torch_bf16_attention`), with the masking of
/// [`AttnOpts`]: keys whose `key_mask` entry is 0 are excluded ([`KeyMaskMode::Exclude`](crate::ops::KeyMaskMode::Exclude), the
/// only mode the kernel has) and a `window` limits query `i` to keys `i − left ..= i + right`.
/// The kernel has no logit soft-cap (SDPA ignores it): asking for one is an error.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    route!(
        "torch_bf16_attention",
        [q, k, v, opts.key_mask],
        Op::TorchBf16Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            opts: AttnSpec::of(opts)
        }
    );
    // Checked: no soft-cap, the shapes, a key mask [B, Nk] applied by exclusion.
    let nk = k.dim(2)?;
    let valid: Option<Vec<bool>> = match opts.key_mask {
        None => None,
        Some(m) => Some(f32_data(m)?.iter().map(|&x| x != 0.0).collect()),
    };
    let (left, right) = opts.window.unwrap_or((usize::MAX, usize::MAX));
    flash_attention(q, k, v, opts.scale, |bi, i, j| {
        valid.as_ref().is_none_or(|m| m[bi * nk + j])
            && (j >= i || i - j <= left)
            && (j <= i || j - i <= right)
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::torch_bf16::test_values::unit;
    use crate::ops::KeyMaskMode;
    use crate::rng::Xoshiro256pp;

    /// Close to a plain softmax attention; masked keys excluded; a row with no key is zero;
    /// more keys than one block and bad shapes are errors.
    #[test]
    fn flash_attention_basics() {
        let mut rng = Xoshiro256pp::new(3);
        let (b, h, n, d) = (2, 2, 13, 8);
        let mk = |rng: &mut Xoshiro256pp| {
            let v: Vec<f32> = (0..b * h * n * d)
                .map(|_| round(unit(rng) * 2.0 - 1.0))
                .collect();
            Tensor::from_vec(v, &[b, h, n, d]).unwrap()
        };
        let (q, k, v) = (mk(&mut rng), mk(&mut rng), mk(&mut rng));
        let allowed = |bi: usize, i: usize, j: usize| bi == 0 || (j < 5 && i != 7);
        for isa in cpu::Isa::available() {
            let o = cpu::with_isa(isa, || flash_attention(&q, &k, &v, 0.5, allowed))
                .unwrap()
                .to_vec_f32()
                .unwrap();
            let (qv, kv, vv) = (
                q.to_vec_f32().unwrap(),
                k.to_vec_f32().unwrap(),
                v.to_vec_f32().unwrap(),
            );
            for bh in 0..b * h {
                for i in 0..n {
                    let row = &o[(bh * n + i) * d..(bh * n + i + 1) * d];
                    if !(0..n).any(|j| allowed(bh / h, i, j)) {
                        assert!(row.iter().all(|&x| x == 0.0));
                        continue;
                    }
                    let s: Vec<f64> = (0..n)
                        .map(|j| {
                            if !allowed(bh / h, i, j) {
                                return f64::NEG_INFINITY;
                            }
                            (0..d)
                                .map(|c| {
                                    qv[(bh * n + i) * d + c] as f64
                                        * kv[(bh * n + j) * d + c] as f64
                                })
                                .sum::<f64>()
                                * 0.5
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..d {
                        let want: f64 = (0..n)
                            .map(|j| e[j] / z * vv[(bh * n + j) * d + c] as f64)
                            .sum();
                        assert!(
                            (row[c] as f64 - want).abs() < 2e-2,
                            "{isa:?} {bh} {i} {c}: {} vs {want}",
                            row[c]
                        );
                    }
                }
            }
        }
        let big = Tensor::from_vec(vec![0f32; 513 * 2], &[1, 1, 513, 2]).unwrap();
        assert!(flash_attention(&big, &big, &big, 1.0, |_, _, _| true).is_err());
        let bad = Tensor::from_vec(vec![0f32; 6], &[1, 6]).unwrap();
        assert!(flash_attention(&bad, &bad, &bad, 1.0, |_, _, _| true).is_err());
    }

    /// The op's key mask and band are the kernel's `allowed` rule, bit for bit; a soft-cap or
    /// zero-value masking is refused.
    #[test]
    fn attention_op_masks_like_the_kernel() {
        let mut rng = Xoshiro256pp::new(5);
        let (b, h, n, d) = (2, 2, 11, 8);
        let mk = |rng: &mut Xoshiro256pp| {
            let v: Vec<f32> = (0..b * h * n * d)
                .map(|_| round(unit(rng) * 2.0 - 1.0))
                .collect();
            Tensor::from_vec(v, &[b, h, n, d]).unwrap()
        };
        let (q, k, v) = (mk(&mut rng), mk(&mut rng), mk(&mut rng));
        let m: Vec<u8> = (0..b * n).map(|i| u8::from(i % 7 != 3)).collect();
        let mask = Tensor::from_vec(m.clone(), &[b, n]).unwrap();
        let mut opts = AttnOpts::new(0.3);
        opts.key_mask = Some(&mask);
        opts.mask_mode = KeyMaskMode::Exclude;
        opts.window = Some((2, 3));
        let got = attention(&q, &k, &v, &opts)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let want = flash_attention(&q, &k, &v, 0.3, |bi, i, j| {
            m[bi * n + j] != 0 && j + 2 >= i && j <= i + 3
        })
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        opts.mask_mode = KeyMaskMode::ZeroValues;
        assert!(attention(&q, &k, &v, &opts).is_err());
        opts.mask_mode = KeyMaskMode::Exclude;
        opts.softcap = Some(50.0);
        assert!(attention(&q, &k, &v, &opts).is_err());
    }
}
