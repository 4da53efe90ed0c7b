//! Windowed and streaming decoding whose output is bit-identical to a whole-sequence decode.
//!
//! Every output latent of the SAME decoder depends on a bounded neighbourhood of input latents:
//!
//! * SAME-S (chunked attention, 2 cells per chunk, midpoint shift, kernel-3 mapping): attention
//!   never leaves a 2-latent chunk; the shifted half moves chunk borders by one latent, and the
//!   kernel-3 mapping reads one patch token across each cell border. A window whose start is
//!   even (so its chunks coincide with the whole decode's chunks) therefore reproduces every
//!   latent at least 2 latents away from its inner edges. RoPE positions are per chunk (0…33),
//!   identical in both.
//! * SAME-L (±17-token band, 12 blocks, kernel-1 mapping): each block widens the dependency by
//!   one latent cell, so a latent at least `depth` latents away from a window edge sees exactly
//!   the same keys in every block. RoPE positions are absolute within the decoded sequence, so
//!   each window uses the absolute positions of its tokens (the angle of position `p` is
//!   computed from `p` alone, never from a window-relative index), which keeps `q·k` bit-equal.
//!
//! With identical inputs, identical per-row kernels (linear layers, DyT, attention rows and the
//! mapping are row-wise and independent of how many rows a call holds) give identical bits. A
//! banded attention row reduces over exactly its own keys, starting at its first key
//! ([`aria_core::ops::attention`] with a window), so it does not matter where a window starts.
//! Stochastic terms are off by default (a reference decode draws its noise for the whole
//! sequence in call order, which no window can reproduce); `with_noise_seed` switches them on
//! with noise keyed by absolute latent position, matching [`Autoencoder::decode_keyed`].

use aria_core::{DType, Tensor};

use crate::config::SameAttention;
use crate::error::{CodecError, Result};
use crate::model::Autoencoder;
use crate::noise::Draw;

/// Halo (left, right, in latents) and alignment of exact windows for a decoder.
pub(crate) fn plan(ae: &Autoencoder) -> (usize, usize, usize) {
    let c = &ae.decoder_stage().cfg;
    let k2 = c.mapping_kernel() / 2;
    let depth = c.depth();
    match c.attention {
        SameAttention::Band { left, right } => (depth * left + k2, depth * right + k2, 1),
        SameAttention::Chunked {
            chunk_size,
            midpoint_shift,
        } => {
            let m = chunk_size / c.stride();
            let edge = if midpoint_shift { m / 2 } else { 0 } + k2;
            let h = edge.div_ceil(m) * m;
            (h, h, m)
        }
    }
}

/// Decodes a whole latent sequence window by window; memory stays bounded by the window size
/// while the result is bit-identical to [`Autoencoder::decode`] with noise off.
#[derive(Debug)]
pub struct WindowedDecoder<'a> {
    ae: &'a Autoencoder,
    window: usize,
    noise_seed: Option<u64>,
}

impl<'a> WindowedDecoder<'a> {
    /// A windowed decoder emitting `window` latents per step (rounded up to the alignment the
    /// decoder needs; `0` picks a default: 64 latents for SAME-S, 96 for SAME-L).
    pub fn new(ae: &'a Autoencoder, window: usize) -> Self {
        WindowedDecoder {
            ae,
            window: effective_window(ae, window),
            noise_seed: None,
        }
    }

    /// Latents emitted per step.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Switch the configured stochastic terms on, drawn from position-keyed noise: the output
    /// then equals [`Autoencoder::decode_keyed`] with the same seed, bit for bit.
    pub fn with_noise_seed(mut self, seed: u64) -> Self {
        self.noise_seed = Some(seed);
        self
    }

    /// Decode `latents [B, C, T]` → `[B, 2, samples_per_latent · T']`, bit-identical to
    /// `ae.decode(latents, None)`. The result is a CPU tensor: each window's audio is copied to
    /// the host as it completes (with a model on a device backend, once per window), so memory
    /// beyond the output stays bounded by one window on either side.
    pub fn decode(&self, latents: &Tensor) -> Result<Tensor> {
        let mut s = StreamingDecoder::new(self.ae, self.window);
        s.noise_seed = self.noise_seed;
        let shape = latents.shape();
        if shape.len() != 3 {
            return Err(CodecError::Invalid(format!(
                "latents must be [B, C, T], got {shape:?}"
            )));
        }
        let (b, t) = (shape[0], shape[2]);
        let ch = self.ae.config().audio_channels;
        if t == 0 {
            return Ok(Tensor::zeros(&[b, ch, 0], DType::F32));
        }
        let total = self.ae.decoded_latents(t) * self.ae.samples_per_latent();
        // Output written in place as windows complete (no concatenation copy).
        let mut out = vec![0f32; b * ch * total];
        let mut filled = 0;
        let mut put = |a: &Tensor| -> Result<()> {
            let a = a.to_cpu()?.contiguous()?;
            let n = a.shape()[2];
            let d = a.as_slice::<f32>()?;
            if filled + n > total || a.shape()[0] * a.shape()[1] != b * ch {
                return Err(CodecError::Invalid(
                    "windowed decode produced an unexpected length".into(),
                ));
            }
            for row in 0..b * ch {
                out[row * total + filled..row * total + filled + n]
                    .copy_from_slice(&d[row * n..(row + 1) * n]);
            }
            filled += n;
            Ok(())
        };
        let mut at = 0;
        while at < t {
            let k = self.window.min(t - at);
            put(&s.push(&latents.narrow(2, at, k)?.contiguous()?)?)?;
            at += k;
        }
        put(&s.finish()?)?;
        Ok(Tensor::from_vec(out, &[b, ch, total])?)
    }
}

fn effective_window(ae: &Autoencoder, window: usize) -> usize {
    let (hl, _, align) = plan(ae);
    let w = if window == 0 {
        (4 * hl).max(64)
    } else {
        window
    };
    let banded = matches!(ae.decoder_stage().cfg.attention, SameAttention::Band { .. });
    let w = if window == 0 && banded { w.max(96) } else { w };
    w.div_ceil(align) * align
}

/// Decodes latents as they arrive: [`StreamingDecoder::push`] returns the audio that is final
/// given the latents received so far, [`StreamingDecoder::finish`] the rest. The concatenated
/// output is bit-identical to [`Autoencoder::decode`] with noise off; memory holds only the
/// latents still needed (a window plus its halo).
#[derive(Debug)]
pub struct StreamingDecoder<'a> {
    ae: &'a Autoencoder,
    window: usize,
    halo_l: usize,
    halo_r: usize,
    /// Buffered latents `[B, C, n]` (on the device of the pushed latents), first column =
    /// latent `buf0`.
    buf: Option<Tensor>,
    buf0: usize,
    received: usize,
    emitted: usize,
    batch: usize,
    finished: bool,
    noise_seed: Option<u64>,
}

impl<'a> StreamingDecoder<'a> {
    /// A streaming decoder that decodes `window` latents at a time (see [`WindowedDecoder::new`]).
    pub fn new(ae: &'a Autoencoder, window: usize) -> Self {
        let (halo_l, halo_r, _) = plan(ae);
        StreamingDecoder {
            ae,
            window: effective_window(ae, window),
            halo_l,
            halo_r,
            buf: None,
            buf0: 0,
            received: 0,
            emitted: 0,
            batch: 0,
            finished: false,
            noise_seed: None,
        }
    }

    /// Switch the configured stochastic terms on with position-keyed noise (see
    /// [`WindowedDecoder::with_noise_seed`]).
    pub fn with_noise_seed(mut self, seed: u64) -> Self {
        self.noise_seed = Some(seed);
        self
    }

    /// Latents received so far.
    pub fn received(&self) -> usize {
        self.received
    }

    /// Latents whose audio has been returned so far.
    pub fn emitted(&self) -> usize {
        self.emitted
    }

    /// Append latents `[B, C, t]` (any `t ≥ 0`; `B` fixed by the first push) and return the
    /// audio `[B, 2, samples]` that became final (possibly 0 samples).
    pub fn push(&mut self, latents: &Tensor) -> Result<Tensor> {
        if self.finished {
            return Err(CodecError::Invalid(
                "StreamingDecoder::push after finish".into(),
            ));
        }
        let s = latents.shape();
        let c = self.ae.config().latent_dim;
        if s.len() != 3 || s[1] != c || (self.batch != 0 && s[0] != self.batch) {
            return Err(CodecError::Invalid(format!(
                "latents must be [B, {c}, t] with a fixed B, got {s:?}"
            )));
        }
        if self.batch == 0 {
            self.batch = s[0];
        }
        let t = s[2];
        let l = latents.to_dtype(DType::F32)?;
        self.buf = Some(match self.buf.take() {
            None => l,
            Some(b) => Tensor::cat(&[&b, &l], 2)?,
        });
        self.received += t;
        let mut parts = Vec::new();
        while self.emitted + self.window + self.halo_r <= self.received {
            let end = self.emitted + self.window;
            parts.push(self.decode_range(self.emitted, end, end + self.halo_r)?);
            self.emitted = end;
            self.trim();
        }
        self.concat(parts)
    }

    /// Decode what is left (including, for SAME-S with an odd number of latents, the zero-padded
    /// extra latent that [`Autoencoder::decode`] also returns).
    pub fn finish(&mut self) -> Result<Tensor> {
        if self.finished {
            return Err(CodecError::Invalid(
                "StreamingDecoder::finish called twice".into(),
            ));
        }
        self.finished = true;
        if self.batch == 0 || self.received == 0 {
            let ch = self.ae.config().audio_channels;
            return Ok(Tensor::zeros(&[self.batch.max(1), ch, 0], DType::F32));
        }
        let total = self.ae.decoded_latents(self.received);
        let mut parts = Vec::new();
        while self.emitted < total {
            let end = (self.emitted + self.window).min(total);
            let hi = if end >= total {
                self.received
            } else {
                (end + self.halo_r).min(self.received)
            };
            parts.push(self.decode_range(self.emitted, end, hi)?);
            self.emitted = end;
            self.trim();
        }
        self.concat(parts)
    }

    fn concat(&self, parts: Vec<Tensor>) -> Result<Tensor> {
        if parts.is_empty() {
            let ch = self.ae.config().audio_channels;
            return Ok(Tensor::zeros(&[self.batch.max(1), ch, 0], DType::F32));
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(Tensor::cat(&refs, 2)?)
    }

    /// Drop buffered latents no later window needs.
    fn trim(&mut self) {
        let keep_from = self.emitted.saturating_sub(self.halo_l);
        if keep_from > self.buf0 {
            if let Some(b) = self.buf.take() {
                let n = keep_from - self.buf0;
                let len = b.shape()[2];
                // A view: the next push compacts it.
                self.buf = b.narrow(2, n.min(len), len - n.min(len)).ok();
            }
            self.buf0 = keep_from;
        }
    }

    /// Audio of latents `[start, end)` from a decode of latents `[start − halo, hi)`.
    fn decode_range(&self, start: usize, end: usize, hi: usize) -> Result<Tensor> {
        let lo = start.saturating_sub(self.halo_l).max(self.buf0);
        let buf = self
            .buf
            .as_ref()
            .ok_or_else(|| CodecError::Invalid("streaming decoder: no latents buffered".into()))?;
        let lat = buf.narrow(2, lo - self.buf0, hi - lo)?.contiguous()?;
        let noise = match self.noise_seed {
            Some(s) => Draw::Keyed(s),
            None => Draw::Off,
        };
        let (_, audio) = self.ae.decode_span(&lat, lo, noise, None, None)?;
        let spl = self.ae.samples_per_latent();
        Ok(audio
            .narrow(2, (start - lo) * spl, (end - start) * spl)?
            .contiguous()?)
    }
}
