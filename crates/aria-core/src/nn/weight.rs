//! Weight kinds: dense tensors, packed (quantized) formats, and run-time adapters.

use std::fmt;
use std::sync::Arc;

pub use aria_tensor::format::{PackedBlocks, PackedWeight, WeightFormat};

use crate::{Device, Result, Tensor};

/// A packed weight uploaded to a backend ([`put_packed`]): the backend's own layout in
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

/// Dense weights `[out_i, in]` (f32, f16 or bf16, with the same `in`) as one packed weight
/// `[Σ out_i, in]` in `format`, their rows one after the other (e.g. a layer's query, key and
/// value projections as one product), packed on the CPU; a layer holding it uploads it with
/// [`Linear::to_device`](crate::nn::Linear::to_device). Device weights are read back once.
///
/// `bf16_panels` packs here (the CPU's panels, `aria_cpu::host::Bf16DotWeight`); the block
/// formats are quantized by `aria-quant` (their quantizers choose scales), so they are refused
/// here, naming the format.
pub fn pack_stacked(format: WeightFormat, parts: &[&Tensor]) -> Result<Arc<dyn PackedWeight>> {
    match format {
        WeightFormat::Bf16Panels => {
            let host = parts
                .iter()
                .map(|w| w.to_cpu())
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = host.iter().collect();
            Ok(Arc::new(aria_cpu::host::Bf16DotWeight::pack_stacked(
                &refs,
            )?))
        }
        f => Err(crate::CoreError::Invalid(format!(
            "weights are packed as {f} by aria-quant's quantizers, not by nn::pack_stacked"
        ))),
    }
}

/// Upload a packed weight to `device`'s backend, in the layout the backend packs at upload. A
/// weight already there is returned as is; on the CPU, the CPU weight.
pub fn put_packed(device: &Device, w: &Arc<dyn PackedWeight>) -> Result<Arc<dyn PackedWeight>> {
    {
        let host = w.host().unwrap_or_else(|| w.clone());
        let Device::Backend(be) = device else {
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
    fn operand(&self) -> PackedBlocks {
        PackedBlocks {
            format: self.format,
            w8a8: self.w8a8,
            rows: self.rows,
            cols: self.cols,
            data: self.data.clone(),
        }
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
