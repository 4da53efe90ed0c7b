//! The two products of one attention head on the AMX tile unit: scores `S = Q·Kᵀ` and outputs
//! `O = P·V`, with bf16 inputs (rounded to nearest even as the weight products round them) and
//! f32 accumulation. Every output is one accumulation over its K pairs in order inside one tile
//! register, on one thread: the blocking and the thread count never change a bit.
//!
//! Operands are packed per head into tiles: A (rows of Q or P) as in `amx`, B
//! tile-major (a 1 KiB tile of 16 pair rows × 16 columns for each column tile and pair block,
//! one after the other), so a tile load reads 1 KiB in one run.

use super::aligned::LineAligned;
use super::amx::{kernel_2x2, pack_row_avx512, Tiles, T, TK};

/// Pairs for `k` values, padded to whole pair blocks.
fn padded_pairs(k: usize) -> usize {
    k.div_ceil(2).div_ceil(TK) * TK
}

/// Tiles of 16 rows or columns for `n`, rounded up to an even count (the kernel takes two).
fn even_tiles(n: usize) -> usize {
    n.div_ceil(2 * T) * 2
}

/// A head's packed operands and its score and output blocks, reused from head to head.
#[derive(Default)]
pub struct HeadBuffers {
    a: Option<LineAligned>,
    b: Option<LineAligned>,
    c: Vec<f32>,
}

thread_local! {
    /// [`with_thread_buffers`]' buffers, kept between the heads and the calls of a thread.
    static BUFFERS: std::cell::Cell<Option<HeadBuffers>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with this thread's head buffers, kept from call to call (so an attention reuses the
/// previous one's allocations instead of clearing fresh ones); a call nested inside `f` on the
/// same thread gets buffers of its own.
pub fn with_thread_buffers<R>(f: impl FnOnce(&mut HeadBuffers) -> R) -> R {
    let mut b = BUFFERS.with(|c| c.take()).unwrap_or_default();
    let r = f(&mut b);
    BUFFERS.with(|c| c.set(Some(b)));
    r
}

/// Resize `buf` (reusing it when large enough) to `len` words and hand it out.
fn words(buf: &mut Option<LineAligned>, len: usize) -> &mut [u32] {
    if buf.as_ref().is_some_and(|b| b.len() < len) {
        *buf = None;
    }
    &mut buf.get_or_insert_with(|| LineAligned::zeroed(len))[..len]
}

/// `m` rows of `k` f32 (`src[i·ld + kk]`) as A tiles of `kps` pairs: tile (t, q) holds rows
/// `16t..16t + 16`, pairs `16q..16q + 16`; rows past `m` (up to `mt` tiles) and pairs past the
/// data are zero.
fn pack_a(
    src: &[f32],
    ld: usize,
    (m, k): (usize, usize),
    (mt, kps): (usize, usize),
    out: &mut [u32],
) {
    let nq = kps / TK;
    for t in 0..mt {
        for r in 0..T {
            for q in 0..nq {
                let dst = &mut out[((t * nq + q) * T + r) * TK..][..TK];
                pack_pairs(src, ld, (m, k), (t * T + r, q), dst);
            }
        }
    }
}

/// Pair block `q` (16 pairs) of row `i` of `src` (`n` rows of `k` values at stride `ld`) into
/// `dst` (16 words); zeros for a row past `n` and pairs past `k`.
fn pack_pairs(
    src: &[f32],
    ld: usize,
    (n, k): (usize, usize),
    (i, q): (usize, usize),
    dst: &mut [u32],
) {
    if i >= n {
        dst.fill(0);
        return;
    }
    let row = &src[i * ld..i * ld + k];
    let part = &row[(2 * q * TK).min(k)..(2 * (q + 1) * TK).min(k)];
    // SAFETY: AVX-512F and AVX-512 BF16 are present wherever the tile unit is (the op checks
    // `bf16dot::native` with `amx::available`); `dst` holds 16 words and `part` at most 32
    // values.
    unsafe { pack_row_avx512(part, dst) };
}

/// B tiles whose column `j` is row `j` of `src` (`n` rows of `k` values at stride `ld`): the
/// 16 rows of a column tile are packed as A rows, then each 16 × 16 tile is transposed.
fn pack_b_rows(
    src: &[f32],
    ld: usize,
    (n, k): (usize, usize),
    (nt, kps): (usize, usize),
    out: &mut [u32],
) {
    let nq = kps / TK;
    let mut tile = [0u32; T * TK];
    for ct in 0..nt {
        for q in 0..nq {
            for (r, dst) in tile.chunks_exact_mut(TK).enumerate() {
                pack_pairs(src, ld, (n, k), (ct * T + r, q), dst);
            }
            let dst = &mut out[(ct * nq + q) * T * TK..][..T * TK];
            for (p, row) in dst.chunks_exact_mut(T).enumerate() {
                for (c, d) in row.iter_mut().enumerate() {
                    *d = tile[c * TK + p];
                }
            }
        }
    }
}

/// B tiles whose column `c` is column `c` of `src` (`k` rows of `n` values at stride `ld`):
/// pair row `p` of a tile holds rows `2p` and `2p + 1` of `src` side by side.
fn pack_b_cols(
    src: &[f32],
    ld: usize,
    (k, n): (usize, usize),
    (nt, kps): (usize, usize),
    out: &mut [u32],
) {
    let nq = kps / TK;
    for ct in 0..nt {
        let (c0, c1) = ((ct * T).min(n), (ct * T + T).min(n));
        for q in 0..nq {
            let dst = &mut out[(ct * nq + q) * T * TK..][..T * TK];
            for (p, row) in dst.chunks_exact_mut(T).enumerate() {
                let r = 2 * (q * TK + p);
                let lo = (r < k).then(|| &src[r * ld + c0..r * ld + c1]);
                let hi = (r + 1 < k).then(|| &src[(r + 1) * ld + c0..(r + 1) * ld + c1]);
                // SAFETY: as in `pack_a`; `row` holds 16 words and each source at most 16.
                unsafe { interleave_avx512(lo.unwrap_or(&[]), hi.unwrap_or(&[]), row) };
            }
        }
    }
}

/// `dst[c] = bf16(lo[c]) | bf16(hi[c]) << 16` for 16 columns (zero past each source).
///
/// # Safety
/// AVX-512F and AVX-512 BF16; `dst.len() ≥ 16`, `lo.len() ≤ 16`, `hi.len() ≤ 16`.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::incompatible_msrv)]
unsafe fn interleave_avx512(lo: &[f32], hi: &[f32], dst: &mut [u32]) {
    use std::arch::x86_64::*;
    debug_assert!(dst.len() >= 16 && lo.len() <= 16 && hi.len() <= 16);
    let mask = |n: usize| ((1u32 << n) - 1) as u16;
    // SAFETY: the masked loads read only `lo[..]` and `hi[..]`; the store writes `dst[..16]`.
    unsafe {
        let l = _mm512_maskz_loadu_ps(mask(lo.len()), lo.as_ptr());
        let h = _mm512_maskz_loadu_ps(mask(hi.len()), hi.as_ptr());
        let lw = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
            _mm512_cvtneps_pbh(l),
        ));
        let hw = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
            _mm512_cvtneps_pbh(h),
        ));
        let v = _mm512_or_si512(lw, _mm512_slli_epi32::<16>(hw));
        _mm512_storeu_si512(dst.as_mut_ptr() as *mut __m512i, v);
    }
}

/// `C = A·B` over `mt × nt` tiles (both even) of `nq` pair blocks, into `c` (row stride `ldc`,
/// `nt·16` columns and `mt·16` rows written).
///
/// # Safety
/// The tiles are configured ([`Tiles::configure`] on this thread); `a` holds `mt·nq` A tiles
/// and `b` `nt·nq` B tiles (tile-major); `c` at least `mt·16·ldc` values with `ldc ≥ nt·16`.
unsafe fn product(
    a: &[u32],
    b: &[u32],
    (mt, nt, nq): (usize, usize, usize),
    c: &mut [f32],
    ldc: usize,
) {
    debug_assert!(mt % 2 == 0 && nt % 2 == 0 && ldc >= nt * T && c.len() >= mt * T * ldc);
    debug_assert!(a.len() >= mt * nq * T * TK && b.len() >= nt * nq * T * TK);
    let tile = |base: &[u32], t: usize| base[t * nq * T * TK..].as_ptr();
    for ct in (0..nt).step_by(2) {
        for rt in (0..mt).step_by(2) {
            let dst = c[rt * T * ldc + ct * T..].as_mut_ptr();
            // SAFETY: the caller's extents: A tiles rt, rt + 1 and B tiles ct, ct + 1 hold nq
            // blocks each; the 32 × 32 block of C at (16rt, 16ct) lies inside `c`.
            unsafe {
                kernel_2x2(
                    nq,
                    [tile(a, rt), tile(a, rt + 1)],
                    [tile(b, ct), tile(b, ct + 1)],
                    (4 * T, 4 * T * TK),
                    (dst, ldc),
                )
            };
        }
    }
}

/// One head: `q [m, d]`, `k [nk, d]`, `v [nk, dv]` (row-major), `probs(i, row)` turning the
/// scores of query `i` (`nk` values) into probabilities in place; the `[m, dv]` output into
/// `out`. The tiles are configured for the duration.
///
/// The caller checked `amx::available` and [`super::bf16dot::native`].
#[allow(clippy::too_many_arguments)]
pub fn head(
    buf: &mut HeadBuffers,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (m, nk, d, dv): (usize, usize, usize, usize),
    probs: impl Fn(usize, &mut [f32]),
    out: &mut [f32],
) {
    let _tiles = Tiles::configure();
    let (mt, kt, vt) = (even_tiles(m), even_tiles(nk), even_tiles(dv));
    // Scores: A = Q (d values a row), B = K rows as columns.
    let kps = padded_pairs(d);
    let ldc = kt * T;
    if buf.c.len() < mt * T * ldc.max(vt * T) {
        buf.c.resize(mt * T * ldc.max(vt * T), 0.0);
    }
    let a = words(&mut buf.a, mt * kps * T);
    pack_a(q, d, (m, d), (mt, kps), a);
    let b = words(&mut buf.b, kt * kps * T);
    pack_b_rows(k, d, (nk, d), (kt, kps), b);
    // SAFETY: tiles configured above; A holds mt·(kps/16) tiles, B kt·(kps/16); `c` holds
    // mt·16 rows of ldc = kt·16.
    unsafe { product(a, b, (mt, kt, kps / TK), &mut buf.c, ldc) };
    for i in 0..m {
        probs(i, &mut buf.c[i * ldc..i * ldc + nk]);
    }
    // Outputs: A = P (nk values a row), B = V columns.
    let kps = padded_pairs(nk);
    let a = words(&mut buf.a, mt * kps * T);
    pack_a(&buf.c, ldc, (m, nk), (mt, kps), a);
    let b = words(&mut buf.b, vt * kps * T);
    pack_b_cols(v, dv, (nk, dv), (vt, kps), b);
    let ldo = vt * T;
    // SAFETY: as above, with vt column tiles of kps/16 blocks; `c` holds mt·16 rows of ldo.
    unsafe { product(a, b, (mt, vt, kps / TK), &mut buf.c, ldo) };
    for (i, o) in out.chunks_exact_mut(dv).take(m).enumerate() {
        o.copy_from_slice(&buf.c[i * ldo..i * ldo + dv]);
    }
}
