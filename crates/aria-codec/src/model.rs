//! The SAME autoencoder: patching, encoder, SoftNorm bottleneck, decoder, chunked decode.

use std::path::Path;

use aria_core::nn::{Bias, Linear};
use aria_core::{ops, DType, Device, Tensor, WeightLoader};

use crate::config::AutoencoderConfig;
use crate::error::{CodecError, Result};
use crate::noise::{Draw, NoiseSource};
use crate::stage::{Dir, Stage};

/// Latents per window of the official chunked decode / encode.
pub const CHUNK_LATENTS: usize = 128;
/// Overlap (latents) between consecutive windows of the official chunked decode / encode.
pub const CHUNK_OVERLAP: usize = 32;

/// Intermediate tensors of one decode (for parity tests and debugging).
#[derive(Debug, Clone)]
pub struct DecodeTrace {
    /// Bottleneck output `[B, C, T]` (latents · running_std, plus noise when on).
    pub bottleneck_out: Tensor,
    /// Output of every transformer block, in the layout the block saw: `[B·chunks, chunk, D]`
    /// for chunked attention (the shifted half includes the edge copies), `[B, 17·T, D]` for a
    /// sliding window.
    pub block_outputs: Vec<Tensor>,
    /// Decoder output before un-patching, `[B, 2·patch, stride·T']`.
    pub patches: Tensor,
    /// Audio `[B, 2, samples]`.
    pub audio: Tensor,
}

/// Intermediate tensors of one encode.
#[derive(Debug, Clone)]
pub struct EncodeTrace {
    /// Patched input `[B, 2·patch, L]`.
    pub patches: Tensor,
    /// Encoder output before the bottleneck `[B, C, n]`.
    pub pre_bottleneck: Tensor,
    /// Latents `[B, C, n]`.
    pub latents: Tensor,
}

#[derive(Debug)]
struct Bottleneck {
    /// `scaling_factor [1, C, 1]`.
    scale: Tensor,
    /// `bias [1, C, 1]`.
    bias: Tensor,
    /// `running_std`, as a number and as a `[1]` tensor (divisor of the encode).
    running_std: Option<(f32, Tensor)>,
    noise_regularize: bool,
}

/// A loaded SAME autoencoder (SAME-S or SAME-L).
#[derive(Debug)]
pub struct Autoencoder {
    cfg: AutoencoderConfig,
    enc: Stage,
    /// `encoder.layers.2`: encoder width → latent channels.
    enc_out: Linear,
    /// `decoder.layers.1`: latent channels → decoder width.
    dec_in: Linear,
    dec: Stage,
    bottleneck: Bottleneck,
    device: Device,
}

impl Autoencoder {
    /// Load the weights for `cfg` from `loader`. Accepts a full checkpoint (tensors under
    /// `pretransform.model.`) or a standalone autoencoder file (no prefix); a loader that already
    /// carries a prefix is used as it is.
    pub fn load(cfg: &AutoencoderConfig, loader: &WeightLoader) -> Result<Self> {
        let w = if loader.prefix().is_empty()
            && loader.contains("pretransform.model.bottleneck.scaling_factor")
        {
            loader.pp("pretransform.model")
        } else {
            loader.clone()
        };
        let c = cfg.latent_dim;
        let enc = Stage::load(&w.pp("encoder.layers.0"), &cfg.encoder, Dir::Encoder)?;
        let de = cfg.encoder.width();
        let dd = cfg.decoder.width();
        let enc_out = Linear::load(&w.pp("encoder.layers.2"), de, c, Bias::Yes)?;
        let dec_in = Linear::load(&w.pp("decoder.layers.1"), c, dd, Bias::Yes)?;
        let dec = Stage::load(&w.pp("decoder.layers.3"), &cfg.decoder, Dir::Decoder)?;
        let bw = w.pp("bottleneck");
        let running_std = if cfg.bottleneck.auto_scale {
            let t = bw.get_as("running_std", &[1], DType::F32)?;
            Some((t.to_scalar_f32()?, t))
        } else {
            None
        };
        let bottleneck = Bottleneck {
            scale: bw.get_as("scaling_factor", &[1, c, 1], DType::F32)?,
            bias: bw.get_as("bias", &[1, c, 1], DType::F32)?,
            running_std,
            noise_regularize: cfg.bottleneck.noise_regularize,
        };
        Ok(Autoencoder {
            cfg: cfg.clone(),
            enc,
            enc_out,
            dec_in,
            dec,
            bottleneck,
            device: Device::Cpu,
        })
    }

    /// Every matrix of the decoder (the latent projection, the stage's mapping and blocks),
    /// e.g. to pack them ([`Linear::set_weight`]); decoding runs on whatever weight kind they
    /// hold.
    pub fn decoder_linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = vec![&mut self.dec_in];
        v.extend(self.dec.linears_mut());
        v
    }

    /// Every matrix of the encoder (the stage's mapping and blocks, the latent projection),
    /// e.g. to pack them ([`Linear::set_weight`]); encoding runs on whatever weight kind they
    /// hold.
    pub fn encoder_linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = self.enc.linears_mut();
        v.push(&mut self.enc_out);
        v
    }

    /// Drop the resident pages of the memory-mapped weights of the encoder and the decoder
    /// (see [`aria_core::nn::Linear::release_pages`]), e.g. once a request's audio is decoded:
    /// the next encode or decode reads them from the file again. Returns the bytes released.
    pub fn release_pages(&self) -> Result<usize> {
        Ok(self.enc.release_pages()?
            + self.dec.release_pages()?
            + self.enc_out.release_pages()?
            + self.dec_in.release_pages()?)
    }

    /// Move every weight and parameter to `device` (a device backend, or back to the CPU).
    /// Inputs passed to [`Self::decode`] / [`Self::encode`] should live there too; the noise
    /// draws of the stochastic terms are moved there as they are taken (an explicit upload
    /// each), so a decode with noise off stays on the device from input to output.
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.enc.move_to(device)?;
        self.dec.move_to(device)?;
        self.enc_out.to_device(device)?;
        self.dec_in.to_device(device)?;
        let b = &mut self.bottleneck;
        b.scale = device.put(&b.scale)?;
        b.bias = device.put(&b.bias)?;
        if let Some((r, t)) = &b.running_std {
            b.running_std = Some((*r, device.put(t)?));
        }
        self.device = device.clone();
        Ok(())
    }

    /// Where the weights live.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Read the configuration file and the weights file(s), and load.
    pub fn from_files(config: impl AsRef<Path>, weights: &[impl AsRef<Path>]) -> Result<Self> {
        let cfg = AutoencoderConfig::from_model_config(config)?;
        let loader = WeightLoader::open(weights)?;
        Self::load(&cfg, &loader)
    }

    /// The configuration.
    pub fn config(&self) -> &AutoencoderConfig {
        &self.cfg
    }

    /// Audio samples per latent (4096 for the released models).
    pub fn samples_per_latent(&self) -> usize {
        self.cfg.downsampling_ratio
    }

    /// Latents the decoder actually decodes for `t` input latents (SAME-S rounds up to whole
    /// attention chunks; the extra latent's audio is part of the output of [`Self::decode`]).
    pub fn decoded_latents(&self, t: usize) -> usize {
        match self.cfg.decoder.cells_per_chunk() {
            None => t,
            Some(m) => t.div_ceil(m) * m,
        }
    }

    // ---------------------------------------------------------------- patching

    /// Patch audio `[B, ch, n]` → `[B, ch·P, ceil(n/P)]` (zero-padded on the right); feature
    /// `c·P + h` of patch `l` is sample `l·P + h` of channel `c`.
    pub fn patchify(&self, audio: &Tensor) -> Result<Tensor> {
        let tok = self.patch_tokens(audio)?;
        Ok(tok.transpose(1, 2)?.contiguous()?)
    }

    /// Patch tokens `[B, L, ch·P]`.
    fn patch_tokens(&self, audio: &Tensor) -> Result<Tensor> {
        let s = audio.shape();
        let ch = self.cfg.audio_channels;
        if s.len() != 3 || s[1] != ch {
            return Err(CodecError::Invalid(format!(
                "audio must be [B, {ch}, samples], got {s:?}"
            )));
        }
        let (b, n) = (s[0], s[2]);
        let p = self.cfg.patch_size;
        let l = n.div_ceil(p);
        let a = ops::pad(&audio.to_dtype(DType::F32)?, 2, 0, l * p - n)?;
        Ok(a.reshape(&[b, ch, l, p])?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b, l, ch * p])?)
    }

    /// Patch tokens `[B, L, ch·P]` → audio `[B, ch, L·P]` (with `tanh` when soft clip is on).
    fn unpatch(&self, tok: &Tensor) -> Result<Tensor> {
        let s = tok.shape();
        let (b, l) = (s[0], s[1]);
        let ch = self.cfg.audio_channels;
        let p = self.cfg.patch_size;
        let a = tok
            .reshape(&[b, l, ch, p])?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b, ch, l * p])?;
        if self.cfg.soft_clip {
            return Ok(ops::tanh(&a)?);
        }
        Ok(a)
    }

    // ---------------------------------------------------------------- bottleneck

    fn check_latents(&self, z: &Tensor) -> Result<()> {
        let s = z.shape();
        if s.len() != 3 || s[1] != self.cfg.latent_dim {
            return Err(CodecError::Invalid(format!(
                "latents must be [B, {}, T], got {s:?}",
                self.cfg.latent_dim
            )));
        }
        Ok(())
    }

    /// SoftNorm decode: `z · running_std`, plus `ε · running_std · 1e−3` when
    /// `noise_regularize` is configured and a noise source is given.
    pub fn bottleneck_decode(
        &self,
        z: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<Tensor> {
        self.bottleneck_decode_with(z, 0, Draw::from_opt(noise))
    }

    fn bottleneck_decode_with(
        &self,
        z: &Tensor,
        pos0: usize,
        mut noise: Draw<'_>,
    ) -> Result<Tensor> {
        self.check_latents(z)?;
        let (b, c, t) = (z.shape()[0], z.shape()[1], z.shape()[2]);
        let z = z.to_dtype(DType::F32)?;
        let v = match &self.bottleneck.running_std {
            Some((r, _)) => ops::mul_scalar(&z, *r)?,
            None => z,
        };
        if !self.bottleneck.noise_regularize {
            return Ok(v);
        }
        let keyed = matches!(noise, Draw::Keyed(_));
        let Some(eps) = noise.rows(0, b, pos0, t, c, v.shape())? else {
            return Ok(v);
        };
        let eps = if keyed {
            // Keyed noise comes as [b, t, c] (one key per latent); reorder to [b, c, t].
            let e = self.device.put(&Tensor::from_vec(eps, &[b, t, c])?)?;
            e.transpose(1, 2)?.contiguous()?
        } else {
            self.device.put(&Tensor::from_vec(eps, &[b, c, t])?)?
        };
        // ε · running_std · 1e−3, or ε · (per-channel unbiased std over time) · 1e−3.
        let scaled = match &self.bottleneck.running_std {
            Some((r, _)) => ops::mul_scalar(&eps, *r)?,
            None => ops::mul(&eps, &ops::std_last(&v)?)?,
        };
        Ok(ops::add(&v, &ops::mul_scalar(&scaled, 1e-3)?)?)
    }

    /// SoftNorm encode: `(y · s + b) / running_std`.
    pub fn bottleneck_encode(&self, y: &Tensor) -> Result<Tensor> {
        self.check_latents(y)?;
        let y = y.to_dtype(DType::F32)?;
        let x = ops::add(
            &ops::mul(&y, &self.bottleneck.scale)?,
            &self.bottleneck.bias,
        )?;
        match &self.bottleneck.running_std {
            Some((_, r)) => Ok(ops::div(&x, r)?),
            None => Ok(x),
        }
    }

    // ---------------------------------------------------------------- decode

    /// Decode latents `[B, C, T]` to audio `[B, 2, samples_per_latent · T']` in one pass
    /// (`T' = `[`Self::decoded_latents`]`(T)`). With `noise` the configured stochastic terms
    /// (bottleneck noise regularisation, decoder new-token noise) are drawn from it in the
    /// reference order; `None` switches them off.
    pub fn decode(&self, latents: &Tensor, noise: Option<&mut dyn NoiseSource>) -> Result<Tensor> {
        Ok(self
            .decode_span(latents, 0, Draw::from_opt(noise), None, None)?
            .1)
    }

    /// [`Self::decode`] with the configured stochastic terms drawn from a generator keyed by
    /// `seed` and each latent's absolute position instead of a call-order stream. The windowed
    /// and streaming decoders with the same seed ([`crate::WindowedDecoder::with_noise_seed`])
    /// reproduce this output bit for bit. (Statistically the same noise as the reference, not
    /// its numbers.)
    pub fn decode_keyed(&self, latents: &Tensor, seed: u64) -> Result<Tensor> {
        Ok(self
            .decode_span(latents, 0, Draw::Keyed(seed), None, None)?
            .1)
    }

    /// [`Self::decode`] returning the intermediate tensors too.
    pub fn decode_traced(
        &self,
        latents: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<DecodeTrace> {
        let mut blocks = Vec::new();
        let (patches, audio, bottleneck_out) = {
            let (tok, audio) =
                self.decode_span(latents, 0, Draw::from_opt(noise), Some(&mut blocks), None)?;
            let bo = blocks.remove(0);
            (tok.transpose(1, 2)?.contiguous()?, audio, bo)
        };
        Ok(DecodeTrace {
            bottleneck_out,
            block_outputs: blocks,
            patches,
            audio,
        })
    }

    /// Decode latents whose first one is latent number `pos_latent0` of a longer sequence (the
    /// RoPE positions of a sliding-window decoder are absolute). Returns the patch tokens
    /// `[B, L, 2P]` and the audio. When `trace` is given, its first entry is the bottleneck
    /// output, followed by the block outputs. With `span`, only those cells run through the
    /// transformer (see [`Self::decode_part`]).
    pub(crate) fn decode_span(
        &self,
        latents: &Tensor,
        pos_latent0: usize,
        mut noise: Draw<'_>,
        mut trace: Option<&mut Vec<Tensor>>,
        span: Option<(usize, usize)>,
    ) -> Result<(Tensor, Tensor)> {
        let y = self.bottleneck_decode_with(latents, pos_latent0, noise.reborrow())?;
        if let Some(t) = trace.as_deref_mut() {
            t.push(y.clone());
        }
        let z = self.dec_in.forward(&y.transpose(1, 2)?.contiguous()?)?;
        drop(y);
        let tok = self.dec.decode(&z, pos_latent0, noise, trace, span)?;
        let audio = self.unpatch(&tok)?;
        Ok((tok, audio))
    }

    /// The latents `start..end` of a `T`-latent sequence that [`Self::decode_part`] runs through
    /// the transformer for `keep` (`keep` widened by the decoder's dependency halo and aligned
    /// to its chunks; reaching the end, it ends at the padded length).
    pub fn part_span(&self, t: usize, keep: std::ops::Range<usize>) -> std::ops::Range<usize> {
        let (hl, hr, align) = crate::window::plan(self);
        let c0 = keep.start.saturating_sub(hl) / align * align;
        let c1 = (keep.end + hr).div_ceil(align) * align;
        let c1 = if c1 >= t { self.decoded_latents(t) } else { c1 };
        c0..c1
    }

    /// What [`Self::decode_chunked`] runs through the transformer for `t` latents: per window,
    /// the latent span of it (see [`Self::part_span`]); one whole sequence under 128 latents.
    pub fn chunked_spans(&self, t: usize) -> Vec<std::ops::Range<usize>> {
        if t < CHUNK_LATENTS {
            #[allow(clippy::single_range_in_vec_init)] // one span: the whole sequence
            return vec![0..self.decoded_latents(t)];
        }
        chunk_windows(t)
            .into_iter()
            .map(|(_, keep)| {
                if keep.is_empty() {
                    0..CHUNK_LATENTS
                } else {
                    self.part_span(CHUNK_LATENTS, keep)
                }
            })
            .collect()
    }

    /// [`Self::decode`] of `latents [B, C, T]` computed only as far as the audio of the latents
    /// `keep` needs: returns `(audio, start)` where `audio` covers latents `start..end` (with
    /// `start ≤ keep.start`, `end ≥ keep.end`) and has, for the latents `keep`, the bits of
    /// the same samples of `decode(latents, noise)`. The noise is drawn for the whole sequence,
    /// in the same order, so the source ends where `decode` would leave it.
    ///
    /// Every output latent depends on a bounded neighbourhood (see [`crate::WindowedDecoder`]),
    /// so only that neighbourhood of `keep` runs through the transformer: the official chunked
    /// decode, whose 128-latent windows overlap and keep only part of each, does a third less
    /// work this way at 10 s.
    pub fn decode_part(
        &self,
        latents: &Tensor,
        keep: std::ops::Range<usize>,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<(Tensor, usize)> {
        self.check_latents(latents)?;
        let t = latents.shape()[2];
        if keep.start >= keep.end || keep.end > t {
            return Err(CodecError::Invalid(format!(
                "latents {}..{} to keep are empty or beyond the {t} given",
                keep.start, keep.end
            )));
        }
        let std::ops::Range { start: c0, end: c1 } = self.part_span(t, keep);
        let (_, audio) =
            self.decode_span(latents, 0, Draw::from_opt(noise), None, Some((c0, c1)))?;
        Ok((audio, c0))
    }

    /// The official chunked decode (`decode_audio(chunked=True)`): 128-latent windows with
    /// overlap 32 (hop 96), the last window anchored to the end, each window decoded on its own
    /// (own padding, own RoPE positions, own noise draws, in window order), 16 latents trimmed at
    /// inner edges. Sequences shorter than 128 latents are decoded whole. Output
    /// `[B, 2, samples_per_latent · T]`.
    pub fn decode_chunked(
        &self,
        latents: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<Tensor> {
        self.decode_chunked_with(latents, CHUNK_LATENTS, CHUNK_OVERLAP, noise)
    }

    /// [`Self::decode_chunked`] with another window size and overlap (latents).
    pub fn decode_chunked_with(
        &self,
        latents: &Tensor,
        chunk: usize,
        overlap: usize,
        mut noise: Option<&mut dyn NoiseSource>,
    ) -> Result<Tensor> {
        self.check_latents(latents)?;
        let t = latents.shape()[2];
        if overlap >= chunk {
            return Err(CodecError::Invalid(format!(
                "overlap {overlap} must be smaller than the chunk {chunk}"
            )));
        }
        if t < chunk {
            return self.decode(latents, noise);
        }
        let starts = chunk_starts(t, chunk, overlap);
        let spl = self.samples_per_latent();
        let keep = kept_regions(&starts, t, chunk, overlap);
        let mut parts = Vec::with_capacity(starts.len());
        for (&s, &(left, len)) in starts.iter().zip(&keep) {
            let win = latents.narrow(2, s, chunk)?.contiguous()?;
            if len == 0 {
                // Nothing kept; decoded all the same so that later windows see the same draws.
                self.decode(&win, reborrow(&mut noise))?;
                continue;
            }
            // Only what the kept region needs of the window (the same bits).
            let (a, at) = self.decode_part(&win, left..left + len, reborrow(&mut noise))?;
            parts.push(a.narrow(2, (left - at) * spl, len * spl)?.contiguous()?);
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(Tensor::cat(&refs, 2)?)
    }

    /// Decode as the pretransform is configured: chunked when `model.pretransform.chunked`
    /// is true, whole otherwise.
    pub fn decode_default(
        &self,
        latents: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<Tensor> {
        if self.cfg.chunked {
            self.decode_chunked(latents, noise)
        } else {
            self.decode(latents, noise)
        }
    }

    // ---------------------------------------------------------------- encode

    /// Encode audio `[B, 2, n]` (44.1 kHz) to latents `[B, C, n']` in one pass: patching with
    /// zero padding, the encoder (which pads to whole chunks / cells), the bottleneck.
    /// `noise` feeds the encoder's new-token noise when its `mask_noise > 0`.
    pub fn encode(&self, audio: &Tensor, noise: Option<&mut dyn NoiseSource>) -> Result<Tensor> {
        Ok(self.encode_inner(audio, noise)?.latents)
    }

    /// [`Self::encode`] returning the intermediate tensors too.
    pub fn encode_traced(
        &self,
        audio: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<EncodeTrace> {
        self.encode_inner(audio, noise)
    }

    fn encode_inner(
        &self,
        audio: &Tensor,
        noise: Option<&mut dyn NoiseSource>,
    ) -> Result<EncodeTrace> {
        let tok = self.patch_tokens(audio)?;
        let h = self.enc.encode(&tok, Draw::from_opt(noise), None)?;
        let patches = tok.transpose(1, 2)?.contiguous()?;
        let z = self.enc_out.forward(&h)?;
        let pre_bottleneck = z.transpose(1, 2)?.contiguous()?;
        let latents = self.bottleneck_encode(&pre_bottleneck)?;
        Ok(EncodeTrace {
            patches,
            pre_bottleneck,
            latents,
        })
    }

    /// The official chunked encode (`encode_audio(chunked=True)`): windows of
    /// `128 · samples_per_latent` samples with hop `96 · samples_per_latent`, the last anchored to
    /// the end, 16 latents trimmed at inner edges; inputs shorter than one window are encoded
    /// whole. The input should be a whole number of latents long (see
    /// [`crate::audio::prepare_audio`]).
    pub fn encode_chunked(
        &self,
        audio: &Tensor,
        mut noise: Option<&mut dyn NoiseSource>,
    ) -> Result<Tensor> {
        let spl = self.samples_per_latent();
        let n = audio.shape().get(2).copied().unwrap_or(0);
        let (chunk, overlap) = (CHUNK_LATENTS, CHUNK_OVERLAP);
        if n < chunk * spl {
            return self.encode(audio, noise);
        }
        let cs = chunk * spl;
        let hop = (chunk - overlap) * spl;
        // Window starts in samples (the last one anchored to the end of the input).
        let mut starts: Vec<usize> = (0..=n - cs).step_by(hop).collect();
        if starts.last() != Some(&(n - cs)) {
            starts.push(n - cs);
        }
        let in_latents: Vec<usize> = starts.iter().map(|s| s / spl).collect();
        let keep = kept_regions(&in_latents, n / spl, chunk, overlap);
        let mut parts = Vec::with_capacity(starts.len());
        for (&s, &(left, len)) in starts.iter().zip(&keep) {
            let win = audio.narrow(2, s, cs)?.contiguous()?;
            let z = self.encode(&win, reborrow(&mut noise))?;
            parts.push(z.narrow(2, left, len)?.contiguous()?);
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(Tensor::cat(&refs, 2)?)
    }

    pub(crate) fn decoder_stage(&self) -> &Stage {
        &self.dec
    }
}

/// Reborrow an optional noise source for one call (shortening the trait object's lifetime).
pub(crate) fn reborrow<'b>(
    n: &'b mut Option<&mut dyn NoiseSource>,
) -> Option<&'b mut dyn NoiseSource> {
    match n {
        Some(x) => Some(&mut **x),
        None => None,
    }
}

/// The windows of the official chunked decode of `t ≥ 128` latents ([`CHUNK_LATENTS`] each,
/// overlap [`CHUNK_OVERLAP`], see [`Autoencoder::decode_chunked`]): each window's first latent
/// and the latents of it that the decode keeps (window-relative; they tile `0..t` in order).
pub fn chunk_windows(t: usize) -> Vec<(usize, std::ops::Range<usize>)> {
    let starts = chunk_starts(t, CHUNK_LATENTS, CHUNK_OVERLAP);
    let keep = kept_regions(&starts, t, CHUNK_LATENTS, CHUNK_OVERLAP);
    starts
        .into_iter()
        .zip(keep)
        .map(|(s, (left, len))| (s, left..left + len))
        .collect()
}

/// The part of each window (latents `left .. left + len` of it) that a chunked decode or encode
/// keeps: the inner edges trimmed by `overlap / 2`, the last window anchored to the end and, where
/// it overlaps its predecessor by more than that, winning (the predecessor is cut where the last
/// window's part begins). The parts tile `0..t` in order.
fn kept_regions(starts: &[usize], t: usize, chunk: usize, overlap: usize) -> Vec<(usize, usize)> {
    let half = overlap / 2;
    let n = starts.len();
    // [begin, end) of each window's part in output latents.
    let mut span: Vec<(usize, usize)> = starts
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let last = i + 1 == n;
            let at = if last { t - chunk } else { s };
            let left = if i == 0 { 0 } else { half };
            let right = if last { chunk } else { chunk - half };
            (at + left, at + right)
        })
        .collect();
    for i in 1..n {
        span[i - 1].1 = span[i - 1].1.min(span[i].0);
    }
    span.iter()
        .zip(starts.iter().enumerate())
        .map(|(&(b, e), (i, &s))| {
            let at = if i + 1 == n { t - chunk } else { s };
            (b - at, e.saturating_sub(b))
        })
        .collect()
}

/// Window starts of the official chunked decode: `0, hop, 2·hop, …` while `≤ T − chunk`, then
/// `T − chunk` if not already there.
pub fn chunk_starts(t: usize, chunk: usize, overlap: usize) -> Vec<usize> {
    if t < chunk {
        return vec![0];
    }
    let hop = chunk - overlap;
    let mut s: Vec<usize> = (0..=t - chunk).step_by(hop.max(1)).collect();
    if s.last() != Some(&(t - chunk)) {
        s.push(t - chunk);
    }
    s
}
