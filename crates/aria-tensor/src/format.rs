//! Packed weight formats of the op vocabulary ([`WeightFormat`]) and a weight's blocks in one
//! of them ([`PackedBlocks`]).

use std::fmt;
use std::sync::Arc;

use crate::{Device, Result, Tensor};

/// A packed weight format of the op vocabulary: what [`Op::LinearPacked`](crate::backend::Op)
/// carries, and what a backend lists in [`Backend::packed_formats`](crate::Backend). The block
/// layouts (the ggml ones) and their reference quantize/dequantize live in `aria-quant`; a
/// backend receives the blocks in that layout ([`PackedBlocks`]) and packs its own at upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WeightFormat {
    /// Blocks of 32 int8 weights with one f16 scale (34 bytes).
    Q8_0,
    /// 4-bit k-quant super-blocks of 256 (144 bytes).
    Q4K,
    /// 6-bit k-quant super-blocks of 256 (210 bytes).
    Q6K,
    /// bf16 weights for bf16 products with f32 accumulation: the activations are rounded to
    /// bf16 (nearest even) and each output sums the products of bf16 pairs in f32, pair by
    /// pair (`vdpbf16ps`'s arithmetic). Blocks are pairs of bf16 (4 bytes, little-endian, the
    /// odd last weight of a row paired with 0). The CPU packs them into panels at upload
    /// (`aria_cpu::bf16dot::Bf16Panels`) and runs them on the AMX tile unit where it has one.
    Bf16Panels,
}

impl WeightFormat {
    /// The format's name (`q8_0`, `q4_k`, `q6_k`, `bf16_panels`).
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Q8_0 => "q8_0",
            WeightFormat::Q4K => "q4_k",
            WeightFormat::Q6K => "q6_k",
            WeightFormat::Bf16Panels => "bf16_panels",
        }
    }

    /// Weights per block.
    pub fn block_elems(self) -> usize {
        match self {
            WeightFormat::Q8_0 => 32,
            WeightFormat::Q4K | WeightFormat::Q6K => 256,
            WeightFormat::Bf16Panels => 2,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::Q8_0 => 34,
            WeightFormat::Q4K => 144,
            WeightFormat::Q6K => 210,
            WeightFormat::Bf16Panels => 4,
        }
    }
}

impl WeightFormat {
    /// Bytes of one row of `cols` weights: whole blocks, the last one zero-padded.
    pub fn row_bytes(self, cols: usize) -> usize {
        cols.div_ceil(self.block_elems()) * self.block_bytes()
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A packed weight in one format: its blocks in the format's reference layout, as handed to a
/// backend's [`upload_packed`](crate::Backend::upload_packed) ([`PackedWeight::blocks`]), or
/// the layout a backend packed from them, as the weight operand of
/// [`Op::LinearPacked`](crate::backend::Op) ([`PackedWeight::operand`]).
#[derive(Debug, Clone)]
pub struct PackedBlocks {
    /// The format.
    pub format: WeightFormat,
    /// Whether products quantize the activations per token to int8 (W8A8, `q8_0` only).
    pub w8a8: bool,
    /// `out`.
    pub rows: usize,
    /// `in`.
    pub cols: usize,
    /// The blocks, `U8 [rows, format.row_bytes(cols)]` on the CPU (owned or memory-mapped);
    /// or, as an operand, the backend's layout of them, on that backend.
    pub data: Tensor,
}

/// A weight matrix `[out, in]` in a packed format of the op vocabulary, implemented by
/// `aria-quant` (the ggml formats, on the CPU), `aria-cpu` (the bf16 panels) and
/// `aria_core::nn`'s weight uploaded to a device backend. It runs in the op set: a `Linear`
/// layer (`aria_core::nn`) holding one runs `aria_core::ops::linear_packed` on its
/// [`operand`](PackedWeight::operand), the layout the backend it lives on packed, whose kernels
/// decode the weight inside their micro-kernels.
pub trait PackedWeight: Send + Sync + fmt::Debug {
    /// The format's name and version (e.g. `"q8_0/v1"`).
    fn format(&self) -> &str;
    /// `[out, in]`.
    fn shape(&self) -> [usize; 2];
    /// Bytes held by the packed data.
    fn nbytes(&self) -> usize;
    /// The weight as the operand of [`Op::LinearPacked`](crate::backend::Op): its format, mode
    /// and shape, and its data in the layout of the backend it lives on (what that backend's
    /// [`upload_packed`](crate::Backend::upload_packed) gives: on the CPU, the blocks of the
    /// block formats and the panels of `bf16_panels`).
    fn operand(&self) -> PackedBlocks;
    /// The weight as a dense f32 tensor (for adapters that need the full matrix, and tests).
    fn dequantize(&self) -> Result<Tensor>;
    /// Drop the resident pages of packed data borrowed from a memory-mapped file (see
    /// [`Tensor::release_pages`]); they read back on the next use. Returns the bytes released
    /// (0, the default, for data held in owned memory).
    fn release_pages(&self) -> Result<usize> {
        Ok(0)
    }
    /// The blocks in the format's reference layout, for another backend to upload (`None`, the
    /// default: a weight whose blocks cannot be recovered, which stays where it is).
    fn blocks(&self) -> Option<PackedBlocks> {
        None
    }
    /// Where the packed data lives (the CPU unless it was uploaded).
    fn device(&self) -> Device {
        Device::Cpu
    }
    /// For a weight uploaded to a backend, the CPU weight it was uploaded from.
    fn host(&self) -> Option<Arc<dyn PackedWeight>> {
        None
    }
}
