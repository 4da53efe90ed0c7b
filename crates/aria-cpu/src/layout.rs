//! Data-layout ops on slices: copies that rearrange elements without arithmetic (the CPU bodies
//! of `aria_core::ops::{unfold, fill_masked_rows}`), split over the rayon pool the call runs on.

use rayon::prelude::*;

/// Sliding windows of a token-major sequence `x [b, l, c]` for a "same" convolution:
/// `[b, l, k·c]`, row `t` holding `x[t − k/2] … x[t + k/2]` (window position major), zeros
/// outside `0..l`.
pub fn unfold(x: &[f32], [b, l, c]: [usize; 3], k: usize) -> Vec<f32> {
    let half = k / 2;
    let mut col = vec![0f32; b * l * k * c];
    if k * c == 0 {
        return col;
    }
    col.par_chunks_mut(k * c)
        .enumerate()
        .for_each(|(row_i, row)| {
            let (bi, t) = (row_i / l, row_i % l);
            for kk in 0..k {
                let src = t + kk;
                if src >= half && src - half < l {
                    let st = src - half;
                    row[kk * c..(kk + 1) * c].copy_from_slice(&x[(bi * l + st) * c..][..c]);
                }
            }
        });
    col
}

/// Every `d`-row of `x` whose `keep` entry is 0 replaced, in place, by `fill` (or zeros).
pub fn fill_masked_rows(x: &mut [f32], d: usize, keep: &[f32], fill: Option<&[f32]>) {
    if d == 0 {
        return;
    }
    x.par_chunks_mut(d)
        .zip(keep.par_iter())
        .for_each(|(row, &k)| {
            if k == 0.0 {
                match fill {
                    Some(f) => row.copy_from_slice(f),
                    None => row.fill(0.0),
                }
            }
        });
}
