//! One generic kernel body per row op over a small vector trait ([`Simd`]), implemented for
//! `f32` (one lane: the scalar path), AVX2 + FMA (`__m256`, 8 lanes) and NEON (`float32x4_t`,
//! 4 lanes). The per-ISA files only stamp out named wrappers (see `row_kernels`), so the
//! kernels below exist once.
//!
//! - The arithmetic kernels use separate multiplies and adds in the order of the scalar
//!   formula (never a fused multiply-add), so every path gives the same bits as the scalar one.
//! - The transcendental kernels (`exp`, `tanh`, `sin`, `erf`) are polynomial
//!   approximations for the vector paths only; the scalar path keeps the standard library's
//!   functions as the reference (see `scalar.rs`).
//! - A row's tail (fewer than a vector of elements) goes through the same vector code on a
//!   zero-padded buffer, so an element's result never depends on where a row or chunk starts.

/// A vector of `f32` lanes and the operations the generic kernels need. Every method is an
/// `unsafe fn`: on the vector paths it may only run where the path's features were detected.
#[allow(clippy::missing_safety_doc)]
pub trait Simd: Copy {
    /// Lanes.
    const N: usize;
    /// Every lane `v`.
    unsafe fn splat(v: f32) -> Self;
    /// `N` values from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// `N` values to `p` (unaligned).
    unsafe fn store(self, p: *mut f32);
    /// `self + b`.
    unsafe fn add(self, b: Self) -> Self;
    /// `self − b`.
    unsafe fn sub(self, b: Self) -> Self;
    /// `self · b`.
    unsafe fn mul(self, b: Self) -> Self;
    /// `self / b`.
    unsafe fn div(self, b: Self) -> Self;
    /// `self · b + c`, fused (one rounding) on the vector paths.
    unsafe fn fma(self, b: Self, c: Self) -> Self;
    /// Lane minimum (`b` where either is NaN).
    unsafe fn min(self, b: Self) -> Self;
    /// Lane maximum (`b` where either is NaN).
    unsafe fn max(self, b: Self) -> Self;
    /// `|self|`.
    unsafe fn abs(self) -> Self;
    /// Round down to an integer.
    unsafe fn floor(self) -> Self;
    /// Round to the nearest integer, ties to even.
    unsafe fn round(self) -> Self;
    /// `2^k` for lanes holding integers `k` in −126..=127.
    unsafe fn pow2i(k: Self) -> Self;
    /// `x` where `a < b`, else `y`.
    unsafe fn select_lt(a: Self, b: Self, x: Self, y: Self) -> Self;
    /// The non-negative `self` with the sign bit of `s`.
    unsafe fn with_sign_of(self, s: Self) -> Self;
    /// `x` in the lanes where `x` is NaN, else `self`.
    unsafe fn nan_from(self, x: Self) -> Self;
    /// `−self` in the lanes where the integer `k` is odd.
    unsafe fn neg_if_odd(self, k: Self) -> Self;
    /// Whether any lane has `|self| > lim` (±∞ included, NaN not).
    unsafe fn any_abs_gt(self, lim: f32) -> bool;

    /// `f` applied lane by lane (through memory).
    #[inline(always)]
    unsafe fn map_lanes(self, f: impl Fn(f32) -> f32) -> Self {
        let mut t = [0f32; 16];
        // SAFETY: `N` ≤ 16 lanes are written and read inside `t`.
        unsafe {
            self.store(t.as_mut_ptr());
            t[..Self::N].iter_mut().for_each(|v| *v = f(*v));
            Self::load(t.as_ptr())
        }
    }
}

impl Simd for f32 {
    const N: usize = 1;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        v
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller passes a readable pointer.
        unsafe { *p }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller passes a writable pointer.
        unsafe { *p = self }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        self + b
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        self - b
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        self * b
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        self / b
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        self.mul_add(b, c)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        if self < b {
            self
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        if self > b {
            self
        } else {
            b
        }
    }
    #[inline(always)]
    unsafe fn abs(self) -> Self {
        self.abs()
    }
    #[inline(always)]
    unsafe fn floor(self) -> Self {
        self.floor()
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        self.round_ties_even()
    }
    #[inline(always)]
    unsafe fn pow2i(k: Self) -> Self {
        f32::from_bits(((k as i32 + 127) << 23) as u32)
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self, b: Self, x: Self, y: Self) -> Self {
        if a < b {
            x
        } else {
            y
        }
    }
    #[inline(always)]
    unsafe fn with_sign_of(self, s: Self) -> Self {
        f32::from_bits(self.to_bits() | (s.to_bits() & 0x8000_0000))
    }
    #[inline(always)]
    unsafe fn nan_from(self, x: Self) -> Self {
        if x.is_nan() {
            x
        } else {
            self
        }
    }
    #[inline(always)]
    unsafe fn neg_if_odd(self, k: Self) -> Self {
        f32::from_bits(self.to_bits() ^ (((k as i32) as u32) << 31))
    }
    #[inline(always)]
    unsafe fn any_abs_gt(self, lim: f32) -> bool {
        self.abs() > lim
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{V16, V8};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Simd;

    /// 8 lanes of AVX2 + FMA.
    #[derive(Clone, Copy)]
    pub struct V8(__m256);

    // SAFETY (every method): register intrinsics, or loads/stores of 8 lanes at a pointer the
    // caller vouches for; the caller runs with AVX2 and FMA detected.
    impl Simd for V8 {
        const N: usize = 8;
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { V8(_mm256_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { V8(_mm256_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            unsafe { V8(_mm256_add_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            unsafe { V8(_mm256_sub_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            unsafe { V8(_mm256_mul_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn div(self, b: Self) -> Self {
            unsafe { V8(_mm256_div_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            unsafe { V8(_mm256_fmadd_ps(self.0, b.0, c.0)) }
        }
        #[inline(always)]
        unsafe fn min(self, b: Self) -> Self {
            unsafe { V8(_mm256_min_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            unsafe { V8(_mm256_max_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn abs(self) -> Self {
            unsafe { V8(_mm256_andnot_ps(_mm256_set1_ps(-0.0), self.0)) }
        }
        #[inline(always)]
        unsafe fn floor(self) -> Self {
            unsafe { V8(_mm256_floor_ps(self.0)) }
        }
        #[inline(always)]
        unsafe fn round(self) -> Self {
            unsafe {
                V8(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(self.0))
            }
        }
        #[inline(always)]
        unsafe fn pow2i(k: Self) -> Self {
            unsafe {
                let e = _mm256_add_epi32(_mm256_cvtps_epi32(k.0), _mm256_set1_epi32(127));
                V8(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(e)))
            }
        }
        #[inline(always)]
        unsafe fn select_lt(a: Self, b: Self, x: Self, y: Self) -> Self {
            unsafe {
                V8(_mm256_blendv_ps(
                    y.0,
                    x.0,
                    _mm256_cmp_ps::<_CMP_LT_OQ>(a.0, b.0),
                ))
            }
        }
        #[inline(always)]
        unsafe fn with_sign_of(self, s: Self) -> Self {
            unsafe {
                V8(_mm256_or_ps(
                    self.0,
                    _mm256_and_ps(_mm256_set1_ps(-0.0), s.0),
                ))
            }
        }
        #[inline(always)]
        unsafe fn nan_from(self, x: Self) -> Self {
            unsafe {
                V8(_mm256_blendv_ps(
                    self.0,
                    x.0,
                    _mm256_cmp_ps::<_CMP_UNORD_Q>(x.0, x.0),
                ))
            }
        }
        #[inline(always)]
        unsafe fn neg_if_odd(self, k: Self) -> Self {
            unsafe {
                let bit = _mm256_slli_epi32::<31>(_mm256_cvtps_epi32(k.0));
                V8(_mm256_xor_ps(self.0, _mm256_castsi256_ps(bit)))
            }
        }
        #[inline(always)]
        unsafe fn any_abs_gt(self, lim: f32) -> bool {
            unsafe {
                let a = self.abs();
                _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(a.0, _mm256_set1_ps(lim))) != 0
            }
        }
    }

    /// 16 lanes of AVX-512F, each lane computed by the operation [`V8`] uses (the same
    /// rounding, comparisons and integer steps), so an element-wise kernel gives the AVX2 bits.
    #[derive(Clone, Copy)]
    pub struct V16(__m512);

    // SAFETY (every method): register intrinsics, or loads/stores of 16 lanes at a pointer the
    // caller vouches for; the caller runs with AVX-512F detected.
    #[allow(clippy::incompatible_msrv)]
    impl Simd for V16 {
        const N: usize = 16;
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { V16(_mm512_set1_ps(v)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { V16(_mm512_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            unsafe { V16(_mm512_add_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            unsafe { V16(_mm512_sub_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            unsafe { V16(_mm512_mul_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn div(self, b: Self) -> Self {
            unsafe { V16(_mm512_div_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            unsafe { V16(_mm512_fmadd_ps(self.0, b.0, c.0)) }
        }
        // `vminps`/`vmaxps` return the second operand where either is NaN, as on AVX2.
        #[inline(always)]
        unsafe fn min(self, b: Self) -> Self {
            unsafe { V16(_mm512_min_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            unsafe { V16(_mm512_max_ps(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn abs(self) -> Self {
            unsafe {
                V16(_mm512_castsi512_ps(_mm512_andnot_si512(
                    _mm512_castps_si512(_mm512_set1_ps(-0.0)),
                    _mm512_castps_si512(self.0),
                )))
            }
        }
        #[inline(always)]
        unsafe fn floor(self) -> Self {
            // Toward −∞, exceptions suppressed: `_mm256_floor_ps`.
            unsafe { V16(_mm512_roundscale_ps::<0x09>(self.0)) }
        }
        #[inline(always)]
        unsafe fn round(self) -> Self {
            // Nearest, ties to even, exceptions suppressed.
            unsafe { V16(_mm512_roundscale_ps::<0x08>(self.0)) }
        }
        #[inline(always)]
        unsafe fn pow2i(k: Self) -> Self {
            unsafe {
                let e = _mm512_add_epi32(_mm512_cvtps_epi32(k.0), _mm512_set1_epi32(127));
                V16(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(e)))
            }
        }
        #[inline(always)]
        unsafe fn select_lt(a: Self, b: Self, x: Self, y: Self) -> Self {
            unsafe {
                let m = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a.0, b.0);
                V16(_mm512_mask_blend_ps(m, y.0, x.0))
            }
        }
        #[inline(always)]
        unsafe fn with_sign_of(self, s: Self) -> Self {
            unsafe {
                let sign = _mm512_and_si512(
                    _mm512_castps_si512(_mm512_set1_ps(-0.0)),
                    _mm512_castps_si512(s.0),
                );
                V16(_mm512_castsi512_ps(_mm512_or_si512(
                    _mm512_castps_si512(self.0),
                    sign,
                )))
            }
        }
        #[inline(always)]
        unsafe fn nan_from(self, x: Self) -> Self {
            unsafe {
                let m = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x.0, x.0);
                V16(_mm512_mask_blend_ps(m, self.0, x.0))
            }
        }
        #[inline(always)]
        unsafe fn neg_if_odd(self, k: Self) -> Self {
            unsafe {
                let bit = _mm512_slli_epi32::<31>(_mm512_cvtps_epi32(k.0));
                V16(_mm512_castsi512_ps(_mm512_xor_si512(
                    _mm512_castps_si512(self.0),
                    bit,
                )))
            }
        }
        #[inline(always)]
        unsafe fn any_abs_gt(self, lim: f32) -> bool {
            unsafe {
                let a = self.abs();
                _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a.0, _mm512_set1_ps(lim)) != 0
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub use arm::V4;

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    use super::Simd;

    /// 4 lanes of NEON.
    #[derive(Clone, Copy)]
    pub struct V4(float32x4_t);

    // SAFETY (every method): register intrinsics, or loads/stores of 4 lanes at a pointer the
    // caller vouches for; the caller runs with NEON detected.
    impl Simd for V4 {
        const N: usize = 4;
        #[inline(always)]
        unsafe fn splat(v: f32) -> Self {
            unsafe { V4(vdupq_n_f32(v)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            unsafe { V4(vld1q_f32(p)) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            unsafe { vst1q_f32(p, self.0) }
        }
        #[inline(always)]
        unsafe fn add(self, b: Self) -> Self {
            unsafe { V4(vaddq_f32(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn sub(self, b: Self) -> Self {
            unsafe { V4(vsubq_f32(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn mul(self, b: Self) -> Self {
            unsafe { V4(vmulq_f32(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn div(self, b: Self) -> Self {
            unsafe { V4(vdivq_f32(self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            unsafe { V4(vfmaq_f32(c.0, self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn min(self, b: Self) -> Self {
            unsafe { V4(vbslq_f32(vcltq_f32(self.0, b.0), self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn max(self, b: Self) -> Self {
            unsafe { V4(vbslq_f32(vcgtq_f32(self.0, b.0), self.0, b.0)) }
        }
        #[inline(always)]
        unsafe fn abs(self) -> Self {
            unsafe { V4(vabsq_f32(self.0)) }
        }
        #[inline(always)]
        unsafe fn floor(self) -> Self {
            unsafe { V4(vrndmq_f32(self.0)) }
        }
        #[inline(always)]
        unsafe fn round(self) -> Self {
            unsafe { V4(vrndnq_f32(self.0)) }
        }
        #[inline(always)]
        unsafe fn pow2i(k: Self) -> Self {
            unsafe {
                let e = vaddq_s32(vcvtq_s32_f32(k.0), vdupq_n_s32(127));
                V4(vreinterpretq_f32_s32(vshlq_n_s32::<23>(e)))
            }
        }
        #[inline(always)]
        unsafe fn select_lt(a: Self, b: Self, x: Self, y: Self) -> Self {
            unsafe { V4(vbslq_f32(vcltq_f32(a.0, b.0), x.0, y.0)) }
        }
        #[inline(always)]
        unsafe fn with_sign_of(self, s: Self) -> Self {
            unsafe { V4(vbslq_f32(vdupq_n_u32(0x8000_0000), s.0, self.0)) }
        }
        #[inline(always)]
        unsafe fn nan_from(self, x: Self) -> Self {
            unsafe { V4(vbslq_f32(vceqq_f32(x.0, x.0), self.0, x.0)) }
        }
        #[inline(always)]
        unsafe fn neg_if_odd(self, k: Self) -> Self {
            unsafe {
                let bit = vshlq_n_u32::<31>(vreinterpretq_u32_s32(vcvtq_s32_f32(k.0)));
                V4(vreinterpretq_f32_u32(veorq_u32(
                    vreinterpretq_u32_f32(self.0),
                    bit,
                )))
            }
        }
        #[inline(always)]
        unsafe fn any_abs_gt(self, lim: f32) -> bool {
            unsafe { vmaxvq_u32(vcagtq_f32(self.0, vdupq_n_f32(lim))) != 0 }
        }
    }
}

// ------------------------------------------------------------------------- math functions

/// `exp` (Cephes-style range reduction and polynomial, the constants of the AVX2 `exp8`; ≈1 ulp;
/// 0 below ≈ −88.4, +∞ above ≈ 88.4).
#[inline(always)]
pub(crate) unsafe fn exp<S: Simd>(x: S) -> S {
    // SAFETY: lane arithmetic only; the caller runs with the path's features.
    unsafe {
        let x = S::splat(88.376_26).min(x);
        let x = S::splat(-88.376_26).max(x);
        let fx = x
            .fma(S::splat(std::f32::consts::LOG2_E), S::splat(0.5))
            .floor();
        let x = fx.fma(S::splat(-0.693_359_4), x);
        let x = fx.fma(S::splat(2.121_944_4e-4), x);
        let z = x.mul(x);
        let mut y = S::splat(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            y = y.fma(x, S::splat(c));
        }
        let y = y.fma(z, x).add(S::splat(1.0));
        y.mul(S::pow2i(fx))
    }
}

/// `tanh`: the odd Taylor polynomial of `scalar::TANH_TAYLOR` below |x| = 0.4,
/// `(1 − t)/(1 + t)` with `t = e^{−2|x|}` above (|x| clamped to 9), the sign put back; within
/// 3 ulp of the correctly rounded value, NaN propagates (the algorithm of the AVX2 `tanh8`).
#[inline(always)]
pub(crate) unsafe fn tanh<S: Simd>(x: S) -> S {
    // SAFETY: lane arithmetic only; the caller runs with the path's features.
    unsafe {
        let one = S::splat(1.0);
        let a = x.abs().min(S::splat(9.0));
        let t = exp(a.mul(S::splat(-2.0)));
        let big = one.sub(t).div(one.add(t));
        let z = a.mul(a);
        let c = super::scalar::TANH_TAYLOR;
        let mut p = S::splat(c[0]);
        for &ci in &c[1..] {
            p = p.fma(z, S::splat(ci));
        }
        let small = a.mul(z).fma(p, a);
        S::select_lt(a, S::splat(0.4), small, big)
            .with_sign_of(x)
            .nan_from(x)
    }
}

/// Largest |x| [`sin`] reduces with its three-part π; lanes beyond (and ±∞) use `f32::sin`.
const SIN_REDUCE_MAX: f32 = 65_536.0;

/// `sin`: `x = kπ + r` with a three-part π (an exact first product for |k| < 2¹⁶), then the
/// odd Taylor polynomial of `sin r` to r¹³ on |r| ≤ π/2 and the sign of `(−1)^k`; for
/// |x| ≤ 65536 (beyond, and for ±∞, `f32::sin` lane by lane) within a few 1e-8 of the exact
/// value (tested), NaN propagates.
#[inline(always)]
pub(crate) unsafe fn sin<S: Simd>(x: S) -> S {
    // SAFETY: lane arithmetic only; the caller runs with the path's features.
    unsafe {
        let k = x.mul(S::splat(std::f32::consts::FRAC_1_PI)).round();
        // π = 3.140625 + 9.675025939941406e-4 + 1.509957990978376e-7 (+ 1e-15).
        let r = k.mul(S::splat(-3.140_625)).add(x);
        let r = k.fma(S::splat(-9.675_026e-4), r);
        let r = k.fma(S::splat(-1.509_958e-7), r);
        let z = r.mul(r);
        // 1/13!, −1/11!, 1/9!, −1/7!, 1/5!, −1/3!.
        let mut p = S::splat(1.605_904_4e-10);
        for c in [
            -2.505_210_8e-8,
            2.755_731_9e-6,
            -1.984_127e-4,
            8.333_334e-3,
            -0.166_666_67,
        ] {
            p = p.fma(z, S::splat(c));
        }
        let y = r.mul(z).fma(p, r).neg_if_odd(k);
        if x.any_abs_gt(SIN_REDUCE_MAX) {
            // Only the lanes beyond the reduction's range take the library sine.
            let lim = S::splat(SIN_REDUCE_MAX);
            return S::select_lt(lim, x.abs(), x.map_lanes(f32::sin), y);
        }
        y
    }
}

/// `erf` (Abramowitz & Stegun 7.1.26 with the vector [`exp`]: absolute error below 2e-7, exact
/// ±1 far out, odd).
#[inline(always)]
pub(crate) unsafe fn erf<S: Simd>(x: S) -> S {
    // SAFETY: lane arithmetic only; the caller runs with the path's features.
    unsafe {
        let one = S::splat(1.0);
        let a = x.abs();
        let t = one.div(a.fma(S::splat(0.327_591_1), one));
        let mut p = S::splat(1.061_405_4);
        for c in [-1.453_152, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
            p = p.fma(t, S::splat(c));
        }
        let e = exp(a.mul(a).mul(S::splat(-1.0)));
        let y = one.sub(p.mul(t).mul(e));
        y.max(S::splat(0.0)).with_sign_of(x).nan_from(x)
    }
}

/// `sin(π·v)` with the product rounded to f32 first, as the reference evaluates it.
#[inline(always)]
pub(crate) unsafe fn sin_pi<S: Simd>(v: S) -> S {
    // SAFETY: lane arithmetic only.
    unsafe { sin(v.mul(S::splat(std::f32::consts::PI))) }
}

/// Exact (erf) GELU `0.5·v·(1 + erf(v/√2))`.
#[inline(always)]
pub(crate) unsafe fn gelu<S: Simd>(v: S) -> S {
    // SAFETY: lane arithmetic only.
    unsafe {
        let e = erf(v.mul(S::splat(std::f32::consts::FRAC_1_SQRT_2)));
        S::splat(0.5).mul(v).mul(S::splat(1.0).add(e))
    }
}

/// Tanh GELU `0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³)))`.
#[inline(always)]
pub(crate) unsafe fn gelu_tanh<S: Simd>(v: S) -> S {
    // SAFETY: lane arithmetic only.
    unsafe {
        let c = S::splat(0.044715).mul(v).mul(v).mul(v);
        let t = tanh(S::splat(0.797_884_6).mul(v.add(c)));
        S::splat(0.5).mul(v).mul(S::splat(1.0).add(t))
    }
}

// ------------------------------------------------------------------------- row drivers

/// `outs[m][i] ← f(ins[0][i..], …)[m]` for `i < n`, a vector at a time; the tail goes through a
/// zero-padded buffer. An output may alias an input (every group is loaded before it is stored).
///
/// # Safety
/// Every pointer must be valid for `n` elements; the path's features must be present.
#[inline(always)]
pub unsafe fn zip_map<S: Simd, const K: usize, const M: usize>(
    n: usize,
    ins: [*const f32; K],
    outs: [*mut f32; M],
    f: impl Fn([S; K]) -> [S; M],
) {
    // SAFETY: offsets stay below n inside every pointer's extent (caller's contract); the tail
    // buffers hold 16 ≥ N lanes.
    unsafe {
        let mut i = 0;
        while i + S::N <= n {
            let mut a = [S::splat(0.0); K];
            for (a, p) in a.iter_mut().zip(ins) {
                *a = S::load(p.add(i));
            }
            let v = f(a);
            for (o, r) in outs.iter().zip(v) {
                r.store(o.add(i));
            }
            i += S::N;
        }
        if i < n {
            let m = n - i;
            let mut bufs = [[0f32; 16]; K];
            for (b, p) in bufs.iter_mut().zip(ins) {
                std::ptr::copy_nonoverlapping(p.add(i), b.as_mut_ptr(), m);
            }
            let mut a = [S::splat(0.0); K];
            for (a, b) in a.iter_mut().zip(&bufs) {
                *a = S::load(b.as_ptr());
            }
            let v = f(a);
            let mut t = [0f32; 16];
            for (o, r) in outs.iter().zip(v) {
                r.store(t.as_mut_ptr());
                std::ptr::copy_nonoverlapping(t.as_ptr(), o.add(i), m);
            }
        }
    }
}

/// `x ← f(x)` in place.
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn map_inplace<S: Simd>(x: &mut [f32], f: impl Fn(S) -> S) {
    let p = x.as_mut_ptr();
    // SAFETY: one stream of x.len() elements, read and written in place.
    unsafe {
        zip_map::<S, 1, 1>(
            x.len(),
            [p as *const f32],
            [p],
            #[inline(always)]
            |[v]| [f(v)],
        )
    }
}

/// `o ← f(a, b)` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn map2<S: Simd>(o: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(S, S) -> S) {
    let n = o.len().min(a.len()).min(b.len());
    // SAFETY: all three slices hold at least n elements.
    unsafe {
        zip_map::<S, 2, 1>(
            n,
            [a.as_ptr(), b.as_ptr()],
            [o.as_mut_ptr()],
            #[inline(always)]
            |[a, b]| [f(a, b)],
        )
    }
}
