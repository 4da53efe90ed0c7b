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

/// Repack 16 whole columns of a `q8_0` panel of width [`INR`] with gathers: for each of `nblk`
/// blocks, block `b0 + bb` of rows `rows[j] = base + j·row_bytes` (j < 16) into panel columns
/// `jg..jg + 16` (the layout of [`super::IntPanel`]), its scales into `d`, and with `offset`
/// `corr = 128 · Σw` (through `vpdpbusd` with ones, exact). The same values as the scalar
/// repack.
///
/// # Safety
/// AVX-512F and AVX-512 VNNI; `base` valid for 16 rows of `row_bytes ≥ 34·(b0 + nblk)` bytes
/// with `16·row_bytes < 2³¹`; `q`, `d`, `corr` hold `nblk` blocks of the panel.
#[target_feature(enable = "avx512f,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn repack16(
    base: *const u8,
    row_bytes: usize,
    b0: usize,
    nblk: usize,
    jg: usize,
    offset: bool,
    q: &mut [u8],
    d: &mut [f32],
    corr: &mut [i32],
) {
    debug_assert!(jg + 16 <= INR && q.len() >= nblk * 32 * INR && d.len() >= nblk * INR);
    // SAFETY: every gather reads 4 bytes inside block b0 + bb of one of the 16 rows (offsets
    // 0..4 for the scale, 2 + 4·k4..6 + 4·k4 ≤ 34 for the weights); the stores write 64 bytes
    // of `q` and 16 values of `d`/`corr` inside the panel's nblk blocks.
    unsafe {
        let rb = row_bytes as i32;
        let idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(rb),
        );
        let ones = _mm512_set1_epi8(1);
        for bb in 0..nblk {
            let p = base.add((b0 + bb) * 34);
            let mut sum = _mm512_setzero_si512();
            for k4 in 0..8 {
                let g = _mm512_i32gather_epi32::<1>(idx, p.add(2 + 4 * k4).cast());
                if offset {
                    sum = _mm512_dpbusd_epi32(sum, ones, g);
                }
                _mm512_storeu_si512(q.as_mut_ptr().add(((bb * 8 + k4) * INR + jg) * 4).cast(), g);
            }
            let h = _mm512_cvtepi32_epi16(_mm512_i32gather_epi32::<1>(idx, p.cast()));
            _mm512_storeu_ps(d.as_mut_ptr().add(bb * INR + jg), _mm512_cvtph_ps(h));
            let c = if offset {
                _mm512_slli_epi32::<7>(sum)
            } else {
                _mm512_setzero_si512()
            };
            _mm512_storeu_si512(corr.as_mut_ptr().add(bb * INR + jg).cast(), c);
        }
    }
}

/// One row of [`super::quantize_activations`] with AVX-512F: the same scale and bytes as the
/// portable row (the maximum is exact in any order, each value is one multiplication and a
/// round to nearest even, then the same clamp and offset).
///
/// # Safety
/// AVX-512F; `qr.len() ≥ xr.len()`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn quantize_row(xr: &[f32], offset: bool, qr: &mut [u8], s: &mut f32) {
    debug_assert!(qr.len() >= xr.len());
    let n = xr.len();
    let mask = |i: usize| crate::lane_masks32(n - i)[0];
    // SAFETY: every load and store is masked to the `n` elements of `xr` and `qr` (the caller
    // guarantees `qr` holds at least `n`).
    unsafe {
        let inf = _mm512_set1_ps(f32::INFINITY);
        let mut amax = _mm512_setzero_ps();
        let mut bad: u16 = 0;
        let mut i = 0;
        while i < n {
            let m = mask(i);
            let v = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, xr.as_ptr().add(i)));
            // Not less than ∞: ∞ itself, or NaN (unordered).
            bad |= _mm512_mask_cmp_ps_mask::<_CMP_NLT_UQ>(m, v, inf);
            amax = _mm512_max_ps(amax, v);
            i += 16;
        }
        if bad != 0 {
            *s = f32::NAN;
            return;
        }
        let amax = _mm512_reduce_max_ps(amax);
        if amax == 0.0 {
            return;
        }
        *s = amax / 127.0;
        let inv = _mm512_set1_ps(127.0 / amax);
        let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
        let off = _mm512_set1_epi32(if offset { 128 } else { 0 });
        let mut i = 0;
        while i < n {
            let m = mask(i);
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr.as_ptr().add(i)), inv);
            let r =
                _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            let r = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(r, hi), lo), off);
            _mm512_mask_cvtepi32_storeu_epi8(qr.as_mut_ptr().add(i).cast(), m, r);
            i += 16;
        }
    }
}
