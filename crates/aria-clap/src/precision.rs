//! The arithmetic the towers run in: f32 as stored (the reference's, within 1e-5), or bf16
//! products with f32 accumulation on packed weights (the CPU's fast path where it has one: the
//! AMX tile unit, or `vdpbf16ps` on AMD cores).

use aria_core::nn::{Linear, Weight, WeightFormat};

use crate::Result;

/// The arithmetic of the matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 on the stored weights: the reference's results (within 1e-5 relative).
    #[default]
    F32,
    /// Every linear layer's weight packed as bf16 panels (activations rounded to bf16, products
    /// accumulated in f32); the attention products may round to bf16 too. About 1e-3 relative
    /// on the embeddings; the weights take half the memory.
    Bf16Dot,
    /// [`Precision::Bf16Dot`] where the device runs it faster than f32, else [`Precision::F32`].
    Fast,
}

impl Precision {
    /// Parse `f32`, `bf16-dot` or `fast`.
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "f32" => Precision::F32,
            "bf16-dot" => Precision::Bf16Dot,
            "fast" => Precision::Fast,
            _ => return None,
        })
    }

    /// The name [`Precision::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16Dot => "bf16-dot",
            Precision::Fast => "fast",
        }
    }

    /// [`Precision::Fast`] resolved for the CPU; the others as they are.
    pub fn resolve(self) -> Precision {
        match self {
            Precision::Fast
                if aria_core::backend::faster_than_f32(
                    &aria_core::Device::Cpu,
                    WeightFormat::Bf16Panels,
                ) =>
            {
                Precision::Bf16Dot
            }
            Precision::Fast => Precision::F32,
            p => p,
        }
    }
}

/// Re-pack a linear layer's weight as bf16 panels (a layer already packed stays as it is).
pub(crate) fn pack_bf16(l: &mut Linear) -> Result<()> {
    let Some(w) = l.effective_weight() else {
        return Ok(());
    };
    let packed = aria_core::nn::pack_stacked(WeightFormat::Bf16Panels, &[w])?;
    // The dense weight's mapped pages are not needed any more.
    l.weight().release_pages()?;
    l.set_weight(Weight::Packed(packed))?;
    Ok(())
}
