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
    /// odd last weight of a row paired with 0). The CPU packs them into panels at load
    /// (`aria_core::nn::Bf16DotWeight`) and runs them on the AMX tile unit where it
    /// has one.
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

/// A packed weight's blocks in the format's reference layout, as handed to a backend's
/// [`upload_packed`](crate::Backend::upload_packed).
#[derive(Debug, Clone)]
pub struct PackedBlocks {
    /// The format.
    pub format: WeightFormat,
    /// Whether products quantize the activations per token to int8 (W8A8, `q8_0` only).
    pub w8a8: bool,
    /// `out`.
    pub rows: usize,
    /// `in` (a multiple of the format's block).
    pub cols: usize,
    /// `U8 [rows, cols / block_elems · block_bytes]` on the CPU (owned or memory-mapped).
    pub data: Tensor,
}

/// A quantized weight matrix `[out, in]` in some packed format, implemented by `aria-quant`
/// (the ggml formats) and `aria-cpu` (the bf16 panels). A `Linear` layer (`aria_core::nn`) holding one calls
/// [`PackedWeight::linear`] with f32 activations; the format's kernels dequantize inside their
/// micro-kernels.
pub trait PackedWeight: Send + Sync + fmt::Debug {
    /// The format's name and version (e.g. `"q8_0/v1"`).
    fn format(&self) -> &str;
    /// `[out, in]`.
    fn shape(&self) -> [usize; 2];
    /// Bytes held by the packed data.
    fn nbytes(&self) -> usize;
    /// `y = x·Wᵀ + b` for `x [.., in]` f32.
    fn linear(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor>;
    /// The weight as a dense f32 tensor (for adapters that need the full matrix, and tests).
    fn dequantize(&self) -> Result<Tensor>;
    /// Drop the resident pages of packed data borrowed from a memory-mapped file (see
    /// [`Tensor::release_pages`]); they read back on the next use. Returns the bytes released
    /// (0, the default, for data held in owned memory).
    fn release_pages(&self) -> Result<usize> {
        Ok(0)
    }
    /// The blocks in a format of the op vocabulary, for a backend to upload (`None`, the
    /// default: a CPU-only layout that cannot move, such as the bf16 panels).
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
