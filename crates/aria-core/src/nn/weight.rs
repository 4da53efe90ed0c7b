//! Weight kinds: dense tensors, packed (quantized) formats, and run-time adapters.

use std::fmt;
use std::sync::Arc;

use crate::{Result, Tensor};

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
