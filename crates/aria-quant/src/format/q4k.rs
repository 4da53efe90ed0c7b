//! `q4_k`: a k-quant 4-bit format. Super-blocks of 256 weights in 8 sub-blocks of 32; each
//! sub-block has a 6-bit scale `sc_j` and a 6-bit min `m_j`, quantized under the super-block's
//! f16 `d` and `dmin` (4.5 bits per weight). The byte layout is the one of ggml's `Q4_K`.

use super::{f16_at_least, round_clamp, round_clamp_f32, BlockFormat, BlockQ4K, Format};

/// The `q4_k` layout.
pub(crate) struct Q4K;

/// Candidate grids tried per sub-block by [`fit_sub`]: `15 + 0.08·step` levels over the
/// min-max range for `step ∈ [−SEARCH, SEARCH]`.
const SEARCH: i32 = 12;
/// Number of candidate grids.
const GRIDS: usize = 2 * SEARCH as usize + 1;

/// Fit `x ≈ s·q − m` (`q ∈ [0, 15]`, `s ≥ 0`, `m ≥ 0` so that 0 is inside the range) by
/// trying grids around the min-max one and refitting `s` and `m` by least squares on each
/// grid's assignment; the pair with the smallest squared error wins.
///
/// The candidates are evaluated side by side (the inner loops run across candidates, which
/// vectorizes), but every candidate's sums are accumulated in element order exactly as one
/// candidate at a time would, so the result is the same bit for bit.
#[inline(always)]
fn fit_sub(x: &[f32; 32]) -> (f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    if hi <= lo {
        return (0.0, -lo);
    }
    let n = x.len() as f32;
    let mut sx = 0f32;
    for &v in x {
        sx += v;
    }
    // Least-squares statistics of each grid's assignment.
    let mut is = [0f32; GRIDS];
    for (c, i) in is.iter_mut().enumerate() {
        *i = (15.0 + 0.08 * (c as i32 - SEARCH) as f32) / (hi - lo);
    }
    let (mut sq, mut sqq, mut sqx) = ([0f32; GRIDS], [0f32; GRIDS], [0f32; GRIDS]);
    for &v in x {
        for c in 0..GRIDS {
            let q = round_clamp_f32((v - lo) * is[c], 0.0, 15.0);
            sq[c] += q;
            sqq[c] += q * q;
            sqx[c] += q * v;
        }
    }
    // Candidate 0 is the min-max grid; 1 + c the refit of grid c (when it is valid).
    let mut cs = [0f32; GRIDS + 1];
    let mut cm = [0f32; GRIDS + 1];
    let mut valid = [false; GRIDS + 1];
    (cs[0], cm[0], valid[0]) = ((hi - lo) / 15.0, -lo, true);
    for c in 0..GRIDS {
        let (sq, sqq, sqx) = (sq[c], sqq[c], sqx[c]);
        let det = n * sqq - sq * sq;
        if det <= 0.0 {
            continue;
        }
        let mut s = (n * sqx - sq * sx) / det;
        let mut b = (sqq * sx - sq * sqx) / det;
        if b > 0.0 {
            b = 0.0;
            s = sqx / sqq;
        }
        if s <= 0.0 {
            continue;
        }
        (cs[c + 1], cm[c + 1], valid[c + 1]) = (s, -b, true);
    }
    // Squared error of every candidate.
    let mut ci = [0f32; GRIDS + 1];
    for c in 0..=GRIDS {
        ci[c] = if cs[c] > 0.0 { 1.0 / cs[c] } else { 0.0 };
    }
    let mut err = [0f32; GRIDS + 1];
    for &v in x {
        for c in 0..=GRIDS {
            let q = round_clamp_f32((v + cm[c]) * ci[c], 0.0, 15.0);
            let e = cs[c] * q - cm[c] - v;
            err[c] += e * e;
        }
    }
    let mut best = (cs[0], cm[0]);
    let mut best_err = err[0];
    for c in 1..=GRIDS {
        if valid[c] && err[c] < best_err {
            best = (cs[c], cm[c]);
            best_err = err[c];
        }
    }
    best
}

impl BlockFormat for Q4K {
    type Block = BlockQ4K;
    const FORMAT: Format = Format::Q4K;
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = std::mem::size_of::<BlockQ4K>();
    const VERSION: u32 = 1;

    #[inline(always)]
    fn quantize(x: &[f32], out: &mut BlockQ4K) {
        let mut s = [0f32; 8];
        let mut m = [0f32; 8];
        for (j, sub) in x.chunks_exact(32).take(8).enumerate() {
            let sub: &[f32; 32] = sub.try_into().expect("chunks_exact(32)");
            (s[j], m[j]) = fit_sub(sub);
        }
        let smax = s.iter().fold(0f32, |a, &v| a.max(v));
        let mmax = m.iter().fold(0f32, |a, &v| a.max(v));
        let d = f16_at_least(smax / 63.0);
        let dmin = f16_at_least(mmax / 63.0);
        let (df, dminf) = (d.to_f32(), dmin.to_f32());
        let mut sc = [0u8; 8];
        let mut mq = [0u8; 8];
        for j in 0..8 {
            sc[j] = if df > 0.0 {
                round_clamp(s[j] / df, 0, 63) as u8
            } else {
                0
            };
            mq[j] = if dminf > 0.0 {
                round_clamp(m[j] / dminf, 0, 63) as u8
            } else {
                0
            };
        }
        out.d = d.to_le_bytes();
        out.dmin = dmin.to_le_bytes();
        out.set_scale_min(&sc, &mq);
        let mut q = [0u8; 256];
        for j in 0..8 {
            let d1 = df * sc[j] as f32;
            let m1 = dminf * mq[j] as f32;
            let id = if d1 > 0.0 { 1.0 / d1 } else { 0.0 };
            for l in 0..32 {
                q[32 * j + l] = round_clamp((x[32 * j + l] + m1) * id, 0, 15) as u8;
            }
        }
        for c in 0..4 {
            for l in 0..32 {
                out.qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
            }
        }
    }
}
