//! The W8A8 int8 tile on the AMX unit (x86-64 with AMX-INT8, Linux): `tdpbssd` (signed ×
//! signed bytes into int32 tiles) gives each 32-block's exact sums for 32 rows × 32 columns at
//! once; AVX-512 then folds them into the f32 outputs as every other path does
//! (`C ← fma(s as f32, d, C)`, block after block), so the outputs are the same bits as the
//! scalar reference's.
//!
//! One `tdpbssd` takes K = 32 here (one q8_0 block; A tiles of 16 rows × 32 bytes, B tiles of 8
//! rows × 16 columns × 4 bytes): the block scales differ per block, so blocks cannot share an
//! accumulator tile. A B tile is 16 columns of the panel layout of [`super::IntPanel`] as it
//! is (a panel row of 32 columns is two B tiles side by side).

#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use super::scalar::int_extents_ok;
use super::IntPanel;

/// Rows of one int8 tile call (two A tiles).
pub(crate) const IMR: usize = 32;
/// Panel width (two B tiles).
pub(crate) const INR: usize = 32;
/// Most blocks of one call (a K slab of the W8A8 product).
const MAX_BLK: usize = 8;

/// Whether this CPU and OS run the tile: CPUID reports AMX-INT8 and the tile unit is granted
/// to the process ([`crate::bf16dot::amx_available`], asked for once).
pub(crate) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0: EDX bit 25 is AMX-INT8 (read only where leaf 7 exists).
        let max = __cpuid(0).eax;
        let int8 = max >= 7 && __cpuid_count(7, 0).edx & (1 << 25) != 0;
        int8 && crate::bf16dot::amx_available()
    })
}

/// This thread's tile configuration for the int8 tile, released when dropped: tiles 0–3 the
/// 16 × 16 int32 sums, 4–5 A (16 rows of 32 bytes), 6–7 B (8 rows of 64 bytes).
pub(crate) struct Tiles(());

impl Tiles {
    /// Configure the tiles. Only call where [`available`] holds.
    pub(crate) fn configure() -> Tiles {
        #[repr(C, align(64))]
        struct Cfg([u8; 64]);
        let mut cfg = Cfg([0; 64]);
        cfg.0[0] = 1;
        let shapes: [(u16, u8); 8] = [
            (64, 16),
            (64, 16),
            (64, 16),
            (64, 16),
            (32, 16),
            (32, 16),
            (64, 8),
            (64, 8),
        ];
        for (t, (colsb, rows)) in shapes.into_iter().enumerate() {
            cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            cfg.0[48 + t] = rows;
        }
        // SAFETY: callers hold `available` (AMX present and granted); `cfg` is a valid
        // 64-byte palette-1 configuration.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
        }
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured by `configure` on this thread.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// The int32 sums of `nblk` blocks for 32 rows × 32 columns: `s[b][r][j]` (row stride 32).
///
/// # Safety
/// Tiles configured by [`Tiles::configure`] on this thread; `a` valid for 32 rows of
/// `32·nblk` bytes at stride `lda`; `q` for `nblk` blocks of 8 panel rows of 128 bytes; `s`
/// for `nblk · 1024` int32.
unsafe fn sums(nblk: usize, a: *const u8, lda: usize, q: *const u8, s: *mut i32) {
    // SAFETY: the caller guarantees the extents and the configuration.
    unsafe {
        std::arch::asm!(
            "2:",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{a0} + {lda}*1]",
            "tileloadd tmm5, [{a1} + {lda}*1]",
            "tileloadd tmm6, [{q} + {sb}*1]",
            "tileloadd tmm7, [{q} + {sb}*1 + 64]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tilestored [{s} + {sc}*1], tmm0",
            "tilestored [{s} + {sc}*1 + 64], tmm1",
            "tilestored [{s2} + {sc}*1], tmm2",
            "tilestored [{s2} + {sc}*1 + 64], tmm3",
            "add {a0}, 32",
            "add {a1}, 32",
            "add {q}, 1024",
            "add {s}, 4096",
            "add {s2}, 4096",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) nblk => _,
            a0 = inout(reg) a => _,
            a1 = inout(reg) a.add(16 * lda) => _,
            q = inout(reg) q => _,
            s = inout(reg) s => _,
            s2 = inout(reg) s.add(16 * 32) => _,
            lda = in(reg) lda,
            sb = in(reg) 128usize,
            sc = in(reg) 128usize,
            options(nostack),
        );
    }
}

/// `C[r][0..nc] ← fma(s[b][r] as f32, d[b], C[r])` for each block in order, rows `..mr`.
///
/// # Safety
/// AVX-512F; `c` valid for `mr` rows of `nc ≤ 32` at stride `ldc`; `s` and `d` as
/// [`tile_i8`] fills them.
#[target_feature(enable = "avx512f")]
unsafe fn fold(nblk: usize, s: &[i32], d: &[f32], mr: usize, c: *mut f32, ldc: usize, nc: usize) {
    let [m0, m1] = crate::lane_masks32(nc);
    // SAFETY: the masked loads and stores touch `c[r·ldc..r·ldc + nc]` only; `s` holds
    // nblk · 1024 sums and `d` nblk · 32 scales (checked by the caller).
    unsafe {
        let mut dv = [[_mm512_setzero_ps(); 2]; MAX_BLK];
        for (b, v) in dv.iter_mut().enumerate().take(nblk) {
            *v = [
                _mm512_loadu_ps(d.as_ptr().add(b * INR)),
                _mm512_loadu_ps(d.as_ptr().add(b * INR + 16)),
            ];
        }
        for r in 0..mr {
            let row = c.add(r * ldc);
            let mut f0 = _mm512_maskz_loadu_ps(m0, row);
            let mut f1 = _mm512_maskz_loadu_ps(m1, row.add(16));
            for (b, v) in dv.iter().enumerate().take(nblk) {
                let sp = s.as_ptr().add(b * 1024 + r * 32);
                f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(sp.cast())), v[0], f0);
                f1 = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_loadu_si512(sp.add(16).cast())),
                    v[1],
                    f1,
                );
            }
            _mm512_mask_storeu_ps(row, m0, f0);
            _mm512_mask_storeu_ps(row.add(16), m1, f1);
        }
    }
}

/// The AMX int8 tile (signed activations, `corr` zero), as [`super::scalar::tile_i8`] on up to
/// 32 rows and a panel of 32 columns, at most 8 blocks a call.
///
/// # Safety
/// [`available`] holds and [`Tiles::configure`] ran on this thread (its guard alive).
///
/// # Panics
/// If a slice is shorter than the extents the call touches, or the panel is not [`INR`] wide.
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
        w.nr == INR && w.nblk <= MAX_BLK && int_extents_ok(IMR, mr, a, lda, w, c.len(), ldc, nc),
        "amx int8 tile extents"
    );
    let nblk = w.nblk;
    if nblk == 0 {
        return;
    }
    let kb = 32 * nblk;
    // The tile reads 32 whole rows: where `a` has fewer, they go through a zero-padded copy.
    let mut padded = Vec::new();
    let (ap, lda) = if a.len() >= (IMR - 1) * lda + kb {
        (a.as_ptr(), lda)
    } else {
        padded.resize(IMR * kb, 0u8);
        for r in 0..mr {
            padded[r * kb..(r + 1) * kb].copy_from_slice(&a[r * lda..r * lda + kb]);
        }
        (padded.as_ptr(), kb)
    };
    #[repr(C, align(64))]
    struct Sums([MaybeUninit<i32>; MAX_BLK * 1024]);
    let mut sums_buf = Sums([const { MaybeUninit::<i32>::uninit() }; MAX_BLK * 1024]);
    let buf = &mut sums_buf.0;
    // SAFETY: the caller configured the tiles where AMX is granted; `ap` holds 32 rows of `kb`
    // bytes at stride `lda` (checked above, or the padded copy); `w.q` holds nblk blocks of 8
    // panel rows of 32 × 4 bytes (checked above); `buf` holds nblk · 1024 sums.
    unsafe { sums(nblk, ap, lda, w.q.as_ptr(), buf.as_mut_ptr().cast()) };
    // SAFETY: `sums` wrote all nblk · 1024 of them (four 16 × 16 tiles a block).
    let s: &[i32] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), nblk * 1024) };
    match raw {
        Some((out, ldr)) => {
            assert!(
                out.len() >= (mr - 1) * ldr + nblk * INR,
                "amx int8 raw extents"
            );
            for r in 0..mr {
                for b in 0..nblk {
                    out[r * ldr + b * INR..r * ldr + b * INR + INR]
                        .copy_from_slice(&s[b * 1024 + r * 32..b * 1024 + r * 32 + 32]);
                }
            }
        }
        // SAFETY: AMX implies AVX-512F; C extents checked above (`int_extents_ok`).
        None => unsafe { fold(nblk, s, w.d, mr, c.as_mut_ptr(), ldc, nc) },
    }
}
