//! Open-ended generation, chunk by chunk ([`StreamGenerator`]).
//!
//! Every chunk generates a window of `context + chunk` seconds. From the second chunk on the
//! window is an inpainting request: its first `context` seconds are kept (the inpainting mask
//! marks them as kept) and the rest is regenerated. The kept part is, by default, the previous
//! window's own final latents shifted by one chunk ([`ContextFrom::Latents`]: a rolling latent
//! context, nothing re-encoded; chunk and context are then whole latent frames), or the
//! previous window's audio tail encoded again ([`ContextFrom::Audio`]). Only the new `chunk`
//! seconds are emitted. At each join the new window is first phase-aligned to the previous one
//! (the lag within `±align_sec` that maximises their normalised cross-correlation over the
//! fade), then the two are crossfaded over a short fade at the end of the overlap, so the
//! stream has no discontinuity.
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
    /// Linear gains scaled for the measured correlation `r` of the two signals over the fade
    /// (after alignment): `g = (1 − w, w) / √((1 − w)² + w² + 2r·w(1 − w))`, which keeps the
    /// power constant for any `r` in [0, 1] (linear for `r = 1`, power-normalised for `r = 0`).
    #[default]
    Adaptive,
    /// `cos`/`sin` gains: constant power for uncorrelated signals.
    EqualPower,
    /// Linear gains: constant amplitude for correlated (phase-aligned) signals.
    Linear,
}

impl Fade {
    /// Gains `(out, in)` at position `w` in [0, 1] of the fade, for signals of correlation `r`.
    fn gains(self, w: f32, r: f32) -> (f32, f32) {
        match self {
            Fade::EqualPower => {
                let a = w * std::f32::consts::FRAC_PI_2;
                (a.cos(), a.sin())
            }
            Fade::Linear => (1.0 - w, w),
            Fade::Adaptive => {
                let r = r.clamp(0.0, 1.0);
                let (a, b) = (1.0 - w, w);
                let s = (a * a + b * b + 2.0 * r * a * b).sqrt();
                (a / s, b / s)
            }
        }
    }
}

/// What each window continues from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ContextFrom {
    /// The previous window's final latents, shifted by one chunk: no encoder pass, and the kept
    /// region continues the latent sequence exactly. Chunk and context are rounded up to whole
    /// latent frames ([`crate::plan::Geometry::downsampling_ratio`] samples).
    #[default]
    Latents,
    /// The previous window's audio tail, encoded again by the autoencoder (any lengths).
    Audio,
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
    /// What each window continues from.
    pub context_from: ContextFrom,
    /// Largest phase-alignment lag at a join, in seconds (0: no alignment).
    pub align_sec: f64,
}

impl Default for StreamConfig {
    /// 4 s chunks continuing 2 s of latent context, a 50 ms correlation-adaptive fade after a
    /// phase alignment of at most 5 ms, 1 s of headroom.
    fn default() -> Self {
        StreamConfig {
            chunk_sec: 4.0,
            context_sec: 2.0,
            fade_sec: 0.05,
            fade: Fade::Adaptive,
            padding_sec: 1.0,
            context_from: ContextFrom::Latents,
            align_sec: 0.005,
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
    /// Phase-alignment lag applied to this window at its join, in samples (positive: the new
    /// window's audio was advanced); 0 for the first chunk.
    pub lag: i64,
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
    /// What each window continues from, and (latent context) the last window's latents past
    /// the emitted chunk, `[C, context / ratio]` channel-major.
    context_from: ContextFrom,
    tail_latents: Option<Vec<f32>>,
    /// Audio samples per latent frame.
    ratio: usize,
    /// Largest alignment lag in samples.
    max_lag: usize,
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
        let ratio = pipe.geometry().downsampling_ratio.max(1);
        let frames = |n: usize| match config.context_from {
            ContextFrom::Latents => n.div_ceil(ratio) * ratio,
            ContextFrom::Audio => n,
        };
        let chunk = frames(to_samples(config.chunk_sec, "chunk")?);
        let context = frames(to_samples(config.context_sec, "context")?);
        let fade_len = to_samples(config.fade_sec, "fade")?;
        let max_lag = to_samples(config.align_sec, "alignment")?;
        if chunk == 0 {
            return Err(Error::Input(format!(
                "stream chunk of {} s has no samples",
                config.chunk_sec
            )));
        }
        if max_lag > fade_len {
            return Err(Error::Input(format!(
                "stream alignment of {} s exceeds the fade of {} s",
                config.align_sec, config.fade_sec
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
        // Every window has `max_lag` samples past its end, so that an aligned window still
        // covers it.
        let window = samples_to_sec(chunk + context + max_lag, sr);
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
            context_from: config.context_from,
            tail_latents: None,
            ratio,
            max_lag,
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
        self.tail.as_ref().map_or(0, Vec::len) + self.tail_latents.as_ref().map_or(0, Vec::len)
    }

    /// Samples per latent frame: with [`ContextFrom::Latents`], chunk and context lengths are
    /// multiples of it.
    pub fn latent_frame_samples(&self) -> usize {
        self.ratio
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
        opts: RunOptions<'_>,
    ) -> Result<StreamChunk> {
        let pipe = self.pipe;
        pipe.on_pool(|| self.next_chunk_here(noise, opts))
    }

    fn next_chunk_here(
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
        req.inpaint_latents = match (&self.tail_latents, self.context_from) {
            (Some(tl), ContextFrom::Latents) => Some(self.window_latents(&req, tl)?),
            _ => None,
        };
        opts.audio = AudioOutput::Tensor;
        let out = self.pipe.run(&req, noise, opts)?;
        let shape = out.audio.shape().to_vec();
        let n = match shape.as_slice() {
            [a, n] if *a == ch && *n >= w + self.max_lag => *n,
            _ => {
                return Err(Error::Input(format!(
                    "stream window audio has shape {shape:?}, expected [{ch}, >= {w}]"
                )))
            }
        };
        let new = out.audio.contiguous()?.to_vec_f32()?;
        let f0 = ctx - self.fade_len;
        let (lag, corr) = match &self.tail {
            Some(tail) => best_lag(tail, ctx, &new, n, ch, f0, self.max_lag),
            None => (0, 0.0),
        };
        // The window's first `w` samples on the stream's time line (advanced by `lag`), joined
        // to the tail.
        let mut joined = vec![0f32; ch * w];
        for k in 0..ch {
            let row = &new[k * n..(k + 1) * n];
            let dst = &mut joined[k * w..(k + 1) * w];
            match &self.tail {
                None => dst.copy_from_slice(&row[..w]),
                Some(tail) => {
                    let old = &tail[k * ctx..(k + 1) * ctx];
                    let src = |i: usize| row[(i as i64 + lag) as usize];
                    dst[..f0].copy_from_slice(&old[..f0]);
                    for i in f0..ctx {
                        let x = (i - f0) as f32 + 0.5;
                        let (g_out, g_in) = self.fade.gains(x / self.fade_len as f32, corr);
                        dst[i] = old[i] * g_out + src(i) * g_in;
                    }
                    for (i, d) in dst.iter_mut().enumerate().skip(ctx) {
                        *d = src(i);
                    }
                }
            }
        }
        if self.context_from == ContextFrom::Latents {
            self.tail_latents = Some(self.next_tail_latents(&out.latents)?);
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
            lag,
            timings: out.timings,
        };
        self.index += 1;
        Ok(chunk)
    }
}

impl StreamGenerator<'_> {
    /// The inpainting latents `[1, C, T]` of the next window: the kept tail latents in its
    /// first frames, zeros after them (masked out).
    fn window_latents(&self, req: &GenerateRequest, tail: &[f32]) -> Result<Tensor> {
        let t = self
            .pipe
            .lengths(req.seconds, req.duration_padding_sec)
            .latents;
        let keep = self.context / self.ratio;
        let c = tail.len() / keep.max(1);
        if keep == 0 || keep > t || c * keep != tail.len() {
            return Err(Error::Input(format!(
                "stream latent context of {keep} frames does not fit a window of {t} latents"
            )));
        }
        let mut v = vec![0f32; c * t];
        for ch in 0..c {
            v[ch * t..ch * t + keep].copy_from_slice(&tail[ch * keep..(ch + 1) * keep]);
        }
        Ok(Tensor::from_vec(v, &[1, c, t])?)
    }

    /// The latent frames of `latents` (`[1, C, T]`) past the emitted chunk: the next window's
    /// context.
    fn next_tail_latents(&self, latents: &Tensor) -> Result<Vec<f32>> {
        let (c0, keep) = (self.chunk / self.ratio, self.context / self.ratio);
        let (c, t) = match latents.shape() {
            [1, c, t] if c0 + keep <= *t => (*c, *t),
            s => {
                return Err(Error::Input(format!(
                    "stream window latents have shape {s:?}, expected [1, C, >= {}]",
                    c0 + keep
                )))
            }
        };
        let v = latents.contiguous()?.to_vec_f32()?;
        let mut tail = Vec::with_capacity(c * keep);
        for ch in 0..c {
            tail.extend_from_slice(&v[ch * t + c0..ch * t + c0 + keep]);
        }
        Ok(tail)
    }
}

/// The lag in `[-min(max_lag, f0), max_lag]` that maximises the normalised cross-correlation,
/// summed over channels, between the old tail's fade region `old[f0..ctx]` and the new window's
/// `new[f0 + lag..ctx + lag]` (`new`: `ch` rows of `n` samples, `n ≥ ctx + max_lag`). Ties go
/// to the smallest |lag|; silence gives lag 0. Returns the lag and its correlation.
fn best_lag(
    old: &[f32],
    ctx: usize,
    new: &[f32],
    n: usize,
    ch: usize,
    f0: usize,
    max_lag: usize,
) -> (i64, f32) {
    let lo = -(max_lag.min(f0) as i64);
    let hi = max_lag as i64;
    let mut best = (0i64, f64::NEG_INFINITY);
    let mut any = false;
    let mut lags: Vec<i64> = (lo..=hi).collect();
    lags.sort_by_key(|l| l.abs());
    for lag in lags {
        let (mut dot, mut e_old, mut e_new) = (0f64, 0f64, 0f64);
        for k in 0..ch {
            let o = &old[k * ctx + f0..(k + 1) * ctx];
            let start = (f0 as i64 + lag) as usize;
            let s = &new[k * n + start..k * n + start + o.len()];
            for (a, b) in o.iter().zip(s) {
                dot += f64::from(*a) * f64::from(*b);
                e_old += f64::from(*a) * f64::from(*a);
                e_new += f64::from(*b) * f64::from(*b);
            }
        }
        let denom = (e_old * e_new).sqrt();
        if denom <= 0.0 {
            continue;
        }
        let r = dot / denom;
        any = true;
        if r > best.1 {
            best = (lag, r);
        }
    }
    if any {
        (best.0, best.1 as f32)
    } else {
        (0, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::best_lag;

    #[test]
    fn best_lag_finds_a_known_shift() {
        let (ch, ctx, f0, n) = (2usize, 400usize, 100usize, 520usize);
        let sig = |i: i64, k: usize| {
            ((i as f32) * 0.07 + k as f32).sin() + 0.3 * ((i as f32) * 0.23).cos()
        };
        let old: Vec<f32> = (0..ch)
            .flat_map(|k| (0..ctx as i64).map(move |i| sig(i, k)))
            .collect();
        for shift in [-7i64, 0, 5, 19] {
            // new[j] = old-signal at j - shift: the best lag re-aligns it.
            let new: Vec<f32> = (0..ch)
                .flat_map(|k| (0..n as i64).map(move |j| sig(j - shift, k)))
                .collect();
            let (lag, r) = best_lag(&old, ctx, &new, n, ch, f0, 32);
            assert_eq!(lag, shift);
            assert!((r - 1.0).abs() < 1e-5, "{r}");
        }
        let silent = vec![0f32; ch * n];
        assert_eq!(best_lag(&old, ctx, &silent, n, ch, f0, 32), (0, 0.0));
    }

    #[test]
    fn adaptive_gains_keep_power_for_any_correlation() {
        use super::Fade;
        for r in [0.0f32, 0.3, 0.8, 1.0] {
            for w in [0.0f32, 0.1, 0.5, 0.9, 1.0] {
                let (a, b) = Fade::Adaptive.gains(w, r);
                let power = a * a + b * b + 2.0 * r * a * b;
                assert!((power - 1.0).abs() < 1e-5, "r {r} w {w}: {power}");
            }
        }
        assert_eq!(
            Fade::Adaptive.gains(0.25, 1.0),
            Fade::Linear.gains(0.25, 1.0)
        );
    }
}
