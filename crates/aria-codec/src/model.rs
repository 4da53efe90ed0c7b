//! The SAME autoencoder: patching, encoder, SoftNorm bottleneck, decoder, chunked decode.

use std::path::Path;

use aria_core::{ops, DType, Tensor, WeightLoader};

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
    scale: Vec<f32>,
    bias: Vec<f32>,
    running_std: Option<f32>,
    noise_regularize: bool,
}

/// A loaded SAME autoencoder (SAME-S or SAME-L).
#[derive(Debug)]
pub struct Autoencoder {
    cfg: AutoencoderConfig,
    enc: Stage,
    enc_out_w: Tensor,
    enc_out_b: Tensor,
    dec_in_w: Tensor,
    dec_in_b: Tensor,
    dec: Stage,
    bottleneck: Bottleneck,
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
        let enc_out_w = w.get_as("encoder.layers.2.weight", &[c, de], DType::F32)?;
        let enc_out_b = w.get_as("encoder.layers.2.bias", &[c], DType::F32)?;
        let dec_in_w = w.get_as("decoder.layers.1.weight", &[dd, c], DType::F32)?;
        let dec_in_b = w.get_as("decoder.layers.1.bias", &[dd], DType::F32)?;
        let dec = Stage::load(&w.pp("decoder.layers.3"), &cfg.decoder, Dir::Decoder)?;
        let bw = w.pp("bottleneck");
        let running_std = if cfg.bottleneck.auto_scale {
            Some(bw.get_as("running_std", &[1], DType::F32)?.to_vec_f32()?[0])
        } else {
            None
        };
        let bottleneck = Bottleneck {
            scale: bw
                .get_as("scaling_factor", &[1, c, 1], DType::F32)?
                .to_vec_f32()?,
            bias: bw.get_as("bias", &[1, c, 1], DType::F32)?.to_vec_f32()?,
            running_std,
            noise_regularize: cfg.bottleneck.noise_regularize,
        };
        Ok(Autoencoder {
            cfg: cfg.clone(),
            enc,
            enc_out_w,
            enc_out_b,
            dec_in_w,
            dec_in_b,
            dec,
            bottleneck,
        })
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
        if self.cfg.decoder.sliding_window.is_some() {
            t
        } else {
            let m = self.cfg.decoder.cells_per_chunk();
            t.div_ceil(m) * m
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
        let a = audio.to_dtype(DType::F32)?.contiguous()?;
        let ad = a.as_slice::<f32>()?;
        let mut out = vec![0f32; b * l * ch * p];
        for bi in 0..b {
            for c in 0..ch {
                let src = &ad[(bi * ch + c) * n..][..n];
                for (i, v) in src.iter().enumerate() {
                    let (li, h) = (i / p, i % p);
                    out[((bi * l + li) * ch + c) * p + h] = *v;
                }
            }
        }
        Ok(Tensor::from_vec(out, &[b, l, ch * p])?)
    }

    /// Patch tokens `[B, L, ch·P]` → audio `[B, ch, L·P]` (with `tanh` when soft clip is on).
    fn unpatch(&self, tok: &Tensor) -> Result<Tensor> {
        let s = tok.shape();
        let (b, l) = (s[0], s[1]);
        let ch = self.cfg.audio_channels;
        let p = self.cfg.patch_size;
        let td = tok.as_slice::<f32>()?;
        let mut out = vec![0f32; b * ch * l * p];
        for bi in 0..b {
            for li in 0..l {
                for c in 0..ch {
                    let src = &td[((bi * l + li) * ch + c) * p..][..p];
                    out[(bi * ch + c) * l * p + li * p..][..p].copy_from_slice(src);
                }
            }
        }
        if self.cfg.soft_clip {
            out.iter_mut().for_each(|v| *v = v.tanh());
        }
        Ok(Tensor::from_vec(out, &[b, ch, l * p])?)
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
        let mut v = z.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
        if let Some(r) = self.bottleneck.running_std {
            v.iter_mut().for_each(|x| *x *= r);
        }
        if !self.bottleneck.noise_regularize {
            return Ok(Tensor::from_vec(v, z.shape())?);
        }
        let keyed = matches!(noise, Draw::Keyed(_));
        let eps = noise.rows(0, b, pos0, t, c, z.shape())?.map(|e| {
            if !keyed {
                return e;
            }
            // Keyed noise comes as [b, t, c] (one key per latent); reorder to [b, c, t].
            let mut o = vec![0f32; e.len()];
            for bi in 0..b {
                for ti in 0..t {
                    for ci in 0..c {
                        o[(bi * c + ci) * t + ti] = e[(bi * t + ti) * c + ci];
                    }
                }
            }
            o
        });
        let Some(eps) = eps else {
            return Ok(Tensor::from_vec(v, z.shape())?);
        };
        match self.bottleneck.running_std {
            Some(r) => {
                for (x, e) in v.iter_mut().zip(eps) {
                    *x += e * r * 1e-3;
                }
            }
            None => {
                // Scale by the per-channel (unbiased) standard deviation over time.
                for (row, erow) in v.chunks_mut(t.max(1)).zip(eps.chunks(t.max(1))) {
                    let mean = row.iter().sum::<f32>() / t as f32;
                    let var =
                        row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / (t as f32 - 1.0);
                    let sd = var.sqrt();
                    for (x, e) in row.iter_mut().zip(erow) {
                        *x += e * sd * 1e-3;
                    }
                }
            }
        }
        Ok(Tensor::from_vec(v, z.shape())?)
    }

    /// SoftNorm encode: `(y · s + b) / running_std`.
    pub fn bottleneck_encode(&self, y: &Tensor) -> Result<Tensor> {
        self.check_latents(y)?;
        let t = y.shape()[2];
        let mut v = y.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
        let c = self.cfg.latent_dim;
        for (i, x) in v.iter_mut().enumerate() {
            let ch = (i / t.max(1)) % c;
            *x = *x * self.bottleneck.scale[ch] + self.bottleneck.bias[ch];
            if let Some(r) = self.bottleneck.running_std {
                *x /= r;
            }
        }
        Ok(Tensor::from_vec(v, y.shape())?)
    }

    // ---------------------------------------------------------------- decode

    /// Decode latents `[B, C, T]` to audio `[B, 2, samples_per_latent · T']` in one pass
    /// (`T' = `[`Self::decoded_latents`]`(T)`). With `noise` the configured stochastic terms
    /// (bottleneck noise regularisation, decoder new-token noise) are drawn from it in the
    /// reference order; `None` switches them off.
    pub fn decode(&self, latents: &Tensor, noise: Option<&mut dyn NoiseSource>) -> Result<Tensor> {
        Ok(self.decode_span(latents, 0, Draw::from_opt(noise), None)?.1)
    }

    /// [`Self::decode`] with the configured stochastic terms drawn from a generator keyed by
    /// `seed` and each latent's absolute position instead of a call-order stream. The windowed
    /// and streaming decoders with the same seed ([`crate::WindowedDecoder::with_noise_seed`])
    /// reproduce this output bit for bit. (Statistically the same noise as the reference, not
    /// its numbers.)
    pub fn decode_keyed(&self, latents: &Tensor, seed: u64) -> Result<Tensor> {
        Ok(self.decode_span(latents, 0, Draw::Keyed(seed), None)?.1)
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
                self.decode_span(latents, 0, Draw::from_opt(noise), Some(&mut blocks))?;
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
    /// output, followed by the block outputs.
    pub(crate) fn decode_span(
        &self,
        latents: &Tensor,
        pos_latent0: usize,
        mut noise: Draw<'_>,
        mut trace: Option<&mut Vec<Tensor>>,
    ) -> Result<(Tensor, Tensor)> {
        let y = self.bottleneck_decode_with(latents, pos_latent0, noise.reborrow())?;
        if let Some(t) = trace.as_deref_mut() {
            t.push(y.clone());
        }
        let z = ops::linear(
            &y.transpose(1, 2)?.contiguous()?,
            &self.dec_in_w,
            Some(&self.dec_in_b),
        )?;
        drop(y);
        let tok = self.dec.decode(&z, pos_latent0, noise, trace)?;
        let audio = self.unpatch(&tok)?;
        Ok((tok, audio))
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
        let b = latents.shape()[0];
        let ch = self.cfg.audio_channels;
        let total = t * spl;
        let mut out = vec![0f32; b * ch * total];
        let half = (overlap / 2) * spl;
        let cs = chunk * spl;
        for (i, &s) in starts.iter().enumerate() {
            let win = latents.narrow(2, s, chunk)?.contiguous()?;
            let a = self.decode(&win, reborrow(&mut noise))?;
            let ad = a.as_slice::<f32>()?;
            let alen = a.shape()[2];
            let last = i + 1 == starts.len();
            let out_start = if last { total - cs } else { s * spl };
            let left = if i == 0 { 0 } else { half };
            let right = if last { cs } else { cs - half };
            for row in 0..b * ch {
                out[row * total + out_start + left..row * total + out_start + right]
                    .copy_from_slice(&ad[row * alen + left..row * alen + right]);
            }
        }
        Ok(Tensor::from_vec(out, &[b, ch, total])?)
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
        let z = ops::linear(&h, &self.enc_out_w, Some(&self.enc_out_b))?;
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
        let mut starts: Vec<usize> = (0..=n - cs).step_by(hop).collect();
        if starts.last() != Some(&(n - cs)) {
            starts.push(n - cs);
        }
        let total = n / spl;
        let b = audio.shape()[0];
        let c = self.cfg.latent_dim;
        let mut out = vec![0f32; b * c * total];
        let half = overlap / 2;
        for (i, &s) in starts.iter().enumerate() {
            let z = self.encode(&audio.narrow(2, s, cs)?.contiguous()?, reborrow(&mut noise))?;
            let zl = z.shape()[2];
            let zd = z.as_slice::<f32>()?;
            let last = i + 1 == starts.len();
            let out_start = if last { total - chunk } else { s / spl };
            let left = if i == 0 { 0 } else { half };
            let right = if last { chunk } else { chunk - half };
            for row in 0..b * c {
                out[row * total + out_start + left..row * total + out_start + right]
                    .copy_from_slice(&zd[row * zl + left..row * zl + right]);
            }
        }
        Ok(Tensor::from_vec(out, &[b, c, total])?)
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
