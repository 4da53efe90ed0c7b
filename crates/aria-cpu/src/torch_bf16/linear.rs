use rayon::prelude::*;

use super::{block_tree, round, tails, BLOCK};
use crate::gemm::WData;

/// Weight rows (output columns) per task of [`linear`] (a multiple of every tile's `J`).
const NB: usize = 32;

/// Reorder the first `main` elements of every `k`-row into groups of `g` lanes (`g` a multiple
/// of [`LANES`] dividing 64): group `q` of block `c` (`64c + g·q + l`) goes to `[q][c][l]`, so
/// every lane's elements follow each other within a group.
fn by_group(v: &WData<'_>, rows: usize, k: usize, main: usize, g: usize) -> Vec<f32> {
    let nc = main / BLOCK;
    let groups = BLOCK / g;
    let mut out = vec![0f32; rows * main];
    if main == 0 {
        return out;
    }
    // Rows are independent: a pure reordering, split over the pool.
    out.par_chunks_exact_mut(main).enumerate().for_each_init(
        || vec![0f32; main],
        |src, (r, dst)| {
            v.read(r * k, src);
            for c in 0..nc {
                for q in 0..groups {
                    let s = &src[c * BLOCK + q * g..c * BLOCK + (q + 1) * g];
                    let o = (q * nc + c) * g;
                    dst[o..o + g].copy_from_slice(s);
                }
            }
        },
    );
    out
}

/// The main-loop sums of [`dot`] (64 partial sums through [`block_tree`]) for a tile of
/// `I` × `J` outputs, from rows in [`by_group`] order with `G` lanes per group (`nc` blocks
/// each). Every lane is its own left-to-right sum, so the group width changes only how many
/// lanes one instruction advances, never the result. With `FMA` the products are accumulated
/// by fused multiply-adds, as the reference does; the product of two bf16 values is exact in
/// f32, so without it the result is the same except for products in the subnormal range.
#[inline(always)]
fn tile_body<const FMA: bool, const G: usize, const I: usize, const J: usize>(
    xs: [&[f32]; I],
    ws: [&[f32]; J],
    nc: usize,
) -> [[f32; J]; I] {
    let mut out = [[[0f32; BLOCK]; J]; I];
    for q in 0..BLOCK / G {
        let span = q * nc * G..(q + 1) * nc * G;
        let xv: [&[[f32; G]]; I] =
            std::array::from_fn(|t| &bytemuck::cast_slice(&xs[t][span.clone()])[..nc]);
        let wv: [&[[f32; G]]; J] =
            std::array::from_fn(|t| &bytemuck::cast_slice(&ws[t][span.clone()])[..nc]);
        let mut acc = [[[0f32; G]; J]; I];
        for c in 0..nc {
            let xc: [[f32; G]; I] = std::array::from_fn(|t| xv[t][c]);
            let wc: [[f32; G]; J] = std::array::from_fn(|t| wv[t][c]);
            for (ai, xi) in acc.iter_mut().zip(&xc) {
                for (a, wj) in ai.iter_mut().zip(&wc) {
                    for l in 0..G {
                        a[l] = if FMA {
                            xi[l].mul_add(wj[l], a[l])
                        } else {
                            a[l] + xi[l] * wj[l]
                        };
                    }
                }
            }
        }
        for (oi, ai) in out.iter_mut().zip(&acc) {
            for (o, a) in oi.iter_mut().zip(ai) {
                o[q * G..(q + 1) * G].copy_from_slice(a);
            }
        }
    }
    let mut sums = [[0f32; J]; I];
    for (si, oi) in sums.iter_mut().zip(&out) {
        for (s, o) in si.iter_mut().zip(oi) {
            *s = block_tree(o);
        }
    }
    sums
}

/// A register tile of [`linear`] for one ISA path: group width, rows of x and rows of w.
trait Tile {
    const G: usize;
    const I: usize;
    const J: usize;
    /// The main-loop sums for `xs.len() == I` rows of x against `ws.len() == J` rows of w.
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]);
}

/// Portable: 8-lane groups, 2 × 4 outputs, multiply then add.
struct Portable;
impl Tile for Portable {
    const G: usize = 8;
    const I: usize = 2;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        let r = tile_body::<false, 8, 2, 4>([xs[0], xs[1]], [ws[0], ws[1], ws[2], ws[3]], nc);
        out.copy_from_slice(r.as_flattened());
    }
}

/// AVX2 + FMA: 8-lane groups (one register), 2 × 4 outputs.
#[cfg(target_arch = "x86_64")]
struct Avx2Tile;
#[cfg(target_arch = "x86_64")]
impl Tile for Avx2Tile {
    const G: usize = 8;
    const I: usize = 2;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        /// # Safety
        /// The CPU must support AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn body(xs: [&[f32]; 2], ws: [&[f32]; 4], nc: usize) -> [[f32; 4]; 2] {
            tile_body::<true, 8, 2, 4>(xs, ws, nc)
        }
        // SAFETY: `linear` selects this tile only on the AVX2 path, which `crate::current`
        // returns only on CPUs with AVX2 and FMA.
        let r = unsafe { body([xs[0], xs[1]], [ws[0], ws[1], ws[2], ws[3]], nc) };
        out.copy_from_slice(r.as_flattened());
    }
}

/// AVX-512F: 16-lane groups (one register), 4 × 4 outputs in the 32 registers.
#[cfg(target_arch = "x86_64")]
struct Avx512Tile;
#[cfg(target_arch = "x86_64")]
impl Tile for Avx512Tile {
    const G: usize = 16;
    const I: usize = 4;
    const J: usize = 4;
    fn run(xs: &[&[f32]], ws: &[&[f32]], nc: usize, out: &mut [f32]) {
        /// # Safety
        /// The CPU must support AVX-512F, AVX2 and FMA.
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn body(xs: [&[f32]; 4], ws: [&[f32]; 4], nc: usize) -> [[f32; 4]; 4] {
            tile_body::<true, 16, 4, 4>(xs, ws, nc)
        }
        // SAFETY: `linear` selects this tile only on the AVX-512 path, which `crate::current`
        // returns only on CPUs with AVX-512F, AVX2 and FMA.
        let r = unsafe {
            body(
                [xs[0], xs[1], xs[2], xs[3]],
                [ws[0], ws[1], ws[2], ws[3]],
                nc,
            )
        };
        out.copy_from_slice(r.as_flattened());
    }
}

/// `x · wᵀ (+ bias)` as PyTorch's bf16 `linear` computes it on the CPU without oneDNN: every
/// output is [`dot`](super::dot) of an input row and a weight row (plus the bias in f32), rounded
/// to bf16. `x` is `[m, k]` holding bf16 values, `w` `[n, k]` in any float type (bf16 for a
/// faithful replay), `bias` `[n]`; returns `[m, n]` f32 holding bf16 values. Runs on the rayon
/// pool it is called on, with the tile of the selected ISA path; every path gives the same bits.
pub fn linear(
    x: &WData<'_>,
    w: &WData<'_>,
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    match crate::current() {
        #[cfg(target_arch = "x86_64")]
        crate::Isa::Avx512 => linear_with::<Avx512Tile>(x, w, bias, m, k, n),
        #[cfg(target_arch = "x86_64")]
        crate::Isa::Avx2 => linear_with::<Avx2Tile>(x, w, bias, m, k, n),
        _ => linear_with::<Portable>(x, w, bias, m, k, n),
    }
}

fn linear_with<T: Tile>(
    xd: &WData<'_>,
    wd: &WData<'_>,
    bv: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let main = k & !(BLOCK - 1);
    let nc = main / BLOCK;
    let xp = by_group(xd, m, k, main, T::G);
    let wp = by_group(wd, n, k, main, T::G);
    // Whole rows for the tails, only when there are tails.
    let whole = |v: &WData<'_>, rows: usize| {
        let mut out = vec![0f32; rows * k];
        v.read(0, &mut out);
        out
    };
    let (xv, wv) = if main < k {
        (whole(xd, m), whole(wd, n))
    } else {
        (Vec::new(), Vec::new())
    };
    fn row(v: &[f32], i: usize, len: usize) -> &[f32] {
        &v[i * len..(i + 1) * len]
    }
    let zeros = vec![0f32; main];
    // Tasks own blocks of weight rows (output columns) and sweep every input row, so a block
    // of weights stays in cache while the inputs stream past it.
    let blocks: Vec<Vec<f32>> = (0..n.div_ceil(NB))
        .into_par_iter()
        .map(|jb| {
            let (jlo, jhi) = (jb * NB, (jb * NB + NB).min(n));
            let nb = jhi - jlo;
            let mut ob = vec![0f32; m * nb];
            let mut sums = vec![0f32; T::I * T::J];
            let mut xs: Vec<&[f32]> = vec![&zeros; T::I];
            let mut ws: Vec<&[f32]> = vec![&zeros; T::J];
            for i0 in (0..m).step_by(T::I) {
                let rows_i = T::I.min(m - i0);
                for (t, xr) in xs.iter_mut().enumerate() {
                    *xr = if t < rows_i {
                        row(&xp, i0 + t, main)
                    } else {
                        &zeros
                    };
                }
                for j0 in (jlo..jhi).step_by(T::J) {
                    let cols = T::J.min(jhi - j0);
                    for (t, wr) in ws.iter_mut().enumerate() {
                        *wr = if t < cols {
                            row(&wp, j0 + t, main)
                        } else {
                            &zeros
                        };
                    }
                    T::run(&xs, &ws, nc, &mut sums);
                    for t in 0..rows_i {
                        for u in 0..cols {
                            let (i, j) = (i0 + t, j0 + u);
                            let s = sums[t * T::J + u];
                            let d = if main < k {
                                tails(row(&xv, i, k), row(&wv, j, k), s)
                            } else {
                                // The empty tail register still adds its zero.
                                s + 0.0
                            };
                            ob[i * nb + (j - jlo)] = round(match bv {
                                Some(b) => b[j] + d,
                                None => d,
                            });
                        }
                    }
                }
            }
            ob
        })
        .collect();
    let mut out = vec![0f32; m * n];
    for (jb, ob) in blocks.iter().enumerate() {
        let jlo = jb * NB;
        let nb = ob.len() / m.max(1);
        for i in 0..m {
            out[i * n + jlo..i * n + jlo + nb].copy_from_slice(&ob[i * nb..(i + 1) * nb]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::Float;
    use crate::torch_bf16::dot;
    use crate::torch_bf16::test_values::{hostile, Rng};
    use half::bf16;

    /// The tiled kernel gives exactly [`dot`] for every output, on every ISA path, for every
    /// remainder of rows, columns and K.
    #[test]
    fn linear_is_dot_then_round() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for &(m, k, n) in &[
            (5, 768, 9),
            (1, 64, 1),
            (3, 200, 6),
            (4, 16, 4),
            (2, 7, 3),
            (0, 64, 2),
        ] {
            let x = hostile(&mut rng, m * k);
            let w = hostile(&mut rng, n * k);
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
            let xd = WData::from_bytes(Float::F32, bytemuck::cast_slice(&x));
            let wd = WData::from_bytes(Float::Bf16, bytemuck::cast_slice(&wb));
            for isa in crate::Isa::available() {
                let got = crate::with_isa(isa, || linear(&xd, &wd, Some(&bias), m, k, n));
                assert_eq!(got.len(), m * n);
                for i in 0..m {
                    for j in 0..n {
                        let want =
                            round(bias[j] + dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]));
                        assert_eq!(
                            got[i * n + j].to_bits(),
                            want.to_bits(),
                            "{isa:?} m{m} k{k} n{n} ({i},{j})"
                        );
                    }
                }
            }
        }
    }
}
