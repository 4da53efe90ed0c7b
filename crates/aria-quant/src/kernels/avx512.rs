//! x86-64 AVX-512 micro-kernel: the int8 tile on 6 × 32 with `vpdpbusd` (AVX-512 VNNI; activations offset by +128, each block's accumulator
//! starting at `−128 · Σw`).
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::scalar::int_extents_ok;
use super::IntPanel;

/// int8 tile rows.
pub(crate) const IMR: usize = 6;
/// int8 panel width.
pub(crate) const INR: usize = 32;

/// Load `n ≤ 32` f32 of a C row into two vectors (zeros past `n`).
#[inline(always)]
unsafe fn load_row(p: *const f32, n: usize) -> [__m512; 2] {
    // SAFETY: `p` has `n` readable elements (checked by the callers' extents).
    unsafe {
        if n == 32 {
            [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))]
        } else {
            let mut t = [0f32; 32];
            std::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
            [
                _mm512_loadu_ps(t.as_ptr()),
                _mm512_loadu_ps(t.as_ptr().add(16)),
            ]
        }
    }
}

/// Store the first `n ≤ 32` lanes of two vectors to a C row.
#[inline(always)]
unsafe fn store_row(p: *mut f32, n: usize, v: [__m512; 2]) {
    // SAFETY: `p` has `n` writable elements (checked by the callers' extents).
    unsafe {
        if n == 32 {
            _mm512_storeu_ps(p, v[0]);
            _mm512_storeu_ps(p.add(16), v[1]);
        } else {
            let mut t = [0f32; 32];
            _mm512_storeu_ps(t.as_mut_ptr(), v[0]);
            _mm512_storeu_ps(t.as_mut_ptr().add(16), v[1]);
            std::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_tile<const M: usize>(
    a: *const u8,
    lda: usize,
    w: &IntPanel<'_>,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    raw: Option<(*mut i32, usize)>,
) {
    // SAFETY: the caller checked the extents and runs with AVX-512F + VNNI.
    unsafe {
        let (q, d, corr) = (w.q.as_ptr(), w.d.as_ptr(), w.corr.as_ptr());
        let mut fa = [[_mm512_setzero_ps(); 2]; M];
        if raw.is_none() {
            for (r, f) in fa.iter_mut().enumerate() {
                *f = load_row(c.add(r * ldc), nc);
            }
        }
        let zero = _mm512_setzero_si512();
        for b in 0..w.nblk {
            let i0 = _mm512_sub_epi32(zero, _mm512_loadu_si512(corr.add(b * INR).cast()));
            let i1 = _mm512_sub_epi32(zero, _mm512_loadu_si512(corr.add(b * INR + 16).cast()));
            let mut ia = [[i0, i1]; M];
            for k4 in 0..8 {
                let wp = q.add((b * 8 + k4) * INR * 4);
                let w0 = _mm512_loadu_si512(wp.cast());
                let w1 = _mm512_loadu_si512(wp.add(64).cast());
                for (r, acc) in ia.iter_mut().enumerate() {
                    let av = _mm512_set1_epi32(
                        a.add(r * lda + 32 * b + 4 * k4)
                            .cast::<i32>()
                            .read_unaligned(),
                    );
                    acc[0] = _mm512_dpbusd_epi32(acc[0], av, w0);
                    acc[1] = _mm512_dpbusd_epi32(acc[1], av, w1);
                }
            }
            match raw {
                Some((out, ldr)) => {
                    for (r, acc) in ia.iter().enumerate() {
                        let p = out.add(r * ldr + b * INR);
                        _mm512_storeu_si512(p.cast(), acc[0]);
                        _mm512_storeu_si512(p.add(16).cast(), acc[1]);
                    }
                }
                None => {
                    let d0 = _mm512_loadu_ps(d.add(b * INR));
                    let d1 = _mm512_loadu_ps(d.add(b * INR + 16));
                    for (f, acc) in fa.iter_mut().zip(&ia) {
                        f[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[0]), d0, f[0]);
                        f[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[1]), d1, f[1]);
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

/// The AVX-512 VNNI int8 tile (activations offset by +128, `corr` holds `128 · Σw`), as
/// [`super::scalar::tile_i8`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI.
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
#[target_feature(enable = "avx512f,avx512vnni,avx2,fma")]
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
    assert!(
        w.nr == INR && int_extents_ok(IMR, mr, a, lda, w, c.len(), ldc, nc),
        "int8 tile extents"
    );
    let raw = raw.map(|(r, ldr)| {
        assert!(
            r.len() >= (mr - 1) * ldr + w.nblk * INR,
            "int8 tile raw extents"
        );
        (r.as_mut_ptr(), ldr)
    });
    let (a, c) = (a.as_ptr(), c.as_mut_ptr());
    // SAFETY: extents checked above; AVX-512 VNNI guaranteed by the caller.
    unsafe {
        match mr {
            1 => i8_tile::<1>(a, lda, w, c, ldc, nc, raw),
            2 => i8_tile::<2>(a, lda, w, c, ldc, nc, raw),
            3 => i8_tile::<3>(a, lda, w, c, ldc, nc, raw),
            4 => i8_tile::<4>(a, lda, w, c, ldc, nc, raw),
            5 => i8_tile::<5>(a, lda, w, c, ldc, nc, raw),
            _ => i8_tile::<IMR>(a, lda, w, c, ldc, nc, raw),
        }
    }
}
