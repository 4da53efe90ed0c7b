//! NEON kernels (aarch64). Same functions and meaning as [`super::scalar`]; each is an
//! `unsafe fn` that the caller may only run after detecting NEON.
//!
//! Reductions keep 16 partial sums (four 4-lane registers) combined in a fixed order.

use std::arch::aarch64::*;

use super::scalar::{self, MR, NR};

/// `exp` of 4 lanes (same range reduction and polynomial as the AVX2 path).
#[inline(always)]
unsafe fn exp4(x: float32x4_t) -> float32x4_t {
    // SAFETY: register-only intrinsics; the caller runs with NEON enabled.
    unsafe {
        let x = vminq_f32(x, vdupq_n_f32(88.376_26));
        let x = vmaxq_f32(x, vdupq_n_f32(-88.376_26));
        let fx = vfmaq_f32(vdupq_n_f32(0.5), x, vdupq_n_f32(std::f32::consts::LOG2_E));
        let fx = vrndmq_f32(fx);
        let x = vfmsq_f32(x, fx, vdupq_n_f32(0.693_359_4));
        let x = vfmsq_f32(x, fx, vdupq_n_f32(-2.121_944_4e-4));
        let z = vmulq_f32(x, x);
        let mut y = vdupq_n_f32(1.987_569_1e-4);
        y = vfmaq_f32(vdupq_n_f32(1.398_2e-3), y, x);
        y = vfmaq_f32(vdupq_n_f32(8.333_452e-3), y, x);
        y = vfmaq_f32(vdupq_n_f32(4.166_579_6e-2), y, x);
        y = vfmaq_f32(vdupq_n_f32(0.166_666_65), y, x);
        y = vfmaq_f32(vdupq_n_f32(0.5), y, x);
        y = vfmaq_f32(x, y, z);
        y = vaddq_f32(y, vdupq_n_f32(1.0));
        let e = vcvtq_s32_f32(fx);
        let e = vshlq_n_s32::<23>(vaddq_s32(e, vdupq_n_s32(127)));
        vmulq_f32(y, vreinterpretq_f32_s32(e))
    }
}

/// Dot product (the shorter length counts).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: every load reads indices < n, inside both slices.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let o = i + 4 * u;
                *a = vfmaq_f32(*a, vld1q_f32(pa.add(o)), vld1q_f32(pb.add(o)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
            i += 4;
        }
        let v = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(v);
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
    // SAFETY: the caller checked the extents (`tile_extents_ok`) and runs with NEON.
    unsafe {
        let mut cv = [[vdupq_n_f32(0.0); 4]; M];
        for k in 0..kc {
            let b = [
                vld1q_f32(bp.add(k * ldb)),
                vld1q_f32(bp.add(k * ldb + 4)),
                vld1q_f32(bp.add(k * ldb + 8)),
                vld1q_f32(bp.add(k * ldb + 12)),
            ];
            for r in 0..M {
                let av = vdupq_n_f32(*a.add(r * lda + k));
                for q in 0..4 {
                    cv[r][q] = vfmaq_f32(cv[r][q], av, b[q]);
                }
            }
        }
        let mut t = [0f32; NR];
        for r in 0..M {
            for q in 0..4 {
                vst1q_f32(t.as_mut_ptr().add(4 * q), cv[r][q]);
            }
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

/// Micro-kernel of the packed matrix product; see [`scalar::gemm_tile`] (FMA accumulation).
///
/// # Safety
/// The CPU must support NEON.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[target_feature(enable = "neon")]
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
    // SAFETY: extents checked above; NEON guaranteed by the caller.
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

/// Maximum (−∞ for an empty slice).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn max(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    // SAFETY: loads stay below n.
    unsafe {
        let mut m = vdupq_n_f32(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 4 <= n {
            m = vmaxnmq_f32(vld1q_f32(p.add(i)), m);
            i += 4;
        }
        let mut r = vmaxnmvq_f32(m);
        while i < n {
            r = r.max(*p.add(i));
            i += 1;
        }
        r
    }
}

#[inline(always)]
unsafe fn reduce(x: &[f32], f: impl Fn(float32x4_t) -> float32x4_t, g: impl Fn(f32) -> f32) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    // SAFETY: loads stay below n; NEON enabled by the caller.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = vaddq_f32(*a, f(vld1q_f32(p.add(i + 4 * u))));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vaddq_f32(acc[0], f(vld1q_f32(p.add(i))));
            i += 4;
        }
        let v = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(v);
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
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sum(x: &[f32]) -> f32 {
    // SAFETY: NEON enabled here.
    unsafe { reduce(x, |v| v, |v| v) }
}

/// Sum of squares.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sumsq(x: &[f32]) -> f32 {
    // SAFETY: NEON enabled here.
    unsafe { reduce(x, |v| vmulq_f32(v, v), |v| v * v) }
}

/// Sum of squared deviations from `m`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sumsq_dev(x: &[f32], m: f32) -> f32 {
    // SAFETY: NEON enabled here.
    unsafe {
        let mv = vdupq_n_f32(m);
        reduce(
            x,
            |v| {
                let d = vsubq_f32(v, mv);
                vmulq_f32(d, d)
            },
            |v| (v - m) * (v - m),
        )
    }
}

#[inline(always)]
unsafe fn map_inplace(x: &mut [f32], f: impl Fn(float32x4_t) -> float32x4_t) {
    let n = x.len();
    let p = x.as_mut_ptr();
    // SAFETY: loads and stores stay below n; NEON enabled by the caller.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            vst1q_f32(p.add(i), f(vld1q_f32(p.add(i))));
            i += 4;
        }
        if i < n {
            let mut t = [0f32; 4];
            t[..n - i].copy_from_slice(&x[i..]);
            vst1q_f32(t.as_mut_ptr(), f(vld1q_f32(t.as_ptr())));
            x[i..].copy_from_slice(&t[..n - i]);
        }
    }
}

/// `x ← exp(x − m)`, returning the sum of the new values.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    // SAFETY: NEON enabled here.
    unsafe {
        let mv = vdupq_n_f32(m);
        map_inplace(x, |v| exp4(vsubq_f32(v, mv)));
        sum(x)
    }
}

/// `x ← x · s`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn scale(x: &mut [f32], s: f32) {
    // SAFETY: NEON enabled here.
    unsafe { map_inplace(x, |v| vmulq_n_f32(v, s)) }
}

#[inline(always)]
unsafe fn silu4(v: float32x4_t) -> float32x4_t {
    // SAFETY: register-only intrinsics; NEON enabled by the caller.
    unsafe { vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0), exp4(vnegq_f32(v)))) }
}

/// `x ← x / (1 + e^−x)`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn silu(x: &mut [f32]) {
    // SAFETY: NEON enabled here.
    unsafe { map_inplace(x, |v| silu4(v)) }
}

/// `x ← 1 / (1 + e^−x)`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sigmoid(x: &mut [f32]) {
    // SAFETY: NEON enabled here.
    unsafe {
        map_inplace(x, |v| {
            vdivq_f32(
                vdupq_n_f32(1.0),
                vaddq_f32(vdupq_n_f32(1.0), exp4(vnegq_f32(v))),
            )
        })
    }
}

/// `o ← v · silu(g)` (the shortest length counts).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn swiglu(o: &mut [f32], v: &[f32], g: &[f32]) {
    let n = o.len().min(v.len()).min(g.len());
    let (po, pv, pg) = (o.as_mut_ptr(), v.as_ptr(), g.as_ptr());
    // SAFETY: indices stay below n, inside all three slices; NEON enabled here.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            let s = silu4(vld1q_f32(pg.add(i)));
            vst1q_f32(po.add(i), vmulq_f32(vld1q_f32(pv.add(i)), s));
            i += 4;
        }
    }
    let i = n - n % 4;
    if i < n {
        let mut t = [0f32; 4];
        t[..n - i].copy_from_slice(&g[i..n]);
        // SAFETY: NEON enabled here.
        unsafe { silu(&mut t) };
        for j in i..n {
            o[j] = v[j] * t[j - i];
        }
    }
}

/// `tanh` of 4 lanes (same method and coefficients as the AVX2 path).
#[inline(always)]
unsafe fn tanh4(x: float32x4_t) -> float32x4_t {
    // SAFETY: register-only intrinsics; the caller runs with NEON enabled.
    unsafe {
        let a = vminq_f32(vabsq_f32(x), vdupq_n_f32(9.0));
        let t = exp4(vmulq_n_f32(a, -2.0));
        let one = vdupq_n_f32(1.0);
        let big = vdivq_f32(vsubq_f32(one, t), vaddq_f32(one, t));
        let z = vmulq_f32(a, a);
        let c = scalar::TANH_TAYLOR;
        let mut p = vdupq_n_f32(c[0]);
        for &ci in &c[1..] {
            p = vfmaq_f32(vdupq_n_f32(ci), p, z);
        }
        let small = vfmaq_f32(a, vmulq_f32(a, z), p);
        let r = vbslq_f32(vcltq_f32(a, vdupq_n_f32(0.4)), small, big);
        // Sign of x back in; NaN lanes keep x.
        let signed = vbslq_f32(vdupq_n_u32(0x8000_0000), x, r);
        vbslq_f32(vceqq_f32(x, x), signed, x)
    }
}

/// `o ← γ ⊙ tanh(α·x) + β` (dynamic tanh; the shortest length counts).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dyt(o: &mut [f32], x: &[f32], alpha: f32, g: &[f32], b: &[f32]) {
    let n = o.len().min(x.len()).min(g.len()).min(b.len());
    let (po, px, pg, pb) = (o.as_mut_ptr(), x.as_ptr(), g.as_ptr(), b.as_ptr());
    // SAFETY: indices stay below n, inside all four slices; NEON enabled here.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            let t = tanh4(vmulq_n_f32(vld1q_f32(px.add(i)), alpha));
            let r = vfmaq_f32(vld1q_f32(pb.add(i)), vld1q_f32(pg.add(i)), t);
            vst1q_f32(po.add(i), r);
            i += 4;
        }
        if i < n {
            let m = n - i;
            let (mut tx, mut tg, mut tb) = ([0f32; 4], [0f32; 4], [0f32; 4]);
            tx[..m].copy_from_slice(&x[i..n]);
            tg[..m].copy_from_slice(&g[i..n]);
            tb[..m].copy_from_slice(&b[i..n]);
            let t = tanh4(vmulq_n_f32(vld1q_f32(tx.as_ptr()), alpha));
            let r = vfmaq_f32(vld1q_f32(tb.as_ptr()), vld1q_f32(tg.as_ptr()), t);
            vst1q_f32(tx.as_mut_ptr(), r);
            o[i..n].copy_from_slice(&tx[..m]);
        }
    }
}

super::kernels::row_kernels!(arith: super::simd::V4, [unsafe], #[target_feature(enable = "neon")]);
super::kernels::row_kernels!(transcendental: super::simd::V4, #[target_feature(enable = "neon")]);
