//! The `aria` command-line program: a thin layer of argument parsing, progress display and
//! file output over the `aria` library.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use aria::discover::{resolve_model, ModelFiles, SearchPaths};
use aria::noise::{NoiseSource, RecordingNoise, ReplayNoise, SeededNoise};
use aria::pipeline::{
    Event, GenerateRequest, InitAudio, Inpaint, LoadOptions, Pipeline, Precision,
};
use aria::synth::{self, Preset};
use aria::SamplerKind;
use aria::{Error, Result};
use aria_codec::audio::{read_audio, write_wav, WavFormat};
use aria_core::Tensor;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "aria",
    version,
    about = "Stable Audio 3 text-to-audio, natively in Rust"
)]
struct Cli {
    /// No progress bars and no timing summary.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate audio from a prompt (without --model: the random-weight demo model).
    Generate(Box<GenerateArgs>),
    /// Build a tiny random-weight model and generate from it (no download; the output is noise).
    Demo(DemoArgs),
    /// Encode an audio file to latents (safetensors, tensor `latents`).
    Encode(EncodeArgs),
    /// Decode latents (safetensors, tensor `latents`) to a WAV file.
    Decode(DecodeArgs),
    /// Show parameter counts, dtypes and the memory plan of a model.
    Info(InfoArgs),
}

#[derive(Args)]
struct ModelArg {
    /// Model folder (model_config.json, model.safetensors, t5gemma-b-b-ul2/) or name
    /// (small-music, small-sfx, medium: looked up in the Hugging Face cache).
    #[arg(long, short)]
    model: Option<String>,
}

#[derive(Args)]
struct NoiseArgs {
    /// Seed of the noise (random when absent; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Replay every random draw from this file (draw_00, draw_01, … in call order).
    #[arg(long)]
    noise: Option<PathBuf>,
    /// Save every random draw to this file (replayable with --noise).
    #[arg(long)]
    noise_out: Option<PathBuf>,
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The text prompt.
    #[arg(long, short)]
    prompt: String,
    /// Duration in seconds.
    #[arg(long, short, default_value_t = 10.0, allow_negative_numbers = true)]
    seconds: f64,
    /// Sampler steps.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Classifier-free guidance scale (1 = off).
    #[arg(long, default_value_t = 1.0)]
    cfg: f32,
    /// Negative prompt (with --cfg other than 1).
    #[arg(long)]
    negative_prompt: Option<String>,
    /// Adaptive projected guidance scale (1 = full APG, 0 = plain CFG).
    #[arg(long, default_value_t = 1.0)]
    apg: f32,
    /// Sampler: pingpong or euler (default: what the model's objective uses).
    #[arg(long)]
    sampler: Option<String>,
    /// Start from this audio (audio-to-audio).
    #[arg(long)]
    init_audio: Option<PathBuf>,
    /// Noise level for --init-audio, in (0, 1].
    #[arg(long, default_value_t = 0.8)]
    init_noise_level: f32,
    /// Audio to inpaint.
    #[arg(long)]
    inpaint_audio: Option<PathBuf>,
    /// Region START,END (seconds) to regenerate in --inpaint-audio (repeatable).
    #[arg(long)]
    inpaint_range: Vec<String>,
    /// LoRA FILE[:STRENGTH] (repeatable, applied in order; strength 1 by default).
    #[arg(long)]
    lora: Vec<String>,
    /// Headroom (seconds) added to the duration when sizing the latents.
    #[arg(long, default_value_t = 6.0)]
    duration_padding: f64,
    #[command(flatten)]
    noise: NoiseArgs,
    /// Write the final latents to this safetensors file (tensor `latents`).
    #[arg(long)]
    latents_out: Option<PathBuf>,
    /// Output WAV file.
    #[arg(long, short, default_value = "out.wav")]
    output: PathBuf,
    /// Write 16-bit PCM instead of 32-bit float.
    #[arg(long)]
    pcm16: bool,
    /// Text-encoder arithmetic: `bf16` reproduces the official (bf16) conditioning bit for
    /// bit, `f32` is closer to exact arithmetic (default: what the model folder asks for).
    #[arg(long, value_parser = ["bf16", "f32"])]
    text_precision: Option<String>,
}

#[derive(Args)]
struct DemoArgs {
    /// The text prompt.
    #[arg(long, short, default_value = "warm ambient pad")]
    prompt: String,
    /// Duration in seconds.
    #[arg(long, short, default_value_t = 5.0, allow_negative_numbers = true)]
    seconds: f64,
    /// Seed of the noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output WAV file.
    #[arg(long, short, default_value = "demo.wav")]
    output: PathBuf,
}

#[derive(Args)]
struct EncodeArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Audio file to encode.
    #[arg(long, short)]
    input: PathBuf,
    #[command(flatten)]
    noise: NoiseArgs,
    /// Output safetensors file.
    #[arg(long, short, default_value = "latents.safetensors")]
    output: PathBuf,
}

#[derive(Args)]
struct DecodeArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Latents file (safetensors; tensor `latents` or its only tensor), `[1, C, T]` or `[C, T]`.
    #[arg(long, short)]
    input: PathBuf,
    #[command(flatten)]
    noise: NoiseArgs,
    /// Output WAV file.
    #[arg(long, short, default_value = "out.wav")]
    output: PathBuf,
    /// Write 16-bit PCM instead of 32-bit float.
    #[arg(long)]
    pcm16: bool,
}

#[derive(Args)]
struct InfoArgs {
    #[command(flatten)]
    model: ModelArg,
}

/// Progress display (bars on stderr unless quiet).
struct Ui {
    quiet: bool,
    start: Instant,
}

impl Ui {
    fn spinner(&self, msg: &str) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new_spinner().with_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    }

    fn note(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{msg}");
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The demo model folder (written on first use).
fn demo_model(ui: &Ui) -> Result<ModelFiles> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join("aria").join("demo-tiny-v1");
    if !aria::discover::missing_files(&dir).is_empty() {
        let pb = ui.spinner("writing the tiny random-weight demo model");
        synth::write_model(&dir, Preset::Tiny, aria_core::DType::F32, 0, &mut |_, _| {})?;
        pb.finish_and_clear();
    }
    resolve_model(&dir.display().to_string(), &SearchPaths::default())
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ u64::from(std::process::id())) % 100_000
}

fn noise_source(args: &NoiseArgs, ui: &Ui) -> Result<Box<dyn NoiseSource>> {
    if let Some(p) = &args.noise {
        if args.seed.is_some() {
            return Err(Error::Input("--noise and --seed exclude each other".into()));
        }
        return Ok(Box::new(ReplayNoise::open(p, "")?));
    }
    let seed = args.seed.unwrap_or_else(random_seed);
    if args.seed.is_none() {
        ui.note(&format!("seed: {seed}"));
    }
    Ok(Box::new(SeededNoise::new(seed)))
}

fn parse_range(s: &str) -> Result<(f64, f64)> {
    let bad = || {
        Error::Input(format!(
            "--inpaint-range `{s}`: expected START,END in seconds"
        ))
    };
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

fn parse_lora(s: &str) -> Result<(PathBuf, f32)> {
    match s.rsplit_once(':') {
        Some((p, st)) if !p.is_empty() => match st.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok((PathBuf::from(p), v)),
            _ => Err(Error::Input(format!(
                "--lora `{s}`: strength `{st}` is not a number"
            ))),
        },
        _ => Ok((PathBuf::from(s), 1.0)),
    }
}

fn load(model: &Option<String>, opts: &LoadOptions, ui: &Ui) -> Result<Pipeline> {
    let files = match model {
        Some(m) => resolve_model(m, &SearchPaths::from_env())?,
        None => {
            ui.note(
                "no --model given: using a tiny model with RANDOM weights; its output is noise.",
            );
            ui.note("For real audio pass --model small-music (downloaded Hugging Face folder) or --model <folder>.");
            demo_model(ui)?
        }
    };
    let pb = ui.spinner(&format!("loading {}", files.dir.display()));
    let p = Pipeline::load(&files, opts);
    pb.finish_and_clear();
    p
}

fn write_audio(path: &Path, audio: &Tensor, sr: u32, pcm16: bool) -> Result<()> {
    let fmt = if pcm16 {
        WavFormat::Pcm16
    } else {
        WavFormat::F32
    };
    Ok(write_wav(path, audio, sr, fmt)?)
}

fn generate(args: &GenerateArgs, ui: &Ui) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(Error::Input(format!(
            "--seconds must be positive, got {}",
            args.seconds
        )));
    }
    let sampler = match &args.sampler {
        Some(s) => Some(match s.as_str() {
            "pingpong" | "ping-pong" => SamplerKind::PingPong,
            "euler" => SamplerKind::Euler,
            _ => {
                return Err(Error::Input(format!(
                    "--sampler `{s}`: expected pingpong or euler"
                )))
            }
        }),
        None => None,
    };
    let loras = args
        .lora
        .iter()
        .map(|s| parse_lora(s))
        .collect::<Result<Vec<_>>>()?;
    let ranges = args
        .inpaint_range
        .iter()
        .map(|s| parse_range(s))
        .collect::<Result<Vec<_>>>()?;
    if !ranges.is_empty() && args.inpaint_audio.is_none() {
        return Err(Error::Input("--inpaint-range needs --inpaint-audio".into()));
    }
    let init_audio = match &args.init_audio {
        Some(p) => Some(InitAudio {
            clip: read_audio(p)?,
            noise_level: args.init_noise_level,
        }),
        None => None,
    };
    let inpaint = match &args.inpaint_audio {
        Some(p) => Some(Inpaint {
            clip: read_audio(p)?,
            ranges,
        }),
        None => None,
    };
    if let Some(p) = &args.noise.noise {
        if !p.is_file() {
            return Err(Error::Noise {
                path: p.clone(),
                reason: "file not found".into(),
            });
        }
    }
    let pipe = load(
        &args.model.model,
        &LoadOptions {
            loras,
            text_precision: args.text_precision.as_deref().map(|p| match p {
                "f32" => Precision::F32,
                _ => Precision::Bf16,
            }),
            ..Default::default()
        },
        ui,
    )?;
    let ready = ui.start.elapsed();
    let mut base_noise = noise_source(&args.noise, ui)?;
    let mut req = GenerateRequest::new(args.prompt.clone(), args.seconds);
    req.steps = args.steps;
    req.cfg_scale = args.cfg;
    req.apg_scale = args.apg;
    req.negative_prompt = args.negative_prompt.clone();
    req.sampler = sampler;
    req.duration_padding_sec = args.duration_padding;
    req.init_audio = init_audio;
    req.inpaint = inpaint;

    let text_pb = ui.spinner("encoding the prompt");
    let mut steps_pb: Option<ProgressBar> = None;
    let mut dec_pb: Option<ProgressBar> = None;
    let mut on_event = |e: &Event| {
        match e {
            Event::TextDone => text_pb.finish_and_clear(),
            Event::Step { index, total, .. } => {
                let pb = steps_pb.get_or_insert_with(|| {
                    if ui.quiet {
                        return ProgressBar::hidden();
                    }
                    let pb = ProgressBar::new(*total as u64);
                    if let Ok(st) = ProgressStyle::with_template(
                        "sampling {bar:30} {pos}/{len} steps {elapsed_precise}",
                    ) {
                        pb.set_style(st);
                    }
                    pb
                });
                pb.set_position(*index as u64 + 1);
            }
            Event::Decoding => {
                if let Some(pb) = &steps_pb {
                    pb.finish_and_clear();
                }
                dec_pb = Some(ui.spinner("decoding"));
            }
            Event::Decoded => {
                if let Some(pb) = &dec_pb {
                    pb.finish_and_clear();
                }
            }
            Event::AudioEncoded => {}
        }
        ControlFlow::Continue(())
    };
    let out = if let Some(p) = &args.noise.noise_out {
        let mut rec = RecordingNoise::new(base_noise.as_mut());
        let out = pipe.generate(&req, &mut rec, &mut on_event)?;
        rec.save(p)?;
        out
    } else {
        pipe.generate(&req, base_noise.as_mut(), &mut on_event)?
    };
    write_audio(&args.output, &out.audio, pipe.sample_rate(), args.pcm16)?;
    if let Some(p) = &args.latents_out {
        aria_core::save_safetensors(p, &[("latents", &out.latents)], None)?;
    }
    if !ui.quiet {
        let t = &out.timings;
        let per_step = if t.steps.is_empty() {
            Duration::ZERO
        } else {
            t.steps.iter().sum::<Duration>() / t.steps.len() as u32
        };
        eprintln!(
            "wrote {} ({:.2} s, peak {:.3})",
            args.output.display(),
            out.audio.shape()[1] as f64 / f64::from(pipe.sample_rate()),
            out.audio
                .to_vec_f32()?
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()))
        );
        eprintln!(
            "timing: ready {} | text {} | {} steps × {} | decode {} | total {}",
            secs(ready),
            secs(t.text),
            t.steps.len(),
            secs(per_step),
            secs(t.decode),
            secs(ui.start.elapsed())
        );
    }
    Ok(())
}

fn demo(args: &DemoArgs, ui: &Ui) -> Result<()> {
    let g = GenerateArgs {
        model: ModelArg { model: None },
        prompt: args.prompt.clone(),
        seconds: args.seconds,
        steps: 8,
        cfg: 1.0,
        negative_prompt: None,
        apg: 1.0,
        sampler: None,
        init_audio: None,
        init_noise_level: 0.8,
        inpaint_audio: None,
        inpaint_range: Vec::new(),
        lora: Vec::new(),
        duration_padding: 6.0,
        noise: NoiseArgs {
            seed: Some(args.seed),
            noise: None,
            noise_out: None,
        },
        latents_out: None,
        output: args.output.clone(),
        pcm16: false,
        text_precision: None,
    };
    generate(&g, ui)
}

fn encode(args: &EncodeArgs, ui: &Ui) -> Result<()> {
    let clip = read_audio(&args.input)?;
    let mut noise = noise_source(&args.noise, ui)?;
    let pipe = load(&args.model.model, &LoadOptions::default(), ui)?;
    let pb = ui.spinner("encoding");
    let z = pipe.encode_audio(&clip, noise.as_mut())?;
    pb.finish_and_clear();
    aria_core::save_safetensors(&args.output, &[("latents", &z)], None)?;
    ui.note(&format!("wrote {} {:?}", args.output.display(), z.shape()));
    Ok(())
}

fn decode(args: &DecodeArgs, ui: &Ui) -> Result<()> {
    let w = aria_core::WeightLoader::open(&[&args.input])?;
    let names = w.names();
    let name = if names.iter().any(|n| n == "latents") {
        "latents".to_string()
    } else if names.len() == 1 {
        names[0].clone()
    } else {
        return Err(Error::Input(format!(
            "{}: no tensor named `latents`",
            args.input.display()
        )));
    };
    let mut z = w.get_any(&name)?.to_dtype(aria_core::DType::F32)?;
    if z.rank() == 2 {
        z = z.unsqueeze(0)?;
    }
    let mut noise = noise_source(&args.noise, ui)?;
    let pipe = load(&args.model.model, &LoadOptions::default(), ui)?;
    let c = pipe.config().model.io_channels;
    if z.rank() != 3 || z.shape()[0] != 1 || z.shape()[1] != c {
        return Err(Error::Input(format!(
            "{}: latents of shape {:?}, the model needs [1, {c}, T]",
            args.input.display(),
            z.shape()
        )));
    }
    let pb = ui.spinner("decoding");
    let audio = pipe.decode_latents(&z, noise.as_mut())?;
    pb.finish_and_clear();
    write_audio(&args.output, &audio, pipe.sample_rate(), args.pcm16)?;
    ui.note(&format!("wrote {}", args.output.display()));
    Ok(())
}

fn info(args: &InfoArgs, ui: &Ui) -> Result<()> {
    let files = match &args.model.model {
        Some(m) => resolve_model(m, &SearchPaths::from_env())?,
        None => demo_model(ui)?,
    };
    let info = aria::info::model_info(&files)?;
    let cfg = aria_dit::config::ModelConfig::from_file(&files.config)?;
    let ae = aria_codec::AutoencoderConfig::from_model_config(&files.config)?;
    let geometry = aria::plan::Geometry {
        sample_rate: cfg.sample_rate,
        downsampling_ratio: ae.downsampling_ratio,
        latent_align: 2,
        max_samples: aria::pipeline::GENERATE_SAMPLE_SIZE.max(cfg.sample_size),
    };
    println!("model: {}", files.dir.display());
    print!(
        "{}",
        info.report(
            &geometry,
            cfg.model.diffusion.config.embed_dim,
            &[10.0, 30.0]
        )
    );
    Ok(())
}

fn run(cli: &Cli, start: Instant) -> Result<()> {
    let ui = Ui {
        quiet: cli.quiet,
        start,
    };
    match &cli.cmd {
        Cmd::Generate(a) => generate(a, &ui),
        Cmd::Demo(a) => demo(a, &ui),
        Cmd::Encode(a) => encode(a, &ui),
        Cmd::Decode(a) => decode(a, &ui),
        Cmd::Info(a) => info(a, &ui),
    }
}

fn main() -> ExitCode {
    let start = Instant::now();
    let cli = Cli::parse();
    match run(&cli, start) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_string().replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
