//! `q8_0`: blocks of 32 int8 weights with one f16 scale (8.5 bits per weight).

use super::{f16_at_least, round_clamp, BlockFormat, BlockQ8_0, Format};

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
}
