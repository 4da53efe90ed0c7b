//! The scalar reference micro-kernels. Every SIMD path computes the same values with the same
//! operations in the same order and is tested bit for bit against these.

use super::IntPanel;

/// Panel width (columns) of the int8 tile on this path.
pub(crate) const INR: usize = 16;
/// Most rows of one int8 tile call.
pub(crate) const IMR: usize = 4;

/// Whether an int8 tile call stays inside its slices.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn int_extents_ok(
    mr_max: usize,
    mr: usize,
    a: &[u8],
    lda: usize,
    w: &IntPanel<'_>,
    c_len: usize,
    ldc: usize,
    nc: usize,
) -> bool {
    let kb = w.nblk * 32;
    (1..=mr_max).contains(&mr)
        && nc <= w.nr
        && w.q.len() >= w.nblk * 32 * w.nr
        && w.d.len() >= w.nblk * w.nr
        && w.corr.len() >= w.nblk * w.nr
        && (kb == 0 || a.len() >= (mr - 1) * lda + kb)
        && (nc == 0 || c_len >= (mr - 1) * ldc + nc)
}

/// int8 micro-kernel over `w.nblk` blocks of 32: for each block `b`, the exact int32 sum
/// `s = Σ_{k<32} a[r][32b + k] · w[b][k][j] − corr[b][j]` (activations as stored: signed for
/// this path, `corr` zero), then `C[r][j] ← fma(s as f32, d[b][j], C[r][j])`. With `raw`, the
/// sums are written to `raw[r·ldr + b·nr + j]` instead and C is left alone.
///
/// # Panics
/// If a slice is shorter than the extents the call touches.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_i8(
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
        int_extents_ok(IMR, mr, a, lda, w, c.len(), ldc, nc),
        "tile_i8 extents"
    );
    let nr = w.nr;
    let mut raw = raw;
    for b in 0..w.nblk {
        for r in 0..mr {
            let ar = &a[r * lda + 32 * b..r * lda + 32 * b + 32];
            for j in 0..nc {
                let mut s = -w.corr[b * nr + j];
                for (k4, a4) in ar.chunks_exact(4).enumerate() {
                    let wq = &w.q[((b * 8 + k4) * nr + j) * 4..][..4];
                    for t in 0..4 {
                        s += (a4[t] as i8 as i32) * (wq[t] as i8 as i32);
                    }
                }
                match raw.as_mut() {
                    Some((out, ldr)) => out[r * *ldr + b * nr + j] = s,
                    None => {
                        let cv = &mut c[r * ldc + j];
                        *cv = (s as f32).mul_add(w.d[b * nr + j], *cv);
                    }
                }
            }
        }
    }
}
