//! Audio files: WAV writing (32-bit float or 16-bit PCM) and reading, other formats through
//! symphonia (FLAC, MP3, AAC/M4A, ALAC, Ogg Vorbis, AIFF, …), resampling, and the official
//! `prepare_audio` (resample, pad / crop, channel fixing).
//!
//! Resampling: the official code uses `torchaudio.transforms.Resample` (a Hann-windowed sinc
//! with 6 zero crossings per side and rolloff 0.99, polyphase after reducing the rates by their
//! gcd). [`resample`] implements that same algorithm (same kernel, same padding, same output
//! length `ceil(n · to / from)`), so it matches the reference up to f32 summation order rather
//! than approximately — whenever the reduced ratio keeps that kernel small (see
//! [`resample_plan`]): every usual rate (8, 11.025, 16, 22.05, 24, 32, 48, 88.2, 96, 176.4 and
//! 192 kHz to 44.1 kHz, and back). The polyphase kernel has one phase per output sample of the
//! reduced ratio, each as long as one input period, so it grows with the product of the reduced
//! rates (44 101 Hz → 44 100 Hz would need 1.9·10⁹ taps, 7.8 GB); past the limit a windowed-sinc
//! resampler of bounded size (rubato's, 256 taps, 256 sub-phases, cubic interpolation between
//! them) is used instead, with the same output length and its filter delay removed (aligned
//! with the input to within one output sample). Inputs already at the target rate are passed
//! through untouched, as in the reference.

use std::path::Path;

use aria_core::{DType, Tensor};

use crate::error::{CodecError, Result};

/// Decoded audio: `data [channels, frames]` (f32, nominally in [−1, 1]) at `sample_rate` Hz.
#[derive(Debug, Clone)]
pub struct AudioClip {
    /// Samples, `[channels, frames]`.
    pub data: Tensor,
    /// Sample rate in Hz.
    pub sample_rate: u32,
}

impl AudioClip {
    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.data.shape()[0]
    }
    /// Number of frames (samples per channel).
    pub fn frames(&self) -> usize {
        self.data.shape()[1]
    }
}

/// Sample format of a written WAV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WavFormat {
    /// IEEE 32-bit float, written as is.
    F32,
    /// 16-bit PCM: clamped to [−1, 1], scaled by 32767 and rounded.
    Pcm16,
}

/// `[ch, n]` or `[1, ch, n]` as contiguous f32 rows.
fn as_rows(audio: &Tensor) -> Result<(usize, usize, Vec<f32>)> {
    let s = audio.shape();
    let (ch, n) = match s {
        [c, n] => (*c, *n),
        [1, c, n] => (*c, *n),
        _ => {
            return Err(CodecError::Invalid(format!(
                "audio must be [channels, samples] or [1, channels, samples], got {s:?}"
            )))
        }
    };
    Ok((
        ch,
        n,
        audio.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?,
    ))
}

/// Write `audio` (`[channels, samples]` or `[1, channels, samples]`) as a WAV file.
pub fn write_wav(
    path: impl AsRef<Path>,
    audio: &Tensor,
    sample_rate: u32,
    format: WavFormat,
) -> Result<()> {
    let path = path.as_ref();
    let (ch, n, v) = as_rows(audio)?;
    if ch == 0 || ch > u16::MAX as usize {
        return Err(CodecError::audio(
            path,
            format!("cannot write {ch} channels"),
        ));
    }
    let spec = hound::WavSpec {
        channels: ch as u16,
        sample_rate,
        bits_per_sample: if format == WavFormat::F32 { 32 } else { 16 },
        sample_format: if format == WavFormat::F32 {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let err = |e: hound::Error| CodecError::audio(path, e);
    let mut w = hound::WavWriter::create(path, spec).map_err(err)?;
    for i in 0..n {
        for c in 0..ch {
            let x = v[c * n + i];
            match format {
                WavFormat::F32 => w.write_sample(x).map_err(err)?,
                WavFormat::Pcm16 => {
                    let q = (x.clamp(-1.0, 1.0) * 32767.0).round() as i16;
                    w.write_sample(q).map_err(err)?
                }
            }
        }
    }
    w.finalize().map_err(err)
}

/// The sample rates aria reads and resamples, in Hz: telephone-band 4 kHz up to 768 kHz
/// (the highest rate interfaces record). A rate outside it is a corrupt or hostile header, and
/// refusing it keeps resampling bounded: the ratio between two accepted rates is at most 192,
/// so the bounded resampler's start-up delay stays below 25 000 output samples.
pub const SAMPLE_RATES: std::ops::RangeInclusive<u32> = 4_000..=768_000;

/// Read an audio file (WAV through hound; anything else symphonia can probe). Integer PCM is
/// scaled to [−1, 1) by `2^(bits−1)`. Errors name the file; a file without samples, or at a
/// rate outside [`SAMPLE_RATES`], is an error.
pub fn read_audio(path: impl AsRef<Path>) -> Result<AudioClip> {
    let path = path.as_ref();
    let clip = match read_wav(path) {
        Ok(c) => c,
        Err(wav_err) => match read_symphonia(path) {
            Ok(c) => c,
            Err(e) => {
                let is_wav = path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| e.eq_ignore_ascii_case("wav"));
                return Err(if is_wav { wav_err } else { e });
            }
        },
    };
    if clip.frames() == 0 || clip.channels() == 0 {
        return Err(CodecError::audio(path, "contains no audio samples"));
    }
    if !SAMPLE_RATES.contains(&clip.sample_rate) {
        return Err(CodecError::audio(
            path,
            format!(
                "sample rate {} Hz is outside the {}–{} Hz that aria reads",
                clip.sample_rate,
                SAMPLE_RATES.start(),
                SAMPLE_RATES.end()
            ),
        ));
    }
    Ok(clip)
}

fn read_wav(path: &Path) -> Result<AudioClip> {
    let err = |e: hound::Error| CodecError::audio(path, format!("cannot read WAV: {e}"));
    let mut r = hound::WavReader::open(path).map_err(err)?;
    let spec = r.spec();
    let ch = spec.channels as usize;
    let inter: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => r
            .samples::<f32>()
            .collect::<std::result::Result<_, _>>()
            .map_err(err)?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            r.samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<std::result::Result<_, _>>()
                .map_err(err)?
        }
    };
    deinterleave(path, &inter, ch, spec.sample_rate)
}

fn deinterleave(path: &Path, inter: &[f32], ch: usize, sample_rate: u32) -> Result<AudioClip> {
    if ch == 0 {
        return Err(CodecError::audio(path, "has zero channels"));
    }
    let n = inter.len() / ch;
    let mut data = vec![0f32; ch * n];
    for (i, frame) in inter.chunks_exact(ch).enumerate() {
        for (c, v) in frame.iter().enumerate() {
            data[c * n + i] = *v;
        }
    }
    Ok(AudioClip {
        data: Tensor::from_vec(data, &[ch, n])?,
        sample_rate,
    })
}

fn read_symphonia(path: &Path) -> Result<AudioClip> {
    use symphonia::core::codecs::audio::AudioDecoderOptions;
    use symphonia::core::errors::Error as SErr;
    use symphonia::core::formats::probe::Hint;
    use symphonia::core::formats::{FormatOptions, TrackType};
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;

    let err =
        |e: &dyn std::fmt::Display| CodecError::audio(path, format!("cannot decode audio: {e}"));
    let file = std::fs::File::open(path).map_err(|e| CodecError::audio(path, e))?;
    let mss = MediaSourceStream::new(Box::new(file), Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = path.extension().and_then(|e| e.to_str()) {
        hint.with_extension(ext);
    }
    let mut format = symphonia::default::get_probe()
        .probe(
            &hint,
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| err(&e))?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| CodecError::audio(path, "has no audio track"))?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| CodecError::audio(path, "audio track without codec parameters"))?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| err(&e))?;
    let mut inter: Vec<f32> = Vec::new();
    let mut ch = params.channels.as_ref().map(|c| c.count()).unwrap_or(0);
    let mut rate = params.sample_rate.unwrap_or(0);
    let mut buf: Vec<f32> = Vec::new();
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(SErr::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(err(&e)),
        };
        if packet.track_id != track_id {
            continue;
        }
        match decoder.decode(&packet) {
            Ok(ab) => {
                let spec = ab.spec();
                ch = spec.channels().count();
                rate = spec.rate();
                buf.resize(ab.samples_interleaved(), 0.0);
                ab.copy_to_slice_interleaved(&mut buf);
                inter.extend_from_slice(&buf);
            }
            Err(SErr::DecodeError(_)) => continue,
            Err(e) => return Err(err(&e)),
        }
    }
    if rate == 0 {
        return Err(CodecError::audio(path, "unknown sample rate"));
    }
    deinterleave(path, &inter, ch, rate)
}

/// Largest torchaudio kernel [`resample`] builds, in taps (phases × taps per phase): 1 MiB of
/// f32.
pub const MAX_EXACT_KERNEL_TAPS: usize = 1 << 18;

/// Longest torchaudio kernel phase [`resample`] builds (the multiply–adds per output sample).
pub const MAX_EXACT_PHASE_TAPS: usize = 1024;

/// Zero crossings per side of the torchaudio kernel.
const ZEROS: f64 = 6.0;
/// Rolloff of the torchaudio kernel.
const ROLLOFF: f64 = 0.99;

/// How [`resample`] converts between two rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResamplePlan {
    /// Equal rates: the input is returned unchanged.
    Passthrough,
    /// The reference's torchaudio algorithm, with a kernel of `phases × taps` f32 values
    /// (at most [`MAX_EXACT_KERNEL_TAPS`], `taps` at most [`MAX_EXACT_PHASE_TAPS`]).
    Exact {
        /// Output phases (the reduced target rate).
        phases: usize,
        /// Taps per phase (one reduced input period plus the sinc's two wings).
        taps: usize,
    },
    /// A bounded windowed-sinc resampler (rubato): its filter tables and buffers have the same
    /// size whatever the rates.
    Bounded,
}

/// The method [`resample`] uses from `from` Hz to `to` Hz (both non-zero).
pub fn resample_plan(from: u32, to: u32) -> ResamplePlan {
    if from == to {
        return ResamplePlan::Passthrough;
    }
    let (orig, new, width) = exact_geometry(from, to);
    let taps = 2 * width + orig;
    match new.checked_mul(taps) {
        Some(k) if k <= MAX_EXACT_KERNEL_TAPS && taps <= MAX_EXACT_PHASE_TAPS => {
            ResamplePlan::Exact { phases: new, taps }
        }
        _ => ResamplePlan::Bounded,
    }
}

/// The reduced rates and the sinc half-width (in input samples) of the torchaudio kernel.
fn exact_geometry(from: u32, to: u32) -> (usize, usize, usize) {
    let g = gcd(u64::from(from), u64::from(to));
    let (orig, new) = ((u64::from(from) / g) as usize, (u64::from(to) / g) as usize);
    let base = orig.min(new) as f64 * ROLLOFF;
    let width = (ZEROS * orig as f64 / base).ceil() as usize;
    (orig, new, width)
}

/// Resample `[channels, n]` from `from` Hz to `to` Hz; returns `[channels, ceil(n · to / from)]`.
/// For the usual rates this is the reference's algorithm (torchaudio `Resample`,
/// `sinc_interp_hann`, 6 zero crossings, rolloff 0.99; kernel built in f64, applied in f32);
/// for a ratio whose torchaudio kernel would be larger than [`MAX_EXACT_KERNEL_TAPS`], a
/// bounded sinc resampler (see [`resample_plan`] and the module docs). Both rates must lie in
/// [`SAMPLE_RATES`]; equal rates return the input unchanged.
pub fn resample(data: &Tensor, from: u32, to: u32) -> Result<Tensor> {
    let s = data.shape();
    if s.len() != 2 {
        return Err(CodecError::Invalid(format!(
            "resample expects [channels, samples], got {s:?}"
        )));
    }
    if !SAMPLE_RATES.contains(&from) || !SAMPLE_RATES.contains(&to) {
        return Err(CodecError::Invalid(format!(
            "cannot resample {from} Hz → {to} Hz: rates must lie in {}–{} Hz",
            SAMPLE_RATES.start(),
            SAMPLE_RATES.end()
        )));
    }
    let x = data.to_dtype(DType::F32)?.contiguous()?;
    if from == to || s[1] == 0 || s[0] == 0 {
        return Ok(x);
    }
    let (ch, n) = (s[0], s[1]);
    let v = x.to_vec_f32()?;
    let target = (n as u64 * u64::from(to)).div_ceil(u64::from(from)) as usize;
    let out = match resample_plan(from, to) {
        ResamplePlan::Exact { .. } => resample_exact(&v, ch, n, from, to, target),
        _ => resample_bounded(&v, ch, n, from, to, target)?,
    };
    Ok(Tensor::from_vec(out, &[ch, target])?)
}

/// The torchaudio algorithm on channel-major `v` (`ch × n`), `target` samples per channel.
fn resample_exact(v: &[f32], ch: usize, n: usize, from: u32, to: u32, target: usize) -> Vec<f32> {
    let (orig, new, width) = exact_geometry(from, to);
    let base = orig.min(new) as f64 * ROLLOFF;
    let klen = 2 * width + orig;
    // kernel[p][m], p = output phase, m = tap.
    let mut kernel = vec![0f32; new * klen];
    let scale = base / orig as f64;
    for p in 0..new {
        // The reference evaluates the phases `arange(0, -new, -1) / new` in float32 (default
        // dtype) before adding them to the float64 tap offsets.
        let phase = f64::from(-(p as f32) / new as f32);
        for m in 0..klen {
            let idx = (m as f64 - width as f64) / orig as f64;
            let mut t = (phase + idx) * base;
            t = t.clamp(-ZEROS, ZEROS);
            let w = (t * std::f64::consts::PI / ZEROS / 2.0).cos().powi(2);
            let tp = t * std::f64::consts::PI;
            let sinc = if tp == 0.0 { 1.0 } else { tp.sin() / tp };
            kernel[p * klen + m] = (sinc * w * scale) as f32;
        }
    }
    let frames = target.div_ceil(new);
    let mut out = vec![0f32; ch * target];
    for c in 0..ch {
        let xr = &v[c * n..(c + 1) * n];
        let orow = &mut out[c * target..(c + 1) * target];
        for f in 0..frames {
            for p in 0..new {
                let o = f * new + p;
                if o >= target {
                    break;
                }
                let kr = &kernel[p * klen..(p + 1) * klen];
                let mut acc = 0f32;
                for (m, kv) in kr.iter().enumerate() {
                    // padded index f·orig + m  ↔  original index f·orig + m − width
                    let i = (f * orig + m) as isize - width as isize;
                    if i >= 0 && (i as usize) < n {
                        acc += xr[i as usize] * kv;
                    }
                }
                orow[o] = acc;
            }
        }
    }
    out
}

/// Input frames per rubato call.
const BOUNDED_CHUNK: usize = 1024;

/// A bounded sinc resampler (rubato) on channel-major `v` (`ch × n`): the filter delay is
/// removed in whole output samples, and the output has `target` samples per channel.
fn resample_bounded(
    v: &[f32],
    ch: usize,
    n: usize,
    from: u32,
    to: u32,
    target: usize,
) -> Result<Vec<f32>> {
    use rubato::audioadapter_buffers::direct::SequentialSlice;
    use rubato::{
        Async, FixedAsync, Resampler, SincInterpolationParameters, SincInterpolationType,
        WindowFunction,
    };
    let err = |e: &dyn std::fmt::Display| {
        CodecError::Invalid(format!("resampling {from} Hz → {to} Hz: {e}"))
    };
    let params = SincInterpolationParameters::new(256, WindowFunction::BlackmanHarris2)
        .oversampling_factor(256)
        .interpolation(SincInterpolationType::Cubic);
    let ratio = f64::from(to) / f64::from(from);
    let mut rs = Async::<f32>::new_sinc(ratio, 1.0, &params, BOUNDED_CHUNK, ch, FixedAsync::Input)
        .map_err(|e| err(&e))?;
    let cap = rs.process_all_needed_output_len(n).max(target);
    let mut buf = vec![0f32; ch * cap];
    let input = SequentialSlice::new(v, ch, n).map_err(|e| err(&e))?;
    let produced = {
        let mut output = SequentialSlice::new_mut(&mut buf, ch, cap).map_err(|e| err(&e))?;
        rs.process_all_into_buffer(&input, &mut output, n, None)
            .map_err(|e| err(&e))?
            .1
    };
    let keep = produced.min(target);
    let mut out = vec![0f32; ch * target];
    for c in 0..ch {
        out[c * target..c * target + keep].copy_from_slice(&buf[c * cap..c * cap + keep]);
    }
    Ok(out)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Channel fixing as the official `set_audio_channels`: mono → duplicated, more than
/// `target` → the first `target` channels; `target = 1` averages to mono.
pub fn fix_channels(data: &Tensor, target: usize) -> Result<Tensor> {
    let s = data.shape();
    if s.len() != 2 || s[0] == 0 || target == 0 {
        return Err(CodecError::Invalid(format!(
            "fix_channels: [channels, samples] and target ≥ 1, got {s:?} → {target}"
        )));
    }
    let (ch, n) = (s[0], s[1]);
    let v = data.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
    let out: Vec<f32> = if target == 1 {
        (0..n)
            .map(|i| (0..ch).map(|c| v[c * n + i]).sum::<f32>() / ch as f32)
            .collect()
    } else if ch == 1 {
        (0..target).flat_map(|_| v.iter().copied()).collect()
    } else if ch >= target {
        v[..target * n].to_vec()
    } else {
        return Err(CodecError::Invalid(format!(
            "cannot make {target} channels from {ch}"
        )));
    };
    Ok(Tensor::from_vec(out, &[target, n])?)
}

/// Zero-pad on the right or crop from the start to exactly `len` samples (`[channels, n]`).
pub fn pad_crop(data: &Tensor, len: usize) -> Result<Tensor> {
    let s = data.shape();
    if s.len() != 2 {
        return Err(CodecError::Invalid(format!(
            "pad_crop expects [channels, samples], got {s:?}"
        )));
    }
    let (ch, n) = (s[0], s[1]);
    let v = data.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
    let mut out = vec![0f32; ch * len];
    for c in 0..ch {
        let k = n.min(len);
        out[c * len..c * len + k].copy_from_slice(&v[c * n..c * n + k]);
    }
    Ok(Tensor::from_vec(out, &[ch, len])?)
}

/// The official `prepare_audio`: resample to `target_sr`, pad / crop to `target_length`
/// samples (`None`: keep the length), fix the channel count; returns `[1, channels, samples]`.
pub fn prepare_audio(
    clip: &AudioClip,
    target_sr: u32,
    target_length: Option<usize>,
    target_channels: usize,
) -> Result<Tensor> {
    let x = resample(&clip.data, clip.sample_rate, target_sr)?;
    let x = match target_length {
        Some(l) => pad_crop(&x, l)?,
        None => x,
    };
    let x = fix_channels(&x, target_channels)?;
    Ok(x.unsqueeze(0)?)
}
