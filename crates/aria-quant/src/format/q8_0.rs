//! `q8_0`: blocks of 32 int8 weights with one f16 scale (8.5 bits per weight).

use super::{f16_at_least, f16_le, round_clamp, BlockFormat, Format, I8Rows};

/// One `q8_0` block: `w[i] = d · qs[i]`, `qs[i] ∈ [−127, 127]` (−128 is never written, which
/// the W8A8 kernels rely on).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// The scale, f16 little-endian.
    pub d: [u8; 2],
    /// The quantized weights.
    pub qs: [i8; 32],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::align_of::<BlockQ8_0>() == 1);

// SAFETY: `#[repr(C)]` of byte arrays only: no padding (size asserted above), alignment 1,
// every bit pattern valid.
unsafe impl bytemuck::Zeroable for BlockQ8_0 {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for BlockQ8_0 {}

impl BlockQ8_0 {
    /// The scale as f32.
    #[inline(always)]
    pub fn scale(&self) -> f32 {
        f16_le(self.d)
    }
}

/// The `q8_0` layout.
pub(crate) struct Q8_0;

impl BlockFormat for Q8_0 {
    type Block = BlockQ8_0;
    const FORMAT: Format = Format::Q8_0;
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = std::mem::size_of::<BlockQ8_0>();
    const VERSION: u32 = 1;

    /// `d = max|x| / 127` rounded up to f16, `q = round(x / d)`.
    #[inline(always)]
    fn quantize(x: &[f32], out: &mut BlockQ8_0) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = f16_at_least(amax / 127.0);
        let df = d.to_f32();
        out.d = d.to_le_bytes();
        let id = if df > 0.0 { 1.0 / df } else { 0.0 };
        for (q, v) in out.qs.iter_mut().zip(x) {
            *q = round_clamp(v * id, -127, 127) as i8;
        }
    }

    #[inline]
    fn unpack(b: &BlockQ8_0, q: &mut [i8], scale: &mut [f32], _offset: &mut [f32]) -> I8Rows {
        // Constant-length ranges: vector moves, not a call.
        q[..32].copy_from_slice(&b.qs);
        scale[..2].fill(b.scale());
        I8Rows::Scaled
    }

    #[inline]
    fn dequantize(b: &BlockQ8_0, out: &mut [f32]) {
        let d = b.scale();
        for (o, q) in out.iter_mut().zip(&b.qs) {
            *o = d * *q as f32;
        }
    }
}
