//! Packed block formats: each is a `#[repr(C)]` block struct with a compile-time size check, a
//! [`BlockFormat`] implementation (constants + the reference quantizer of one block; the
//! block's decoding is its [`Block`] implementation) and a [`Format`] tag carrying the layout
//! version.
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
//! The block structs and their dequantization are written once, in the CPU backend
//! (`aria_cpu::quant::blocks`, re-exported here), and used by every kernel path and by
//! [`Format::dequantize_row`], with the same f32 operations in the same order, so every path
//! sees bit-identical weights. This module adds what only packing needs: the tags and the
//! reference quantizers.

mod q4k;
mod q6k;
mod q8_0;

use aria_core::cpu::quant::blocks::{self, Block};
pub use aria_core::cpu::quant::blocks::{BlockQ4K, BlockQ6K, BlockQ8_0, I8Rows, I8_GROUP};
use aria_core::nn::WeightFormat;
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

/// One block layout: its constants and the reference quantizer of one block (its decoding is
/// the block struct's [`Block`] implementation, which the CPU kernels share).
pub trait BlockFormat {
    /// The block struct (`#[repr(C)]`, alignment 1).
    type Block: Block;
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
}

impl From<Format> for WeightFormat {
    fn from(f: Format) -> WeightFormat {
        match f {
            Format::Q8_0 => WeightFormat::Q8_0,
            Format::Q4K => WeightFormat::Q4K,
            Format::Q6K => WeightFormat::Q6K,
        }
    }
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
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above), the only requirement of the
            // `target_feature` function; it runs the same code as the portable path.
            return unsafe { quantize_row_avx2(self, what, row, x, out) };
        }
        self.quantize_row_portable(what, row, x, out)
    }

    /// [`Format::quantize_row`] compiled for the baseline target (SSE2 on x86-64). The
    /// quantizers are IEEE f32 arithmetic without fused operations, so every compilation of
    /// them gives the same bytes.
    #[inline(always)]
    fn quantize_row_portable(
        self,
        what: &str,
        row: usize,
        x: &[f32],
        out: &mut [u8],
    ) -> Result<()> {
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
        blocks::dequantize_row(self.into(), blocks, out)
    }

    /// Columns `k0..k0 + q.len()` of a packed row (`k0` a block multiple) as int8 values with
    /// a scale (and offset) per [`I8_GROUP`] columns (see [`Block::unpack`]): the same
    /// weights, bit for bit, as [`Format::dequantize_cols`] gives.
    ///
    /// # Panics
    /// As [`Format::dequantize_cols`], or if `scale`/`offset` hold fewer than
    /// `q.len().div_ceil(I8_GROUP)` values.
    pub fn unpack_cols(
        self,
        row: &[u8],
        k0: usize,
        q: &mut [i8],
        scale: &mut [f32],
        offset: &mut [f32],
    ) -> I8Rows {
        blocks::unpack_cols(self.into(), row, k0, q, scale, offset).unwrap_or(I8Rows::Scaled)
    }

    /// Dequantize columns `k0..k0 + out.len()` of a packed row, where `k0` is a multiple of
    /// the block size (the kernels' slabs).
    ///
    /// # Panics
    /// If `k0` is not a block multiple or the row is too short for the range.
    pub fn dequantize_cols(self, row: &[u8], k0: usize, out: &mut [f32]) {
        blocks::dequantize_cols(self.into(), row, k0, out)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

use blocks::MAX_BLOCK;

/// The quantizers compiled with AVX2 enabled (wider vectors for the loops across
/// candidates; no FMA, so the bytes are the portable path's).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(
    f: Format,
    what: &str,
    row: usize,
    x: &[f32],
    out: &mut [u8],
) -> Result<()> {
    f.quantize_row_portable(what, row, x, out)
}

#[inline(always)]
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

/// `1.5 · 2²³`: adding and subtracting it rounds an f32 of magnitude below `2²²` to an
/// integer, to nearest with ties to even (the default rounding of every f32 addition).
const ROUND_MAGIC: f32 = 12_582_912.0;

/// Round to nearest, ties to even, as an integer clamped to `[lo, hi]` (`|lo|, |hi| < 2²¹`).
///
/// The same integer as `(v.round_ties_even() as i32).clamp(lo, hi)` for every `v` (checked
/// in the tests), without the library call `round_ties_even` becomes on targets without
/// SSE4.1 (it kept the quantizers' loops from vectorizing): for `|v| < 2²²`, `v + M` lies in
/// `[2²², 2²⁴)`… more precisely in `(2²³, 2²⁴)`, where f32 steps are 1, so the addition itself
/// rounds `v` to the nearest integer with ties to even (`M` is even), and the subtraction is
/// exact. A larger `|v|` (or ±∞) comes out with its sign and a magnitude of at least `2²¹`, so
/// it clamps to the same bound; NaN converts to 0 either way.
#[inline(always)]
pub(crate) fn round_clamp(v: f32, lo: i32, hi: i32) -> i32 {
    debug_assert!(lo.unsigned_abs() < 1 << 21 && hi.unsigned_abs() < 1 << 21);
    (((v + ROUND_MAGIC) - ROUND_MAGIC) as i32).clamp(lo, hi)
}

/// [`round_clamp`] as an f32, for bounds with `lo ≤ 0 ≤ hi`: the same value as
/// `round_clamp(v, lo as i32, hi as i32) as f32` for every `v` (checked in the tests), with
/// compares and selects only, so loops over it vectorize (NaN fails every compare and maps
/// to 0, as `as i32` maps it).
#[inline(always)]
pub(crate) fn round_clamp_f32(v: f32, lo: f32, hi: f32) -> f32 {
    debug_assert!(lo <= 0.0 && hi >= 0.0 && -lo < (1 << 21) as f32 && hi < (1 << 21) as f32);
    let r = (v + ROUND_MAGIC) - ROUND_MAGIC;
    let r = if r >= lo {
        r
    } else if r < lo {
        lo
    } else {
        0.0
    };
    if r > hi {
        hi
    } else {
        r
    }
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;

    /// The int8 form of every format is, bit for bit, the dequantized weights: whole and
    /// partial slabs, a block of zeros, and blocks of one sign.
    #[test]
    fn unpacked_int8_gives_the_dequantized_bits() {
        for f in Format::ALL {
            for cols in [40usize, 256, 300, 3 * 256 + 17] {
                let x: Vec<f32> = (0..cols)
                    .map(|i| match (i / 32) % 4 {
                        1 => 0.0,
                        2 => 0.1 + (i % 7) as f32 * 0.03,
                        _ => ((i * 37 % 101) as f32 - 50.0) / 17.0,
                    })
                    .collect();
                let mut row = vec![0u8; f.row_bytes(cols)];
                f.quantize_row("w", 0, &x, &mut row).unwrap();
                for k0 in (0..cols).step_by(256) {
                    let n = 256.min(cols - k0);
                    let mut want = vec![0f32; n];
                    f.dequantize_cols(&row, k0, &mut want);
                    let g = n.div_ceil(I8_GROUP);
                    let (mut q, mut sc, mut off) = (vec![0i8; n], vec![0f32; g], vec![0f32; g]);
                    let mode = f.unpack_cols(&row, k0, &mut q, &mut sc, &mut off);
                    let got: Vec<u32> = (0..n)
                        .map(|c| {
                            let v = sc[c / I8_GROUP] * q[c] as f32;
                            match mode {
                                I8Rows::Scaled => v,
                                I8Rows::ScaledOffset => v - off[c / I8_GROUP],
                            }
                            .to_bits()
                        })
                        .collect();
                    let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{f} cols {cols} k0 {k0}");
                }
            }
        }
    }

    fn old_round(v: f32, lo: i32, hi: i32) -> i32 {
        (v.round_ties_even() as i32).clamp(lo, hi)
    }

    /// Every bound pair the quantizers use.
    const BOUNDS: [(i32, i32); 6] = [(0, 15), (0, 63), (0, 127), (-32, 31), (-127, 127), (0, 0)];

    #[test]
    fn round_clamp_matches_round_ties_even() {
        let mut vals: Vec<f32> = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            ROUND_MAGIC,
            -ROUND_MAGIC,
            4_194_304.0,
            -4_194_304.0,
            8_388_608.5,
        ];
        // Every half-integer and its neighbours around the clamp ranges.
        for k in -300..=300 {
            let h = k as f32 + 0.5;
            vals.extend([
                h,
                f32::from_bits(h.to_bits() + 1),
                f32::from_bits(h.to_bits() - 1),
            ]);
            vals.push(k as f32);
        }
        // A stride through every bit pattern (both signs, all exponents).
        let mut b = 0u32;
        while let Some(n) = b.checked_add(4093) {
            vals.push(f32::from_bits(b));
            b = n;
        }
        for (lo, hi) in BOUNDS {
            for &v in &vals {
                let want = old_round(v, lo, hi);
                assert_eq!(round_clamp(v, lo, hi), want, "{v:e} ({lo}, {hi})");
                let f = round_clamp_f32(v, lo as f32, hi as f32);
                assert_eq!(
                    f.to_bits(),
                    (want as f32).to_bits(),
                    "{v:e} ({lo}, {hi}) as f32"
                );
            }
        }
    }

    /// Throughput of the quantizers against the reference ones (`cargo test --release -p
    /// aria-quant --lib -- --ignored --nocapture quantize_speed`).
    #[test]
    #[ignore = "timing, run by hand in release"]
    fn quantize_speed() {
        let x: Vec<f32> = (0..1 << 20)
            .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 0.04)
            .collect();
        for (f, r) in [
            (Format::Q8_0, reference::q8_0 as fn(&[f32]) -> Vec<u8>),
            (Format::Q4K, reference::q4k),
            (Format::Q6K, reference::q6k),
        ] {
            let be = f.block_elems();
            let t = std::time::Instant::now();
            let want: Vec<u8> = x.chunks(be).flat_map(r).collect();
            let t_ref = t.elapsed();
            let mut got = vec![0u8; f.row_bytes(x.len())];
            let t = std::time::Instant::now();
            f.quantize_row("speed", 0, &x, &mut got).expect("quantize");
            let t_new = t.elapsed();
            assert_eq!(got, want, "{f}");
            println!(
                "{f}: reference {:.1} ns/weight, now {:.1} ns/weight ({:.1}x)",
                t_ref.as_nanos() as f64 / x.len() as f64,
                t_new.as_nanos() as f64 / x.len() as f64,
                t_ref.as_secs_f64() / t_new.as_secs_f64()
            );
        }
    }

    /// Bit-identical blocks from the optimised quantizers and the reference ones, on weights
    /// of several scales and shapes (Gaussian-like, uniform, sparse, constant, tiny, huge).
    #[test]
    fn quantizers_match_reference() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for scale in [1e-4f32, 0.02, 1.0, 300.0, 3e3] {
            for kind in 0..5 {
                let row: Vec<f32> = (0..256)
                    .map(|i| {
                        let u = next() * 2.0 - 1.0;
                        let g = (next() + next() + next() - 1.5) * 2.0;
                        scale
                            * match kind {
                                0 => g,
                                1 => u,
                                2 if i % 7 == 0 => g * 10.0,
                                2 => 0.0,
                                3 => u.abs() + 0.5,
                                _ => -(u.abs()) - 0.25,
                            }
                    })
                    .collect();
                rows.push(row);
            }
        }
        rows.push(vec![0.0; 256]);
        rows.push(vec![0.75; 256]);
        rows.push((0..256).map(|i| (i as f32 - 128.0) / 8.0).collect());
        rows.push((0..256).map(|i| if i == 3 { 1.0 } else { 0.0 }).collect());
        for _ in 0..200 {
            let scale = 10f32.powf(next() * 6.0 - 4.0);
            rows.push((0..256).map(|_| (next() - 0.5) * scale).collect());
        }
        for (i, x) in rows.iter().enumerate() {
            for (f, want) in [
                (
                    Format::Q8_0,
                    x.chunks(32).flat_map(reference::q8_0).collect::<Vec<u8>>(),
                ),
                (Format::Q4K, reference::q4k(x)),
                (Format::Q6K, reference::q6k(x)),
            ] {
                let mut got = vec![0u8; f.row_bytes(256)];
                f.quantize_row("test", i, x, &mut got).expect("quantize");
                assert_eq!(got, want, "{f} row {i}");
                got.fill(0);
                f.quantize_row_portable("test", i, x, &mut got)
                    .expect("quantize");
                assert_eq!(got, want, "{f} row {i} (portable path)");
            }
        }
    }
}
