//! Square-block transposes in registers for B-panel packing (x86-64): 16 × 16 on AVX-512F,
//! 8 × 8 on AVX2. Pure data movement: every path puts the same values in the same places.
//!
//! A weight `[N, K]` is packed into panels whose rows are its columns; the portable blocked
//! loop moves one element per instruction (the compiler does not turn the column gathers into
//! shuffles), these kernels load whole rows and shuffle: ~3× the rate on cache-resident rows.

#![allow(clippy::incompatible_msrv)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::Isa;

/// The side of the register-block transpose a path runs (0: none, the portable loop).
pub fn block(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.is_available() => 16,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.is_available() => 8,
        _ => 0,
    }
}

/// `dst[c·ldo + r] = src[r·ld + c]` for `r, c < s`, with `s` = [`block`]`(isa)`; nothing where
/// that is 0.
///
/// # Panics
/// If `src` is shorter than `(s − 1)·ld + s` or `dst` than `(s − 1)·ldo + s`.
#[inline]
pub fn square(isa: Isa, src: &[f32], ld: usize, dst: &mut [f32], ldo: usize) {
    let s = block(isa);
    if s == 0 {
        return;
    }
    assert!(
        ld >= s
            && ldo >= s
            && src.len() > (s - 1) * ld + s - 1
            && dst.len() > (s - 1) * ldo + s - 1,
        "transpose block extents"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the extents were checked above (s rows of s elements at strides ld / ldo); the
    // path's features were detected at run time (`block` is non-zero only then).
    unsafe {
        if s == 16 {
            t16(src.as_ptr(), ld, dst.as_mut_ptr(), ldo)
        } else {
            t8(src.as_ptr(), ld, dst.as_mut_ptr(), ldo)
        }
    }
}

/// `dst[c·ldo + r] = scale[r] · q[r·ldq + c]`, less `offset[r]` where given (a product, then a
/// difference, each rounded, no fused multiply-add: the bits of the scalar expression), for
/// `r, c < s` with `s` = [`block`]`(isa)`; nothing where that is 0. Int8 rows with one scale
/// (and offset) per row, dequantized in registers on their way into the transposed block.
///
/// # Panics
/// If `q` is shorter than `(s − 1)·ldq + s`, `dst` than `(s − 1)·ldo + s`, or `scale` (or
/// `offset`) than `s`.
#[inline]
pub fn square_i8(
    isa: Isa,
    q: &[i8],
    ldq: usize,
    scale: &[f32],
    offset: Option<&[f32]>,
    dst: &mut [f32],
    ldo: usize,
) {
    let s = block(isa);
    if s == 0 {
        return;
    }
    assert!(
        ldq >= s
            && ldo >= s
            && q.len() > (s - 1) * ldq + s - 1
            && dst.len() > (s - 1) * ldo + s - 1
            && scale.len() >= s
            && offset.is_none_or(|o| o.len() >= s),
        "int8 transpose block extents"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the extents were checked above (s rows of s elements at strides ldq / ldo, s
    // scales and offsets); the path's features were detected at run time.
    unsafe {
        let (qp, sp, op) = (q.as_ptr(), scale.as_ptr(), offset.map(<[f32]>::as_ptr));
        if s == 16 {
            t16_i8(qp, ldq, sp, op, dst.as_mut_ptr(), ldo)
        } else {
            t8_i8(qp, ldq, sp, op, dst.as_mut_ptr(), ldo)
        }
    }
}

/// [`square_i8`] on AVX-512F: each row's 16 int8 widened to int32, converted, scaled (and
/// offset), then [`t16_regs`].
///
/// # Safety
/// AVX-512F; `q[r·ldq + c]` readable, `dst[c·ldo + r]` writable for `r, c < 16`; `scale`
/// (and `offset` when given) readable for 16 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn t16_i8(
    q: *const i8,
    ldq: usize,
    scale: *const f32,
    offset: Option<*const f32>,
    dst: *mut f32,
    ldo: usize,
) {
    // SAFETY: reads and writes inside the extents the caller guarantees.
    unsafe {
        let r: [__m512; 16] = std::array::from_fn(|i| {
            let w = _mm_loadu_si128(q.add(i * ldq).cast());
            let v = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(w)),
                _mm512_set1_ps(*scale.add(i)),
            );
            match offset {
                Some(o) => _mm512_sub_ps(v, _mm512_set1_ps(*o.add(i))),
                None => v,
            }
        });
        t16_regs(r, dst, ldo)
    }
}

/// [`square_i8`] on AVX2: [`t16_i8`] with 8 × 8 blocks and [`t8_regs`].
///
/// # Safety
/// AVX2; `q[r·ldq + c]` readable, `dst[c·ldo + r]` writable for `r, c < 8`; `scale` (and
/// `offset` when given) readable for 8 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn t8_i8(
    q: *const i8,
    ldq: usize,
    scale: *const f32,
    offset: Option<*const f32>,
    dst: *mut f32,
    ldo: usize,
) {
    // SAFETY: reads and writes inside the extents the caller guarantees.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| {
            let w = _mm_loadl_epi64(q.add(i * ldq).cast());
            let v = _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w)),
                _mm256_set1_ps(*scale.add(i)),
            );
            match offset {
                Some(o) => _mm256_sub_ps(v, _mm256_set1_ps(*o.add(i))),
                None => v,
            }
        });
        t8_regs(r, dst, ldo)
    }
}

/// 16 × 16 transpose: 16 row loads, four shuffle stages (32-bit, 64-bit, then two 128-bit lane
/// stages), 16 stores.
///
/// # Safety
/// AVX-512F; `src[r·ld + c]` readable and `dst[c·ldo + r]` writable for `r, c < 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn t16(src: *const f32, ld: usize, dst: *mut f32, ldo: usize) {
    // SAFETY: loads inside the extents the caller guarantees; the stores are `t16_regs`'s.
    unsafe {
        let r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(src.add(i * ld)));
        t16_regs(r, dst, ldo)
    }
}

/// The shuffles and stores of [`t16`]: `dst[c·ldo + i] = r[i][c]`.
///
/// # Safety
/// AVX-512F; `dst[c·ldo + i]` writable for `i, c < 16`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn t16_regs(r: [__m512; 16], dst: *mut f32, ldo: usize) {
    // SAFETY: stores inside the extents the caller guarantees; the rest is registers.
    unsafe {
        // Pairs of rows interleaved by 32-bit element.
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // Then by 64-bit pair: each 128-bit lane of u[4i + j] holds one column of four rows.
        let pd = _mm512_castps_pd;
        let mut u = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let (a0, a1, b0, b1) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a0), pd(b0)));
            u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a0), pd(b0)));
            u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a1), pd(b1)));
            u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a1), pd(b1)));
        }
        // 128-bit lanes gathered across groups of four rows, twice.
        for i in 0..2 {
            for j in 0..4 {
                let (a, b) = (u[8 * i + j], u[8 * i + 4 + j]);
                t[8 * i + j] = _mm512_shuffle_f32x4::<0x88>(a, b);
                t[8 * i + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(a, b);
            }
        }
        for j in 0..8 {
            let (a, b) = (t[j], t[8 + j]);
            _mm512_storeu_ps(dst.add(j * ldo), _mm512_shuffle_f32x4::<0x88>(a, b));
            _mm512_storeu_ps(dst.add((8 + j) * ldo), _mm512_shuffle_f32x4::<0xdd>(a, b));
        }
    }
}

/// 8 × 8 transpose: 8 row loads, 32-bit and 64-bit interleaves, a 128-bit lane exchange,
/// 8 stores.
///
/// # Safety
/// AVX2; `src[r·ld + c]` readable and `dst[c·ldo + r]` writable for `r, c < 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn t8(src: *const f32, ld: usize, dst: *mut f32, ldo: usize) {
    // SAFETY: loads inside the extents the caller guarantees; the stores are `t8_regs`'s.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * ld)));
        t8_regs(r, dst, ldo)
    }
}

/// The shuffles and stores of [`t8`]: `dst[c·ldo + i] = r[i][c]`.
///
/// # Safety
/// AVX2; `dst[c·ldo + i]` writable for `i, c < 8`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn t8_regs(r: [__m256; 8], dst: *mut f32, ldo: usize) {
    // SAFETY: stores inside the extents the caller guarantees; the rest is registers.
    unsafe {
        let mut t = [_mm256_setzero_ps(); 8];
        for i in 0..4 {
            t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // s[4h + j]: column j (and j + 4) of rows 4h..4h + 4, one in each 128-bit lane.
        let mut s = [_mm256_setzero_ps(); 8];
        for h in 0..2 {
            let (a0, a1, b0, b1) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
            s[4 * h] = _mm256_shuffle_ps::<0x44>(a0, b0);
            s[4 * h + 1] = _mm256_shuffle_ps::<0xee>(a0, b0);
            s[4 * h + 2] = _mm256_shuffle_ps::<0x44>(a1, b1);
            s[4 * h + 3] = _mm256_shuffle_ps::<0xee>(a1, b1);
        }
        for j in 0..4 {
            let (lo, hi) = (s[j], s[4 + j]);
            _mm256_storeu_ps(dst.add(j * ldo), _mm256_permute2f128_ps::<0x20>(lo, hi));
            _mm256_storeu_ps(
                dst.add((4 + j) * ldo),
                _mm256_permute2f128_ps::<0x31>(lo, hi),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path with a register transpose moves each element of a strided block to its
    /// transposed place and touches nothing else.
    #[test]
    fn register_blocks_transpose() {
        let paths: Vec<Isa> = Isa::available()
            .into_iter()
            .filter(|&i| block(i) > 0)
            .collect();
        if paths.is_empty() {
            aria_testing::skip_for_hardware("no register-block transpose on this CPU");
        }
        for isa in paths {
            let s = block(isa);
            for (ld, ldo) in [(s, s), (s + 3, 2 * s + 1), (40, 32)] {
                let src: Vec<f32> = (0..s * ld).map(|i| i as f32).collect();
                let mut got = vec![-1f32; s * ldo];
                square(isa, &src, ld, &mut got, ldo);
                let mut want = vec![-1f32; s * ldo];
                for r in 0..s {
                    for c in 0..s {
                        want[c * ldo + r] = src[r * ld + c];
                    }
                }
                assert_eq!(got, want, "{isa:?} ld {ld} ldo {ldo}");
            }
        }
    }

    /// The int8 block transpose gives, bit for bit, `scale·q` (less the offset) in the
    /// transposed place, signed zeros included, and touches nothing else.
    #[test]
    fn int8_blocks_dequantize_in_the_transpose() {
        let paths: Vec<Isa> = Isa::available()
            .into_iter()
            .filter(|&i| block(i) > 0)
            .collect();
        if paths.is_empty() {
            aria_testing::skip_for_hardware("no register-block transpose on this CPU");
        }
        for isa in paths {
            let s = block(isa);
            let (ldq, ldo) = (s + 5, 2 * s + 3);
            let q: Vec<i8> = (0..s * ldq)
                .map(|i| ((i * 71 % 255) as i32 - 127) as i8)
                .collect();
            // A zero scale gives −0 for negative q without an offset; odd scales and offsets
            // round.
            let scale: Vec<f32> = (0..s)
                .map(|r| {
                    if r == 3 {
                        0.0
                    } else {
                        0.013 * (r as f32 + 0.7)
                    }
                })
                .collect();
            let offset: Vec<f32> = (0..s).map(|r| 0.37 / (r as f32 + 1.0)).collect();
            for off in [None, Some(&offset[..])] {
                let mut got = vec![-1f32; s * ldo];
                square_i8(isa, &q, ldq, &scale, off, &mut got, ldo);
                let mut want = vec![-1f32; s * ldo];
                for r in 0..s {
                    for c in 0..s {
                        let v = scale[r] * q[r * ldq + c] as f32;
                        want[c * ldo + r] = match off {
                            Some(o) => v - o[r],
                            None => v,
                        };
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{isa:?} offset {}", off.is_some());
            }
        }
    }
}
