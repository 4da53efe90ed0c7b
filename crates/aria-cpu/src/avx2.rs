//! AVX2 + FMA kernels (x86-64). Same functions and meaning as [`super::scalar`]; each is an
//! `unsafe fn` that the caller may only run after detecting AVX2 and FMA.
//!
//! Reductions keep 32 partial sums (four 8-lane registers) combined in a fixed order, which is at
//! least as accurate as the sequential scalar sum and independent of the thread count.

use std::arch::x86_64::*;

use super::scalar::{self, MR, NR};

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: register-only intrinsics; the caller runs with AVX2 enabled.
    unsafe {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// `exp` of 8 lanes (Cephes-style range reduction and polynomial, ≈1 ulp; exact 0 below ≈ −88.4,
/// +∞ above ≈ 88.4, NaN propagates).
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    // SAFETY: register-only intrinsics; the caller runs with AVX2 and FMA enabled.
    unsafe {
        let x = _mm256_min_ps(_mm256_set1_ps(88.376_26), x);
        let x = _mm256_max_ps(_mm256_set1_ps(-88.376_26), x);
        let fx = _mm256_fmadd_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(0.5),
        );
        let fx = _mm256_floor_ps(fx);
        let x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693_359_4), x);
        let x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.121_944_4e-4), x);
        let z = _mm256_mul_ps(x, x);
        let mut y = _mm256_set1_ps(1.987_569_1e-4);
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.398_2e-3));
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.333_452e-3));
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.166_579_6e-2));
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(0.166_666_65));
        y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(0.5));
        y = _mm256_fmadd_ps(y, z, x);
        y = _mm256_add_ps(y, _mm256_set1_ps(1.0));
        let e = _mm256_cvtps_epi32(fx);
        let e = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }
}

/// Dot product (the shorter length counts).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: every load reads indices < n, inside both slices.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let o = i + 8 * u;
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(o)), _mm256_loadu_ps(pb.add(o)), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i)),
                _mm256_loadu_ps(pb.add(i)),
                acc[0],
            );
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum(v);
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const M: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    bp: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    // SAFETY: the caller checked the extents (`tile_extents_ok`) and runs with AVX2 + FMA.
    unsafe {
        let mut c0 = [_mm256_setzero_ps(); M];
        let mut c1 = [_mm256_setzero_ps(); M];
        for k in 0..kc {
            let b0 = _mm256_loadu_ps(bp.add(k * ldb));
            let b1 = _mm256_loadu_ps(bp.add(k * ldb + 8));
            for r in 0..M {
                let av = _mm256_broadcast_ss(&*a.add(r * lda + k));
                c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
                c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
            }
        }
        store_tile(&c0, &c1, M, c, ldc, nc, acc);
    }
}

/// Write (`acc`: add) the first `rows` rows of a register tile `c0 | c1` to `c` (row stride
/// `ldc`, `nc ≤ NR` columns).
///
/// # Safety
/// `c[r·ldc + j]` must be valid for `r < rows`, `j < nc`; AVX2 available.
#[inline(always)]
unsafe fn store_tile(
    c0: &[__m256],
    c1: &[__m256],
    rows: usize,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    // SAFETY: the caller guarantees the extents of `c` and AVX2.
    unsafe {
        if nc == NR {
            for r in 0..rows {
                let p = c.add(r * ldc);
                let (mut v0, mut v1) = (c0[r], c1[r]);
                if acc {
                    v0 = _mm256_add_ps(_mm256_loadu_ps(p), v0);
                    v1 = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), v1);
                }
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p.add(8), v1);
            }
        } else {
            let mut t = [0f32; NR];
            for r in 0..rows {
                _mm256_storeu_ps(t.as_mut_ptr(), c0[r]);
                _mm256_storeu_ps(t.as_mut_ptr().add(8), c1[r]);
                let p = c.add(r * ldc);
                for (j, tv) in t.iter().enumerate().take(nc) {
                    if acc {
                        *p.add(j) += tv;
                    } else {
                        *p.add(j) = *tv;
                    }
                }
            }
        }
    }
}

/// Micro-kernel of the packed matrix product; see [`scalar::gemm_tile`] (FMA accumulation).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_tile(
    mr: usize,
    kc: usize,
    a: &[f32],
    lda: usize,
    bp: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    assert!(
        scalar::tile_extents_ok(MR, NR, mr, kc, a, lda, bp, ldb, c, ldc, nc),
        "gemm_tile extents"
    );
    let (a, bp, c) = (a.as_ptr(), bp.as_ptr(), c.as_mut_ptr());
    // SAFETY: extents checked above; AVX2 + FMA guaranteed by the caller.
    unsafe {
        match mr {
            1 => tile::<1>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            2 => tile::<2>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            3 => tile::<3>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            4 => tile::<4>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            5 => tile::<5>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            _ => tile::<MR>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
        }
    }
}

/// One k step of the packed-A tile: two B vectors, six broadcasts, twelve FMAs.
#[inline(always)]
unsafe fn step_pa(ap: *const f32, bp: *const f32, c0: &mut [__m256; MR], c1: &mut [__m256; MR]) {
    // SAFETY: the caller keeps `ap[..MR]` and `bp[..NR]` readable; AVX2 + FMA enabled by it.
    unsafe {
        let b0 = _mm256_loadu_ps(bp);
        let b1 = _mm256_loadu_ps(bp.add(8));
        for r in 0..MR {
            let av = _mm256_broadcast_ss(&*ap.add(r));
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
}

/// Micro-kernel on a packed A micro-panel: `C[r][j] (+)= Σ_k ap[k·MR + r] · bp[k·NR + j]` for
/// `r < mr ≤ MR`, `j < nc ≤ NR`, `k < kc` (rows `mr..MR` of `ap` are read but not stored; a
/// zero-padded panel keeps them finite). Each output is the same sequential FMA chain from zero
/// as in [`gemm_tile`], then added to C (or written, with `acc` false): bit-identical to it.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `c[r·ldc + j]` for `r < mr`, `j < nc` must be valid
/// and touched by no other thread during the call.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_tile_pa(
    mr: usize,
    kc: usize,
    ap: &[f32],
    bp: &[f32],
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    assert!(
        (1..=MR).contains(&mr) && nc <= NR && ap.len() >= kc * MR && bp.len() >= kc * NR,
        "gemm_tile_pa extents"
    );
    let (mut a, mut b) = (ap.as_ptr(), bp.as_ptr());
    // SAFETY: extents checked above (kc steps of MR A values and NR B values); the caller keeps
    // `c[r·ldc + j]` for `r < mr`, `j < nc` valid and not touched by another thread; AVX2 + FMA
    // guaranteed by the caller.
    unsafe {
        let mut c0 = [_mm256_setzero_ps(); MR];
        let mut c1 = [_mm256_setzero_ps(); MR];
        let mut k = 0;
        while k + 4 <= kc {
            step_pa(a, b, &mut c0, &mut c1);
            step_pa(a.add(MR), b.add(NR), &mut c0, &mut c1);
            step_pa(a.add(2 * MR), b.add(2 * NR), &mut c0, &mut c1);
            step_pa(a.add(3 * MR), b.add(3 * NR), &mut c0, &mut c1);
            a = a.add(4 * MR);
            b = b.add(4 * NR);
            k += 4;
        }
        while k < kc {
            step_pa(a, b, &mut c0, &mut c1);
            a = a.add(MR);
            b = b.add(NR);
            k += 1;
        }
        store_tile(&c0, &c1, mr, c, ldc, nc, acc);
    }
}

/// Maximum (−∞ for an empty slice).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn max(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    // SAFETY: loads stay below n.
    unsafe {
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 8 <= n {
            m = _mm256_max_ps(_mm256_loadu_ps(p.add(i)), m);
            i += 8;
        }
        let mut t = [0f32; 8];
        _mm256_storeu_ps(t.as_mut_ptr(), m);
        let mut r = t.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        while i < n {
            r = r.max(*p.add(i));
            i += 1;
        }
        r
    }
}

/// Sum of `f(x)` over 32 partial sums, `f` applied to 8 lanes.
#[inline(always)]
unsafe fn reduce(x: &[f32], f: impl Fn(__m256) -> __m256, g: impl Fn(f32) -> f32) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    // SAFETY: loads stay below n; AVX2 enabled by the caller.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, f(_mm256_loadu_ps(p.add(i + 8 * u))));
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_add_ps(acc[0], f(_mm256_loadu_ps(p.add(i))));
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum(v);
        while i < n {
            s += g(*p.add(i));
            i += 1;
        }
        s
    }
}

/// Sum.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sum(x: &[f32]) -> f32 {
    // SAFETY: AVX2 enabled here.
    unsafe { reduce(x, |v| v, |v| v) }
}

/// Sum of squares.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sumsq(x: &[f32]) -> f32 {
    // SAFETY: AVX2 enabled here.
    unsafe { reduce(x, |v| _mm256_mul_ps(v, v), |v| v * v) }
}

/// Sum of squared deviations from `m`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sumsq_dev(x: &[f32], m: f32) -> f32 {
    // SAFETY: AVX2 enabled here.
    unsafe {
        let mv = _mm256_set1_ps(m);
        reduce(
            x,
            |v| {
                let d = _mm256_sub_ps(v, mv);
                _mm256_mul_ps(d, d)
            },
            |v| (v - m) * (v - m),
        )
    }
}

/// Apply `f` to 8 lanes at a time in place; the tail goes through a zero-padded buffer.
#[inline(always)]
unsafe fn map_inplace(x: &mut [f32], f: impl Fn(__m256) -> __m256) {
    let n = x.len();
    let p = x.as_mut_ptr();
    // SAFETY: loads and stores stay below n; AVX2 enabled by the caller.
    unsafe {
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(p.add(i), f(_mm256_loadu_ps(p.add(i))));
            i += 8;
        }
        if i < n {
            let mut t = [0f32; 8];
            t[..n - i].copy_from_slice(&x[i..]);
            _mm256_storeu_ps(t.as_mut_ptr(), f(_mm256_loadu_ps(t.as_ptr())));
            x[i..].copy_from_slice(&t[..n - i]);
        }
    }
}

/// `x ← exp(x − m)`, returning the sum of the new values.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    // SAFETY: AVX2 + FMA enabled here.
    unsafe {
        let mv = _mm256_set1_ps(m);
        map_inplace(x, |v| exp8(_mm256_sub_ps(v, mv)));
        sum(x)
    }
}

/// `x ← x · s`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scale(x: &mut [f32], s: f32) {
    // SAFETY: AVX2 enabled here.
    unsafe {
        let sv = _mm256_set1_ps(s);
        map_inplace(x, |v| _mm256_mul_ps(v, sv));
    }
}

#[inline(always)]
unsafe fn silu8(v: __m256) -> __m256 {
    // SAFETY: register-only intrinsics; AVX2 + FMA enabled by the caller.
    unsafe {
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }
}

/// `x ← x / (1 + e^−x)`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn silu(x: &mut [f32]) {
    // SAFETY: AVX2 + FMA enabled here.
    unsafe { map_inplace(x, |v| silu8(v)) }
}

/// `x ← 1 / (1 + e^−x)`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn sigmoid(x: &mut [f32]) {
    // SAFETY: AVX2 + FMA enabled here.
    unsafe {
        map_inplace(x, |v| {
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
            _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_add_ps(_mm256_set1_ps(1.0), e))
        })
    }
}

/// `o ← v · silu(g)` (the shortest length counts).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn swiglu(o: &mut [f32], v: &[f32], g: &[f32]) {
    let n = o.len().min(v.len()).min(g.len());
    let (po, pv, pg) = (o.as_mut_ptr(), v.as_ptr(), g.as_ptr());
    // SAFETY: indices stay below n, inside all three slices; AVX2 + FMA enabled here.
    unsafe {
        let mut i = 0;
        while i + 8 <= n {
            let s = silu8(_mm256_loadu_ps(pg.add(i)));
            _mm256_storeu_ps(po.add(i), _mm256_mul_ps(_mm256_loadu_ps(pv.add(i)), s));
            i += 8;
        }
    }
    let i = n - n % 8;
    if i < n {
        let mut t = [0f32; 8];
        t[..n - i].copy_from_slice(&g[i..n]);
        // SAFETY: AVX2 + FMA enabled here.
        unsafe { silu(&mut t) };
        for j in i..n {
            o[j] = v[j] * t[j - i];
        }
    }
}

/// `tanh` of 8 lanes: an odd Taylor polynomial (to x¹⁵) below |x| = 0.4, `(1 − t)/(1 + t)` with
/// `t = e^{−2|x|}` above (|x| clamped to 9, where tanh rounds to 1), the sign put back; 2 ulp
/// at worst from the correctly rounded value, like glibc's `tanhf` (tested: ≤ 3), NaN propagates.
#[inline(always)]
unsafe fn tanh8(x: __m256) -> __m256 {
    // SAFETY: register-only intrinsics; the caller runs with AVX2 and FMA enabled.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let ax = _mm256_andnot_ps(sign, x);
        let a = _mm256_min_ps(ax, _mm256_set1_ps(9.0));
        let t = exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0)));
        let one = _mm256_set1_ps(1.0);
        let big = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
        let z = _mm256_mul_ps(a, a);
        let mut p = _mm256_set1_ps(scalar::TANH_TAYLOR[0]);
        for &c in &scalar::TANH_TAYLOR[1..] {
            p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(c));
        }
        let small = _mm256_fmadd_ps(_mm256_mul_ps(a, z), p, a);
        let r = _mm256_blendv_ps(
            big,
            small,
            _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(0.4)),
        );
        let r = _mm256_or_ps(r, _mm256_and_ps(sign, x));
        // NaN lanes: x itself.
        _mm256_blendv_ps(r, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    }
}

/// `o ← γ ⊙ tanh(α·x) + β` (dynamic tanh; the shortest length counts).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dyt(o: &mut [f32], x: &[f32], alpha: f32, g: &[f32], b: &[f32]) {
    let n = o.len().min(x.len()).min(g.len()).min(b.len());
    let (po, px, pg, pb) = (o.as_mut_ptr(), x.as_ptr(), g.as_ptr(), b.as_ptr());
    // SAFETY: indices stay below n, inside all four slices; AVX2 + FMA enabled here.
    unsafe {
        let av = _mm256_set1_ps(alpha);
        let mut i = 0;
        while i + 8 <= n {
            let t = tanh8(_mm256_mul_ps(av, _mm256_loadu_ps(px.add(i))));
            let r = _mm256_fmadd_ps(_mm256_loadu_ps(pg.add(i)), t, _mm256_loadu_ps(pb.add(i)));
            _mm256_storeu_ps(po.add(i), r);
            i += 8;
        }
        if i < n {
            let m = n - i;
            let (mut tx, mut tg, mut tb) = ([0f32; 8], [0f32; 8], [0f32; 8]);
            tx[..m].copy_from_slice(&x[i..n]);
            tg[..m].copy_from_slice(&g[i..n]);
            tb[..m].copy_from_slice(&b[i..n]);
            let t = tanh8(_mm256_mul_ps(av, _mm256_loadu_ps(tx.as_ptr())));
            let r = _mm256_fmadd_ps(
                _mm256_loadu_ps(tg.as_ptr()),
                t,
                _mm256_loadu_ps(tb.as_ptr()),
            );
            _mm256_storeu_ps(tx.as_mut_ptr(), r);
            o[i..n].copy_from_slice(&tx[..m]);
        }
    }
}

super::kernels::row_kernels!(arith: super::simd::V8, [unsafe], #[target_feature(enable = "avx2,fma")]);
super::kernels::row_kernels!(transcendental: super::simd::V8, #[target_feature(enable = "avx2,fma")]);
