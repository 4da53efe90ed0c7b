//! Open-ended generation, chunk by chunk ([`StreamGenerator`]).
//!
//! Every chunk generates a window of `context + chunk` seconds. From the second chunk on the
//! window is an inpainting request: its first `context` seconds are kept (the model is
//! conditioned on the encoded tail of the previous window, the inpainting mask marks them as
//! kept) and the rest is regenerated. Only the new `chunk` seconds are emitted; the join between
//! the previous window's audio and the new one is crossfaded over a short fade at the end of the
//! overlap, so the stream has no discontinuity.
//!
//! ```text
//! window k-1:  |··········· a[k-1] ···········|
//! window k:                |·· context ··|fade|····· chunk (new) ·····|
//! emitted:     ... tail of a[k-1] ...    xfade   a[k] ...
//! ```
//!
//! Emitted chunk `k` covers samples `[k·C, (k+1)·C)` of the stream (`C`: chunk samples), so
//! every chunk has exactly `C` samples. What the generator keeps between chunks is the
//! not-yet-emitted tail of the last window (`context` seconds of audio, which is also what the
//! next window is conditioned on): memory does not grow with the length of the stream.
//!
//! The prompt ([`StreamGenerator::set_prompt`]) and any other request setting
//! ([`StreamGenerator::request_mut`]) may change between chunks; the change takes effect at the
//! next chunk, which still continues the previous one. A hook per chunk
//! ([`StreamGenerator::next_chunk_with`]) lets the caller ramp e.g. a steering strength across
//! chunks.
//!
//! ```no_run
//! use aria::stream::{StreamConfig, StreamGenerator};
//! use aria::{GenerateRequest, Pipeline, SeededNoise};
//!
//! # fn f(pipe: &Pipeline) -> aria::Result<()> {
//! let req = GenerateRequest::with_defaults("slow ambient drone", 0.0, pipe.sampling_defaults());
//! let mut s = StreamGenerator::new(pipe, req, StreamConfig::default())?;
//! let mut noise = SeededNoise::new(7);
//! for k in 0..10 {
//!     if k == 5 {
//!         s.set_prompt("the drone turns into bright bells");
//!     }
//!     let chunk = s.next_chunk(&mut noise)?; // [channels, chunk samples]
//!     # let _ = chunk;
//! }
//! # Ok(()) }
//! ```

use aria_core::Tensor;
use aria_dit::conditioner::Conditioning;

use crate::noise::NoiseSource;
use crate::pipeline::{AudioOutput, GenerateRequest, Inpaint, RunOptions, Timings};
use crate::{AudioClip, Error, Pipeline, Result};

/// Gain curves of the crossfade at a join.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fade {
    /// `cos`/`sin` gains: constant power for uncorrelated signals.
    #[default]
    EqualPower,
    /// Linear gains: constant amplitude for correlated (phase-aligned) signals.
    Linear,
}

impl Fade {
    /// Gains `(out, in)` at position `w` in [0, 1] of the fade.
    fn gains(self, w: f32) -> (f32, f32) {
        match self {
            Fade::EqualPower => {
                let a = w * std::f32::consts::FRAC_PI_2;
                (a.cos(), a.sin())
            }
            Fade::Linear => (1.0 - w, w),
        }
    }
}

/// Lengths of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamConfig {
    /// New audio per chunk, in seconds.
    pub chunk_sec: f64,
    /// Audio of the previous window every window continues from, in seconds (at least
    /// `fade_sec`).
    pub context_sec: f64,
    /// Crossfade at each join, in seconds (at most `context_sec`).
    pub fade_sec: f64,
    /// Crossfade gains.
    pub fade: Fade,
    /// Latent headroom of every window (the request's `duration_padding_sec`).
    pub padding_sec: f64,
}

impl Default for StreamConfig {
    /// 4 s chunks continuing 2 s of context, a 50 ms equal-power fade, 1 s of headroom.
    fn default() -> Self {
        StreamConfig {
            chunk_sec: 4.0,
            context_sec: 2.0,
            fade_sec: 0.05,
            fade: Fade::EqualPower,
            padding_sec: 1.0,
        }
    }
}

/// One emitted chunk.
#[derive(Debug, Clone)]
pub struct StreamChunk {
    /// Index of the chunk (0-based).
    pub index: usize,
    /// First sample of the chunk in the stream.
    pub start: u64,
    /// Audio `[channels, chunk samples]` at [`Pipeline::sample_rate`].
    pub audio: Tensor,
    /// Time per stage of the window's generation.
    pub timings: Timings,
}

/// Generates an open-ended stream chunk by chunk (see the [module docs](self)).
pub struct StreamGenerator<'p> {
    pipe: &'p Pipeline,
    req: GenerateRequest,
    fade: Fade,
    channels: usize,
    /// Chunk, context and fade lengths in samples.
    chunk: usize,
    context: usize,
    fade_len: usize,
    /// The not-yet-emitted tail of the last window, `[channels, context]` channel-major.
    tail: Option<Vec<f32>>,
    index: usize,
    /// The text conditioning of the current prompt (and negative prompt), computed once per
    /// prompt: every window has the same duration.
    cond: Option<CachedConditioning>,
}

/// Conditioning computed for a prompt and negative prompt.
struct CachedConditioning {
    prompt: String,
    negative: Option<String>,
    cond: (Conditioning, Option<Conditioning>),
}

impl std::fmt::Debug for StreamGenerator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamGenerator")
            .field("chunk", &self.chunk)
            .field("context", &self.context)
            .field("fade", &self.fade_len)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// `n` samples as seconds that [`crate::plan`]'s rounding turns back into exactly `n`.
fn samples_to_sec(n: usize, sr: u32) -> f64 {
    (n as f64 + 0.25) / f64::from(sr)
}

impl<'p> StreamGenerator<'p> {
    /// A stream over `pipe` with the settings of `request` (prompt, steps, guidance, sampler;
    /// its duration and audio inputs are replaced for every window).
    pub fn new(
        pipe: &'p Pipeline,
        request: GenerateRequest,
        config: StreamConfig,
    ) -> Result<StreamGenerator<'p>> {
        let sr = pipe.sample_rate();
        let to_samples = |s: f64, what: &str| -> Result<usize> {
            if !(s.is_finite() && s >= 0.0) {
                return Err(Error::Input(format!(
                    "stream {what} must be a non-negative number of seconds, got {s}"
                )));
            }
            Ok((s * f64::from(sr)).round() as usize)
        };
        let chunk = to_samples(config.chunk_sec, "chunk")?;
        let context = to_samples(config.context_sec, "context")?;
        let fade_len = to_samples(config.fade_sec, "fade")?;
        if chunk == 0 {
            return Err(Error::Input(format!(
                "stream chunk of {} s has no samples",
                config.chunk_sec
            )));
        }
        if fade_len == 0 || fade_len > context {
            return Err(Error::Input(format!(
                "stream fade must be positive and at most the context: fade {} s, context {} s",
                config.fade_sec, config.context_sec
            )));
        }
        if !(config.padding_sec.is_finite() && config.padding_sec >= 0.0) {
            return Err(Error::Input(format!(
                "stream padding must be a non-negative number of seconds, got {}",
                config.padding_sec
            )));
        }
        let window = samples_to_sec(chunk + context, sr);
        if window > pipe.max_seconds() {
            return Err(Error::Input(format!(
                "stream window (context {} s + chunk {} s) exceeds this model's maximum of \
                 {:.2} s",
                config.context_sec,
                config.chunk_sec,
                pipe.max_seconds()
            )));
        }
        let mut req = request;
        req.seconds = window;
        req.duration_padding_sec = config.padding_sec;
        req.init_audio = None;
        req.init_latents = None;
        req.warm_start = None;
        req.inpaint = None;
        req.conditioning = None;
        Ok(StreamGenerator {
            pipe,
            req,
            fade: config.fade,
            channels: pipe.autoencoder().config().audio_channels,
            chunk,
            context,
            fade_len,
            tail: None,
            index: 0,
            cond: None,
        })
    }

    /// Change the prompt from the next chunk on.
    pub fn set_prompt(&mut self, prompt: impl Into<String>) {
        self.req.prompt = prompt.into();
    }

    /// The request every window is made from (prompt, steps, guidance, …); changes take effect
    /// at the next chunk. The duration, padding and audio inputs are set per window.
    pub fn request_mut(&mut self) -> &mut GenerateRequest {
        &mut self.req
    }

    /// Samples per emitted chunk.
    pub fn chunk_samples(&self) -> usize {
        self.chunk
    }

    /// Audio channels of the stream.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Chunks emitted so far.
    pub fn chunks_emitted(&self) -> usize {
        self.index
    }

    /// Floats the generator keeps between chunks (the context tail): constant once the first
    /// chunk is out.
    pub fn retained_floats(&self) -> usize {
        self.tail.as_ref().map_or(0, Vec::len)
    }

    /// The conditioning of the current request, from the cache when the prompt is unchanged
    /// (what [`Pipeline::run`] would compute for it).
    fn conditioning(&mut self) -> Result<(Conditioning, Option<Conditioning>)> {
        let neg_prompt = if self.req.cfg_scale != 1.0 {
            self.req.negative_prompt.clone()
        } else {
            None
        };
        match &self.cond {
            Some(c) if c.prompt == self.req.prompt && c.negative == neg_prompt => {}
            _ => {
                let secs = [self.req.seconds as f32];
                let text = self.pipe.text();
                let cond = text.conditioning(&[self.req.prompt.as_str()], &secs)?;
                let neg = match &neg_prompt {
                    Some(n) => Some(text.negative(&[n.as_str()], &secs)?),
                    None => None,
                };
                self.cond = Some(CachedConditioning {
                    prompt: self.req.prompt.clone(),
                    negative: neg_prompt,
                    cond: (cond, neg),
                });
            }
        }
        self.cond
            .as_ref()
            .map(|c| c.cond.clone())
            .ok_or_else(|| Error::Input("stream conditioning missing".into()))
    }

    /// Generate the next chunk.
    pub fn next_chunk(&mut self, noise: &mut dyn NoiseSource) -> Result<StreamChunk> {
        self.next_chunk_with(noise, RunOptions::default())
    }

    /// Generate the next chunk with run options (a hook, e.g. a steering strength ramped per
    /// chunk, cancellation, progress). The audio is always gathered: `opts.audio` is ignored.
    pub fn next_chunk_with(
        &mut self,
        noise: &mut dyn NoiseSource,
        mut opts: RunOptions<'_>,
    ) -> Result<StreamChunk> {
        let sr = self.pipe.sample_rate();
        let (ch, ctx, c) = (self.channels, self.context, self.chunk);
        let w = ctx + c;
        let cond = self.conditioning()?;
        let mut req = self.req.clone();
        req.conditioning = Some(cond);
        req.inpaint = match &self.tail {
            Some(tail) => Some(Inpaint {
                clip: AudioClip {
                    data: Tensor::from_vec(tail.clone(), &[ch, ctx])?,
                    sample_rate: sr,
                },
                ranges: vec![(samples_to_sec(ctx, sr), req.seconds)],
            }),
            None => None,
        };
        opts.audio = AudioOutput::Tensor;
        let out = self.pipe.run(&req, noise, opts)?;
        let shape = out.audio.shape().to_vec();
        let n = match shape.as_slice() {
            [a, n] if *a == ch && *n >= w => *n,
            _ => {
                return Err(Error::Input(format!(
                    "stream window audio has shape {shape:?}, expected [{ch}, >= {w}]"
                )))
            }
        };
        let new = out.audio.contiguous()?.to_vec_f32()?;
        // The window's first `w` samples on the stream's time line, joined to the tail.
        let mut joined = vec![0f32; ch * w];
        for k in 0..ch {
            let src = &new[k * n..k * n + w];
            let dst = &mut joined[k * w..(k + 1) * w];
            match &self.tail {
                None => dst.copy_from_slice(src),
                Some(tail) => {
                    let old = &tail[k * ctx..(k + 1) * ctx];
                    let f0 = ctx - self.fade_len;
                    dst[..f0].copy_from_slice(&old[..f0]);
                    for i in f0..ctx {
                        let x = (i - f0) as f32 + 0.5;
                        let (g_out, g_in) = self.fade.gains(x / self.fade_len as f32);
                        dst[i] = old[i] * g_out + src[i] * g_in;
                    }
                    dst[ctx..].copy_from_slice(&src[ctx..]);
                }
            }
        }
        let mut emit = Vec::with_capacity(ch * c);
        let mut tail = Vec::with_capacity(ch * ctx);
        for k in 0..ch {
            emit.extend_from_slice(&joined[k * w..k * w + c]);
            tail.extend_from_slice(&joined[k * w + c..(k + 1) * w]);
        }
        self.tail = Some(tail);
        let chunk = StreamChunk {
            index: self.index,
            start: (self.index as u64) * (c as u64),
            audio: Tensor::from_vec(emit, &[ch, c])?,
            timings: out.timings,
        };
        self.index += 1;
        Ok(chunk)
    }
}
