// Without the `quant` feature the items these docs link to do not exist.
#![cfg_attr(not(feature = "quant"), allow(rustdoc::broken_intra_doc_links))]
//! Weight precision of the DiT (and optionally the decoder and the text encoder): packing at
//! load, pre-quantized model folders, memory plans.
//!
//! * [`WeightPrecision`]: what [`LoadOptions::precision`](crate::LoadOptions::precision) asks
//!   for. `f16`/`bf16` convert the DiT linears to 16-bit tensors; `q8`, `q4` and `q4-mixed`
//!   pack them with the [`aria_quant::Policy`] of that name (cross-attention K/V stays in full
//!   precision: it is computed once per generation). Either way, **the full-precision pages are
//!   released** once the new form exists (`madvise(MADV_DONTNEED)` on the memory-mapped ranges,
//!   [`aria_core::WeightLoader::release`]): lower precision replaces memory instead of adding
//!   to it.
//! * [`quantize_model`] writes a complete pre-quantized model folder (what `aria quantize`
//!   does): a packed safetensors file (U8 blocks plus format version, policy and source
//!   checksum in the metadata, see [`aria_quant::io`]), the same `model_config.json`, and the
//!   text-encoder folder (hard links, or copies across file systems). Loading it reads no dense
//!   weight it replaces; corrupt, truncated or mismatched packed files are refused with errors
//!   that name the file and tensor.
//! * W8A8 ([`LoadOptions::w8a8`](crate::LoadOptions::w8a8)): the `q8_0` layers quantize their
//!   activations per token and run int8 × int8 dot products.
//! * LoRA on a packed base runs as a run-time low-rank delta; the base is never re-quantized.
//! * The autoencoder decoder can be packed too
//!   ([`LoadOptions::quantize_decoder`](crate::LoadOptions::quantize_decoder), `q8_0`, into
//!   the same kind of mapped temporary file as the DiT). [`quantize_model`] writes it packed
//!   into the folder by default ([`QuantizeOptions::dense_decoder`] keeps it dense); such a
//!   folder's decoder loads packed from the file, bit for bit the blocks packing at load makes.
//! * The T5Gemma encoder's matrices can be packed as `q8_0` at load
//!   ([`LoadOptions::quantize_text`](crate::LoadOptions::quantize_text), `pack_text`): less
//!   memory for the text stage, not faster; f32 text arithmetic only.
//! * **Stages do not add up.** A run releases the mapped pages of the weights a stage no
//!   longer needs ([`aria_core::Tensor::release_pages`]; unless
//!   [`LoadOptions::keep_resident`](crate::LoadOptions::keep_resident)): the text encoder once
//!   the prompts are encoded, the DiT's context layers (cross-attention K/V and the condition
//!   embedders) once it is prepared, the DiT before decoding, the autoencoder after it. They
//!   read back from the page cache on the next request. A pre-quantized folder's packed
//!   weights are borrowed from its mapping, so they leave before decoding too. Weights packed
//!   at load are quantized one matrix at a time into an unlinked, memory-mapped temporary
//!   file (in `TMPDIR`; [`PackReport::spilled`]) and borrowed from it the same way; where
//!   that file cannot be written they stay in owned memory for the life of the pipeline.
//!
//! Packing needs the `quant` cargo feature (on by default in the `aria` program).

use std::collections::BTreeMap;
use std::fmt;

use aria_core::WeightLoader;
#[cfg(feature = "quant")]
use aria_dit::dit::Dit;

use crate::{Error, Result};

/// The precision of the DiT's linear weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WeightPrecision {
    /// As stored (f32 in the released checkpoints).
    #[default]
    F32,
    /// IEEE half precision tensors.
    F16,
    /// bfloat16 tensors.
    Bf16,
    /// bf16 weights in the `bf16_panels` format
    /// ([`WeightFormat::Bf16Panels`](aria_core::nn::WeightFormat::Bf16Panels)): bf16 products
    /// with f32 accumulation, on the unit the backend picks (the CPU: the AMX tile unit where it
    /// has one, `vdpbf16ps` with AVX-512 BF16, else a slow exact emulation). Half the bytes of
    /// f32, and the fast mode where the CPU has bf16 product units.
    Bf16Dot,
    /// `q8_0` blocks (8.5 bits per weight).
    Q8,
    /// `q4_k` blocks (4.5 bits per weight; `q8_0` where the width does not fit).
    Q4,
    /// `q4_k` FFN, `q6_k` FFN output, `q8_0` attention and the rest (see [`aria_quant::Policy`]).
    Q4Mixed,
    /// The fastest measured mode for the device ([`WeightPrecision::resolve`]): `bf16-dot` where
    /// the device runs bf16 products faster than f32 (an AMX-BF16 tile unit, or AVX-512 BF16 on
    /// AMD cores), else `f32`. The report names the mode that ran.
    Fast,
}

impl WeightPrecision {
    /// Every precision.
    pub const ALL: [WeightPrecision; 8] = [
        WeightPrecision::F32,
        WeightPrecision::F16,
        WeightPrecision::Bf16,
        WeightPrecision::Bf16Dot,
        WeightPrecision::Q8,
        WeightPrecision::Q4,
        WeightPrecision::Q4Mixed,
        WeightPrecision::Fast,
    ];

    /// The name used on the command line (`f32`, `f16`, `bf16`, `bf16-dot`, `q8`, `q4`,
    /// `q4-mixed`).
    pub fn name(self) -> &'static str {
        match self {
            WeightPrecision::F32 => "f32",
            WeightPrecision::F16 => "f16",
            WeightPrecision::Bf16 => "bf16",
            WeightPrecision::Bf16Dot => "bf16-dot",
            WeightPrecision::Q8 => "q8",
            WeightPrecision::Q4 => "q4",
            WeightPrecision::Q4Mixed => "q4-mixed",
            WeightPrecision::Fast => "fast",
        }
    }

    /// Parse a name written by [`WeightPrecision::name`].
    pub fn parse(name: &str) -> Result<WeightPrecision> {
        WeightPrecision::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                Error::Input(format!(
                    "unknown precision `{name}` (f32, f16, bf16, bf16-dot, q8, q4, q4-mixed, fast)"
                ))
            })
    }

    /// The concrete mode for a run on `device`: [`WeightPrecision::Fast`] becomes `bf16-dot`
    /// where the device runs `bf16_panels` products faster than f32
    /// ([`aria_core::backend::faster_than_f32`]; on the CPU: an AMX-BF16 tile unit, or AVX-512
    /// BF16 on AMD cores; measured on an AMX Xeon, 2 threads: DiT step 2.9×, `generate()` 2.8×
    /// the f32 speed, final latents 1e-3 of the seed-to-seed spread), else `f32`; every other
    /// precision is itself.
    pub fn resolve(self, device: crate::pipeline::DeviceKind) -> WeightPrecision {
        use aria_core::nn::WeightFormat;
        match self {
            WeightPrecision::Fast
                if device == crate::pipeline::DeviceKind::Cpu
                    && aria_core::backend::faster_than_f32(
                        &aria_core::Device::Cpu,
                        WeightFormat::Bf16Panels,
                    ) =>
            {
                WeightPrecision::Bf16Dot
            }
            WeightPrecision::Fast => WeightPrecision::F32,
            p => p,
        }
    }

    /// Whether the precision packs weights into quantized blocks.
    pub fn is_packed(self) -> bool {
        matches!(
            self,
            WeightPrecision::Q8 | WeightPrecision::Q4 | WeightPrecision::Q4Mixed
        )
    }

    /// The packing policy of a packed precision.
    #[cfg(feature = "quant")]
    pub fn policy(self) -> Option<aria_quant::Policy> {
        match self {
            WeightPrecision::Q8 => Some(aria_quant::Policy::Q8),
            WeightPrecision::Q4 => Some(aria_quant::Policy::Q4),
            WeightPrecision::Q4Mixed => Some(aria_quant::Policy::Q4Mixed),
            _ => None,
        }
    }
}

impl fmt::Display for WeightPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What loading did to the DiT's linear weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackReport {
    /// The precision the DiT runs at.
    pub precision: WeightPrecision,
    /// Whether the `q8_0` layers run W8A8.
    pub w8a8: bool,
    /// Whether the weights came packed from a pre-quantized folder.
    pub prequantized: bool,
    /// Linear layers per weight kind (`packed q8_0/v1`, `dense f32`, …).
    pub kinds: BTreeMap<String, usize>,
    /// Bytes of the DiT linear weights as stored in the checkpoint.
    pub stored_bytes: usize,
    /// Bytes of the DiT linear weights as the model now holds them.
    pub held_bytes: usize,
    /// Bytes of memory-mapped pages released after packing or converting.
    pub released_bytes: usize,
    /// Whether the weights packed at load live in a memory-mapped temporary file (their
    /// pages can then be released between stages, as a pre-quantized folder's are) rather
    /// than in owned memory.
    pub spilled: bool,
    /// The autoencoder decoder's matrices per weight kind (`packed q8_0/v1`, `dense f32`,
    /// …): packed when the folder was written so or with
    /// [`LoadOptions::quantize_decoder`](crate::LoadOptions::quantize_decoder).
    pub decoder_kinds: BTreeMap<String, usize>,
    /// The autoencoder encoder's matrices per weight kind (`packed bf16_panels/v1` with
    /// [`WeightPrecision::Bf16Dot`], else `dense f32`).
    pub encoder_kinds: BTreeMap<String, usize>,
}

impl PackReport {
    /// One line: precision, kinds, bytes, and the decoder's kinds.
    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let dec: Vec<String> = self
            .decoder_kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let enc: Vec<String> = self
            .encoder_kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        format!(
            "DiT weights {}{}{}{}: {} ({:.3} GB stored, {:.3} GB held, {:.3} GB of pages released){}{}",
            self.precision,
            if self.spilled {
                " (packed into a mapped temporary file)"
            } else {
                ""
            },
            if self.w8a8 { " + W8A8" } else { "" },
            if self.prequantized {
                " (pre-quantized)"
            } else {
                ""
            },
            kinds.join(", "),
            self.stored_bytes as f64 / 1e9,
            self.held_bytes as f64 / 1e9,
            self.released_bytes as f64 / 1e9,
            if dec.is_empty() {
                String::new()
            } else {
                format!("; decoder {}", dec.join(", "))
            },
            if enc.is_empty() {
                String::new()
            } else {
                format!("; encoder {}", enc.join(", "))
            }
        )
    }
}

#[cfg(feature = "quant")]
fn qerr(e: aria_quant::QuantError) -> Error {
    Error::Core(e.into())
}

/// The policy recorded in the checkpoint, if `weights` is a packed (pre-quantized) file.
pub fn packed_policy(weights: &WeightLoader) -> Result<Option<String>> {
    let names = weights.names();
    let Some(first) = names.first() else {
        return Ok(None);
    };
    let md = weights.file_metadata(first)?;
    if !md.contains_key("aria.quant.version") {
        return Ok(None);
    }
    Ok(Some(
        md.get("aria.quant.policy").cloned().unwrap_or_default(),
    ))
}

/// The loader the DiT is built from: `weights` itself, or, for a pre-quantized checkpoint, the
/// same loader with the packed file attached as its packed source (so the DiT's layers take
/// their packed weights without reading a dense one). Refuses a pre-quantized checkpoint
/// asked to load at another precision.
pub(crate) fn dit_loader(
    weights: &WeightLoader,
    path: &std::path::Path,
    precision: Option<WeightPrecision>,
    w8a8: bool,
) -> Result<(WeightLoader, Option<WeightPrecision>)> {
    let Some(policy) = packed_policy(weights)? else {
        return Ok((weights.clone(), None));
    };
    let stored = WeightPrecision::parse(&policy).map_err(|_| {
        Error::Config(format!(
            "{}: packed with unknown policy `{policy}`",
            path.display()
        ))
    })?;
    // `fast` takes a pre-quantized folder as it is.
    if let Some(p) = precision.filter(|p| *p != stored && *p != WeightPrecision::Fast) {
        return Err(Error::Input(format!(
            "{} is pre-quantized at {stored}; it cannot load at {p} (quantize the original \
             checkpoint instead, or leave the precision unset)",
            path.display()
        )));
    }
    #[cfg(feature = "quant")]
    {
        use aria_quant::io::{PackedFile, PackedFileSource};
        let file = PackedFile::open(path).map_err(qerr)?;
        let compute = if w8a8 {
            aria_quant::Compute::W8A8
        } else {
            aria_quant::Compute::WeightOnly
        };
        let src = PackedFileSource::new(file, compute);
        Ok((weights.with_packed(std::sync::Arc::new(src)), Some(stored)))
    }
    #[cfg(not(feature = "quant"))]
    {
        let _ = w8a8;
        Err(Error::Unavailable(format!(
            "{} is pre-quantized ({stored}); this aria is built without the `quant` feature",
            path.display()
        )))
    }
}

/// Bring the DiT's linear weights to `precision` (`None`: as stored), releasing the pages of
/// every dense weight replaced. `weights` is the root loader the DiT was loaded from.
#[cfg(feature = "quant")]
pub(crate) fn prepare_dit(
    dit: &mut Dit,
    weights: &WeightLoader,
    precision: Option<WeightPrecision>,
    prequantized: Option<WeightPrecision>,
    w8a8: bool,
) -> Result<PackReport> {
    use aria_core::nn::Weight;
    use aria_quant::{Compute, Format, PackedMatrix};
    use std::sync::Arc;

    let precision = prequantized.or(precision).unwrap_or_default();
    if w8a8 && !precision.is_packed() {
        return Err(Error::Input(format!(
            "W8A8 needs packed q8_0 weights (precision q8 or q4-mixed), not {precision}"
        )));
    }
    let mut rep = PackReport {
        precision,
        w8a8,
        prequantized: prequantized.is_some(),
        ..Default::default()
    };
    // Packed formats: quantized one matrix at a time into a memory-mapped temporary file
    // (see `spill`), so that the packed weights can leave the resident set between stages as a
    // pre-quantized folder's do; in owned memory when the file cannot be written.
    let mut jobs: Vec<(usize, spill::Job)> = Vec::new();
    for (i, lin) in dit.linears_mut().into_iter().enumerate() {
        let key = format!("{}.weight", lin.name());
        let shape = lin.weight().shape();
        rep.stored_bytes += weights
            .info(&key)
            .map(|(_, i)| i.end - i.start)
            .unwrap_or(0);
        let dense = lin.weight().dense().cloned();
        let Some(w) = dense.filter(|_| prequantized.is_none()) else {
            continue;
        };
        let new = match precision {
            WeightPrecision::F32 => None,
            WeightPrecision::F16 | WeightPrecision::Bf16 => {
                let dt = if precision == WeightPrecision::F16 {
                    aria_core::DType::F16
                } else {
                    aria_core::DType::BF16
                };
                (w.dtype() != dt).then(|| w.to_dtype(dt).map(Weight::Dense).map_err(Error::from))
            }
            WeightPrecision::Bf16Dot => {
                // Kernel-1 convolutions are stored `[out, in, 1]`.
                let w2 = if w.rank() == 3 {
                    w.reshape(&shape)?
                } else {
                    w.clone()
                };
                Some(
                    aria_core::nn::pack_stacked(aria_core::nn::WeightFormat::Bf16Panels, &[&w2])
                        .map(Weight::Packed)
                        .map_err(Error::from),
                )
            }
            _ => {
                if let Some(format) = precision.policy().and_then(|p| p.format_for(&key, shape)) {
                    let weight = if w.rank() == 3 {
                        w.reshape(&shape)?
                    } else {
                        w.clone()
                    };
                    jobs.push((
                        i,
                        spill::Job {
                            key: key.clone(),
                            weight,
                            format,
                        },
                    ));
                }
                None
            }
        };
        if let Some(new) = new {
            drop(w);
            lin.set_weight(new?)?;
            if weights.contains(&key) {
                rep.released_bytes += weights.release(&key)?;
            }
        }
    }
    if !jobs.is_empty() {
        let list: Vec<spill::Job> = jobs
            .iter()
            .map(|(_, j)| spill::Job {
                key: j.key.clone(),
                weight: j.weight.clone(),
                format: j.format,
            })
            .collect();
        let mut released = 0usize;
        let mut release = |k: usize| -> Result<()> {
            let key = &list[k].key;
            if weights.contains(key) {
                released += weights.release(key)?;
            }
            Ok(())
        };
        let packed = match spill::pack(&list, &std::env::temp_dir(), &mut release) {
            Ok(v) => {
                rep.spilled = true;
                v
            }
            Err(_) => list
                .iter()
                .enumerate()
                .map(|(k, j)| {
                    let m = PackedMatrix::quantize(&j.key, &j.weight, j.format).map_err(qerr)?;
                    release(k)?;
                    Ok(m)
                })
                .collect::<Result<Vec<_>>>()?,
        };
        rep.released_bytes += released;
        drop(list);
        let mut lins = dit.linears_mut();
        for ((i, j), m) in jobs.into_iter().zip(packed) {
            let m = if w8a8 && j.format == Format::Q8_0 {
                m.with_compute(Compute::W8A8).map_err(qerr)?
            } else {
                m
            };
            drop(j);
            lins[i].set_weight(Weight::Packed(Arc::new(m)))?;
        }
    }
    for lin in dit.linears() {
        *rep.kinds.entry(lin.weight().kind()).or_default() += 1;
        rep.held_bytes += lin.weight().nbytes();
    }
    // bf16 products for the attention too (the backend takes it where it has a unit for them).
    dit.set_bf16_attention(precision == WeightPrecision::Bf16Dot);
    dit.mark_weights_changed();
    Ok(rep)
}

/// Pack the DiT linears for which `choose(key, [out, in])` names a format (the others stay as
/// they are), releasing the pages of every dense weight replaced; `w8a8` runs the `q8_0` ones
/// W8A8. For measurements of which layers matter (per-layer-group sensitivity); loading uses
/// the policies of [`WeightPrecision`].
#[cfg(feature = "quant")]
pub fn pack_linears(
    dit: &mut Dit,
    weights: &WeightLoader,
    choose: &dyn Fn(&str, [usize; 2]) -> Option<aria_quant::Format>,
    w8a8: bool,
) -> Result<PackReport> {
    use aria_core::nn::Weight;
    use aria_quant::{Compute, Format, PackedMatrix};
    let mut rep = PackReport {
        w8a8,
        ..Default::default()
    };
    for lin in dit.linears_mut() {
        let key = format!("{}.weight", lin.name());
        let shape = lin.weight().shape();
        rep.stored_bytes += lin.weight().nbytes();
        if let (Some(w), Some(f)) = (lin.weight().dense().cloned(), choose(&key, shape)) {
            let m = PackedMatrix::quantize(&key, &w, f).map_err(qerr)?;
            let m = if w8a8 && f == Format::Q8_0 {
                m.with_compute(Compute::W8A8).map_err(qerr)?
            } else {
                m
            };
            drop(w);
            lin.set_weight(Weight::Packed(std::sync::Arc::new(m)))?;
            if weights.contains(&key) {
                rep.released_bytes += weights.release(&key)?;
            }
        }
        *rep.kinds.entry(lin.weight().kind()).or_default() += 1;
        rep.held_bytes += lin.weight().nbytes();
    }
    dit.mark_weights_changed();
    Ok(rep)
}

/// Pack every matrix of the autoencoder's decoder as `q8_0` (W8A8 with `w8a8`), releasing
/// the mapped pages of the dense weights replaced ([`LoadOptions::quantize_decoder`]
/// (crate::LoadOptions::quantize_decoder)). Like the DiT's, the blocks are quantized one
/// matrix at a time into a memory-mapped temporary file (owned memory where it cannot be
/// written). Returns `(layers packed, bytes before, bytes after)`.
#[cfg(feature = "quant")]
pub(crate) fn pack_decoder(
    ae: &mut aria_codec::Autoencoder,
    w8a8: bool,
) -> Result<(usize, usize, usize)> {
    use aria_core::nn::Weight;
    use aria_quant::{Compute, Format, PackedMatrix};
    let mut idx = Vec::new();
    let mut jobs = Vec::new();
    let mut before = 0;
    for (i, lin) in ae.decoder_linears_mut().into_iter().enumerate() {
        let Some(w) = lin.weight().dense().cloned() else {
            continue;
        };
        before += lin.weight().nbytes();
        idx.push(i);
        jobs.push(spill::Job {
            key: format!("{}.weight", lin.name()),
            weight: w,
            format: Format::Q8_0,
        });
    }
    let mut release = |k: usize| -> Result<()> {
        jobs[k].weight.release_pages()?;
        Ok(())
    };
    let packed = match spill::pack(&jobs, &std::env::temp_dir(), &mut release) {
        Ok(v) => v,
        Err(_) => jobs
            .iter()
            .map(|j| {
                let m = PackedMatrix::quantize(&j.key, &j.weight, j.format).map_err(qerr)?;
                j.weight.release_pages()?;
                Ok(m)
            })
            .collect::<Result<Vec<_>>>()?,
    };
    drop(jobs);
    let mut after = 0;
    let mut lins = ae.decoder_linears_mut();
    for (i, m) in idx.iter().zip(packed) {
        let m = if w8a8 {
            m.with_compute(Compute::W8A8).map_err(qerr)?
        } else {
            m
        };
        lins[*i].set_weight(Weight::Packed(std::sync::Arc::new(m)))?;
        after += lins[*i].weight().nbytes();
    }
    Ok((idx.len(), before, after))
}

/// Hold every dense matrix of the autoencoder, decoder and encoder, in the `bf16_panels`
/// format (the autoencoder's side of [`WeightPrecision::Bf16Dot`]: decoding, and the encodes
/// of audio-to-audio, inpainting and the warm-start cache's stretched references), releasing
/// the mapped pages of the dense weights replaced. Matrices already packed (a `q8_0` decoder)
/// keep their format. Returns `(layers packed, bytes before, bytes after)`.
pub(crate) fn pack_autoencoder_bf16(
    ae: &mut aria_codec::Autoencoder,
) -> Result<(usize, usize, usize)> {
    use aria_core::nn::{Bf16DotWeight, Weight};
    fn pack(lin: &mut aria_core::nn::Linear, sums: &mut (usize, usize, usize)) -> Result<()> {
        let Some(w) = lin.weight().dense().cloned() else {
            return Ok(());
        };
        let shape = lin.weight().shape();
        sums.1 += lin.weight().nbytes();
        let w2 = if w.rank() == 2 {
            w.clone()
        } else {
            w.reshape(&shape)?
        };
        let p = Bf16DotWeight::pack(&w2)?;
        drop(w2);
        w.release_pages()?;
        lin.set_weight(Weight::Packed(std::sync::Arc::new(p)))?;
        sums.2 += lin.weight().nbytes();
        sums.0 += 1;
        Ok(())
    }
    let mut sums = (0, 0, 0);
    for lin in ae.decoder_linears_mut() {
        pack(lin, &mut sums)?;
    }
    for lin in ae.encoder_linears_mut() {
        pack(lin, &mut sums)?;
    }
    Ok(sums)
}

/// For a pre-quantized checkpoint: give the decoder matrices that did not load packed through
/// `loader`'s packed source (the mapping convolution, whose weight is folded from its
/// weight-normalised parts at load) their packed form from the file, dropping the folded
/// copy and releasing the pages it was read from. Returns the layers changed.
#[cfg(feature = "quant")]
pub(crate) fn attach_decoder(
    ae: &mut aria_codec::Autoencoder,
    loader: &WeightLoader,
) -> Result<usize> {
    use aria_core::nn::Weight;
    let mut n = 0;
    for lin in ae.decoder_linears_mut() {
        if lin.weight().dense().is_none() {
            continue;
        }
        let key = format!("{}.weight", lin.name());
        if let Some(p) = loader.packed_weight(&key, lin.weight().shape())? {
            lin.set_weight(Weight::Packed(p))?;
            n += 1;
        }
    }
    if n > 0 {
        write::release_folded(loader)?;
    }
    Ok(n)
}

/// Without the `quant` feature no checkpoint is pre-quantized.
#[cfg(not(feature = "quant"))]
pub(crate) fn attach_decoder(
    _ae: &mut aria_codec::Autoencoder,
    _loader: &WeightLoader,
) -> Result<usize> {
    Ok(0)
}

/// The decoder's matrices per weight kind (`packed q8_0/v1`, `dense f32`, …).
pub(crate) fn decoder_kinds(ae: &mut aria_codec::Autoencoder) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for lin in ae.decoder_linears_mut() {
        *kinds.entry(lin.weight().kind()).or_default() += 1;
    }
    kinds
}

/// The encoder's matrices per weight kind.
pub(crate) fn encoder_kinds(ae: &mut aria_codec::Autoencoder) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for lin in ae.encoder_linears_mut() {
        *kinds.entry(lin.weight().kind()).or_default() += 1;
    }
    kinds
}

/// Without the `quant` feature the decoder keeps its stored weights.
#[cfg(not(feature = "quant"))]
pub(crate) fn pack_decoder(
    _ae: &mut aria_codec::Autoencoder,
    _w8a8: bool,
) -> Result<(usize, usize, usize)> {
    Err(Error::Unavailable(
        "quantizing the decoder needs the `quant` feature of the aria crate".into(),
    ))
}

/// Without the `quant` feature only stored weights load.
#[cfg(not(feature = "quant"))]
pub(crate) fn prepare_dit(
    dit: &mut aria_dit::dit::Dit,
    _weights: &WeightLoader,
    precision: Option<WeightPrecision>,
    _prequantized: Option<WeightPrecision>,
    w8a8: bool,
) -> Result<PackReport> {
    let precision = precision.unwrap_or_default();
    if precision != WeightPrecision::F32 || w8a8 {
        return Err(Error::Unavailable(format!(
            "precision {precision}{} needs the `quant` feature of the aria crate",
            if w8a8 { " with W8A8" } else { "" }
        )));
    }
    let mut rep = PackReport::default();
    for lin in dit.linears() {
        *rep.kinds.entry(lin.weight().kind()).or_default() += 1;
        rep.held_bytes += lin.weight().nbytes();
    }
    rep.stored_bytes = rep.held_bytes;
    Ok(rep)
}

#[cfg(feature = "quant")]
mod spill;
#[cfg(feature = "quant")]
mod write;
#[cfg(feature = "quant")]
pub use write::{quantize_model, quantize_model_with, QuantizeOptions, QuantizeSummary};
#[cfg(feature = "quant")]
mod text;
#[cfg(feature = "quant")]
pub use text::{pack_text, TextPack};

/// Without the `quant` feature the text encoder keeps its stored weights.
#[cfg(not(feature = "quant"))]
pub(crate) fn pack_text(
    _text: &mut aria_dit::conditioner::TextConditioner,
    _w8a8: bool,
) -> Result<()> {
    Err(Error::Unavailable(
        "quantizing the text encoder needs the `quant` feature of the aria crate".into(),
    ))
}

/// Bytes per weight of each precision for a linear `[out, in]` named `key` (the memory plan
/// of [`crate::info`]): what the DiT linear weights would hold.
pub fn planned_bytes(
    precision: WeightPrecision,
    key: &str,
    shape: [usize; 2],
    stored: usize,
) -> usize {
    let n = shape[0] * shape[1];
    match precision {
        WeightPrecision::F32 => stored,
        WeightPrecision::F16 | WeightPrecision::Bf16 | WeightPrecision::Bf16Dot => n * 2,
        WeightPrecision::Fast => planned_bytes(
            precision.resolve(crate::pipeline::DeviceKind::Cpu),
            key,
            shape,
            stored,
        ),
        #[cfg(feature = "quant")]
        p => match p.policy().and_then(|pol| pol.format_for(key, shape)) {
            Some(f) => shape[0] * f.row_bytes(shape[1]),
            None => stored,
        },
        #[cfg(not(feature = "quant"))]
        _ => {
            let _ = key;
            stored
        }
    }
}

/// The DiT linear weights of a checkpoint from its headers: `(key, [out, in], stored bytes)`
/// (2-D `*.weight` tensors of the DiT and kernel-1 convolutions `[out, in, 1]`).
fn dit_linear_headers(weights: &WeightLoader) -> Result<Vec<(String, [usize; 2], usize)>> {
    let mut v = Vec::new();
    for n in weights.names() {
        if !n.starts_with("model.model.") || !n.ends_with(".weight") {
            continue;
        }
        let (_, i) = weights.info(&n)?;
        let shape = match i.shape.as_slice() {
            [o, k] | [o, k, 1] => [*o, *k],
            _ => continue,
        };
        v.push((n.clone(), shape, i.end - i.start));
    }
    Ok(v)
}

/// The memory plan per precision of a model folder, from its headers: the DiT linear weights
/// each precision holds and the weights resident during a generation (the DiT, the text
/// encoder's layers and the autoencoder's decoder; the token-embedding table and the
/// autoencoder's encoder are only touched where used). A table, one line per precision.
pub fn memory_plan(files: &crate::discover::ModelFiles) -> Result<String> {
    use std::fmt::Write;
    let weights = WeightLoader::open_checkpoint(&files.weights)?;
    let mut s = String::new();
    if let Some(p) = packed_policy(&weights)? {
        let names = weights.names();
        let decoder = match names.first() {
            Some(n) => weights.file_metadata(n)?.get("aria.quant.decoder").cloned(),
            None => None,
        };
        let _ = writeln!(
            s,
            "memory plan: pre-quantized ({p}); the DiT loads packed from the file, {}",
            match decoder {
                Some(f) => format!("and the autoencoder decoder too ({f})"),
                None => "the autoencoder decoder dense".to_string(),
            }
        );
        return Ok(s);
    }
    let linears = dit_linear_headers(&weights)?;
    let stored: usize = linears.iter().map(|l| l.2).sum();
    let mut rest = 0usize;
    for n in weights.names() {
        let (_, i) = weights.info(&n)?;
        if n.starts_with("pretransform.model.encoder") {
            continue;
        }
        rest += i.end - i.start;
    }
    rest -= stored.min(rest);
    let t5 = WeightLoader::open(&[files.t5_dir.join("model.safetensors")])?;
    for n in t5.names() {
        if n.contains("decoder.") || n.ends_with("embed_tokens.weight") {
            continue;
        }
        let (_, i) = t5.info(&n)?;
        rest += i.end - i.start;
    }
    let _ = writeln!(
        s,
        "memory plan per --precision (DiT linears; resident weights incl. text-encoder layers \
         and decoder, {:.3} GB besides the DiT linears):",
        rest as f64 / 1e9
    );
    let _ = writeln!(
        s,
        "  {:<9} {:>12} {:>16}",
        "precision", "DiT linears", "resident weights"
    );
    for p in WeightPrecision::ALL {
        #[cfg(not(feature = "quant"))]
        if p.is_packed() {
            continue;
        }
        let dit: usize = linears
            .iter()
            .map(|(k, shape, b)| planned_bytes(p, k, *shape, *b))
            .sum();
        let _ = writeln!(
            s,
            "  {:<9} {:>9.3} GB {:>13.3} GB",
            p.name(),
            dit as f64 / 1e9,
            (dit + rest) as f64 / 1e9
        );
    }
    Ok(s)
}
