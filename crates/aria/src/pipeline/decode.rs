//! Decoding latents to audio in bounded memory, chunk by chunk, with the bytes of a whole
//! decode.
//!
//! How the latents are decoded, in order of preference:
//! * **chunked** (`model.pretransform.chunked`, every released model): the official 128-latent
//!   windows (overlap 32, last window anchored to the end), decoded one at a time with their
//!   own noise draws in window order. Each window hands over the audio no later window
//!   overwrites, so the chunks concatenate to `Autoencoder::decode_chunked`'s output exactly.
//! * **unchunked without stochastic terms**: `aria_codec::StreamingDecoder`, whose output is
//!   bit-identical to a whole decode.
//! * **unchunked with stochastic terms**: one whole decode (the reference draws the decoder
//!   noise for the whole sequence in call order, which no window can reproduce); memory then
//!   grows with the length.
//!
//! Peak memory of the first two is one window's activations plus the latents, whatever the
//! duration; the audio itself goes to an [`AudioSink`] as it is final, or is gathered into one
//! tensor ([`AudioOutput::Tensor`]).

use aria_codec::{chunk_windows, StreamingDecoder, WindowedDecoder, CHUNK_LATENTS};
use aria_core::Tensor;

use super::run::CancelToken;
use super::Pipeline;
use crate::noise::NoiseSource;
use crate::{Error, Result};

/// A piece of the output audio, handed to an [`AudioSink`] as soon as it is final. Chunks come
/// in order and tile the output: each starts where the previous one ended.
#[derive(Debug, Clone, Copy)]
pub struct AudioChunk<'a> {
    /// Index (in samples per channel) of the chunk's first sample in the whole output.
    pub start: usize,
    /// Length of the whole output in samples per channel (the same for every chunk).
    pub total: usize,
    /// The samples `[B, channels, n]` at [`Pipeline::sample_rate`], already clamped, masked and
    /// cropped as in the returned audio.
    pub audio: &'a Tensor,
}

/// Receives the output audio chunk by chunk (e.g. a WAV writer, an HTTP response). Any
/// `FnMut(&AudioChunk) -> Result<()>` is one; an error stops the generation and is returned.
pub trait AudioSink {
    /// Take the next chunk.
    fn write(&mut self, chunk: &AudioChunk<'_>) -> Result<()>;
}

impl<F: FnMut(&AudioChunk<'_>) -> Result<()>> AudioSink for F {
    fn write(&mut self, chunk: &AudioChunk<'_>) -> Result<()> {
        self(chunk)
    }
}

/// What to do with the audio of a generation.
#[derive(Default)]
pub enum AudioOutput<'a> {
    /// Gather it into the returned tensor (`Generated::audio`).
    #[default]
    Tensor,
    /// Hand it to a sink as it is decoded; the returned audio tensor is empty.
    Stream(&'a mut dyn AudioSink),
    /// Do not decode: latents only (no decoder draws are made).
    Skip,
}

impl std::fmt::Debug for AudioOutput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AudioOutput::Tensor => "Tensor",
            AudioOutput::Stream(_) => "Stream",
            AudioOutput::Skip => "Skip",
        })
    }
}

/// The final touches of the raw decoder output: zero each item past its valid latents, clamp to
/// [−1, 1], crop to `out_len`.
pub(super) struct Finish {
    /// Per item, the padding mask over latents (`None`: keep everything).
    pub(super) mask: Option<Vec<Vec<f32>>>,
    /// Samples per latent.
    pub(super) ratio: usize,
    /// Samples of the output.
    pub(super) out_len: usize,
}

impl Finish {
    /// The output part of raw audio `a [B, ch, n]` starting at sample `start`, or `None` when it
    /// lies past the crop.
    fn apply(&self, start: usize, a: &Tensor) -> Result<Option<Tensor>> {
        let (b, ch, n) = (a.shape()[0], a.shape()[1], a.shape()[2]);
        let end = (start + n).min(self.out_len);
        if end <= start {
            return Ok(None);
        }
        let k = end - start;
        // The decoded audio leaves the device here (the one download of a request).
        let a = a.to_cpu()?.contiguous()?;
        let d = a.as_slice::<f32>()?;
        let mut out = Vec::with_capacity(b * ch * k);
        for r in 0..b * ch {
            let row = &d[r * n..r * n + k];
            match &self.mask {
                Some(m) => {
                    let pm = &m[r / ch];
                    out.extend(row.iter().enumerate().map(|(i, &v)| {
                        let valid = pm.get((start + i) / self.ratio).copied().unwrap_or(0.0);
                        (v * valid).clamp(-1.0, 1.0)
                    }));
                }
                None => out.extend(row.iter().map(|v| v.clamp(-1.0, 1.0))),
            }
        }
        Ok(Some(Tensor::from_vec(out, &[b, ch, k])?))
    }
}

/// Gathers chunks into one `[B, ch, total]` tensor.
pub(super) struct Gather {
    data: Vec<f32>,
    rows: usize,
    total: usize,
}

impl Gather {
    pub(super) fn new(rows: usize, total: usize) -> Self {
        Gather {
            data: vec![0f32; rows * total],
            rows,
            total,
        }
    }

    pub(super) fn into_tensor(self, b: usize, ch: usize) -> Result<Tensor> {
        Ok(Tensor::from_vec(self.data, &[b, ch, self.total])?)
    }
}

impl AudioSink for Gather {
    fn write(&mut self, c: &AudioChunk<'_>) -> Result<()> {
        let n = c.audio.shape()[2];
        let d = c.audio.as_slice::<f32>()?;
        if c.start + n > self.total || c.audio.elem_count() != self.rows * n {
            return Err(Error::Input(format!(
                "audio chunk {:?} at {} does not fit an output of {} rows × {} samples",
                c.audio.shape(),
                c.start,
                self.rows,
                self.total
            )));
        }
        for r in 0..self.rows {
            self.data[r * self.total + c.start..r * self.total + c.start + n]
                .copy_from_slice(&d[r * n..(r + 1) * n]);
        }
        Ok(())
    }
}

impl Pipeline {
    /// Samples per channel of the raw decode of `t` latents (before the crop).
    pub(super) fn decoded_samples(&self, t: usize) -> usize {
        let spl = self.ae.samples_per_latent();
        if self.chunked_decode && t >= CHUNK_LATENTS {
            t * spl
        } else {
            self.ae.decoded_latents(t) * spl
        }
    }

    /// Whether decoding draws noise (the configured SAME stochastic terms).
    fn decode_draws(&self) -> bool {
        let c = self.ae.config();
        c.decoder.mask_noise > 0.0 || c.bottleneck.noise_regularize
    }

    /// Decode `latents [B, C, T]` in bounded memory (see the module docs), pass every final
    /// piece through `finish` and hand it to `sink`. `progress(done, total)` is told the latents
    /// decoded after each window. Draws come from `noise` in the order of a whole decode.
    pub(super) fn decode_into(
        &self,
        latents: &Tensor,
        noise: &mut dyn NoiseSource,
        finish: &Finish,
        sink: &mut dyn AudioSink,
        cancel: Option<&CancelToken>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<()> {
        let s = latents.shape();
        if s.len() != 3 || s[1] != self.ae.config().latent_dim {
            return Err(Error::Input(format!(
                "latents of shape {s:?}, the autoencoder needs [B, {}, T]",
                self.ae.config().latent_dim
            )));
        }
        let t = s[2];
        let total = finish.out_len;
        let mut emit = |start: usize, raw: &Tensor, done: usize| -> Result<()> {
            if let Some(part) = finish.apply(start, raw)? {
                sink.write(&AudioChunk {
                    start,
                    total,
                    audio: &part,
                })?;
            }
            progress(done.min(t), t);
            match cancel {
                Some(c) if c.is_cancelled() => Err(Error::Cancelled),
                _ => Ok(()),
            }
        };
        if self.chunked_decode && t >= CHUNK_LATENTS {
            // The official chunked decode, window by window (see `Autoencoder::decode_chunked`).
            let spl = self.ae.samples_per_latent();
            for (st, keep) in chunk_windows(t) {
                let win = latents.narrow(2, st, CHUNK_LATENTS)?.contiguous()?;
                if keep.is_empty() {
                    // Nothing of it is kept; decoded for the noise draws of the later windows.
                    self.ae.decode(&win, Some(&mut *noise))?;
                    continue;
                }
                // The part no later window overwrites, and only what it needs of the window
                // (the bits of its whole decode).
                let (a, at) = self.ae.decode_part(&win, keep.clone(), Some(&mut *noise))?;
                let part = a.narrow(2, (keep.start - at) * spl, keep.len() * spl)?;
                emit((st + keep.start) * spl, &part, st + keep.end)?;
            }
            return Ok(());
        }
        if !self.chunked_decode && !self.decode_draws() {
            // No draws: the streaming decoder gives the bytes of a whole decode.
            let window = WindowedDecoder::new(&self.ae, 0).window();
            let mut dec = StreamingDecoder::new(&self.ae, window);
            let spl = self.ae.samples_per_latent();
            let mut at = 0;
            let mut pos = 0;
            while at < t {
                let k = window.min(t - at);
                let part = dec.push(&latents.narrow(2, at, k)?.contiguous()?)?;
                at += k;
                let n = part.shape()[2];
                if n > 0 {
                    emit(pos, &part, dec.emitted())?;
                    pos += n;
                }
            }
            let part = dec.finish()?;
            if part.shape()[2] > 0 || pos == 0 {
                emit(pos, &part, pos / spl.max(1) + part.shape()[2] / spl.max(1))?;
            }
            return Ok(());
        }
        // Short (chunked, under one window) or noisy unchunked decodes: whole.
        let a = self.ae.decode(latents, Some(noise))?;
        emit(0, &a, t)
    }

    /// Encode audio `[1, 2, n]` (already prepared) to latents, chunked as configured.
    pub(super) fn encode_prepared(
        &self,
        x: &Tensor,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor> {
        Ok(if self.chunked_decode {
            self.ae.encode_chunked(x, Some(noise))?
        } else {
            self.ae.encode(x, Some(noise))?
        })
    }

    /// Encode an audio clip to latents `[1, C, T]` (resampled to the model rate, stereo, padded
    /// to whole latents).
    pub fn encode_audio(
        &self,
        clip: &aria_codec::audio::AudioClip,
        noise: &mut dyn NoiseSource,
    ) -> Result<Tensor> {
        let ratio = self.geometry.downsampling_ratio * self.geometry.latent_align;
        let n = (clip.frames() as u64 * u64::from(self.sample_rate()))
            .div_ceil(u64::from(clip.sample_rate.max(1)));
        let n = (n as usize).div_ceil(ratio).max(1) * ratio;
        let x = aria_codec::audio::prepare_audio(clip, self.sample_rate(), Some(n), 2)?;
        self.on_pool(|| self.encode_prepared(&x, noise))
    }

    /// Decode latents `[1, C, T]` to audio `[channels, samples]` (official path: chunked as
    /// configured, stochastic terms drawn from `noise`), clamped to [−1, 1].
    pub fn decode_latents(&self, latents: &Tensor, noise: &mut dyn NoiseSource) -> Result<Tensor> {
        let (b, ch) = (
            latents.shape().first().copied().unwrap_or(1),
            self.ae.config().audio_channels,
        );
        let total = self.decoded_samples(latents.shape().get(2).copied().unwrap_or(0));
        let mut g = Gather::new(b * ch, total);
        self.decode_latents_to(latents, noise, &mut g)?;
        Ok(g.into_tensor(b, ch)?.squeeze(0)?)
    }

    /// [`Self::decode_latents`] in bounded memory: the audio `[B, channels, n]` goes to `sink`
    /// chunk by chunk as it is decoded, with the bytes of the whole decode.
    pub fn decode_latents_to(
        &self,
        latents: &Tensor,
        noise: &mut dyn NoiseSource,
        sink: &mut dyn AudioSink,
    ) -> Result<()> {
        let t = latents.shape().get(2).copied().unwrap_or(0);
        let finish = Finish {
            mask: None,
            ratio: self.ae.samples_per_latent(),
            out_len: self.decoded_samples(t),
        };
        self.on_pool(|| self.decode_into(latents, noise, &finish, sink, None, &mut |_, _| {}))
    }
}
