//! aarch64 NEON micro-kernels: the int8 tile on 4 × 16
//! with signed activations, either with plain NEON (`smull`/`smull2`, `addp`, `sadalp`: every
//! pair sum stays within `2 · 127²`, so i16 never overflows) or with `sdot` (the `dotprod`
//! extension, through inline assembly because its intrinsic is not stable).

use std::arch::aarch64::*;

use super::scalar::int_extents_ok;
use super::IntPanel;

/// int8 tile rows.
pub(crate) const IMR: usize = 4;
/// int8 panel width.
pub(crate) const INR: usize = 16;

/// Load `n ≤ 16` f32 of a C row into four vectors (zeros past `n`).
#[inline(always)]
unsafe fn load_row(p: *const f32, n: usize) -> [float32x4_t; 4] {
    // SAFETY: `p` has `n` readable elements (checked by the callers' extents).
    unsafe {
        let mut t = [0f32; 16];
        let src = if n == 16 {
            p
        } else {
            std::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
            t.as_ptr()
        };
        [
            vld1q_f32(src),
            vld1q_f32(src.add(4)),
            vld1q_f32(src.add(8)),
            vld1q_f32(src.add(12)),
        ]
    }
}

/// Store the first `n ≤ 16` lanes of four vectors to a C row.
#[inline(always)]
unsafe fn store_row(p: *mut f32, n: usize, v: [float32x4_t; 4]) {
    // SAFETY: `p` has `n` writable elements (checked by the callers' extents).
    unsafe {
        if n == 16 {
            for (i, x) in v.iter().enumerate() {
                vst1q_f32(p.add(4 * i), *x);
            }
        } else {
            let mut t = [0f32; 16];
            for (i, x) in v.iter().enumerate() {
                vst1q_f32(t.as_mut_ptr().add(4 * i), *x);
            }
            std::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
        }
    }
}

/// One 4-byte-group multiply-accumulate step: `acc + Σ_4 a·w` per i32 lane (4 columns).
pub(crate) trait Dot {
    /// The step.
    ///
    /// # Safety
    /// The CPU must support the instructions the implementation uses.
    unsafe fn dot(acc: int32x4_t, av: int8x16_t, wv: int8x16_t) -> int32x4_t;
}

/// Plain NEON: widening multiplies, then pairwise adds into i16 and i32.
pub(crate) struct Widen;

impl Dot for Widen {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, av: int8x16_t, wv: int8x16_t) -> int32x4_t {
        // SAFETY: the caller runs with NEON.
        unsafe {
            let lo = vmull_s8(vget_low_s8(av), vget_low_s8(wv));
            let hi = vmull_high_s8(av, wv);
            vpadalq_s16(acc, vpaddq_s16(lo, hi))
        }
    }
}

/// `sdot` (the `dotprod` extension).
pub(crate) struct Sdot;

impl Dot for Sdot {
    #[inline(always)]
    unsafe fn dot(mut acc: int32x4_t, av: int8x16_t, wv: int8x16_t) -> int32x4_t {
        // SAFETY: the caller runs with `dotprod`; the instruction only reads and writes the
        // named vector registers.
        unsafe {
            std::arch::asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {w:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) av,
                w = in(vreg) wv,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

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
    // SAFETY: the caller checked the extents and the CPU features `D` needs.
    unsafe {
        let (q, d, corr) = (w.q.as_ptr(), w.d.as_ptr(), w.corr.as_ptr());
        let mut fa = [[vdupq_n_f32(0.0); 4]; M];
        if raw.is_none() {
            for (r, f) in fa.iter_mut().enumerate() {
                *f = load_row(c.add(r * ldc), nc);
            }
        }
        for b in 0..w.nblk {
            let mut init = [vdupq_n_s32(0); 4];
            for (i, v) in init.iter_mut().enumerate() {
                *v = vnegq_s32(vld1q_s32(corr.add(b * INR + 4 * i)));
            }
            let mut ia = [init; M];
            for k4 in 0..8 {
                let wp = q.add((b * 8 + k4) * INR * 4).cast::<i8>();
                let wv = [
                    vld1q_s8(wp),
                    vld1q_s8(wp.add(16)),
                    vld1q_s8(wp.add(32)),
                    vld1q_s8(wp.add(48)),
                ];
                for (r, acc) in ia.iter_mut().enumerate() {
                    let word = a
                        .add(r * lda + 32 * b + 4 * k4)
                        .cast::<i32>()
                        .read_unaligned();
                    let av = vreinterpretq_s8_s32(vdupq_n_s32(word));
                    for i in 0..4 {
                        acc[i] = D::dot(acc[i], av, wv[i]);
                    }
                }
            }
            match raw {
                Some((out, ldr)) => {
                    for (r, acc) in ia.iter().enumerate() {
                        let p = out.add(r * ldr + b * INR);
                        for (i, v) in acc.iter().enumerate() {
                            vst1q_s32(p.add(4 * i), *v);
                        }
                    }
                }
                None => {
                    let dv = [
                        vld1q_f32(d.add(b * INR)),
                        vld1q_f32(d.add(b * INR + 4)),
                        vld1q_f32(d.add(b * INR + 8)),
                        vld1q_f32(d.add(b * INR + 12)),
                    ];
                    for (f, acc) in fa.iter_mut().zip(&ia) {
                        for i in 0..4 {
                            f[i] = vfmaq_f32(f[i], vcvtq_f32_s32(acc[i]), dv[i]);
                        }
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

/// The plain-NEON int8 tile, as [`super::scalar::tile_i8`].
///
/// # Safety
/// The CPU must support NEON.
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
#[target_feature(enable = "neon")]
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
    // SAFETY: extents checked above; NEON guaranteed by the caller.
    unsafe { by_rows!(mr, Widen, ap, lda, w, cp, ldc, nc, raw) }
}

/// The `sdot` int8 tile, as [`super::scalar::tile_i8`].
///
/// # Safety
/// The CPU must support NEON and `dotprod`.
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_i8_dot(
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
    // SAFETY: extents checked above; `dotprod` guaranteed by the caller.
    unsafe { by_rows!(mr, Sdot, ap, lda, w, cp, ldc, nc, raw) }
}
