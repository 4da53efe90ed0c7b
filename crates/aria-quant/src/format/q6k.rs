//! `q6_k`: a k-quant 6-bit format. Super-blocks of 256 weights in 16 sub-blocks of 16, each
//! with an int8 scale under the super-block's f16 `d` (6.5625 bits per weight). The byte
//! layout is the one of ggml's `Q6_K`.

use super::{f16_at_least, f16_le, round_clamp, round_clamp_f32, BlockFormat, Format, I8Rows};

/// One `q6_k` super-block: weight `i` is `d·scales[i / 16] · (q_i − 32)`, `q_i ∈ [0, 63]`.
///
/// Per half `h < 2` of 128 weights and `l < 32`: `ql[64h + l]` holds the low 4 bits of
/// `q[128h + l]` (low nibble) and `q[128h + 64 + l]` (high nibble); `ql[64h + 32 + l]` those of
/// `q[128h + 32 + l]` and `q[128h + 96 + l]`; `qh[32h + l]` the high 2 bits of
/// `q[128h + l]`, `q[128h + 32 + l]`, `q[128h + 64 + l]`, `q[128h + 96 + l]` (bits 0–1, 2–3,
/// 4–5, 6–7).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; 128],
    /// High 2 bits of the quants.
    pub qh: [u8; 64],
    /// Sub-block scales.
    pub scales: [i8; 16],
    /// Super-block scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::align_of::<BlockQ6K>() == 1);

// SAFETY: `#[repr(C)]` of byte arrays only: no padding (size asserted above), alignment 1,
// every bit pattern valid.
unsafe impl bytemuck::Zeroable for BlockQ6K {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for BlockQ6K {}

impl BlockQ6K {
    /// The 6-bit quant of weight `i < 256`.
    #[inline(always)]
    pub fn quant(&self, i: usize) -> u8 {
        let (h, r) = (i / 128, i % 128);
        let (part, l) = (r / 32, r % 32);
        let lo = match part {
            0 => self.ql[64 * h + l] & 0xF,
            1 => self.ql[64 * h + 32 + l] & 0xF,
            2 => self.ql[64 * h + l] >> 4,
            _ => self.ql[64 * h + 32 + l] >> 4,
        };
        let hi = (self.qh[32 * h + l] >> (2 * part)) & 3;
        lo | (hi << 4)
    }
}

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

    #[inline]
    fn unpack(b: &BlockQ6K, q: &mut [i8], scale: &mut [f32], _offset: &mut [f32]) -> I8Rows {
        let d = f16_le(b.d);
        for (s, v) in scale.iter_mut().zip(&b.scales) {
            *s = d * *v as f32;
        }
        for h in 0..2 {
            for part in 0..4 {
                let base = 128 * h + 32 * part;
                for l in 0..32 {
                    let lo = match part {
                        0 => b.ql[64 * h + l] & 0xF,
                        1 => b.ql[64 * h + 32 + l] & 0xF,
                        2 => b.ql[64 * h + l] >> 4,
                        _ => b.ql[64 * h + 32 + l] >> 4,
                    };
                    let v = lo | (((b.qh[32 * h + l] >> (2 * part)) & 3) << 4);
                    q[base + l] = (v as i32 - 32) as i8;
                }
            }
        }
        I8Rows::Scaled
    }

    /// [`BlockFormat::unpack`]'s values scaled: `d·scales[i / 16] · (q_i − 32)`, one statement
    /// of the bit layout for both.
    fn dequantize(b: &BlockQ6K, out: &mut [f32]) {
        let (mut q, mut scale) = ([0i8; 256], [0f32; 16]);
        Self::unpack(b, &mut q, &mut scale, &mut []);
        for (i, (o, v)) in out.iter_mut().zip(&q).enumerate() {
            *o = scale[i / 16] * *v as f32;
        }
    }
}
