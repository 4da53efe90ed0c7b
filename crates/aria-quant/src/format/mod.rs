//! Packed block formats: each is a `#[repr(C)]` block struct with a compile-time size check, a
//! [`BlockFormat`] implementation (constants + reference quantize/dequantize of one block) and a
//! [`Format`] tag carrying the layout version.
//!
//! | format | block | bytes | bits/weight | value |
//! |---|---|---|---|---|
//! | [`Format::Q8_0`] | 32 | 34 | 8.5 | `d · q`, `q ∈ [−127, 127]`, `d` f16 |
//! | [`Format::Q4K`] | 256 (8 × 32) | 144 | 4.5 | `d·sc_j · q − dmin·m_j`, `q ∈ [0, 15]`, 6-bit `sc_j`, `m_j` |
//! | [`Format::Q6K`] | 256 (16 × 16) | 210 | 6.5625 | `d·sc_j · (q − 32)`, `q ∈ [0, 63]`, int8 `sc_j` |
//!
//! Every block field is a byte array, so blocks have alignment 1 and can be viewed in place in
//! any byte buffer (a memory-mapped file included); 16-bit scales are little-endian f16.
//!
//! **Rows that are not a multiple of the block.** A row of `in` weights is stored as
//! `⌈in / block⌉` blocks, the last one zero-padded. [`Format::dequantize_row`] returns exactly
//! `in` values, and the kernels read only the first `in` columns of a row, so padding never
//! reaches a result. (A 257-wide row in a 256-element format costs a second, mostly empty
//! block: policies keep such narrow layers in q8_0.)
//!
//! The dequantization formulas are written once here and used by every kernel path, with the
//! same f32 operations in the same order, so every path sees bit-identical weights.

mod q4k;
mod q6k;
mod q8_0;

pub use q4k::BlockQ4K;
pub use q6k::BlockQ6K;
pub use q8_0::BlockQ8_0;

use half::f16;

use crate::{QuantError, Result};

/// A packed weight format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// 8-bit: blocks of 32 int8 with one f16 scale.
    Q8_0,
    /// 4-bit k-quant: super-blocks of 256 in 8 sub-blocks of 32, each with a 6-bit scale and
    /// a 6-bit min, under an f16 `d` and `dmin`.
    Q4K,
    /// 6-bit k-quant: super-blocks of 256 in 16 sub-blocks of 16 with int8 scales under an f16
    /// `d`.
    Q6K,
}

/// One block layout: its constants and the reference conversions of one block.
pub trait BlockFormat {
    /// The block struct (`#[repr(C)]`, alignment 1).
    type Block: bytemuck::Pod;
    /// The format this layout implements.
    const FORMAT: Format;
    /// Weights per block.
    const BLOCK_ELEMS: usize;
    /// Bytes per block (`size_of::<Block>()`, checked at compile time).
    const BLOCK_BYTES: usize;
    /// Layout version, part of the tag (`q8_0/v1`). Bumped whenever the bytes of a block
    /// would be read differently.
    const VERSION: u32;
    /// Quantize `x` (exactly [`BlockFormat::BLOCK_ELEMS`] finite values) into `out`.
    fn quantize(x: &[f32], out: &mut Self::Block);
    /// Dequantize one block into `out` (exactly [`BlockFormat::BLOCK_ELEMS`] values).
    fn dequantize(b: &Self::Block, out: &mut [f32]);
}

impl Format {
    /// Every format, in tag order.
    pub const ALL: [Format; 3] = [Format::Q8_0, Format::Q4K, Format::Q6K];

    /// The short name (`q8_0`, `q4_k`, `q6_k`).
    pub const fn name(self) -> &'static str {
        match self {
            Format::Q8_0 => "q8_0",
            Format::Q4K => "q4_k",
            Format::Q6K => "q6_k",
        }
    }

    /// The layout version of the format.
    pub const fn version(self) -> u32 {
        match self {
            Format::Q8_0 => q8_0::Q8_0::VERSION,
            Format::Q4K => q4k::Q4K::VERSION,
            Format::Q6K => q6k::Q6K::VERSION,
        }
    }

    /// The tag `name/vVERSION` stored with packed data and checked when it is read.
    pub fn tag(self) -> String {
        format!("{}/v{}", self.name(), self.version())
    }

    /// Parse a tag written by [`Format::tag`]. A known name at another version is refused:
    /// its bytes would be misread.
    pub fn from_tag(tag: &str) -> Result<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.tag() == tag)
            .ok_or_else(|| QuantError::UnknownFormat {
                tag: tag.to_string(),
                known: Format::ALL.map(|f| f.tag()).join(", "),
            })
    }

    /// Parse a short name (`q8_0`, `q4_k`, `q6_k`; also `q8`, `q4`, `q6`).
    pub fn from_name(name: &str) -> Result<Format> {
        match name {
            "q8_0" | "q8" => Ok(Format::Q8_0),
            "q4_k" | "q4" => Ok(Format::Q4K),
            "q6_k" | "q6" => Ok(Format::Q6K),
            _ => Err(QuantError::UnknownFormat {
                tag: name.to_string(),
                known: "q8_0, q4_k, q6_k".into(),
            }),
        }
    }

    /// Weights per block.
    pub const fn block_elems(self) -> usize {
        match self {
            Format::Q8_0 => q8_0::Q8_0::BLOCK_ELEMS,
            Format::Q4K => q4k::Q4K::BLOCK_ELEMS,
            Format::Q6K => q6k::Q6K::BLOCK_ELEMS,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Format::Q8_0 => q8_0::Q8_0::BLOCK_BYTES,
            Format::Q4K => q4k::Q4K::BLOCK_BYTES,
            Format::Q6K => q6k::Q6K::BLOCK_BYTES,
        }
    }

    /// Storage cost in bits per weight (for whole blocks).
    pub fn bits_per_weight(self) -> f64 {
        (self.block_bytes() * 8) as f64 / self.block_elems() as f64
    }

    /// Blocks in a row of `cols` weights (`⌈cols / block⌉`).
    pub const fn blocks_per_row(self, cols: usize) -> usize {
        cols.div_ceil(self.block_elems())
    }

    /// Bytes of a packed row of `cols` weights.
    pub const fn row_bytes(self, cols: usize) -> usize {
        self.blocks_per_row(cols) * self.block_bytes()
    }

    /// Quantize one row `x` (`cols` values) into `out` (`row_bytes(cols)` bytes), zero-padding
    /// the last block. `what` and `row` name the row in errors (non-finite values, values
    /// beyond the f16 scale range).
    pub fn quantize_row(self, what: &str, row: usize, x: &[f32], out: &mut [u8]) -> Result<()> {
        match self {
            Format::Q8_0 => quantize_row_as::<q8_0::Q8_0>(what, row, x, out),
            Format::Q4K => quantize_row_as::<q4k::Q4K>(what, row, x, out),
            Format::Q6K => quantize_row_as::<q6k::Q6K>(what, row, x, out),
        }
    }

    /// Dequantize a packed row (`row_bytes(out.len())` bytes) into `out` (`cols` values).
    ///
    /// # Panics
    /// If `blocks` is shorter than `row_bytes(out.len())`.
    pub fn dequantize_row(self, blocks: &[u8], out: &mut [f32]) {
        match self {
            Format::Q8_0 => dequantize_range::<q8_0::Q8_0>(blocks, 0, out),
            Format::Q4K => dequantize_range::<q4k::Q4K>(blocks, 0, out),
            Format::Q6K => dequantize_range::<q6k::Q6K>(blocks, 0, out),
        }
    }

    /// Dequantize columns `k0..k0 + out.len()` of a packed row, where `k0` is a multiple of
    /// the block size (the kernels' slabs).
    ///
    /// # Panics
    /// If `k0` is not a block multiple or the row is too short for the range.
    pub fn dequantize_cols(self, row: &[u8], k0: usize, out: &mut [f32]) {
        match self {
            Format::Q8_0 => dequantize_range::<q8_0::Q8_0>(row, k0, out),
            Format::Q4K => dequantize_range::<q4k::Q4K>(row, k0, out),
            Format::Q6K => dequantize_range::<q6k::Q6K>(row, k0, out),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Largest block in any format (elements).
pub(crate) const MAX_BLOCK: usize = 256;

fn quantize_row_as<F: BlockFormat>(
    what: &str,
    row: usize,
    x: &[f32],
    out: &mut [u8],
) -> Result<()> {
    let nb = x.len().div_ceil(F::BLOCK_ELEMS);
    let blocks: &mut [F::Block] = bytemuck::cast_slice_mut(&mut out[..nb * F::BLOCK_BYTES]);
    if let Some((col, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(QuantError::Value {
            what: what.to_string(),
            row,
            col,
            value,
            reason: "not finite".into(),
        });
    }
    // Scales are f16: a block whose largest magnitude would need a scale beyond f16 cannot be
    // stored. 65504 · 15 bounds every format's largest representable weight from below.
    const LIMIT: f32 = 65504.0 * 15.0;
    if let Some((col, &value)) = x.iter().enumerate().find(|(_, v)| v.abs() > LIMIT) {
        return Err(QuantError::Value {
            what: what.to_string(),
            row,
            col,
            value,
            reason: format!("magnitude above {LIMIT} (f16 block scales)"),
        });
    }
    let mut buf = [0f32; MAX_BLOCK];
    for (b, blk) in blocks.iter_mut().enumerate() {
        let s = b * F::BLOCK_ELEMS;
        let e = (s + F::BLOCK_ELEMS).min(x.len());
        let t = &mut buf[..F::BLOCK_ELEMS];
        t[..e - s].copy_from_slice(&x[s..e]);
        t[e - s..].fill(0.0);
        F::quantize(t, blk);
    }
    Ok(())
}

fn dequantize_range<F: BlockFormat>(row: &[u8], k0: usize, out: &mut [f32]) {
    assert_eq!(
        k0 % F::BLOCK_ELEMS,
        0,
        "dequantize_cols: start not on a block"
    );
    let b0 = k0 / F::BLOCK_ELEMS;
    let nb = out.len().div_ceil(F::BLOCK_ELEMS);
    let bytes = &row[b0 * F::BLOCK_BYTES..(b0 + nb) * F::BLOCK_BYTES];
    let blocks: &[F::Block] = bytemuck::cast_slice(bytes);
    let mut buf = [0f32; MAX_BLOCK];
    for (chunk, blk) in out.chunks_mut(F::BLOCK_ELEMS).zip(blocks) {
        if chunk.len() == F::BLOCK_ELEMS {
            F::dequantize(blk, chunk);
        } else {
            F::dequantize(blk, &mut buf[..F::BLOCK_ELEMS]);
            chunk.copy_from_slice(&buf[..chunk.len()]);
        }
    }
}

/// Read a little-endian f16.
#[inline(always)]
pub(crate) fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_le_bytes(b).to_f32()
}

/// The smallest f16 at or above `v ≥ 0` (finite `v` within the f16 range), so a scale
/// rounded to f16 never shrinks below what the block's largest value needs.
pub(crate) fn f16_at_least(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// Round to nearest, ties to even, as an integer clamped to `[lo, hi]`.
#[inline(always)]
pub(crate) fn round_clamp(v: f32, lo: i32, hi: i32) -> i32 {
    (v.round_ties_even() as i32).clamp(lo, hi)
}
