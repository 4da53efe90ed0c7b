//! Weight kinds: dense tensors, packed (quantized) formats, and run-time adapters.

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
    /// ([`Bf16DotWeight`](super::Bf16DotWeight)) and runs them on the AMX tile unit where it
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

/// A quantized weight matrix `[out, in]` in some packed format, implemented outside
/// `aria-core` (by `aria-quant`). A [`Linear`](super::Linear) holding one calls
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

/// A packed weight uploaded to a backend ([`Device::put_packed`]): the backend's own layout in
/// a device tensor, run by [`ops::linear_packed`](crate::ops::linear_packed). It keeps the CPU
/// weight it came from (memory-mapped or owned; its pages can be released), so the layer can
/// move back to the CPU.
#[derive(Debug, Clone)]
pub struct DevicePacked {
    format: WeightFormat,
    w8a8: bool,
    rows: usize,
    cols: usize,
    data: Tensor,
    host: Arc<dyn PackedWeight>,
}

impl Device {
    /// Upload a packed weight to this device's backend, in the layout the backend packs at
    /// upload. A weight already there is returned as is; on the CPU, the CPU weight.
    pub fn put_packed(&self, w: &Arc<dyn PackedWeight>) -> Result<Arc<dyn PackedWeight>> {
        let host = w.host().unwrap_or_else(|| w.clone());
        let Device::Backend(be) = self else {
            return Ok(host);
        };
        if let Device::Backend(cur) = w.device() {
            if cur.name() == be.name() {
                return Ok(w.clone());
            }
        }
        let blocks = host.blocks().ok_or_else(|| crate::CoreError::Backend {
            backend: be.name().to_string(),
            reason: format!(
                "a packed weight in format `{}` has no portable block form and cannot move to a \
                 device backend",
                host.format()
            ),
        })?;
        let data = be.upload_packed(&blocks)?;
        Ok(Arc::new(DevicePacked {
            format: blocks.format,
            w8a8: blocks.w8a8,
            rows: blocks.rows,
            cols: blocks.cols,
            data,
            host,
        }))
    }
}

impl PackedWeight for DevicePacked {
    fn format(&self) -> &str {
        self.host.format()
    }
    fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }
    fn nbytes(&self) -> usize {
        self.host.nbytes()
    }
    fn linear(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        crate::ops::linear_packed(
            x,
            &self.data,
            self.format,
            self.w8a8,
            [self.rows, self.cols],
            bias,
        )
    }
    fn dequantize(&self) -> Result<Tensor> {
        self.host.dequantize()
    }
    fn release_pages(&self) -> Result<usize> {
        self.host.release_pages()
    }
    fn device(&self) -> Device {
        self.data.device()
    }
    fn host(&self) -> Option<Arc<dyn PackedWeight>> {
        Some(self.host.clone())
    }
}

/// Where pre-quantized weights come from (a packed checkpoint, implemented by `aria-quant`),
/// attached to a loader with [`WeightLoader::with_packed`](crate::WeightLoader::with_packed):
/// [`Linear::load`](super::Linear::load) asks it for each layer's weight before reading a dense
/// one.
pub trait PackedSource: Send + Sync + fmt::Debug {
    /// The packed weight stored as tensor `name` (the full checkpoint key, e.g.
    /// `model.model.transformer.layers.0.ff.ff.2.weight`) with logical shape `[out, in]`;
    /// `Ok(None)` when the source has no packed form of it (the layer then loads the dense
    /// tensor). A packed entry of another shape, or corrupt bytes, is an error.
    fn packed(&self, name: &str, shape: [usize; 2]) -> Result<Option<Arc<dyn PackedWeight>>>;
}

/// The low-rank form of an adapter: `Δy = scale · (x·Aᵀ)·Bᵀ` with `A [r, in]`, `B [out, r]`.
#[derive(Debug, Clone)]
pub struct LowRank {
    /// `A [r, in]`.
    pub a: Tensor,
    /// `B [out, r]`.
    pub b: Tensor,
    /// Scale at strength 1 (e.g. `α / r`).
    pub scale: f32,
}

/// A weight adapter (LoRA and its relatives) applied to one layer at a strength.
pub trait Adapter: Send + Sync + fmt::Debug {
    /// What the adapter is (file and module), for error messages.
    fn describe(&self) -> String;
    /// The adapted weight computed from `w` (`[out, in]` dense, any float dtype) at `strength`.
    fn merge(&self, w: &Tensor, strength: f32) -> Result<Tensor>;
    /// The additive low-rank form, if the adapter has one (plain LoRA). Only such adapters can
    /// sit on a packed weight, as a run-time delta (the packed weight is never re-quantized).
    fn low_rank(&self) -> Option<LowRank> {
        None
    }
}

/// The weight of a layer.
#[derive(Debug, Clone)]
pub enum Weight {
    /// A dense tensor `[out, in]` in its stored dtype (often memory-mapped).
    Dense(Tensor),
    /// A packed (quantized) weight.
    Packed(Arc<dyn PackedWeight>),
}

impl Weight {
    /// `[out, in]`.
    pub fn shape(&self) -> [usize; 2] {
        match self {
            Weight::Dense(t) => {
                let s = t.shape();
                [
                    s.first().copied().unwrap_or(0),
                    s.get(1).copied().unwrap_or(0),
                ]
            }
            Weight::Packed(p) => p.shape(),
        }
    }

    /// Bytes the weight holds (a mapped tensor's bytes count too: they are in the page cache).
    pub fn nbytes(&self) -> usize {
        match self {
            Weight::Dense(t) => t.elem_count() * t.dtype().size(),
            Weight::Packed(p) => p.nbytes(),
        }
    }

    /// Drop the resident pages of a weight borrowed from a memory-mapped file (see
    /// [`Tensor::release_pages`]); it reads back from the file on its next use. Returns the
    /// bytes released (0 for weights in owned memory).
    pub fn release_pages(&self) -> Result<usize> {
        match self {
            Weight::Dense(t) => t.release_pages(),
            Weight::Packed(p) => p.release_pages(),
        }
    }

    /// The dense tensor, if this is a dense weight.
    pub fn dense(&self) -> Option<&Tensor> {
        match self {
            Weight::Dense(t) => Some(t),
            Weight::Packed(_) => None,
        }
    }

    /// A short description of the kind (`"dense bf16"`, `"packed q8_0/v1"`).
    pub fn kind(&self) -> String {
        match self {
            Weight::Dense(t) => format!("dense {}", t.dtype()),
            Weight::Packed(p) => format!("packed {}", p.format()),
        }
    }
}
