//! Matrix products with bf16 inputs on the AMX tile unit (x86-64 with AMX-BF16, Linux):
//! `C[M, N] = A[M, K] · Wᵀ + b` on the same weight panels as [`super::bf16dot`] (a panel row
//! of [`NR`] column pairs is three 16-column B tiles), A rounded to bf16 as there.
//!
//! Each 16 × 16 block of C is a tile register that `tdpbf16ps` updates with 16 × 32 bf16 of A
//! and 16 pairs × 16 columns of W at a time; a block of outputs stays in its register for the
//! whole K, so every output is one accumulation over the K pairs in order, on one thread:
//! blocking and the thread count never change a bit. The unit's own rounding inside one
//! `tdpbf16ps` is not the documented sequence of `vdpbf16ps` (measured: ~60 % of outputs agree
//! with any sequential f32 model of it), so this product gives the AMX unit's bits, which no
//! other kernel here reproduces; its accuracy is that of f32 accumulation (tested against f64).
//!
//! The tile registers need the kernel's permission (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), asked
//! for once per process by [`available`].

use rayon::prelude::*;

use super::aligned::LineAligned;
use super::bf16dot::{to_bf16, Bf16Panels, CPtr, NR};

/// Rows (and columns) of a tile of C; a tile of A holds [`TK`] pairs of each of its rows.
pub(super) const T: usize = 16;
/// Pairs per tile of A (64 bytes a row).
pub(super) const TK: usize = 16;
/// Rows per task: 8 tiles of A.
const MB: usize = 128;
/// Column tiles per task (4 panels).
const CB: usize = 4 * NR / T;

/// Whether this CPU and OS run the AMX product: CPUID reports AMX-TILE and AMX-BF16 and Linux
/// grants the tile data state to the process (requested on the first call).
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(detect)
}

/// Whether CPUID reports AMX-TILE and AMX-BF16 (whether or not the OS grants the tile state).
pub fn in_cpuid() -> bool {
    // CPUID leaf 7, sub-leaf 0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    // Leaf 7 is read only when the highest basic leaf reaches it.
    let max = std::arch::x86_64::__cpuid(0).eax;
    let leaf7 = (max >= 7).then(|| std::arch::x86_64::__cpuid_count(7, 0));
    leaf7.is_some_and(|r| r.edx & (1 << 22) != 0 && r.edx & (1 << 24) != 0)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    if !in_cpuid() {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) only asks the kernel to enable a state
    // component for this process; it reads and writes no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    rc == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// Pack `m` rows of `k` f32 (`a[i·lda + kk]`) as bf16 pairs in tiles of A: row tile `t`
/// (16 rows), pair block `q` (16 pairs) at `((t·nq + q)·16 + r)·16 + p`, `nq = kps / 16`.
/// Rows past `m` and pairs past `⌈k/2⌉` are zero. Rounding is to nearest even; with AVX-512
/// BF16 (`vcvtne2ps2bf16`) subnormal inputs become zero, which the tile unit makes of them
/// anyway (it reads subnormal bf16 as zero).
fn pack_a(a: &[f32], lda: usize, m: usize, k: usize, kps: usize, out: &mut [u32]) {
    let nq = kps / TK;
    let vector = super::bf16dot::native();
    out.par_chunks_mut(nq * T * TK)
        .enumerate()
        .for_each(|(t, o)| {
            for r in 0..T {
                let i = t * T + r;
                if i >= m {
                    for q in 0..nq {
                        o[(q * T + r) * TK..(q * T + r + 1) * TK].fill(0);
                    }
                    continue;
                }
                let row = &a[i * lda..i * lda + k];
                for q in 0..nq {
                    let dst = &mut o[(q * T + r) * TK..(q * T + r + 1) * TK];
                    let src = &row[(2 * q * TK).min(k)..(2 * (q + 1) * TK).min(k)];
                    if vector {
                        // SAFETY: AVX-512F and AVX-512 BF16 were detected (`native`); `dst`
                        // holds 16 words and `src` at most 32 values.
                        unsafe { pack_row_avx512(src, dst) };
                        continue;
                    }
                    for (pp, d) in dst.iter_mut().enumerate() {
                        let lo = src.get(2 * pp).map_or(0, |&x| u32::from(to_bf16(x)));
                        let hi = src.get(2 * pp + 1).map_or(0, |&x| u32::from(to_bf16(x)));
                        *d = lo | (hi << 16);
                    }
                }
            }
        });
}

/// Up to 32 f32 of `src` as 16 bf16 pairs in `dst` (zero past `src`).
///
/// # Safety
/// AVX-512F and AVX-512 BF16; `dst.len() ≥ 16`, `src.len() ≤ 32`.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::incompatible_msrv)]
pub(super) unsafe fn pack_row_avx512(src: &[f32], dst: &mut [u32]) {
    use std::arch::x86_64::*;
    debug_assert!(dst.len() >= 16 && src.len() <= 32);
    let n = src.len();
    let [m0, m1] = super::lane_masks32(n);
    // SAFETY: the masked loads read only `src[..n]`; the store writes `dst[..16]`.
    unsafe {
        let lo = _mm512_maskz_loadu_ps(m0, src.as_ptr());
        let hi = _mm512_maskz_loadu_ps(m1, src.as_ptr().add(16.min(n)));
        let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr() as *mut __m512i, v);
    }
}

/// `c[M, N] = a[M, K] · Wᵀ (+ bias)` on the AMX unit (on the current rayon pool); every
/// element of C is written, none read, so C may be uninitialised.
///
/// # Safety
/// [`available`] holds; `c` is valid for `m·n` writes and not accessed elsewhere meanwhile; `a`
/// holds `m` rows of `lda ≥ K`; M, N and K are not zero.
pub(super) unsafe fn matmul(
    m: usize,
    a: &[f32],
    lda: usize,
    w: &Bf16Panels,
    bias: Option<&[f32]>,
    c: *mut f32,
) {
    let (n, k, kps) = (w.n(), w.k(), w.kps());
    debug_assert!(kps % TK == 0 && m > 0 && n > 0 && k > 0);
    let nq = kps / TK;
    // Row tiles padded to an even count (the kernel takes two at a time).
    let mt = m.div_ceil(2 * T) * 2;
    // The packed A of this thread's previous product, reused when large enough (`pack_a`
    // writes every word it is given, so a used buffer needs no clearing).
    let need = mt * nq * T * TK;
    let mut keep = A_TILES
        .with(|c| c.take())
        .filter(|b| b.len() >= need)
        .unwrap_or_else(|| LineAligned::zeroed(need));
    let ap = &mut keep[..need];
    pack_a(a, lda, m, k, kps, ap);
    let ap = &*ap;
    let nct = n.div_ceil(T);
    let (tasks_m, tasks_n) = (m.div_ceil(MB), nct.div_ceil(CB));
    let cp = CPtr(c);
    let data = w.data();
    (0..tasks_m * tasks_n).into_par_iter().for_each(|task| {
        let (ti, tj) = (task / tasks_n, task % tasks_n);
        let (r0, r1) = (ti * MB, (ti * MB + MB).min(m));
        let (c0, c1) = (tj * CB, (tj * CB + CB).min(nct));
        let cp = &cp;
        let mut scratch = [0f32; 4 * T * T];
        // B tile `ct` (16 columns of panel ct / 3), pair block 0.
        let btile = |ct: usize| {
            let (j, v) = (ct / (NR / T), ct % (NR / T));
            data[(j * kps) * NR + v * T..].as_ptr()
        };
        // B tile rows lie a panel row apart, and a pair block 16 panel rows.
        let (sb, bstep) = (NR * 4, TK * NR * 4);
        let _tiles = Tiles::configure();
        for ct in (c0..c1).step_by(2) {
            let pair = ct + 1 < c1;
            for rt in (r0 / T..r1.div_ceil(T)).step_by(2) {
                let a0 = ap[rt * nq * T * TK..].as_ptr();
                let a1 = ap[(rt + 1) * nq * T * TK..].as_ptr();
                let (i0, j0) = (rt * T, ct * T);
                let rows = (2 * T).min(r1 - i0);
                let cols = (if pair { 2 * T } else { T }).min(n - j0);
                // A block wholly inside C is stored there directly (row stride n); an edge
                // block goes through the scratch (row stride 32).
                let direct = rows == 2 * T && cols == 2 * T;
                let (dst, ld) = if direct {
                    // SAFETY: rows i0..i0 + 32 and columns j0..j0 + 32 lie inside C.
                    (unsafe { cp.0.add(i0 * n + j0) }, n)
                } else {
                    (scratch.as_mut_ptr(), 2 * T)
                };
                // SAFETY: AMX was granted (`available`, the caller's contract) and the tiles
                // are configured (`_tiles`); A tiles rt, rt + 1 hold nq blocks of 1 KiB each
                // (mt is even), B tiles ct (and ct + 1 when `pair`) lie in panels of kps pairs
                // (ct < ⌈n/16⌉ ≤ 3·panels); `dst` takes 32 rows of 32 (or 16) f32 at stride
                // `ld`: the scratch, or this task's block of C (rows r0..r1, tiles c0..c1).
                unsafe {
                    if pair {
                        kernel_2x2(
                            nq,
                            [a0, a1],
                            [btile(ct), btile(ct + 1)],
                            (sb, bstep),
                            (dst, ld),
                        );
                    } else {
                        kernel_2x1(nq, [a0, a1], btile(ct), (sb, bstep), (dst, ld));
                    }
                }
                if direct && bias.is_none() {
                    continue;
                }
                for r in 0..rows {
                    // SAFETY: row i0 + r < r1 ≤ m, columns j0..j0 + cols ≤ n: inside C, and in
                    // this task's rows and column tiles alone.
                    let row = unsafe { cp.0.add((i0 + r) * n + j0) };
                    match (direct, bias) {
                        // SAFETY: the kernel wrote this row of C just now.
                        (true, Some(b)) => unsafe {
                            let d = std::slice::from_raw_parts_mut(row, cols);
                            for (d, bv) in d.iter_mut().zip(&b[j0..j0 + cols]) {
                                *d += bv;
                            }
                        },
                        (true, None) => {}
                        (false, _) => {
                            let src = &scratch[r * 2 * T..r * 2 * T + cols];
                            for (j, &s) in src.iter().enumerate() {
                                let v = s + bias.map_or(0.0, |b| b[j0 + j]);
                                // SAFETY: as above; written, never read uninitialised.
                                unsafe { row.add(j).write(v) };
                            }
                        }
                    }
                }
            }
        }
    });
    A_TILES.with(|c| c.set(Some(keep)));
}

thread_local! {
    /// [`matmul`]'s packed A, kept between the products of a thread (taken out while one runs,
    /// so a product started inside another on the same thread packs into its own).
    static A_TILES: std::cell::Cell<Option<LineAligned>> = const { std::cell::Cell::new(None) };
}

/// The tile configuration of this thread for the duration of a task: 8 tiles of 16 rows of 64
/// bytes (palette 1); released when dropped.
pub(super) struct Tiles;

impl Tiles {
    pub(super) fn configure() -> Tiles {
        #[repr(C, align(64))]
        struct Cfg([u8; 64]);
        let mut cfg = Cfg([0; 64]);
        cfg.0[0] = 1;
        for t in 0..8 {
            cfg.0[16 + 2 * t] = 64;
            cfg.0[48 + t] = T as u8;
        }
        // SAFETY: only reached where AMX is available and granted (`matmul`'s caller checked
        // `available`); `cfg` is a valid 64-byte palette-1 configuration.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
        }
        Tiles
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured by `configure` on this thread.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Two row tiles × two column tiles over `nq` pair blocks: `s[32][32]` (row stride `ld` f32) =
/// A tiles `a[0]` (rows 0–15), `a[1]` (rows 16–31) · B tiles `b[0]` (columns 0–15), `b[1]`
/// (16–31). A tiles are 1 KiB blocks one after the other; a B tile's 16 rows of 64 bytes lie
/// `bs.0` bytes apart, and the next pair block's tile `bs.1` bytes further.
///
/// # Safety
/// Tiles configured as by [`Tiles::configure`]; `a[0]`, `a[1]` valid for `nq` consecutive 1 KiB
/// blocks; `b[0]`, `b[1]` for `nq` tiles laid out as `bs` says; `s.0` for 32 rows of 32 f32 at
/// a stride of `s.1 ≥ 32`.
pub(super) unsafe fn kernel_2x2(
    nq: usize,
    a: [*const u32; 2],
    b: [*const u32; 2],
    bs: (usize, usize),
    s: (*mut f32, usize),
) {
    let (s, ld) = s;
    // SAFETY: the caller guarantees the extents and the tile configuration.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a0} + {s64}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm5, [{a1} + {s64}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a0}, 1024",
            "add {a1}, 1024",
            "add {b0}, {bstep}",
            "add {b1}, {bstep}",
            "dec {q}",
            "jnz 2b",
            "tilestored [{s0} + {sc}*1], tmm0",
            "tilestored [{s1} + {sc}*1], tmm1",
            "tilestored [{s2} + {sc}*1], tmm2",
            "tilestored [{s3} + {sc}*1], tmm3",
            q = inout(reg) nq => _,
            a0 = inout(reg) a[0] => _,
            a1 = inout(reg) a[1] => _,
            b0 = inout(reg) b[0] => _,
            b1 = inout(reg) b[1] => _,
            sb = in(reg) bs.0,
            bstep = in(reg) bs.1,
            s64 = in(reg) 64usize,
            sc = in(reg) ld * 4,
            s0 = in(reg) s,
            s1 = in(reg) s.add(T),
            s2 = in(reg) s.add(T * ld),
            s3 = in(reg) s.add(T * ld + T),
            options(nostack),
        );
    }
}

/// [`kernel_2x2`] with one column tile (`s` columns 0–15).
///
/// # Safety
/// As for [`kernel_2x2`], with one B tile; `s.0` valid for 32 rows of 16 f32 at a stride of
/// `s.1`.
unsafe fn kernel_2x1(
    nq: usize,
    a: [*const u32; 2],
    b: *const u32,
    bs: (usize, usize),
    s: (*mut f32, usize),
) {
    let (s, ld) = s;
    // SAFETY: the caller guarantees the extents and the tile configuration.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm2",
            "2:",
            "tileloadd tmm4, [{a0} + {s64}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm5, [{a1} + {s64}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "add {a0}, 1024",
            "add {a1}, 1024",
            "add {b0}, {bstep}",
            "dec {q}",
            "jnz 2b",
            "tilestored [{s0} + {sc}*1], tmm0",
            "tilestored [{s2} + {sc}*1], tmm2",
            q = inout(reg) nq => _,
            a0 = inout(reg) a[0] => _,
            a1 = inout(reg) a[1] => _,
            b0 = inout(reg) b => _,
            sb = in(reg) bs.0,
            bstep = in(reg) bs.1,
            s64 = in(reg) 64usize,
            sc = in(reg) ld * 4,
            s0 = in(reg) s,
            s2 = in(reg) s.add(T * ld),
            options(nostack),
        );
    }
}
