//! PyTorch's bf16 CPU arithmetic, reproduced bit for bit on f32 tensors that hold bf16 values.
//!
//! A model run in bf16 by PyTorch rounds every op's result to bf16, and the *order* in which its
//! kernels add f32 partial results decides which way a value near a rounding boundary goes.
//! With random (or merely sensitive) weights one flipped ulp early in a network spreads to half
//! of its outputs, so a faithful replay needs the orders too. These are the orders of PyTorch
//! 2.7's ATen kernels on an AVX2 CPU (8 f32 lanes per register) when oneDNN does not take the
//! bf16 matrix products (it does on AVX-512 machines, with other orders):
//!
//! * [`dot`]: the reduced-precision `gemm` dot product (`dot_with_fp32_arith`): 8 registers × 8
//!   lanes over 64-element blocks, a register tree, a lane tree, then the tails; [`linear`]
//!   runs it for every output, tiled so the 64 partial sums stay in registers;
//! * [`seq_dot`]: the left-to-right products of the CPU flash-attention kernel;
//! * [`sum`]: the vectorised `sum` reduction (`cascade_sum`), as `mean` uses it;
//! * [`exp_u20`]: the flash-attention softmax's fast exponential.
//!
//! Products of two bf16 values are exact in f32, so a fused multiply-add and a multiply followed
//! by an add give the same result here; only the additions round.

use half::bf16;
use rayon::prelude::*;

use super::{f32_data, linear_dims};
use crate::cpu;
use crate::cpu::gemm::WData;
use crate::{threads, CoreError, Result, Tensor};

/// f32 lanes of one AVX2 register (`Vectorized<float>`), the width the orders are defined by.
pub const LANES: usize = 8;
/// Elements of one main-loop block of [`dot`] (8 registers of [`LANES`]).
const BLOCK: usize = 64;

/// Round an f32 to the nearest bf16 (ties to even), returned widened.
#[inline]
pub fn round(v: f32) -> f32 {
    bf16::from_f32(v).to_f32()
}

/// `dst[l] += src[l]` lane by lane (one vector add).
#[inline(always)]
fn add_lanes(dst: &mut [f32; LANES], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// `vec_reduce_all(+)` of one AVX2 register: swap 128-bit halves, then 64-bit pairs, then
/// neighbours, adding each time; the result is `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`.
#[inline(always)]
pub fn lanes_sum(v: &[f32; LANES]) -> f32 {
    let a = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// The register tree of [`dot`] over the 64 partial sums of the main loop (register `r` holds
/// elements `8r..8r+8` of every block): 8 → 4 → 2 → 1 registers, then the lanes.
#[inline(always)]
fn block_tree(p: &[f32; BLOCK]) -> f32 {
    let mut h = [0f32; 32];
    for (i, v) in h.iter_mut().enumerate() {
        *v = p[i] + p[i + 32];
    }
    let mut q = [0f32; 16];
    for (i, v) in q.iter_mut().enumerate() {
        *v = h[i] + h[i + 16];
    }
    let mut r = [0f32; LANES];
    for (i, v) in r.iter_mut().enumerate() {
        *v = q[i] + q[i + LANES];
    }
    lanes_sum(&r)
}

/// The tails of [`dot`] after the main loop's sum `main_sum`: whole 16-element vectors into one
/// more register (reduced and added, zero when there are none), then the last elements one by
/// one.
#[inline(always)]
fn tails(a: &[f32], b: &[f32], main_sum: f32) -> f32 {
    let k = a.len().min(b.len());
    let main = k & !(BLOCK - 1);
    if main == k {
        // The empty tail register still adds its zero (−0 becomes +0).
        return main_sum + 0.0;
    }
    let vec_end = k & !(2 * LANES - 1);
    let mut tail = [0f32; LANES];
    let mut j = main;
    while j < vec_end {
        for half in [j, j + LANES] {
            for (l, t) in tail.iter_mut().enumerate() {
                *t += a[half + l] * b[half + l];
            }
        }
        j += 2 * LANES;
    }
    let mut sum = main_sum + lanes_sum(&tail);
    for j in vec_end..k {
        sum += a[j] * b[j];
    }
    sum
}

/// The dot product of ATen's reduced-precision `gemm` (`dot_with_fp32_arith`): 8 registers of 8
/// lanes accumulate 64-element blocks, the registers are added as a tree (8 → 4 → 2 → 1) and
/// then the lanes; a remainder of whole 16-element vectors goes to one more register, the
/// last elements are added one by one.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let k = a.len().min(b.len());
    let main = k & !(BLOCK - 1);
    let mut acc = [0f32; BLOCK];
    for (ca, cb) in a[..main]
        .chunks_exact(BLOCK)
        .zip(b[..main].chunks_exact(BLOCK))
    {
        for ((s, x), y) in acc.iter_mut().zip(ca).zip(cb) {
            *s += x * y;
        }
    }
    tails(&a[..k], &b[..k], block_tree(&acc))
}

/// A plain left-to-right dot product (the order of the flash-attention kernel's products).
pub fn seq_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |s, (x, y)| s + x * y)
}

/// The f32 sum of a contiguous row as PyTorch's vectorised `sum` reduces it (`cascade_sum` on
/// AVX2): 8-lane vectors, four interleaved accumulators over groups of four vectors, summed
/// through a four-level cascade, then the leftover vectors, the accumulators in order, the
/// scalar tail and finally the lanes one by one.
pub fn sum(x: &[f32]) -> f32 {
    let nvec = x.len() / LANES;
    let vecs = |i: usize| -> &[f32] { &x[i * LANES..(i + 1) * LANES] };
    let groups = nvec / 4;
    let ceil_log2 = |n: usize| -> u32 {
        if n <= 1 {
            0
        } else {
            usize::BITS - (n - 1).leading_zeros()
        }
    };
    let power = 4u32.max(ceil_log2(groups) / 4);
    let step = 1usize << power;
    let mask = step - 1;
    let mut acc = [[[0f32; LANES]; 4]; 4];
    let add_group = |a: &mut [[f32; LANES]; 4], g: usize| {
        for (r, row) in a.iter_mut().enumerate() {
            add_lanes(row, vecs(4 * g + r));
        }
    };
    let mut i = 0;
    while i + step <= groups {
        for _ in 0..step {
            add_group(&mut acc[0], i);
            i += 1;
        }
        for j in 1..4 {
            let (lo, hi) = acc.split_at_mut(j);
            for (d, s) in hi[0].iter_mut().zip(lo[j - 1].iter_mut()) {
                add_lanes(d, s);
                *s = [0.0; LANES];
            }
            if i & (mask << (j as u32 * power)) != 0 {
                break;
            }
        }
    }
    while i < groups {
        add_group(&mut acc[0], i);
        i += 1;
    }
    let mut ps = acc[0];
    for lvl in acc.iter().skip(1) {
        for (d, s) in ps.iter_mut().zip(lvl) {
            add_lanes(d, s);
        }
    }
    let (first, rest) = ps.split_at_mut(1);
    for g in groups * 4..nvec {
        add_lanes(&mut first[0], vecs(g));
    }
    for r in rest.iter() {
        add_lanes(&mut first[0], r);
    }
    let mut total = 0f32;
    for &v in &x[nvec * LANES..] {
        total += v;
    }
    for v in first[0] {
        total += v;
    }
    total
}

/// PyTorch's vectorised `exp_u20` (AVX2 / AVX-512 `Vectorized<float>`), the exponential of its
/// CPU flash-attention softmax: a degree-5 polynomial on `x − n·ln2` scaled by `2ⁿ`, accurate to
/// about 20 ulp. Reproduced operation by operation (each `mul_add` is one fused multiply-add of
/// the original).
#[inline(always)]
pub fn exp_u20(x: f32) -> f32 {
    const F1: f32 = 0.999_999_7;
    const F2: f32 = 0.499_991_5;
    const F3: f32 = 0.166_676_52;
    const F4: f32 = 0.041_897_822;
    const F5: f32 = 0.008_289_291;
    let log2e = f32::from_bits(0x3fb8_aa3b);
    let ln2 = f32::from_bits(0x3f31_7218);
    let ln_min = f32::from_bits(0xc2ae_ac50);
    let ln_max = f32::from_bits(0x42b1_7218);
    let underflow = x < ln_min;
    let src = x.min(ln_max).max(ln_min);
    let fx = src.mul_add(log2e, 0.5).floor();
    let r = (-fx).mul_add(ln2, src);
    let mut p = r.mul_add(F5, F4);
    p = r.mul_add(p, F3);
    p = r.mul_add(p, F2);
    p = r.mul_add(p, F1);
    p = r.mul_add(p, 1.0);
    let pow = if underflow {
        0.0
    } else {
        // 2^(n−1); n ∈ [−126, 128] after the clamp, so the exponent field stays in range.
        let e = (fx - 1.0) as i32 + 127;
        f32::from_bits((e as u32) << 23)
    };
    p * pow * 2.0
}

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
    let s = q.shape().to_vec();
    let ks = k.shape();
    if s.len() != 4 || ks.len() != 4 || v.shape() != ks || ks[..2] != s[..2] || ks[3] != s[3] {
        return Err(CoreError::shape(
            "torch_bf16::flash_attention",
            "need q [B, H, N, D] and k, v [B, H, M, D]",
            &[&s, ks, v.shape()],
        ));
    }
    let (b, h, n, d) = (s[0], s[1], s[2], s[3]);
    let kn = ks[2];
    if kn > FLASH_KV_BLOCK {
        return Err(CoreError::Invalid(format!(
            "torch_bf16::flash_attention: {kn} keys exceed one {FLASH_KV_BLOCK}-key block"
        )));
    }
    let qv = f32_data(&q.contiguous()?)?.into_owned();
    let kv = f32_data(&k.contiguous()?)?.into_owned();
    let vv = f32_data(&v.contiguous()?)?.into_owned();
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

/// Weight rows (output columns) per task of [`linear`] (a multiple of every tile's `J`).
const NB: usize = 32;

/// Reorder the first `main` elements of every `k`-row into groups of `g` lanes (`g` a multiple
/// of [`LANES`] dividing 64): group `q` of block `c` (`64c + g·q + l`) goes to `[q][c][l]`, so
/// every lane's elements follow each other within a group.
fn by_group(v: &WData<'_>, rows: usize, k: usize, main: usize, g: usize) -> Vec<f32> {
    let nc = main / BLOCK;
    let groups = BLOCK / g;
    let mut out = vec![0f32; rows * main];
    let mut src = vec![0f32; main];
    for (r, dst) in out.chunks_exact_mut(main.max(1)).enumerate() {
        v.read(r * k, &mut src);
        for c in 0..nc {
            for q in 0..groups {
                let s = &src[c * BLOCK + q * g..c * BLOCK + (q + 1) * g];
                let o = (q * nc + c) * g;
                dst[o..o + g].copy_from_slice(s);
            }
        }
    }
    out
}

/// The main-loop sums of [`dot`] (64 partial sums through [`block_tree`]) for a tile of
/// `I` × `J` outputs, from rows in [`by_group`] order with `G` lanes per group (`nc` blocks
/// each). Every lane is its own left-to-right sum, so the group width changes only how many
/// lanes one instruction advances, never the result. With `FMA` the products are accumulated
/// by fused multiply-adds, as the reference does; the product of two bf16 values is exact in
/// f32, so without it the result is the same except for products in the subnormal range.
#[inline(always)]
fn tile_body<const FMA: bool, const G: usize, const I: usize, const J: usize>(
    xs: [&[f32]; I],
    ws: [&[f32]; J],
    nc: usize,
) -> [[f32; J]; I] {
    let mut out = [[[0f32; BLOCK]; J]; I];
    for q in 0..BLOCK / G {
        let span = q * nc * G..(q + 1) * nc * G;
        let xv: [&[[f32; G]]; I] =
            std::array::from_fn(|t| &bytemuck::cast_slice(&xs[t][span.clone()])[..nc]);
        let wv: [&[[f32; G]]; J] =
            std::array::from_fn(|t| &bytemuck::cast_slice(&ws[t][span.clone()])[..nc]);
        let mut acc = [[[0f32; G]; J]; I];
        for c in 0..nc {
            let xc: [[f32; G]; I] = std::array::from_fn(|t| xv[t][c]);
            let wc: [[f32; G]; J] = std::array::from_fn(|t| wv[t][c]);
            for (ai, xi) in acc.iter_mut().zip(&xc) {
                for (a, wj) in ai.iter_mut().zip(&wc) {
                    for l in 0..G {
                        a[l] = if FMA {
                            xi[l].mul_add(wj[l], a[l])
                        } else {
                            a[l] + xi[l] * wj[l]
                        };
                    }
                }
            }
        }
        for (oi, ai) in out.iter_mut().zip(&acc) {
            for (o, a) in oi.iter_mut().zip(ai) {
                o[q * G..(q + 1) * G].copy_from_slice(a);
            }
        }
    }
    let mut sums = [[0f32; J]; I];
    for (si, oi) in sums.iter_mut().zip(&out) {
        for (s, o) in si.iter_mut().zip(oi) {
            *s = block_tree(o);
        }
    }
    sums
}

/// A register tile of [`linear`] for one ISA path: group width, rows of x and rows of w.
trait Tile {
    const G: usize;
    const I: usize;
    const J: usize;
    /// The main-loop sums for `xs.len() == I` rows of x against `ws.len() == J` rows of w.
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]);
}

/// Portable: 8-lane groups, 2 × 4 outputs, multiply then add.
struct Portable;
impl Tile for Portable {
    const G: usize = 8;
    const I: usize = 2;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        let r = tile_body::<false, 8, 2, 4>([xs[0], xs[1]], [ws[0], ws[1], ws[2], ws[3]], nc);
        out.copy_from_slice(r.as_flattened());
    }
}

/// AVX2 + FMA: 8-lane groups (one register), 2 × 4 outputs.
#[cfg(target_arch = "x86_64")]
struct Avx2Tile;
#[cfg(target_arch = "x86_64")]
impl Tile for Avx2Tile {
    const G: usize = 8;
    const I: usize = 2;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        /// # Safety
        /// The CPU must support AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn body(xs: [&[f32]; 2], ws: [&[f32]; 4], nc: usize) -> [[f32; 4]; 2] {
            tile_body::<true, 8, 2, 4>(xs, ws, nc)
        }
        // SAFETY: `linear` selects this tile only on the AVX2 path, which `cpu::current`
        // returns only on CPUs with AVX2 and FMA.
        let r = unsafe { body([xs[0], xs[1]], [ws[0], ws[1], ws[2], ws[3]], nc) };
        out.copy_from_slice(r.as_flattened());
    }
}

/// AVX-512F: 16-lane groups (one register), 4 × 4 outputs in the 32 registers.
#[cfg(target_arch = "x86_64")]
struct Avx512Tile;
#[cfg(target_arch = "x86_64")]
impl Tile for Avx512Tile {
    const G: usize = 16;
    const I: usize = 4;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        /// # Safety
        /// The CPU must support AVX-512F, AVX2 and FMA.
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn body(xs: [&[f32]; 4], ws: [&[f32]; 4], nc: usize) -> [[f32; 4]; 4] {
            tile_body::<true, 16, 4, 4>(xs, ws, nc)
        }
        // SAFETY: `linear` selects this tile only on the AVX-512 path, which `cpu::current`
        // returns only on CPUs with AVX-512F, AVX2 and FMA.
        let r = unsafe {
            body(
                [xs[0], xs[1], xs[2], xs[3]],
                [ws[0], ws[1], ws[2], ws[3]],
                nc,
            )
        };
        out.copy_from_slice(r.as_flattened());
    }
}

/// `x · wᵀ (+ bias)` as PyTorch's bf16 `linear` computes it on the CPU without oneDNN: every
/// output is [`dot`] of an input row and a weight row (plus the bias in f32), rounded to bf16.
/// `x` is `[.., K]` holding bf16 values, `w` `[N, K]` in any float dtype (bf16 for a faithful
/// replay), `bias` `[N]`. Returns f32 holding bf16 values.
pub fn linear(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    match cpu::current() {
        #[cfg(target_arch = "x86_64")]
        cpu::Isa::Avx512 => linear_with::<Avx512Tile>(x, w, bias),
        #[cfg(target_arch = "x86_64")]
        cpu::Isa::Avx2 => linear_with::<Avx2Tile>(x, w, bias),
        _ => linear_with::<Portable>(x, w, bias),
    }
}

fn linear_with<T: Tile>(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (m, k, n) = linear_dims(x, w, bias)?;
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let (xd, wd) = (
        WData::of("torch_bf16::linear", &x)?,
        WData::of("torch_bf16::linear", &w)?,
    );
    let bv = bias.map(|b| b.to_vec_f32()).transpose()?;
    let main = k & !(BLOCK - 1);
    let nc = main / BLOCK;
    let xp = by_group(&xd, m, k, main, T::G);
    let wp = by_group(&wd, n, k, main, T::G);
    // Whole rows for the tails, only when there are tails.
    let (xv, wv) = if main < k {
        (f32_data(&x)?.into_owned(), f32_data(&w)?.into_owned())
    } else {
        (Vec::new(), Vec::new())
    };
    fn row(v: &[f32], i: usize, len: usize) -> &[f32] {
        &v[i * len..(i + 1) * len]
    }
    let zeros = vec![0f32; main];
    // Tasks own blocks of weight rows (output columns) and sweep every input row, so a block
    // of weights stays in cache while the inputs stream past it.
    let blocks: Vec<Vec<f32>> = threads::install(|| {
        (0..n.div_ceil(NB))
            .into_par_iter()
            .map(|jb| {
                let (jlo, jhi) = (jb * NB, (jb * NB + NB).min(n));
                let nb = jhi - jlo;
                let mut ob = vec![0f32; m * nb];
                let mut sums = vec![0f32; T::I * T::J];
                let mut xs: Vec<&[f32]> = vec![&zeros; T::I];
                let mut ws: Vec<&[f32]> = vec![&zeros; T::J];
                for i0 in (0..m).step_by(T::I) {
                    let rows_i = T::I.min(m - i0);
                    for (t, xr) in xs.iter_mut().enumerate() {
                        *xr = if t < rows_i {
                            row(&xp, i0 + t, main)
                        } else {
                            &zeros
                        };
                    }
                    for j0 in (jlo..jhi).step_by(T::J) {
                        let cols = T::J.min(jhi - j0);
                        for (t, wr) in ws.iter_mut().enumerate() {
                            *wr = if t < cols {
                                row(&wp, j0 + t, main)
                            } else {
                                &zeros
                            };
                        }
                        T::run(&xs, &ws, nc, &mut sums);
                        for t in 0..rows_i {
                            for u in 0..cols {
                                let (i, j) = (i0 + t, j0 + u);
                                let s = sums[t * T::J + u];
                                let d = if main < k {
                                    tails(row(&xv, i, k), row(&wv, j, k), s)
                                } else {
                                    // The empty tail register still adds its zero.
                                    s + 0.0
                                };
                                ob[i * nb + (j - jlo)] = round(match &bv {
                                    Some(b) => b[j] + d,
                                    None => d,
                                });
                            }
                        }
                    }
                }
                ob
            })
            .collect()
    });
    let mut out = vec![0f32; m * n];
    for (jb, ob) in blocks.iter().enumerate() {
        let jlo = jb * NB;
        let nb = ob.len() / m.max(1);
        for i in 0..m {
            out[i * n + jlo..i * n + jlo + nb].copy_from_slice(&ob[i * nb..(i + 1) * nb]);
        }
    }
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Tensor::from_vec(out, &shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Xoshiro256pp;

    /// Values whose sums depend on the order: a spread of magnitudes and large cancelling pairs,
    /// rounded to bf16.
    fn unit(rng: &mut Xoshiro256pp) -> f32 {
        (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn hostile(rng: &mut Xoshiro256pp, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n)
            .map(|_| {
                let m = unit(rng) * 2.0 - 1.0;
                let e = (unit(rng) * 24.0) as i32 - 12;
                round(m * 2f32.powi(e))
            })
            .collect();
        if n >= 2 {
            let (a, b) = (
                (unit(rng) * n as f32) as usize % n,
                (unit(rng) * n as f32) as usize % n,
            );
            v[a] = 30720.0;
            v[b] = -30720.0;
        }
        v
    }

    #[test]
    fn dot_adds_in_the_reference_order() {
        // 2^24 + 1 − 2^24 is 0 from the left, 1 when the big terms meet first (lane 0 of
        // registers 0 and 4).
        let mut a = vec![0f32; 64];
        let b = vec![1f32; 64];
        a[0] = 16_777_216.0;
        a[8] = 1.0;
        a[32] = -16_777_216.0;
        assert_eq!(seq_dot(&a, &b), 0.0);
        assert_eq!(dot(&a, &b), 1.0);
        // Lanes of the last register: l0 + l4 first.
        let mut a = vec![0f32; 64];
        a[0] = 16_777_216.0;
        a[1] = 1.0;
        a[4] = -16_777_216.0;
        assert_eq!(dot(&a, &b), 1.0);
        // The 16-wide tail and the scalar tail come after the blocks.
        let mut a = vec![0f32; 83];
        let b = vec![1f32; 83];
        a[0] = 16_777_216.0;
        a[64] = 1.0;
        a[72] = 1.0; // the same tail lane: 2, added to the blocks' sum in one go
        a[80] = 2.0; // the scalar tail
        assert_eq!(dot(&a, &b), 16_777_220.0);
        assert_eq!(seq_dot(&a, &b), 16_777_218.0);
    }

    /// The tiled kernel gives exactly [`dot`] for every output, on every ISA path, for every
    /// remainder of rows, columns and K.
    #[test]
    fn linear_is_dot_then_round() {
        let mut rng = Xoshiro256pp::new(7);
        for &(m, k, n) in &[
            (5, 768, 9),
            (1, 64, 1),
            (3, 200, 6),
            (4, 16, 4),
            (2, 7, 3),
            (0, 64, 2),
        ] {
            let x = hostile(&mut rng, m * k);
            let w = hostile(&mut rng, n * k);
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
            let xt = Tensor::from_vec(x.clone(), &[m, k]).unwrap();
            let wt = Tensor::from_vec(
                w.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>(),
                &[n, k],
            )
            .unwrap();
            let bt = Tensor::from_vec(bias.clone(), &[n]).unwrap();
            for isa in cpu::Isa::available() {
                let got = cpu::with_isa(isa, || linear(&xt, &wt, Some(&bt)))
                    .unwrap()
                    .to_vec_f32()
                    .unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let want =
                            round(bias[j] + dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]));
                        assert_eq!(
                            got[i * n + j].to_bits(),
                            want.to_bits(),
                            "{isa:?} m{m} k{k} n{n} ({i},{j})"
                        );
                    }
                }
            }
        }
    }

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

    #[test]
    fn sum_adds_in_the_reference_order() {
        let mut x = vec![0f32; 768];
        x[0] = 16_777_216.0;
        x[8] = 1.0; // the same lane, the next vector: absorbed
        x[1] = 1.0; // another lane
        x[9] = -16_777_216.0;
        // Lane 0 holds 2^24 (the 1 is lost), lane 1 holds 1 − 2^24; lanes add at the end.
        assert_eq!(sum(&x), 1.0);
        let x: Vec<f32> = (0..1000).map(|i| (i % 9) as f32).collect();
        assert_eq!(sum(&x), x.iter().sum::<f32>());
    }

    #[test]
    fn exp_u20_is_close_to_exp_and_exact_at_the_edges() {
        assert_eq!(exp_u20(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_u20(-100.0), 0.0);
        assert_eq!(exp_u20(0.0), 1.0);
        let mut worst = 0f64;
        let mut x = -80.0f32;
        while x <= 0.0 {
            let want = (x as f64).exp();
            let got = exp_u20(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x += 0.01;
        }
        // The polynomial is accurate to about 20 ulp (2.4e-6), not to 1 ulp.
        assert!(worst < 3e-6, "exp_u20 relative error {worst}");
        assert!(
            worst > 1e-7,
            "exp_u20 should not be the correctly rounded exp"
        );
    }

    #[test]
    fn round_is_nearest_even() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
        assert_eq!(round(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round(27.712_812), 27.75);
    }
}
