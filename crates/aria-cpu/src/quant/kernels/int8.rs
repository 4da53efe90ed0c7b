//! W8A8: per-token int8 activations × `q8_0` weights with exact int32 block sums.

use crate::aligned::LineAligned;
use rayon::prelude::*;

use super::{col_block, row_block, tile_i8, IntIsa, IntPanel, TileScope};
use crate::quant::blocks::BlockQ8_0;
use crate::quant::WView;
use aria_tensor::format::WeightFormat;

/// Blocks of 32 per K slab.
const SLAB_BLOCKS: usize = 8;

/// Activations quantized per token (row): `x[r][k] ≈ scale[r] · q[r][k]`, symmetric,
/// `q ∈ [−127, 127]`, rows zero-padded to a multiple of 32.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedActs {
    /// Rows.
    pub m: usize,
    /// Columns before padding.
    pub k: usize,
    /// Row stride (`k` rounded up to 32).
    pub kp: usize,
    /// Whether `q` holds `q + 128` as unsigned bytes (the `vpdpbusd` paths) rather than the
    /// signed bytes.
    pub offset: bool,
    /// The quantized rows, `m × kp` bytes.
    pub q: Vec<u8>,
    /// Per-row scales (`max |x| / 127`; NaN for a row with a non-finite value, so that the
    /// row's outputs are NaN as in f32).
    pub scale: Vec<f32>,
}

/// Quantize `x [m, k]` per row: `s = max|x| / 127`, `q = round_ties_even(x · (127 / max|x|))`
/// clamped to ±127 (a zero row has `s = 0`, `q = 0`). With `offset`, bytes hold `q + 128`.
/// Runs on the current rayon pool, on the calling thread's f32 path (AVX-512F, AVX2 or
/// portable: the same bytes on each); every int8 path uses these same bytes.
pub fn quantize_activations(x: &[f32], m: usize, k: usize, offset: bool) -> QuantizedActs {
    let kp = k.div_ceil(32) * 32;
    let mut q = vec![if offset { 128u8 } else { 0 }; m * kp];
    let mut scale = vec![0f32; m];
    let isa = crate::current();
    if kp > 0 {
        q.par_chunks_mut(kp)
            .zip(scale.par_iter_mut())
            .enumerate()
            .for_each(|(r, (qr, s))| {
                let xr = &x[r * k..(r + 1) * k];
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `current` only yields AVX-512 where AVX-512F was detected; `qr`
                    // holds kp ≥ k bytes.
                    crate::Isa::Avx512 => unsafe { super::avx512::quantize_row(xr, offset, qr, s) },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `current` only yields AVX2 where AVX2 was detected.
                    crate::Isa::Avx2 => unsafe { quantize_row_avx2(xr, offset, qr, s) },
                    _ => quantize_row(xr, offset, qr, s),
                }
            });
    }
    QuantizedActs {
        m,
        k,
        kp,
        offset,
        q,
        scale,
    }
}

/// One row of [`quantize_activations`]: its scale into `s`, its bytes into `qr`.
#[inline(always)]
fn quantize_row(xr: &[f32], offset: bool, qr: &mut [u8], s: &mut f32) {
    if xr.iter().any(|v| !v.is_finite()) {
        *s = f32::NAN;
        return;
    }
    let amax = xr.iter().fold(0f32, |a, v| a.max(v.abs()));
    if amax == 0.0 {
        return;
    }
    *s = amax / 127.0;
    let inv = 127.0 / amax;
    let off = if offset { 128 } else { 0 };
    for (o, v) in qr.iter_mut().zip(xr) {
        let qi = ((v * inv).round_ties_even() as i32).clamp(-127, 127);
        *o = (qi + off) as u8;
    }
}

/// [`quantize_row`] compiled with AVX2 (the rounding becomes one instruction; the same bytes:
/// every step is exact or correctly rounded).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(xr: &[f32], offset: bool, qr: &mut [u8], s: &mut f32) {
    quantize_row(xr, offset, qr, s)
}

/// Repack weight rows `j0..j0 + nc` (of a `q8_0` matrix), blocks `b0..b0 + nblk`, into an
/// [`IntPanel`] of width `nr` (columns past `nc` zero); with `gathers` (AVX-512F and VNNI
/// present, `nr` = 32) 16 columns at a time through [`super::avx512::repack16`].
#[allow(clippy::too_many_arguments)]
fn repack(
    w: &WView<'_>,
    j0: usize,
    nc: usize,
    b0: usize,
    nblk: usize,
    nr: usize,
    offset: bool,
    gathers: bool,
    q: &mut [u8],
    d: &mut [f32],
    corr: &mut [i32],
) {
    if nc < nr {
        q.fill(0);
        d.fill(0.0);
        corr.fill(0);
    }
    // The panel as 4-byte groups: group `(bb·8 + k4)·nr + j` is bytes 4k4..4k4 + 4 of column
    // j's block bb (`q` is a multiple of 4 bytes long; groups are copied as they are).
    // Columns done by the gather repack (x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut j_start = 0;
    #[cfg(not(target_arch = "x86_64"))]
    let _ = gathers;
    #[cfg(target_arch = "x86_64")]
    if nr == super::avx512::INR
        && gathers
        && 16 * w.row_bytes < (1 << 31)
        && q.len() >= nblk * 32 * nr
        && d.len() >= nblk * nr
        && corr.len() >= nblk * nr
    {
        // Whole groups of 16 rows inside the weight whose blocks reach b0 + nblk (anything
        // else goes through the portable loop below).
        while j_start + 16 <= nc
            && w.bytes.len() >= (j0 + j_start + 16) * w.row_bytes
            && w.row_bytes >= 34 * (b0 + nblk)
        {
            let row = w.row(j0 + j_start);
            // SAFETY: `gathers` is only set where AVX-512F and AVX-512 VNNI were detected; the
            // 16 rows from `row` lie inside the weight and the panel holds nblk blocks of width
            // INR (both checked above).
            unsafe {
                super::avx512::repack16(
                    row.as_ptr(),
                    w.row_bytes,
                    b0,
                    nblk,
                    j_start,
                    offset,
                    q,
                    d,
                    corr,
                )
            };
            j_start += 16;
        }
    }
    for j in j_start..nc {
        let blocks: &[BlockQ8_0] = bytemuck::cast_slice(w.row(j0 + j));
        for (bb, blk) in blocks[b0..b0 + nblk].iter().enumerate() {
            d[bb * nr + j] = blk.scale();
            corr[bb * nr + j] = if offset {
                128 * blk.qs.iter().map(|&v| v as i32).sum::<i32>()
            } else {
                0
            };
            for (k4, g) in blk.qs.chunks_exact(4).enumerate() {
                let o = ((bb * 8 + k4) * nr + j) * 4;
                q[o..o + 4].copy_from_slice(bytemuck::cast_slice(g));
            }
        }
    }
}

/// Where the raw block sums of [`w8a8_block_sums`] go: `[m][n][blocks]`.
struct RawOut<'a> {
    sums: &'a mut [i32],
    n: usize,
    nblocks: usize,
}

/// One output block for rows `m0..m0 + mb` and weight rows `n0..n0 + nb`: the f32
/// accumulators `c[mb, nb]` (before the row scale), or with `raw` the block sums.
#[allow(clippy::too_many_arguments)]
fn task(
    isa: IntIsa,
    w: &WView<'_>,
    acts: &QuantizedActs,
    m0: usize,
    mb: usize,
    n0: usize,
    nb: usize,
    c: &mut [f32],
    mut raw: Option<&mut RawOut<'_>>,
) {
    let nr = isa.panel_width();
    let mr_max = isa.tile_rows();
    let np = nb.div_ceil(nr);
    let nblocks = w.cols.div_ceil(32);
    let kp = acts.kp;
    // Panels start cache lines (a tile row of the AMX path is then one line).
    let mut qbuf = LineAligned::zeroed(np * SLAB_BLOCKS * 8 * nr);
    let q: &mut [u8] = bytemuck::cast_slice_mut(&mut qbuf[..]);
    let mut d = vec![0f32; np * SLAB_BLOCKS * nr];
    let mut corr = vec![0i32; np * SLAB_BLOCKS * nr];
    let mut rbuf = if raw.is_some() {
        vec![0i32; mr_max * SLAB_BLOCKS * nr]
    } else {
        Vec::new()
    };
    let _scope = TileScope::enter(isa);
    // The gather repack needs AVX-512 VNNI (every AMX CPU has it; checked all the same).
    let gathers =
        matches!(isa, IntIsa::Amx | IntIsa::Avx512Vnni) && IntIsa::Avx512Vnni.is_available();
    // The AMX path reads whole tiles of 32 rows: the slab's rows are copied to lines of their
    // own (zero rows up to a multiple of 32).
    let tiles = isa == IntIsa::Amx;
    let slab = SLAB_BLOCKS * 32;
    let mut abuf = LineAligned::zeroed(if tiles {
        mb.div_ceil(32) * 32 * slab / 4
    } else {
        0
    });
    let mut b0 = 0;
    while b0 < nblocks {
        let nblk = SLAB_BLOCKS.min(nblocks - b0);
        let (qs, ds) = (SLAB_BLOCKS * 32 * nr, SLAB_BLOCKS * nr);
        for p in 0..np {
            let nc = nr.min(nb - p * nr);
            repack(
                w,
                n0 + p * nr,
                nc,
                b0,
                nblk,
                nr,
                acts.offset,
                gathers,
                &mut q[p * qs..p * qs + nblk * 32 * nr],
                &mut d[p * ds..p * ds + nblk * nr],
                &mut corr[p * ds..p * ds + nblk * nr],
            );
        }
        if tiles {
            let ab: &mut [u8] = bytemuck::cast_slice_mut(&mut abuf[..]);
            for r in 0..mb {
                let src = &acts.q[(m0 + r) * kp + 32 * b0..][..32 * nblk];
                ab[r * slab..r * slab + 32 * nblk].copy_from_slice(src);
            }
        }
        let (abytes, lda): (&[u8], usize) = if tiles {
            (bytemuck::cast_slice(&abuf[..]), slab)
        } else {
            (&acts.q[m0 * kp + 32 * b0..], kp)
        };
        let mut i0 = 0;
        while i0 < mb {
            let mr = mr_max.min(mb - i0);
            let a = &abytes[i0 * lda..];
            for p in 0..np {
                let nc = nr.min(nb - p * nr);
                let panel = IntPanel {
                    q: &q[p * qs..p * qs + nblk * 32 * nr],
                    d: &d[p * ds..p * ds + nblk * nr],
                    corr: &corr[p * ds..p * ds + nblk * nr],
                    nblk,
                    nr,
                };
                let ct = &mut c[i0 * nb + p * nr..];
                match raw.as_deref_mut() {
                    None => tile_i8(isa, mr, a, lda, &panel, ct, nb, nc, None),
                    Some(ro) => {
                        let ldr = nblk * nr;
                        tile_i8(isa, mr, a, lda, &panel, ct, nb, nc, Some((&mut rbuf, ldr)));
                        for r in 0..mr {
                            for bb in 0..nblk {
                                for j in 0..nc {
                                    let (row, col) = (m0 + i0 + r, n0 + p * nr + j);
                                    ro.sums[(row * ro.n + col) * ro.nblocks + b0 + bb] =
                                        rbuf[r * ldr + bb * nr + j];
                                }
                            }
                        }
                    }
                }
            }
            i0 += mr;
        }
        b0 += nblk;
    }
}

/// `out[M, N] = (x · Wᵀ)` in W8A8 for quantized activations `acts` and a `q8_0` weight
/// (`acts.offset` must match `isa`), on the current rayon pool.
pub(crate) fn gemm_w8a8(isa: IntIsa, w: &WView<'_>, acts: &QuantizedActs, out: &mut [f32]) {
    debug_assert_eq!(w.format, WeightFormat::Q8_0);
    debug_assert_eq!(acts.offset, isa.offset_acts());
    let (m, n) = (acts.m, w.rows);
    let out = &mut out[..m * n];
    if m == 0 || n == 0 {
        return;
    }
    let mb = row_block(m);
    let mt = m.div_ceil(mb);
    let nb = col_block(n, mt, isa.panel_width());
    let nt = n.div_ceil(nb);
    let blocks: Vec<(usize, usize, Vec<f32>)> = (0..mt * nt)
        .into_par_iter()
        .map(|t| {
            let (mi, ni) = (t / nt, t % nt);
            let (m0, n0) = (mi * mb, ni * nb);
            let (mbl, nbl) = (mb.min(m - m0), nb.min(n - n0));
            let mut cl = vec![0f32; mbl * nbl];
            task(isa, w, acts, m0, mbl, n0, nbl, &mut cl, None);
            (m0, n0, cl)
        })
        .collect();
    for (m0, n0, cl) in blocks {
        let nbl = nb.min(n - n0);
        for (r, row) in cl.chunks_exact(nbl).enumerate() {
            let s = acts.scale[m0 + r];
            let o = &mut out[(m0 + r) * n + n0..(m0 + r) * n + n0 + nbl];
            for (ov, v) in o.iter_mut().zip(row) {
                *ov = v * s;
            }
        }
    }
}

/// The exact int32 block sums `Σ_{k ∈ block b} q_x[r][k] · q_w[j][k]` as `[m][n][blocks]`,
/// computed by the int8 tile of `isa` (single-threaded; for testing the paths against each
/// other).
pub(crate) fn w8a8_block_sums(isa: IntIsa, w: &WView<'_>, acts: &QuantizedActs) -> Vec<i32> {
    let (m, n) = (acts.m, w.rows);
    let nblocks = w.cols.div_ceil(32);
    let mut sums = vec![0i32; m * n * nblocks];
    if m == 0 || n == 0 || nblocks == 0 {
        return sums;
    }
    let mut c = vec![0f32; m * n];
    let mut ro = RawOut {
        sums: &mut sums,
        n,
        nblocks,
    };
    task(isa, w, acts, 0, m, 0, n, &mut c, Some(&mut ro));
    sums
}
