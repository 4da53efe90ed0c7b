//! x86-64 AVX2 int8 tiles, and the AVX-VNNI int8 tile (256-bit `vpdpbusd`).
//!
//! - int8 (AVX2): `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into i16 with
//!   saturation. With activations and weights in `[−127, 127]`, the sign trick
//!   (`|a|` unsigned × `sign(a)·w` signed) keeps every pair within `2 · 127² = 32258`, so
//!   nothing saturates; `vpmaddwd` by ones then adds pairs of pairs into i32.
//! - int8 (AVX-VNNI): `vpdpbusd` takes the activations offset by +128 (unsigned) and starts
//!   each block's accumulator at `−128 · Σw` (the panel's `corr`), which gives the same exact
//!   sums.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::scalar::int_extents_ok;
use super::IntPanel;

/// int8 tile rows.
pub(crate) const IMR: usize = 4;
/// int8 panel width.
pub(crate) const INR: usize = 16;

/// Load `n ≤ 16` f32 accumulators of a C row into two vectors (zeros past `n`).
#[inline(always)]
unsafe fn load_row(p: *const f32, n: usize) -> [__m256; 2] {
    // SAFETY: `p` has `n` readable elements (checked by the callers' extents).
    unsafe {
        if n == 16 {
            [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
        } else {
            let mut t = [0f32; 16];
            std::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
            [
                _mm256_loadu_ps(t.as_ptr()),
                _mm256_loadu_ps(t.as_ptr().add(8)),
            ]
        }
    }
}

/// Store the first `n ≤ 16` lanes of two vectors to a C row.
#[inline(always)]
unsafe fn store_row(p: *mut f32, n: usize, v: [__m256; 2]) {
    // SAFETY: `p` has `n` writable elements (checked by the callers' extents).
    unsafe {
        if n == 16 {
            _mm256_storeu_ps(p, v[0]);
            _mm256_storeu_ps(p.add(8), v[1]);
        } else {
            let mut t = [0f32; 16];
            _mm256_storeu_ps(t.as_mut_ptr(), v[0]);
            _mm256_storeu_ps(t.as_mut_ptr().add(8), v[1]);
            std::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
        }
    }
}

/// One 4-byte-group multiply-accumulate step of an int8 tile: `acc + Σ_4 a·w` per i32 lane.
pub(crate) trait Dot {
    /// The step.
    ///
    /// # Safety
    /// The CPU must support the instructions the implementation uses.
    unsafe fn dot(acc: __m256i, av: __m256i, wv: __m256i) -> __m256i;
}

/// AVX2 sign trick: `vpmaddubsw(|a|, sign(a)·w)` then `vpmaddwd` by ones.
pub(crate) struct SignTrick;

impl Dot for SignTrick {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, av: __m256i, wv: __m256i) -> __m256i {
        // SAFETY: the caller runs with AVX2.
        unsafe {
            let ua = _mm256_sign_epi8(av, av);
            let sw = _mm256_sign_epi8(wv, av);
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, sw), _mm256_set1_epi16(1));
            _mm256_add_epi32(acc, p)
        }
    }
}

/// AVX-VNNI `vpdpbusd` (unsigned activations × signed weights).
pub(crate) struct AvxVnni;

impl Dot for AvxVnni {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, av: __m256i, wv: __m256i) -> __m256i {
        // SAFETY: the caller runs with AVX-VNNI.
        unsafe { _mm256_dpbusd_avx_epi32(acc, av, wv) }
    }
}

/// The block loop shared by the AVX2 and AVX-VNNI int8 tiles.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_tile<const M: usize, D: Dot>(
    a: *const u8,
    lda: usize,
    w: &IntPanel<'_>,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    raw: Option<(*mut i32, usize)>,
) {
    // SAFETY: the caller checked the extents (`int_extents_ok`) and the CPU features `D`
    // needs.
    unsafe {
        let (q, d, corr) = (w.q.as_ptr(), w.d.as_ptr(), w.corr.as_ptr());
        let mut fa = [[_mm256_setzero_ps(); 2]; M];
        if raw.is_none() {
            for (r, f) in fa.iter_mut().enumerate() {
                *f = load_row(c.add(r * ldc), nc);
            }
        }
        let zero = _mm256_setzero_si256();
        for b in 0..w.nblk {
            let i0 = _mm256_sub_epi32(zero, _mm256_loadu_si256(corr.add(b * INR).cast()));
            let i1 = _mm256_sub_epi32(zero, _mm256_loadu_si256(corr.add(b * INR + 8).cast()));
            let mut ia = [[i0, i1]; M];
            for k4 in 0..8 {
                let wp = q.add((b * 8 + k4) * INR * 4);
                let w0 = _mm256_loadu_si256(wp.cast());
                let w1 = _mm256_loadu_si256(wp.add(32).cast());
                for (r, acc) in ia.iter_mut().enumerate() {
                    let av = _mm256_set1_epi32(
                        a.add(r * lda + 32 * b + 4 * k4)
                            .cast::<i32>()
                            .read_unaligned(),
                    );
                    acc[0] = D::dot(acc[0], av, w0);
                    acc[1] = D::dot(acc[1], av, w1);
                }
            }
            match raw {
                Some((out, ldr)) => {
                    for (r, acc) in ia.iter().enumerate() {
                        let p = out.add(r * ldr + b * INR);
                        _mm256_storeu_si256(p.cast(), acc[0]);
                        _mm256_storeu_si256(p.add(8).cast(), acc[1]);
                    }
                }
                None => {
                    let d0 = _mm256_loadu_ps(d.add(b * INR));
                    let d1 = _mm256_loadu_ps(d.add(b * INR + 8));
                    for (f, acc) in fa.iter_mut().zip(&ia) {
                        f[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[0]), d0, f[0]);
                        f[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[1]), d1, f[1]);
                    }
                }
            }
        }
        if raw.is_none() {
            for (r, f) in fa.iter().enumerate() {
                store_row(c.add(r * ldc), nc, *f);
            }
        }
    }
}

/// Check an int8 tile call and turn the optional raw output into a pointer.
#[allow(clippy::too_many_arguments)]
fn checked_raw(
    mr: usize,
    a: &[u8],
    lda: usize,
    w: &IntPanel<'_>,
    c: &[f32],
    ldc: usize,
    nc: usize,
    raw: Option<(&mut [i32], usize)>,
) -> Option<(*mut i32, usize)> {
    assert!(
        w.nr == INR && int_extents_ok(IMR, mr, a, lda, w, c.len(), ldc, nc),
        "int8 tile extents"
    );
    raw.map(|(r, ldr)| {
        assert!(
            r.len() >= (mr - 1) * ldr + w.nblk * INR,
            "int8 tile raw extents"
        );
        (r.as_mut_ptr(), ldr)
    })
}

macro_rules! by_rows {
    ($mr:expr, $d:ty, $($arg:expr),*) => {
        match $mr {
            1 => i8_tile::<1, $d>($($arg),*),
            2 => i8_tile::<2, $d>($($arg),*),
            3 => i8_tile::<3, $d>($($arg),*),
            _ => i8_tile::<IMR, $d>($($arg),*),
        }
    };
}

/// The AVX2 int8 tile (signed activations, sign trick), as [`super::scalar::tile_i8`].
///
/// # Safety
/// The CPU must support AVX2 and FMA.
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_i8(
    mr: usize,
    a: &[u8],
    lda: usize,
    w: &IntPanel<'_>,
    c: &mut [f32],
    ldc: usize,
    nc: usize,
    raw: Option<(&mut [i32], usize)>,
) {
    let raw = checked_raw(mr, a, lda, w, c, ldc, nc, raw);
    let (ap, cp) = (a.as_ptr(), c.as_mut_ptr());
    // SAFETY: extents checked above; AVX2 guaranteed by the caller.
    unsafe { by_rows!(mr, SignTrick, ap, lda, w, cp, ldc, nc, raw) }
}

/// The AVX-VNNI int8 tile (activations offset by +128, `corr` holds `128 · Σw`), as
/// [`super::scalar::tile_i8`].
///
/// # Safety
/// The CPU must support AVX2, FMA and AVX-VNNI.
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_i8_vnni(
    mr: usize,
    a: &[u8],
    lda: usize,
    w: &IntPanel<'_>,
    c: &mut [f32],
    ldc: usize,
    nc: usize,
    raw: Option<(&mut [i32], usize)>,
) {
    let raw = checked_raw(mr, a, lda, w, c, ldc, nc, raw);
    let (ap, cp) = (a.as_ptr(), c.as_mut_ptr());
    // SAFETY: extents checked above; AVX-VNNI guaranteed by the caller.
    unsafe { by_rows!(mr, AvxVnni, ap, lda, w, cp, ldc, nc, raw) }
}
