//! `aria stream`: open-ended generation chunk by chunk over [`aria::StreamGenerator`], to a WAV
//! file (its header updated after every chunk, so it is playable while it grows) or to stdout
//! as raw interleaved PCM.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Instant;

use aria::stream::{ContextFrom, Fade};
use aria::{
    Error, GenerateRequest, LoadOptions, Result, RunOptions, SeedGenerator, StreamConfig,
    StreamGenerator,
};
use clap::{Args, ValueEnum};

use crate::args::ModelArg;
use crate::Ctx;

/// Sample format of `-o -`.
/// `--fade`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FadeCurve {
    /// Linear gains normalised for the measured correlation of the two sides (constant power).
    Adaptive,
    /// `cos`/`sin` gains (constant power for uncorrelated sides).
    EqualPower,
    /// Linear gains (constant amplitude for correlated sides).
    Linear,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RawFormat {
    /// 32-bit float, little endian.
    F32,
    /// 16-bit signed integer, little endian.
    S16,
}

/// `aria stream …`.
#[derive(Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// The prompt.
    #[arg(long, short)]
    pub prompt: String,
    /// Change the prompt at a time of the stream: `SECONDS=PROMPT` (repeatable); the change
    /// takes effect at the first chunk starting at or after that time.
    #[arg(long = "prompt-at")]
    pub prompt_at: Vec<String>,
    /// Read new prompts from stdin, one a line, while streaming.
    #[arg(long)]
    pub prompt_stdin: bool,
    /// New audio per chunk, in seconds.
    #[arg(long, default_value_t = 4.0)]
    pub chunk: f64,
    /// Audio of the previous window each window continues, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub context: f64,
    /// Crossfade at each join, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    pub fade_ms: f64,
    /// Crossfade gains at the joins.
    #[arg(long, value_enum, default_value_t = FadeCurve::Adaptive)]
    pub fade: FadeCurve,
    /// Latent headroom of each window, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub padding: f64,
    /// Continue each window from the previous one's audio, encoded again, instead of its
    /// latents (slower; chunk and context need not be whole latent frames).
    #[arg(long)]
    pub audio_context: bool,
    /// Largest phase-alignment shift at a join, in milliseconds (0: none).
    #[arg(long, default_value_t = 5.0)]
    pub align_ms: f64,
    /// Stop after this many seconds (the last chunk is generated whole and cut to the total;
    /// absent: endless).
    #[arg(long)]
    pub total: Option<f64>,
    /// Sampler steps (default: the model's preset).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Classifier-free guidance scale (default: the model's preset).
    #[arg(long)]
    pub cfg: Option<f32>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Generator the seed drives (torch or aria).
    #[arg(long, default_value_t = SeedGenerator::Torch)]
    pub rng: SeedGenerator,
    /// Output: a .wav file, or `-` for raw interleaved PCM on stdout.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Sample format of `-o -`.
    #[arg(long, value_enum, default_value_t = RawFormat::F32)]
    pub format: RawFormat,
    /// 16-bit PCM WAV instead of 32-bit float.
    #[arg(long)]
    pub pcm16: bool,
    /// Steer with a direction file, as for `aria generate --steer` (repeatable).
    #[arg(long)]
    pub steer: Vec<String>,
    /// Ramp every steering strength linearly from 0 to its value over this many seconds of
    /// the stream (per chunk, by the chunk's start); 0: full strength from the start.
    #[arg(long, default_value_t = 0.0)]
    pub steer_ramp: f64,
    /// Use direction files made for another model (the widths must still match).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub quant: crate::quantize::PrecisionArgs,
}

/// The ramp factor in [0, 1] of a steering at `t` seconds (`ramp` ≤ 0: always 1).
fn ramp_factor(t: f64, ramp: f64) -> f32 {
    if ramp > 0.0 {
        (t / ramp).clamp(0.0, 1.0) as f32
    } else {
        1.0
    }
}

/// Where the chunks go.
enum Sink {
    Wav(
        Box<hound::WavWriter<std::io::BufWriter<std::fs::File>>>,
        bool,
    ),
    Raw(std::io::StdoutLock<'static>, RawFormat),
}

impl Sink {
    fn write(&mut self, v: &[f32], ch: usize, n: usize, path: &std::path::Path) -> Result<()> {
        let werr = |e: hound::Error| Error::Audio {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        match self {
            Sink::Wav(w, pcm16) => {
                for i in 0..n {
                    for c in 0..ch {
                        let x = v[c * n + i];
                        if *pcm16 {
                            w.write_sample((x.clamp(-1.0, 1.0) * 32767.0).round() as i16)
                        } else {
                            w.write_sample(x)
                        }
                        .map_err(werr)?;
                    }
                }
                // Rewrites the header: the file is valid after every chunk.
                w.flush().map_err(werr)
            }
            Sink::Raw(out, fmt) => {
                let mut buf = Vec::with_capacity(n * ch * 4);
                for i in 0..n {
                    for c in 0..ch {
                        let x = v[c * n + i];
                        match fmt {
                            RawFormat::F32 => buf.extend_from_slice(&x.to_le_bytes()),
                            RawFormat::S16 => buf.extend_from_slice(
                                &((x.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes(),
                            ),
                        }
                    }
                }
                let ioerr = |e| Error::io(std::path::Path::new("<stdout>"), e);
                out.write_all(&buf).map_err(ioerr)?;
                out.flush().map_err(ioerr)
            }
        }
    }
}

fn parse_prompt_at(s: &str) -> Result<(f64, String)> {
    let bad = || Error::Input(format!("--prompt-at `{s}`: expected SECONDS=PROMPT"));
    let (t, p) = s.split_once('=').ok_or_else(bad)?;
    let t: f64 = t.trim().parse().map_err(|_| bad())?;
    if !(t.is_finite() && t >= 0.0) {
        return Err(bad());
    }
    Ok((t, p.to_string()))
}

/// Run `aria stream`.
pub fn run(a: &StreamArgs, cx: &Ctx) -> Result<()> {
    if cx.json && a.output.as_os_str() == "-" {
        return Err(Error::Input(
            "--json needs -o FILE: with -o - the audio goes to stdout".into(),
        ));
    }
    let mut schedule = a
        .prompt_at
        .iter()
        .map(|s| parse_prompt_at(s))
        .collect::<Result<Vec<_>>>()?;
    schedule.sort_by(|x, y| x.0.total_cmp(&y.0));
    let opts = LoadOptions {
        device: cx.device,
        backend: cx.backend.clone(),
        threads: cx.threads,
        precision: a.quant.precision(),
        w8a8: a.quant.w8a8,
        quantize_decoder: a.quant.quantize_decoder,
        quantize_text: a.quant.quantize_text,
        keep_resident: a.quant.keep_resident,
        ..Default::default()
    };
    if !(a.steer_ramp.is_finite() && a.steer_ramp >= 0.0) {
        return Err(Error::Input(format!(
            "--steer-ramp must be a non-negative number of seconds, got {}",
            a.steer_ramp
        )));
    }
    let specs = crate::steer::parse_specs(&a.steer)?;
    let pipe = crate::load(&a.model.model, &opts, &cx.ui)?;
    let steering = crate::steer::generate_hook(&pipe, &specs, a.force, &cx.ui)?;
    let mut req = GenerateRequest::with_defaults(&a.prompt, 1.0, pipe.sampling_defaults());
    if let Some(s) = a.steps {
        req.steps = s;
    }
    if let Some(c) = a.cfg {
        req.cfg_scale = c;
    }
    let cfg = StreamConfig {
        chunk_sec: a.chunk,
        context_sec: a.context,
        fade_sec: a.fade_ms / 1000.0,
        fade: match a.fade {
            FadeCurve::Adaptive => Fade::Adaptive,
            FadeCurve::EqualPower => Fade::EqualPower,
            FadeCurve::Linear => Fade::Linear,
        },
        padding_sec: a.padding,
        context_from: if a.audio_context {
            ContextFrom::Audio
        } else {
            ContextFrom::Latents
        },
        align_sec: a.align_ms / 1000.0,
    };
    let mut gen = StreamGenerator::new(&pipe, req, cfg)?;
    let sr = pipe.sample_rate();
    let ch = gen.channels();
    let c = gen.chunk_samples();
    let total_samples = match a.total {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            return Err(Error::Input(format!(
                "--total must be a positive number of seconds, got {t}"
            )))
        }
        Some(t) => Some(((t * f64::from(sr)).round() as usize).max(1)),
        None => None,
    };
    let n_chunks = total_samples.map(|t| t.div_ceil(c));
    let to_stdout = a.output.as_os_str() == "-";
    let mut sink = if to_stdout {
        Sink::Raw(std::io::stdout().lock(), a.format)
    } else {
        let spec = hound::WavSpec {
            channels: ch as u16,
            sample_rate: sr,
            bits_per_sample: if a.pcm16 { 16 } else { 32 },
            sample_format: if a.pcm16 {
                hound::SampleFormat::Int
            } else {
                hound::SampleFormat::Float
            },
        };
        let w = hound::WavWriter::create(&a.output, spec).map_err(|e| Error::Audio {
            path: a.output.clone(),
            reason: e.to_string(),
        })?;
        Sink::Wav(Box::new(w), a.pcm16)
    };
    let stdin_prompts = a.prompt_stdin.then(|| {
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines().map_while(|l| l.ok()) {
                let line = line.trim().to_string();
                if !line.is_empty() && tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    });
    let mut noise = a.rng.source(a.seed);
    let t0 = Instant::now();
    let mut k = 0usize;
    let mut gen_time = 0f64;
    let mut written = 0usize;
    while n_chunks.is_none_or(|n| k < n) {
        let start_sec = (k * c) as f64 / f64::from(sr);
        while let Some((t, p)) = schedule.first() {
            if *t > start_sec {
                break;
            }
            cx.ui.note(&format!("{start_sec:.2} s: prompt `{p}`"));
            gen.set_prompt(p.clone());
            schedule.remove(0);
        }
        if let Some(rx) = &stdin_prompts {
            while let Ok(p) = rx.try_recv() {
                cx.ui.note(&format!("{start_sec:.2} s: prompt `{p}`"));
                gen.set_prompt(p);
            }
        }
        let tc = Instant::now();
        let ramped = match &steering {
            Some(h) => Some(
                h.scaled(ramp_factor(start_sec, a.steer_ramp))
                    .map_err(|e| Error::Input(e.to_string()))?,
            ),
            None => None,
        };
        let run = RunOptions {
            hook: ramped
                .as_ref()
                .map(|h| h as &dyn aria_core::hooks::ActivationHook),
            ..Default::default()
        };
        let chunk = gen.next_chunk_with(noise.as_mut(), run)?;
        let dt = tc.elapsed().as_secs_f64();
        gen_time += dt;
        let v = chunk.audio.to_vec_f32()?;
        let n = match n_chunks {
            // The last chunk is cut to the requested total.
            Some(nc) if k + 1 == nc => total_samples.map_or(c, |t| t - k * c).min(c),
            _ => c,
        };
        let v: Vec<f32> = if n == c {
            v
        } else {
            (0..ch).flat_map(|i| v[i * c..i * c + n].to_vec()).collect()
        };
        sink.write(&v, ch, n, &a.output)?;
        written += n;
        let chunk_sec = c as f64 / f64::from(sr);
        cx.ui.note(&format!(
            "chunk {k}: {chunk_sec:.2} s in {dt:.2} s (RTF {:.2})",
            dt / chunk_sec
        ));
        k += 1;
    }
    if let Sink::Wav(w, _) = sink {
        w.finalize().map_err(|e| Error::Audio {
            path: a.output.clone(),
            reason: e.to_string(),
        })?;
    }
    let audio_sec = written as f64 / f64::from(sr);
    let rtf = gen_time / ((k * c) as f64 / f64::from(sr)).max(1e-9);
    if cx.json {
        println!(
            "{}",
            serde_json::json!({
                "command": "stream",
                "output": a.output.display().to_string(),
                "chunks": k,
                "seconds": audio_sec,
                "samples": written,
                "sample_rate": sr,
                "channels": ch,
                "real_time_factor": rtf,
                "total_s": t0.elapsed().as_secs_f64(),
            })
        );
    }
    cx.ui.note(&format!(
        "{k} chunks, {audio_sec:.2} s of audio in {:.2} s: real-time factor {:.3} \
         (generation only)",
        t0.elapsed().as_secs_f64(),
        gen_time / ((k * c) as f64 / f64::from(sr)).max(1e-9)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ramp_factor;

    #[test]
    fn steering_ramps_linearly_then_holds() {
        assert_eq!(ramp_factor(0.0, 8.0), 0.0);
        assert_eq!(ramp_factor(4.0, 8.0), 0.5);
        assert_eq!(ramp_factor(20.0, 8.0), 1.0);
        assert_eq!(ramp_factor(0.0, 0.0), 1.0);
    }
}
