//! Packing the T5Gemma encoder's matrices ([`LoadOptions::quantize_text`]
//! (crate::LoadOptions::quantize_text)).

use aria_core::nn::Weight;
use aria_dit::conditioner::TextConditioner;
use aria_dit::t5gemma::Precision;
use aria_quant::{Compute, Format, PackedMatrix};

use super::qerr;
use crate::{Error, Result};

/// What [`pack_text`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextPack {
    /// Matrices packed.
    pub layers: usize,
    /// Bytes of their stored weights.
    pub stored_bytes: usize,
    /// Bytes of the packed weights.
    pub packed_bytes: usize,
}

/// Pack every matrix of the text encoder's layers as `q8_0` (W8A8 with `w8a8`), releasing the
/// mapped pages of the dense weights replaced. The token-embedding table stays as stored (it is
/// gathered by rows, never multiplied). The encoder must run f32 arithmetic: the replay of the
/// reference's bf16 arithmetic needs the dense bf16 weights.
pub fn pack_text(text: &mut TextConditioner, w8a8: bool) -> Result<TextPack> {
    let enc = text.prompt_mut().encoder_mut();
    if enc.precision() == Precision::Bf16 {
        return Err(Error::Input(
            "the text encoder's bf16 replay needs its dense bf16 weights; quantizing the text \
             encoder needs f32 text precision"
                .into(),
        ));
    }
    let mut rep = TextPack::default();
    for lin in enc.linears_mut() {
        let Some(w) = lin.weight().dense().cloned() else {
            continue;
        };
        let key = format!("{}.weight", lin.name());
        let m = PackedMatrix::quantize(&key, &w, Format::Q8_0).map_err(qerr)?;
        let m = if w8a8 {
            m.with_compute(Compute::W8A8).map_err(qerr)?
        } else {
            m
        };
        rep.stored_bytes += lin.weight().nbytes();
        lin.set_weight(Weight::Packed(std::sync::Arc::new(m)))?;
        w.release_pages()?;
        rep.packed_bytes += lin.weight().nbytes();
        rep.layers += 1;
    }
    Ok(rep)
}
