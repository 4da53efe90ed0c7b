//! `q6_k`: a k-quant 6-bit format. Super-blocks of 256 weights in 16 sub-blocks of 16, each
//! with an int8 scale under the super-block's f16 `d` (6.5625 bits per weight). The byte
//! layout is the one of ggml's `Q6_K`.

use super::{f16_at_least, round_clamp, round_clamp_f32, BlockFormat, BlockQ6K, Format};

/// The `q6_k` layout.
pub(crate) struct Q6K;

/// Candidate scales tried per sub-block by [`fit_sub`].
const CANDIDATES: usize = 17;

/// Symmetric scale for 16 values on the grid `[−32, 31]`: candidates between `amax/32` (when
/// the extreme value is negative, it lands on −32) and `amax/28`; the smallest squared error
/// wins. The candidates' errors are accumulated side by side (the inner loop runs across
/// candidates, which vectorizes), each in element order, so the result is the same bit for
/// bit as evaluating one candidate at a time.
#[inline(always)]
fn fit_sub(x: &[f32; 16]) -> f32 {
    let (mut amax, mut ext) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            ext = v;
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let top = if ext < 0.0 { 32.0 } else { 31.0 };
    let mut sc = [0f32; CANDIDATES];
    let mut inv = [0f32; CANDIDATES];
    for (c, (s, i)) in sc.iter_mut().zip(inv.iter_mut()).enumerate() {
        *s = amax / (top - 0.25 * c as f32);
        *i = 1.0 / *s;
    }
    let mut err = [0f32; CANDIDATES];
    for &v in x {
        for c in 0..CANDIDATES {
            let e = sc[c] * round_clamp_f32(v * inv[c], -32.0, 31.0) - v;
            err[c] += e * e;
        }
    }
    let mut best = sc[0];
    let mut best_err = err[0];
    for c in 1..CANDIDATES {
        if err[c] < best_err {
            best = sc[c];
            best_err = err[c];
        }
    }
    best
}

impl BlockFormat for Q6K {
    type Block = BlockQ6K;
    const FORMAT: Format = Format::Q6K;
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = std::mem::size_of::<BlockQ6K>();
    const VERSION: u32 = 1;

    #[inline(always)]
    fn quantize(x: &[f32], out: &mut BlockQ6K) {
        let mut s = [0f32; 16];
        for (sj, sub) in s.iter_mut().zip(x.chunks_exact(16)) {
            *sj = fit_sub(sub.try_into().expect("chunks_exact(16)"));
        }
        let smax = s.iter().fold(0f32, |a, &v| a.max(v));
        let d = f16_at_least(smax / 127.0);
        let df = d.to_f32();
        out.d = d.to_le_bytes();
        let mut q = [0u8; 256];
        for j in 0..16 {
            let sc = if df > 0.0 {
                round_clamp(s[j] / df, 0, 127)
            } else {
                0
            };
            out.scales[j] = sc as i8;
            let d1 = df * sc as f32;
            let id = if d1 > 0.0 { 1.0 / d1 } else { 0.0 };
            for l in 0..16 {
                q[16 * j + l] = (round_clamp(x[16 * j + l] * id, -32, 31) + 32) as u8;
            }
        }
        for h in 0..2 {
            for l in 0..32 {
                let [a, b, c, e] = [0, 32, 64, 96].map(|o| q[128 * h + o + l]);
                out.ql[64 * h + l] = (a & 0xF) | ((c & 0xF) << 4);
                out.ql[64 * h + 32 + l] = (b & 0xF) | ((e & 0xF) << 4);
                out.qh[32 * h + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
            }
        }
    }
}
