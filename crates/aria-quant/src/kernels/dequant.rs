//! Weight-only product: f32 activations × packed weights, dequantized panel by panel.

use rayon::prelude::*;

use super::{col_block, f32_panel_width, f32_tile_rows, row_block, tile_f32, Isa};
use crate::matrix::WView;

/// K rows of one slab (a multiple of every block size).
pub(crate) const KC: usize = 256;
/// Weight rows dequantized and transposed together.
const TB: usize = 16;

/// `out[M, N] = x[M, K] · Wᵀ` (`x` row-major with `lda = K`, `out` row-major), on the current
/// rayon pool; `isa` must come from [`super::checked`].
pub(crate) fn gemm_dequant(isa: Isa, w: &WView<'_>, x: &[f32], m: usize, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let out = &mut out[..m * n];
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let nr = f32_panel_width(isa);
    let mb = row_block(m);
    let mt = m.div_ceil(mb);
    let nb = col_block(n, mt, nr);
    let nt = n.div_ceil(nb);
    let blocks: Vec<(usize, usize, Vec<f32>)> = (0..mt * nt)
        .into_par_iter()
        .map(|t| {
            let (mi, ni) = (t / nt, t % nt);
            let (m0, n0) = (mi * mb, ni * nb);
            let (mbl, nbl) = (mb.min(m - m0), nb.min(n - n0));
            let mut cl = vec![0f32; mbl * nbl];
            task(isa, w, &x[m0 * k..], mbl, n0, nbl, &mut cl);
            (m0, n0, cl)
        })
        .collect();
    for (m0, n0, cl) in blocks {
        let nbl = nb.min(n - n0);
        for (r, row) in cl.chunks_exact(nbl).enumerate() {
            out[(m0 + r) * n + n0..(m0 + r) * n + n0 + nbl].copy_from_slice(row);
        }
    }
}

/// One output block `c[mb, nb]` (row-major, `ldc = nb`) for weight rows `n0..n0 + nb`.
fn task(isa: Isa, w: &WView<'_>, x: &[f32], mb: usize, n0: usize, nb: usize, c: &mut [f32]) {
    let k = w.cols;
    let nr = f32_panel_width(isa);
    let mr_max = f32_tile_rows(isa);
    let np = nb.div_ceil(nr);
    let mut panels = vec![0f32; np * KC * nr];
    let mut tmp = vec![0f32; TB * KC];
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        for p in 0..np {
            let j0 = p * nr;
            let nc = nr.min(nb - j0);
            let panel = &mut panels[p * KC * nr..p * KC * nr + kc * nr];
            dequant_panel(w, n0 + j0, nc, k0, kc, nr, panel, &mut tmp);
        }
        let mut i0 = 0;
        while i0 < mb {
            let mr = mr_max.min(mb - i0);
            let a = &x[i0 * k + k0..];
            for p in 0..np {
                let j0 = p * nr;
                let nc = nr.min(nb - j0);
                let panel = &panels[p * KC * nr..p * KC * nr + kc * nr];
                tile_f32(isa, mr, kc, a, k, panel, &mut c[i0 * nb + j0..], nb, nc);
            }
            i0 += mr;
        }
        k0 += kc;
    }
}

/// Dequantize `W[j0..j0 + nc][k0..k0 + kc]` into `out[kk·nr + jj]` (a panel of `nr` columns,
/// columns `nc..nr` zero).
#[allow(clippy::too_many_arguments)]
pub(crate) fn dequant_panel(
    w: &WView<'_>,
    j0: usize,
    nc: usize,
    k0: usize,
    kc: usize,
    nr: usize,
    out: &mut [f32],
    tmp: &mut [f32],
) {
    if nc < nr {
        out.fill(0.0);
    }
    let mut g0 = 0;
    while g0 < nc {
        let g = TB.min(nc - g0);
        for r in 0..g {
            w.format
                .dequantize_cols(w.row(j0 + g0 + r), k0, &mut tmp[r * kc..(r + 1) * kc]);
        }
        transpose_rows(tmp, kc, kc, g, nr, &mut out[g0..]);
        g0 += g;
    }
}

/// `out[kk·nr + jj] = src[jj·ld + kk]` for `jj < nc ≤ TB`, `kk < kc`, through TB × TB blocks
/// (contiguous reads and writes the compiler keeps in registers).
fn transpose_rows(src: &[f32], ld: usize, kc: usize, nc: usize, nr: usize, out: &mut [f32]) {
    if nc == TB {
        let rows: [&[f32]; TB] = std::array::from_fn(|r| &src[r * ld..r * ld + kc]);
        let mut kk = 0;
        while kk + TB <= kc {
            let mut blk = [[0f32; TB]; TB];
            for (b, row) in blk.iter_mut().zip(&rows) {
                b.copy_from_slice(&row[kk..kk + TB]);
            }
            for c in 0..TB {
                let o = &mut out[(kk + c) * nr..(kk + c) * nr + TB];
                for (ov, b) in o.iter_mut().zip(&blk) {
                    *ov = b[c];
                }
            }
            kk += TB;
        }
        for kk in kk..kc {
            for (r, row) in rows.iter().enumerate() {
                out[kk * nr + r] = row[kk];
            }
        }
    } else {
        for jj in 0..nc {
            for (kk, v) in src[jj * ld..jj * ld + kc].iter().enumerate() {
                out[kk * nr + jj] = *v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked transpose puts every element where the element-by-element one does.
    #[test]
    fn transpose_matches_elementwise() {
        for (nc, kc, nr) in [
            (TB, TB, 16),
            (TB, 37, 32),
            (5, 256, 16),
            (TB, 256, 32),
            (1, 3, 16),
        ] {
            let src: Vec<f32> = (0..nc * kc).map(|i| i as f32).collect();
            let mut want = vec![-1f32; kc * nr];
            for jj in 0..nc {
                for kk in 0..kc {
                    want[kk * nr + jj] = src[jj * kc + kk];
                }
            }
            let mut got = vec![-1f32; kc * nr];
            transpose_rows(&src, kc, kc, nc, nr, &mut got);
            assert_eq!(got, want, "nc {nc} kc {kc} nr {nr}");
        }
    }
}
