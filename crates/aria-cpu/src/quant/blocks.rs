//! The block layouts of the packed formats (`q8_0`, `q4_k`, `q6_k`: `#[repr(C)]` structs with
//! compile-time size checks) and their decoding, the one statement of each format's values
//! that the CPU kernels and the reference dequantization (`aria-quant`) share.
//!
//! | format | block | bytes | value |
//! |---|---|---|---|
//! | `q8_0` | 32 | 34 | `d · q`, `q ∈ [−127, 127]`, `d` f16 |
//! | `q4_k` | 256 (8 × 32) | 144 | `d·sc_j · q − dmin·m_j`, `q ∈ [0, 15]`, 6-bit `sc_j`, `m_j` |
//! | `q6_k` | 256 (16 × 16) | 210 | `d·sc_j · (q − 32)`, `q ∈ [0, 63]`, int8 `sc_j` |
//!
//! Every block field is a byte array, so blocks have alignment 1 and can be viewed in place in
//! any byte buffer (a memory-mapped file included); 16-bit scales are little-endian f16. A row
//! of `in` weights is `⌈in / block⌉` blocks, the last one zero-padded; decoding a range returns
//! exactly the values asked for, so padding never reaches a result.

use aria_tensor::format::WeightFormat;
use half::{bf16, f16};

pub use crate::gemm::{I8Rows, I8_GROUP};

/// Largest block in any format (elements).
pub const MAX_BLOCK: usize = 256;

/// A block layout's decoding.
pub trait Block: bytemuck::Pod {
    /// Weights per block.
    const ELEMS: usize;
    /// Dequantize the block into `out` (exactly [`Block::ELEMS`] values).
    fn dequantize(&self, out: &mut [f32]);
    /// The block as int8 values `q` ([`Block::ELEMS`]) with a scale (and offset) per
    /// [`I8_GROUP`] of them, such that `scale · q` (less `offset`, with
    /// [`I8Rows::ScaledOffset`]), each step rounded in f32, is the bits
    /// [`Block::dequantize`] gives.
    fn unpack(&self, q: &mut [i8], scale: &mut [f32], offset: &mut [f32]) -> I8Rows;
}

/// Read a little-endian f16.
#[inline(always)]
pub fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

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

impl Block for BlockQ8_0 {
    const ELEMS: usize = 32;

    #[inline]
    fn unpack(&self, q: &mut [i8], scale: &mut [f32], _offset: &mut [f32]) -> I8Rows {
        // Constant-length ranges: vector moves, not a call.
        q[..32].copy_from_slice(&self.qs);
        scale[..2].fill(self.scale());
        I8Rows::Scaled
    }

    #[inline]
    fn dequantize(&self, out: &mut [f32]) {
        let d = self.scale();
        for (o, q) in out.iter_mut().zip(&self.qs) {
            *o = d * *q as f32;
        }
    }
}

/// One `q4_k` super-block: weight `i` of sub-block `j` is `d·sc_j · q − dmin·m_j`, `q ∈ [0, 15]`.
///
/// - `scales` packs the eight 6-bit `(sc_j, m_j)`: for `j < 4`, `sc_j = scales[j] & 63` and
///   `m_j = scales[j + 4] & 63`; for `j ≥ 4`, the low 4 bits are in `scales[j + 4]` (`sc` low
///   nibble, `m` high nibble) and the high 2 bits in the top bits of `scales[j − 4]` (`sc`)
///   and `scales[j]` (`m`).
/// - `qs[32c + l]` holds weight `64c + l` in its low nibble and `64c + 32 + l` in its high
///   nibble (`c < 4`, `l < 32`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-block scale of the sub-block mins, f16 little-endian.
    pub dmin: [u8; 2],
    /// Packed 6-bit sub-block scales and mins.
    pub scales: [u8; 12],
    /// 4-bit quants, two per byte.
    pub qs: [u8; 128],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::align_of::<BlockQ4K>() == 1);

// SAFETY: `#[repr(C)]` of byte arrays only: no padding (size asserted above), alignment 1,
// every bit pattern valid.
unsafe impl bytemuck::Zeroable for BlockQ4K {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for BlockQ4K {}

impl BlockQ4K {
    /// `(sc_j, m_j)` of sub-block `j < 8`.
    #[inline(always)]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        let s = &self.scales;
        if j < 4 {
            (s[j] & 63, s[j + 4] & 63)
        } else {
            (
                (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
                (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
            )
        }
    }

    /// Store the eight 6-bit `(sc_j, m_j)` (the inverse of [`BlockQ4K::scale_min`]).
    pub fn set_scale_min(&mut self, sc: &[u8; 8], m: &[u8; 8]) {
        let s = &mut self.scales;
        for j in 0..4 {
            s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
        }
    }
}

impl Block for BlockQ4K {
    const ELEMS: usize = 256;

    #[inline]
    fn unpack(&self, q: &mut [i8], scale: &mut [f32], offset: &mut [f32]) -> I8Rows {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        for j in 0..8 {
            let (sc, m) = self.scale_min(j);
            scale[2 * j..2 * j + 2].fill(d * sc as f32);
            offset[2 * j..2 * j + 2].fill(dmin * m as f32);
            let qs = &self.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            for (o, v) in q[32 * j..32 * j + 32].iter_mut().zip(qs) {
                *o = ((v >> shift) & 0xF) as i8;
            }
        }
        I8Rows::ScaledOffset
    }

    fn dequantize(&self, out: &mut [f32]) {
        let (d, dmin) = (f16_le(self.d), f16_le(self.dmin));
        for j in 0..8 {
            let (sc, m) = self.scale_min(j);
            let d1 = d * sc as f32;
            let m1 = dmin * m as f32;
            let qs = &self.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            for (o, q) in out[32 * j..32 * j + 32].iter_mut().zip(qs) {
                *o = d1 * ((q >> shift) & 0xF) as f32 - m1;
            }
        }
    }
}

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

impl Block for BlockQ6K {
    const ELEMS: usize = 256;

    #[inline]
    fn unpack(&self, q: &mut [i8], scale: &mut [f32], _offset: &mut [f32]) -> I8Rows {
        let d = f16_le(self.d);
        for (s, v) in scale.iter_mut().zip(&self.scales) {
            *s = d * *v as f32;
        }
        for h in 0..2 {
            for part in 0..4 {
                let base = 128 * h + 32 * part;
                for l in 0..32 {
                    let lo = match part {
                        0 => self.ql[64 * h + l] & 0xF,
                        1 => self.ql[64 * h + 32 + l] & 0xF,
                        2 => self.ql[64 * h + l] >> 4,
                        _ => self.ql[64 * h + 32 + l] >> 4,
                    };
                    let v = lo | (((self.qh[32 * h + l] >> (2 * part)) & 3) << 4);
                    q[base + l] = (v as i32 - 32) as i8;
                }
            }
        }
        I8Rows::Scaled
    }

    /// [`Block::unpack`]'s values scaled: `d·scales[i / 16] · (q_i − 32)`, one statement of
    /// the bit layout for both.
    fn dequantize(&self, out: &mut [f32]) {
        let (mut q, mut scale) = ([0i8; 256], [0f32; 16]);
        self.unpack(&mut q, &mut scale, &mut []);
        for (i, (o, v)) in out.iter_mut().zip(&q).enumerate() {
            *o = scale[i / 16] * *v as f32;
        }
    }
}

/// Dequantize columns `k0..k0 + out.len()` of a packed row in `format`, where `k0` is a
/// multiple of the block size (the kernels' slabs). `bf16_panels` rows are bf16 pairs.
///
/// # Panics
/// If `k0` is not a block multiple or the row is too short for the range.
pub fn dequantize_cols(format: WeightFormat, row: &[u8], k0: usize, out: &mut [f32]) {
    match format {
        WeightFormat::Q8_0 => dequantize_range::<BlockQ8_0>(row, k0, out),
        WeightFormat::Q4K => dequantize_range::<BlockQ4K>(row, k0, out),
        WeightFormat::Q6K => dequantize_range::<BlockQ6K>(row, k0, out),
        _ => {
            for (o, c) in out.iter_mut().zip(row[2 * k0..].chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
    }
}

/// Dequantize a packed row (`format.row_bytes(out.len())` bytes) into `out` (`cols` values).
///
/// # Panics
/// If `blocks` is shorter than `format.row_bytes(out.len())`.
pub fn dequantize_row(format: WeightFormat, blocks: &[u8], out: &mut [f32]) {
    dequantize_cols(format, blocks, 0, out)
}

/// Columns `k0..k0 + q.len()` of a packed row (`k0` a block multiple) as int8 values with a
/// scale (and offset) per [`I8_GROUP`] columns (see [`Block::unpack`]): the same weights, bit
/// for bit, as [`dequantize_cols`] gives. `None` for a format without an int8 form
/// (`bf16_panels`).
///
/// # Panics
/// As [`dequantize_cols`], or if `scale`/`offset` hold fewer than
/// `q.len().div_ceil(I8_GROUP)` values.
pub fn unpack_cols(
    format: WeightFormat,
    row: &[u8],
    k0: usize,
    q: &mut [i8],
    scale: &mut [f32],
    offset: &mut [f32],
) -> Option<I8Rows> {
    Some(match format {
        WeightFormat::Q8_0 => unpack_range::<BlockQ8_0>(row, k0, q, scale, offset),
        WeightFormat::Q4K => unpack_range::<BlockQ4K>(row, k0, q, scale, offset),
        WeightFormat::Q6K => unpack_range::<BlockQ6K>(row, k0, q, scale, offset),
        _ => return None,
    })
}

fn dequantize_range<B: Block>(row: &[u8], k0: usize, out: &mut [f32]) {
    assert_eq!(k0 % B::ELEMS, 0, "dequantize_cols: start not on a block");
    let bytes_per = std::mem::size_of::<B>();
    let b0 = k0 / B::ELEMS;
    let nb = out.len().div_ceil(B::ELEMS);
    let bytes = &row[b0 * bytes_per..(b0 + nb) * bytes_per];
    let blocks: &[B] = bytemuck::cast_slice(bytes);
    let mut buf = [0f32; MAX_BLOCK];
    for (chunk, blk) in out.chunks_mut(B::ELEMS).zip(blocks) {
        if chunk.len() == B::ELEMS {
            blk.dequantize(chunk);
        } else {
            blk.dequantize(&mut buf[..B::ELEMS]);
            chunk.copy_from_slice(&buf[..chunk.len()]);
        }
    }
}

fn unpack_range<B: Block>(
    row: &[u8],
    k0: usize,
    q: &mut [i8],
    scale: &mut [f32],
    offset: &mut [f32],
) -> I8Rows {
    assert_eq!(k0 % B::ELEMS, 0, "unpack_cols: start not on a block");
    const { assert!(MAX_BLOCK.is_multiple_of(I8_GROUP)) };
    let bytes_per = std::mem::size_of::<B>();
    let (b0, n) = (k0 / B::ELEMS, q.len());
    let nb = n.div_ceil(B::ELEMS);
    let bytes = &row[b0 * bytes_per..(b0 + nb) * bytes_per];
    let blocks: &[B] = bytemuck::cast_slice(bytes);
    let gpb = B::ELEMS / I8_GROUP;
    let mut mode = I8Rows::Scaled;
    for (i, blk) in blocks.iter().enumerate() {
        let (c0, g0) = (i * B::ELEMS, i * gpb);
        if c0 + B::ELEMS <= n {
            mode = blk.unpack(
                &mut q[c0..c0 + B::ELEMS],
                &mut scale[g0..g0 + gpb],
                &mut offset[g0..g0 + gpb],
            );
        } else {
            // The last, partial block: unpacked whole, its first columns kept.
            let (mut bq, mut bs, mut bo) = (
                [0i8; MAX_BLOCK],
                [0f32; MAX_BLOCK / I8_GROUP],
                [0f32; MAX_BLOCK / I8_GROUP],
            );
            mode = blk.unpack(&mut bq[..B::ELEMS], &mut bs[..gpb], &mut bo[..gpb]);
            let (cn, gn) = (n - c0, (n - c0).div_ceil(I8_GROUP));
            q[c0..].copy_from_slice(&bq[..cn]);
            scale[g0..g0 + gn].copy_from_slice(&bs[..gn]);
            offset[g0..g0 + gn].copy_from_slice(&bo[..gn]);
        }
    }
    mode
}
