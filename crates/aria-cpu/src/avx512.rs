//! AVX-512F matrix micro-kernel (x86-64): [`gemm_tile`] on panels of 32 columns, and the
//! element-wise row kernels at 16 lanes (the generic kernels on `simd::V16`, each lane computed
//! by the AVX2 path's operations, so they give its bits). The reductions and the other kernels
//! of this path are the AVX2 ones (re-exported), so the CPU must support AVX2 and FMA too.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

pub use super::avx2::{dot, dyt, max, scale, sigmoid, silu, sum, sumsq, sumsq_dev};
use super::scalar;

/// Panel width of this path.
pub const NR: usize = 32;
/// Rows of the register tile: 12 × 2 accumulators of 16 lanes, 2 B vectors and a broadcast
/// use 27 of the 32 registers (the other paths have 6 rows).
pub const MR: usize = 12;

/// `e^x` of 16 lanes: the AVX2 path's `exp8`, operation for operation (the same clamps,
/// Cody–Waite reduction, polynomial and exponent insertion, each lane rounded alike), so every
/// lane has the bits `exp8` gives it.
#[inline(always)]
unsafe fn exp16(x: __m512) -> __m512 {
    // SAFETY: register-only intrinsics; the caller runs with AVX-512F enabled.
    unsafe {
        let x = _mm512_min_ps(_mm512_set1_ps(88.376_26), x);
        let x = _mm512_max_ps(_mm512_set1_ps(-88.376_26), x);
        let fx = _mm512_fmadd_ps(
            x,
            _mm512_set1_ps(std::f32::consts::LOG2_E),
            _mm512_set1_ps(0.5),
        );
        // Round toward −∞, exceptions suppressed: `_mm256_floor_ps`.
        let fx = _mm512_roundscale_ps::<0x09>(fx);
        let x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693_359_4), x);
        let x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.121_944_4e-4), x);
        let z = _mm512_mul_ps(x, x);
        let mut y = _mm512_set1_ps(1.987_569_1e-4);
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.398_2e-3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.333_452e-3));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.166_579_6e-2));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(0.166_666_65));
        y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(0.5));
        y = _mm512_fmadd_ps(y, z, x);
        y = _mm512_add_ps(y, _mm512_set1_ps(1.0));
        let e = _mm512_cvtps_epi32(fx);
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(e, _mm512_set1_epi32(127)));
        _mm512_mul_ps(y, _mm512_castsi512_ps(e))
    }
}

/// `x ← exp(x − m)`, returning the sum of the new values: the AVX2 kernel's results bit for bit
/// (each element through `exp16`, the tail and the sum through the AVX2 code), twice the
/// elements per instruction.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    // SAFETY: loads and stores stay below n; AVX-512F enabled here.
    unsafe {
        let mv = _mm512_set1_ps(m);
        while i + 16 <= n {
            _mm512_storeu_ps(
                p.add(i),
                exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), mv)),
            );
            i += 16;
        }
    }
    // SAFETY: AVX2 + FMA enabled here.
    unsafe {
        super::avx2::exp_sub_sum(&mut x[i..], m);
        sum(x)
    }
}

/// `o ← v · silu(g)` (the shortest length counts): the AVX2 kernel's results bit for bit (the
/// same operations per lane), 16 lanes at a time.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn swiglu(o: &mut [f32], v: &[f32], g: &[f32]) {
    let n = o.len().min(v.len()).min(g.len());
    let (po, pv, pg) = (o.as_mut_ptr(), v.as_ptr(), g.as_ptr());
    let mut i = 0;
    // SAFETY: indices stay below n, inside all three slices; AVX-512F enabled here.
    unsafe {
        let one = _mm512_set1_ps(1.0);
        while i + 16 <= n {
            let gv = _mm512_loadu_ps(pg.add(i));
            let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
            let s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
            _mm512_storeu_ps(po.add(i), _mm512_mul_ps(_mm512_loadu_ps(pv.add(i)), s));
            i += 16;
        }
    }
    // SAFETY: AVX2 + FMA enabled here.
    unsafe { super::avx2::swiglu(&mut o[i..n], &v[i..n], &g[i..n]) }
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
    // SAFETY: the caller checked the extents (`tile_extents_ok`) and runs with AVX-512F.
    unsafe {
        let mut c0 = [_mm512_setzero_ps(); M];
        let mut c1 = [_mm512_setzero_ps(); M];
        for k in 0..kc {
            let b0 = _mm512_loadu_ps(bp.add(k * ldb));
            let b1 = _mm512_loadu_ps(bp.add(k * ldb + 16));
            for r in 0..M {
                let av = _mm512_set1_ps(*a.add(r * lda + k));
                c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
                c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
            }
        }
        store_tile(&c0, &c1, M, c, ldc, nc, acc);
    }
}

/// Write (or, with `acc`, add) `rows` rows of a register tile to C, `nc` columns of each.
///
/// # Safety
/// AVX-512F, and `c[r·ldc + j]` valid for `r < rows`, `j < nc`.
#[inline(always)]
unsafe fn store_tile(
    c0: &[__m512],
    c1: &[__m512],
    rows: usize,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    // SAFETY: the caller guarantees the extents of `c` and AVX-512F.
    unsafe {
        if nc == NR {
            for r in 0..rows {
                let p = c.add(r * ldc);
                let (mut v0, mut v1) = (c0[r], c1[r]);
                if acc {
                    v0 = _mm512_add_ps(_mm512_loadu_ps(p), v0);
                    v1 = _mm512_add_ps(_mm512_loadu_ps(p.add(16)), v1);
                }
                _mm512_storeu_ps(p, v0);
                _mm512_storeu_ps(p.add(16), v1);
            }
        } else {
            let mut t = [0f32; NR];
            for r in 0..rows {
                _mm512_storeu_ps(t.as_mut_ptr(), c0[r]);
                _mm512_storeu_ps(t.as_mut_ptr().add(16), c1[r]);
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

/// One k step of the packed-A tile: two B vectors, twelve broadcasts, 24 FMAs.
#[inline(always)]
unsafe fn step_pa(ap: *const f32, bp: *const f32, c0: &mut [__m512; MR], c1: &mut [__m512; MR]) {
    // SAFETY: the caller keeps `ap[..MR]` and `bp[..NR]` readable; AVX-512F enabled by it.
    unsafe {
        let b0 = _mm512_loadu_ps(bp);
        let b1 = _mm512_loadu_ps(bp.add(16));
        for r in 0..MR {
            let av = _mm512_set1_ps(*ap.add(r));
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
}

/// Micro-kernel on a packed A micro-panel of [`MR`] rows: `C[r][j] (+)= Σ_k ap[k·MR + r] ·
/// bp[k·NR + j]` for `r < mr ≤ MR`, `j < nc ≤ NR`, `k < kc` (rows `mr..MR` of `ap` are read but
/// not stored; a zero-padded panel keeps them finite). Each output is the same sequential FMA
/// chain from zero as in [`gemm_tile`], then added to C (or written, with `acc` false):
/// bit-identical to it.
///
/// # Safety
/// The CPU must support AVX-512F, and `c[r·ldc + j]` for `r < mr`, `j < nc` must be valid and
/// touched by no other thread during the call.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[target_feature(enable = "avx512f,avx2,fma")]
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
    // `c[r·ldc + j]` for `r < mr`, `j < nc` valid and not touched by another thread; AVX-512F
    // guaranteed by the caller.
    unsafe {
        let mut c0 = [_mm512_setzero_ps(); MR];
        let mut c1 = [_mm512_setzero_ps(); MR];
        let mut k = 0;
        while k + 2 <= kc {
            step_pa(a, b, &mut c0, &mut c1);
            step_pa(a.add(MR), b.add(NR), &mut c0, &mut c1);
            a = a.add(2 * MR);
            b = b.add(2 * NR);
            k += 2;
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

/// Micro-kernel of the packed matrix product on panels of [`NR`] = 32 columns; otherwise as
/// [`scalar::gemm_tile`] (FMA accumulation).
///
/// # Safety
/// The CPU must support AVX-512F.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[target_feature(enable = "avx512f,avx2,fma")]
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
    // SAFETY: extents checked above; AVX-512F guaranteed by the caller.
    unsafe {
        match mr {
            1 => tile::<1>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            2 => tile::<2>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            3 => tile::<3>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            4 => tile::<4>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            5 => tile::<5>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            6 => tile::<6>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            7 => tile::<7>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            8 => tile::<8>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            9 => tile::<9>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            10 => tile::<10>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            11 => tile::<11>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
            _ => tile::<MR>(kc, a, lda, bp, ldb, c, ldc, nc, acc),
        }
    }
}

super::kernels::row_kernels!(arith: super::simd::V16, [unsafe], #[target_feature(enable = "avx512f")]);
super::kernels::row_kernels!(transcendental: super::simd::V16, #[target_feature(enable = "avx512f")]);

#[cfg(test)]
mod tests {
    /// Values across exp's range and its clamps, with infinities, NaN and signed zeros.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|i| match i % 97 {
                3 => f32::INFINITY,
                5 => f32::NEG_INFINITY,
                7 => f32::NAN,
                11 => -0.0,
                13 => 95.0,
                17 => -120.0,
                _ => {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 60.0
                }
            })
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    type Glu = unsafe fn(&mut [f32], &[f32], &[f32]);
    type Un = unsafe fn(&mut [f32]);

    /// The 16-lane kernels (`exp_sub_sum`, `swiglu` and the element-wise kernels on `V16`) give
    /// the AVX2 kernels' bits, element by element and for the sum, at lengths around the vector
    /// widths, with ±∞, NaN, −0 and values past the clamps among the inputs.
    #[test]
    fn sixteen_lanes_match_avx2_bits() {
        if !(super::super::Isa::Avx512.is_available()) {
            aria_testing::skip_for_hardware("this CPU has no AVX-512F");
            return;
        }
        for n in [0usize, 1, 7, 8, 15, 16, 17, 31, 33, 100, 452, 1001] {
            for m in [0.0f32, 3.5, -7.25] {
                let x = values(n, n as u32);
                let (mut a, mut b) = (x.clone(), x.clone());
                // SAFETY: AVX-512F (and so AVX2 + FMA on the paths aria runs) checked above.
                let (sa, sb) = unsafe {
                    (
                        super::exp_sub_sum(&mut a, m),
                        super::super::avx2::exp_sub_sum(&mut b, m),
                    )
                };
                assert_eq!(bits(&a), bits(&b), "exp_sub_sum n {n} m {m}");
                assert_eq!(sa.to_bits(), sb.to_bits(), "exp_sub_sum sum n {n} m {m}");
            }
            let (v, g) = (values(n, 7 * n as u32 + 1), values(n, 3 * n as u32 + 2));
            let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
            // SAFETY: as above.
            unsafe {
                super::swiglu(&mut a, &v, &g);
                super::super::avx2::swiglu(&mut b, &v, &g);
            }
            assert_eq!(bits(&a), bits(&b), "swiglu n {n}");
            // The element-wise kernels stamped on `V16`: the AVX2 bits, element by element.
            let glu: [(&str, Glu, Glu); 3] = [
                ("geglu", super::geglu, super::super::avx2::geglu),
                (
                    "geglu_tanh",
                    super::geglu_tanh,
                    super::super::avx2::geglu_tanh,
                ),
                (
                    "sin_pi_glu",
                    super::sin_pi_glu,
                    super::super::avx2::sin_pi_glu,
                ),
            ];
            for (name, f16, f8) in glu {
                let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
                // SAFETY: as above.
                unsafe {
                    f16(&mut a, &v, &g);
                    f8(&mut b, &v, &g);
                }
                assert_eq!(bits(&a), bits(&b), "{name} n {n}");
            }
            let un: [(&str, Un, Un); 3] = [
                ("gelu", super::gelu, super::super::avx2::gelu),
                ("gelu_tanh", super::gelu_tanh, super::super::avx2::gelu_tanh),
                ("sin_pi", super::sin_pi, super::super::avx2::sin_pi),
            ];
            for (name, f16, f8) in un {
                let (mut a, mut b) = (v.clone(), v.clone());
                // SAFETY: as above.
                unsafe {
                    f16(&mut a);
                    f8(&mut b);
                }
                assert_eq!(bits(&a), bits(&b), "{name} n {n}");
            }
            let (mut a, mut b) = (v.clone(), v.clone());
            // SAFETY: as above.
            unsafe {
                super::softcap(&mut a, 2.5);
                super::super::avx2::softcap(&mut b, 2.5);
            }
            assert_eq!(bits(&a), bits(&b), "softcap n {n}");
            let (c, s) = (values(n, 5 * n as u32 + 3), values(n, 11 * n as u32 + 4));
            let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
            // SAFETY: as above.
            unsafe {
                super::norm_gain_modulate(&mut a, &v, 0.75, &g, &c, &s);
                super::super::avx2::norm_gain_modulate(&mut b, &v, 0.75, &g, &c, &s);
            }
            assert_eq!(bits(&a), bits(&b), "norm_gain_modulate n {n}");
            let (mut a, mut b) = (v.clone(), v.clone());
            // SAFETY: as above.
            unsafe {
                super::rope_half(&mut a, &c, &s);
                super::super::avx2::rope_half(&mut b, &c, &s);
                super::add_mul_to(&mut a, &g, &c);
                super::super::avx2::add_mul_to(&mut b, &g, &c);
                super::axpby(&mut a, 0.3, &g, -1.7, &s);
                super::super::avx2::axpby(&mut b, 0.3, &g, -1.7, &s);
                super::affine(&mut a, 1.25, -0.5);
                super::super::avx2::affine(&mut b, 1.25, -0.5);
            }
            assert_eq!(
                bits(&a),
                bits(&b),
                "rope_half, add_mul_to, axpby, affine n {n}"
            );
        }
    }
}
