//! The command line: subcommands, flags (with the official CLI's names as aliases) and the
//! parsing of the compound values (`FILE[:STRENGTH]`, `START,END`).

use std::path::PathBuf;

use aria::noise::SeedGenerator;
use aria::pipeline::{GenerateRequest, Precision, SamplingDefaults};
use aria::{DeviceKind, Error, Result, SamplerKind};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "aria",
    version,
    about = "Stable Audio 3 text-to-audio, natively in Rust"
)]
pub struct Cli {
    /// No progress bars and no timing summary (warnings still go to stderr).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Print a machine-readable JSON summary on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// More detail on stderr: what loading did to the weights (kinds, bytes, pages released)
    /// and every step's time.
    #[arg(long, short, global = true, conflicts_with = "quiet")]
    pub verbose: bool,
    /// Worker threads (default: every core).
    #[arg(long, short = 't', global = true)]
    pub threads: Option<usize>,
    /// Where the models run.
    #[arg(long, global = true, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Generate audio from a prompt (without --model: the random-weight demo model).
    Generate(Box<GenerateArgs>),
    /// Build a tiny random-weight model and generate from it (no download; the output is noise).
    Demo(DemoArgs),
    /// Encode an audio file to latents (safetensors, tensor `latents`).
    Encode(EncodeArgs),
    /// Decode latents (safetensors, tensor `latents`) to a WAV or FLAC file.
    Decode(DecodeArgs),
    /// Show parameter counts, dtypes and the memory plan of a model.
    Info(InfoArgs),
    /// Write a pre-quantized copy of a model folder (q8, q4, q4-mixed).
    Quantize(crate::quantize::QuantizeArgs),
    /// List the model folders that discovery finds (Hugging Face cache, working directory).
    Models,
    /// Activation steering: extract directions, sweep their strength, inspect direction files.
    Steer(crate::steer::SteerArgs),
    /// The warm-start cache: stats, list, import audio, clear.
    Cache(crate::cache::CacheArgs),
    /// Open-ended generation chunk by chunk, to a WAV file or raw PCM on stdout.
    Stream(Box<crate::stream::StreamArgs>),
    /// Serve the model over HTTP: a job queue, streamed audio, a web page.
    Serve(Box<crate::serve::ServeArgs>),
    /// Embed texts and clips with CLAP and print their similarities (CLAP scores).
    Clap(Box<crate::score::ClapArgs>),
    /// Measure folders of clips with CLAP: CLAP score against prompts, FAD and drift from a
    /// baseline folder, each beside the re-seed spread.
    Score(Box<crate::score::ScoreArgs>),
}

/// `--device`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The CPU.
    Cpu,
    /// A GPU through wgpu (build with `--features wgpu`).
    Wgpu,
    /// An NVIDIA GPU through CUDA (build with `--features cuda`).
    Cuda,
}

impl From<Device> for DeviceKind {
    fn from(d: Device) -> DeviceKind {
        match d {
            Device::Cpu => DeviceKind::Cpu,
            Device::Wgpu => DeviceKind::Wgpu,
            Device::Cuda => DeviceKind::Cuda,
        }
    }
}

/// `--sampler`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sampler {
    /// Ping-pong (the post-trained models' sampler).
    #[value(alias = "ping-pong")]
    Pingpong,
    /// Euler (the base models' sampler).
    Euler,
    /// 4th-order Runge–Kutta (4 model evaluations per step).
    Rk4,
    /// DPM-Solver++ (2M) for rectified flow.
    Dpmpp,
}

impl From<Sampler> for SamplerKind {
    fn from(s: Sampler) -> SamplerKind {
        match s {
            Sampler::Pingpong => SamplerKind::PingPong,
            Sampler::Euler => SamplerKind::Euler,
            Sampler::Rk4 => SamplerKind::Rk4,
            Sampler::Dpmpp => SamplerKind::DpmPp,
        }
    }
}

/// `--text-precision`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TextPrecision {
    /// A replay of the official bf16 arithmetic as PyTorch computes it on AVX2 CPUs
    /// (reproduces its conditioning bit for bit there).
    Bf16,
    /// f32 arithmetic (the default where bf16 products are not faster; the closest to exact).
    F32,
    /// f32 arithmetic with the matrices in the bf16_panels format (bf16 product inputs, f32
    /// accumulation) and the attention's products allowed in bf16: the CPU runs them on its
    /// AMX tile unit where it has AMX-BF16, else with `vdpbf16ps` (AVX-512 BF16), else emulated
    /// (the same bits as `vdpbf16ps`, tens of times slower than f32). `bf16-amx` is another
    /// name for it: the unit is the backend's choice.
    #[value(alias = "bf16-amx")]
    Bf16Dot,
}

impl From<TextPrecision> for Precision {
    fn from(p: TextPrecision) -> Precision {
        match p {
            TextPrecision::Bf16 => Precision::Bf16,
            TextPrecision::F32 => Precision::F32,
            TextPrecision::Bf16Dot => Precision::Bf16Dot,
        }
    }
}

#[derive(Args)]
pub struct ModelArg {
    /// Model folder (model_config.json, model.safetensors, t5gemma-b-b-ul2/) or name
    /// (small-music, small-sfx, medium: looked up in the Hugging Face cache).
    #[arg(long, short)]
    pub model: Option<String>,
}

#[derive(Args)]
pub struct NoiseArgs {
    /// Seed of the noise (-1 or absent: random, printed).
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<i64>,
    /// Generator the seed drives: `torch` (the official generate(seed=N)'s draws, bit for bit)
    /// or `aria` (aria's own portable generator).
    #[arg(long, default_value_t = SeedGenerator::Torch)]
    pub rng: SeedGenerator,
    /// Replay every random draw from this file (draw_00, draw_01, … in call order).
    #[arg(long)]
    pub noise: Option<PathBuf>,
    /// Save every random draw to this file (replayable with --noise).
    #[arg(long)]
    pub noise_out: Option<PathBuf>,
}

#[derive(Args)]
pub struct DecodeOpts {
    /// Decode in the official 128-latent chunks (default: as the model config says).
    #[arg(long, conflicts_with = "no_chunked_decode")]
    pub chunked_decode: bool,
    /// Decode the whole sequence at once.
    #[arg(long)]
    pub no_chunked_decode: bool,
}

impl DecodeOpts {
    pub fn chunked(&self) -> Option<bool> {
        match (self.chunked_decode, self.no_chunked_decode) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// The text prompt; several (`-p a -p b` or `-p a b`) make a batch.
    #[arg(long, short, required = true, num_args = 1..)]
    pub prompt: Vec<String>,
    /// Duration in seconds (one, or one per batch item).
    #[arg(
        long,
        short,
        visible_alias = "duration",
        num_args = 1..,
        default_value = "10",
        allow_negative_numbers = true
    )]
    pub seconds: Vec<f64>,
    /// Batch size (default: the number of prompts; one prompt is repeated).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Sampler steps (default: the model's preset, 8, or 50 for the -base models).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Classifier-free guidance scale, 1 = off (default: the model's preset, 1, or 7 for the
    /// -base models).
    #[arg(long, visible_alias = "cfg-scale")]
    pub cfg: Option<f32>,
    /// Negative prompt (with --cfg other than 1; one, or one per batch item).
    #[arg(long, num_args = 1..)]
    pub negative_prompt: Vec<String>,
    /// Adaptive projected guidance scale (1 = full APG, 0 = plain CFG).
    #[arg(long, default_value_t = 1.0)]
    pub apg: f32,
    /// Sampler (default: what the model's objective uses).
    #[arg(long, value_enum)]
    pub sampler: Option<Sampler>,
    /// Distribution shift of the schedule, TYPE[:KEY=VALUE,...] with TYPE none, logsnr, full or
    /// flux and the keys of `sampling_distribution_shift_options` (default: the model's).
    #[arg(long, visible_alias = "dist-shift")]
    pub shift: Option<String>,
    /// Guide only while LO <= sigma <= HI (LO,HI).
    #[arg(long)]
    pub cfg_interval: Option<String>,
    /// CFG rescale phi (0 = off).
    #[arg(long, visible_alias = "scale-phi", default_value_t = 0.0)]
    pub cfg_rescale: f32,
    /// Clamp of the guidance difference's norm (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub cfg_norm_threshold: f32,
    /// Start from this audio (audio-to-audio).
    #[arg(long)]
    pub init_audio: Option<PathBuf>,
    /// Noise level for --init-audio, in (0, 1].
    #[arg(long, default_value_t = 0.8)]
    pub init_noise_level: f32,
    /// Audio to inpaint.
    #[arg(long)]
    pub inpaint_audio: Option<PathBuf>,
    /// Region START,END (seconds) to regenerate in --inpaint-audio (repeatable).
    #[arg(long)]
    pub inpaint_range: Vec<String>,
    /// Start (seconds) of a region to regenerate (repeatable, paired with --inpaint-end).
    #[arg(long, allow_negative_numbers = true)]
    pub inpaint_start: Vec<f64>,
    /// End (seconds) of a region to regenerate (repeatable, paired with --inpaint-start).
    #[arg(long, allow_negative_numbers = true)]
    pub inpaint_end: Vec<f64>,
    /// LoRA FILE[:STRENGTH] (repeatable, applied in order; strength 1 by default).
    #[arg(long, visible_alias = "lora-ckpt-path")]
    pub lora: Vec<String>,
    /// Strength of every LoRA (or of the one --lora-index names).
    #[arg(long, allow_negative_numbers = true)]
    pub lora_strength: Option<f32>,
    /// The LoRA (0-based) that --lora-strength applies to.
    #[arg(long, requires = "lora_strength")]
    pub lora_index: Option<usize>,
    /// Headroom (seconds) added to the duration when sizing the latents.
    #[arg(long, default_value_t = 6.0)]
    pub duration_padding: f64,
    #[command(flatten)]
    pub noise: NoiseArgs,
    #[command(flatten)]
    pub decode: DecodeOpts,
    /// Write the final latents to this safetensors file (tensor `latents`).
    #[arg(long)]
    pub latents_out: Option<PathBuf>,
    /// Output file: WAV, or FLAC when it ends in `.flac`; a batch writes NAME_0.EXT, NAME_1.EXT, …
    #[arg(long, short, default_value = "out.wav")]
    pub output: PathBuf,
    /// Write 16-bit PCM instead of 32-bit float (FLAC: 16 instead of 24 bits). The default WAV
    /// is 32-bit float, which some readers (Python's `wave`) cannot open.
    #[arg(long)]
    pub pcm16: bool,
    /// Write 24-bit PCM WAV instead of 32-bit float (FLAC is 24-bit already).
    #[arg(long, conflicts_with = "pcm16")]
    pub pcm24: bool,
    /// Text-encoder arithmetic (default: bf16-dot where the CPU runs it faster than f32, on an
    /// AMX-BF16 tile unit or AVX-512 BF16 on AMD cores; else f32).
    #[arg(long, value_enum)]
    pub text_precision: Option<TextPrecision>,
    #[command(flatten)]
    pub quant: crate::quantize::PrecisionArgs,
    /// Steer with a direction file:
    /// FILE[:site=residual|latent|text][:block=K][:strength=A][:steps=LO-HI][:op=add|project][:scale=norm|raw]
    /// (repeatable; applied in the order given, each acting on the previous one's output).
    #[arg(long, value_name = "SPEC")]
    pub steer: Vec<String>,
    /// Use --steer direction files made for another model (their widths are still checked).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub cache_opts: crate::cache::CacheOpts,
}

#[derive(Args)]
pub struct DemoArgs {
    /// The text prompt.
    #[arg(long, short, default_value = "warm ambient pad")]
    pub prompt: String,
    /// Duration in seconds.
    #[arg(long, short, default_value_t = 5.0, allow_negative_numbers = true)]
    pub seconds: f64,
    /// Seed of the noise.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output file (WAV, or FLAC when it ends in `.flac`).
    #[arg(long, short, default_value = "demo.wav")]
    pub output: PathBuf,
}

#[derive(Args)]
pub struct EncodeArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Audio file to encode.
    #[arg(long, short)]
    pub input: PathBuf,
    #[command(flatten)]
    pub noise: NoiseArgs,
    /// Output safetensors file.
    #[arg(long, short, default_value = "latents.safetensors")]
    pub output: PathBuf,
}

#[derive(Args)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Latents file (safetensors; tensor `latents` or its only tensor), `[1, C, T]` or `[C, T]`.
    #[arg(long, short)]
    pub input: PathBuf,
    #[command(flatten)]
    pub noise: NoiseArgs,
    #[command(flatten)]
    pub decode: DecodeOpts,
    /// Output file (WAV, or FLAC when it ends in `.flac`).
    #[arg(long, short, default_value = "out.wav")]
    pub output: PathBuf,
    /// Write 16-bit PCM instead of 32-bit float (FLAC: 16 instead of 24 bits). The default WAV
    /// is 32-bit float, which some readers (Python's `wave`) cannot open.
    #[arg(long)]
    pub pcm16: bool,
    /// Write 24-bit PCM WAV instead of 32-bit float (FLAC is 24-bit already).
    #[arg(long, conflicts_with = "pcm16")]
    pub pcm24: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArg,
}

/// `START,END` in seconds.
pub fn parse_range(s: &str) -> Result<(f64, f64)> {
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

/// `FILE[:STRENGTH]`. A suffix after the last `:` that is not a number is part of the file
/// name (`C:\x.safetensors`, `a:b.safetensors`), unless the whole argument names no file and
/// the suffix looks numeric, which is a typo worth an error.
pub fn parse_lora(s: &str) -> Result<(PathBuf, f32)> {
    if let Some((p, st)) = s.rsplit_once(':') {
        if !p.is_empty() {
            if let Ok(v) = st.parse::<f32>() {
                if !v.is_finite() {
                    return Err(Error::Input(format!(
                        "--lora `{s}`: strength `{st}` is not a finite number"
                    )));
                }
                return Ok((PathBuf::from(p), v));
            }
            let numeric = st
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'));
            if numeric && !st.is_empty() && !std::path::Path::new(s).exists() {
                return Err(Error::Input(format!(
                    "--lora `{s}`: strength `{st}` is not a number"
                )));
            }
        }
    }
    Ok((PathBuf::from(s), 1.0))
}

/// `--shift TYPE[:KEY=VALUE,...]` as a distribution shift.
pub fn parse_shift(s: &str) -> Result<aria::pipeline::Shift> {
    let (ty, rest) = s.split_once(':').unwrap_or((s, ""));
    let mut obj = serde_json::Map::new();
    obj.insert("type".into(), serde_json::Value::String(ty.trim().into()));
    for kv in rest.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::Input(format!("--shift `{s}`: `{kv}` is not KEY=VALUE")))?;
        let v = v.trim();
        let value = match v {
            "true" => serde_json::Value::Bool(true),
            "false" => serde_json::Value::Bool(false),
            n => serde_json::Number::from_f64(
                n.parse::<f64>()
                    .map_err(|_| Error::Input(format!("--shift `{s}`: `{v}` is not a number")))?,
            )
            .map(serde_json::Value::Number)
            .ok_or_else(|| Error::Input(format!("--shift `{s}`: `{v}` is not finite")))?,
        };
        obj.insert(k.trim().into(), value);
    }
    aria::pipeline::Shift::parse(Some(&serde_json::Value::Object(obj)))
        .map_err(|e| Error::Input(format!("--shift `{s}`: {e}")))
}

/// Set the sampling fields of `req` from the flags, the model's preset `defaults` where a
/// flag is not given.
pub fn apply_sampling(
    args: &GenerateArgs,
    defaults: SamplingDefaults,
    req: &mut GenerateRequest,
) -> Result<()> {
    req.steps = args.steps.unwrap_or(defaults.steps);
    req.cfg_scale = args.cfg.unwrap_or(defaults.cfg_scale);
    req.apg_scale = args.apg;
    req.sampler = Some(args.sampler.map_or(defaults.sampler, Into::into));
    req.shift = args.shift.as_deref().map(parse_shift).transpose()?;
    if let Some(iv) = &args.cfg_interval {
        let bad = || Error::Input(format!("--cfg-interval `{iv}`: expected LO,HI"));
        let (lo, hi) = iv.split_once(',').ok_or_else(bad)?;
        let lo: f32 = lo.trim().parse().map_err(|_| bad())?;
        let hi: f32 = hi.trim().parse().map_err(|_| bad())?;
        req.cfg_interval = (lo, hi);
    }
    req.cfg_rescale = args.cfg_rescale;
    req.cfg_norm_threshold = args.cfg_norm_threshold;
    Ok(())
}

/// The LoRAs of `--lora` with `--lora-strength` / `--lora-index` applied.
pub fn loras(args: &GenerateArgs) -> Result<Vec<(PathBuf, f32)>> {
    let mut v = args
        .lora
        .iter()
        .map(|s| parse_lora(s))
        .collect::<Result<Vec<_>>>()?;
    if let Some(st) = args.lora_strength {
        match args.lora_index {
            Some(i) => {
                let n = v.len();
                let e = v.get_mut(i).ok_or_else(|| {
                    Error::Input(format!("--lora-index {i}: only {n} LoRA files given"))
                })?;
                e.1 = st;
            }
            None => v.iter_mut().for_each(|e| e.1 = st),
        }
    }
    Ok(v)
}

/// The inpainting regions of `--inpaint-range` and `--inpaint-start/--inpaint-end`.
pub fn inpaint_ranges(args: &GenerateArgs) -> Result<Vec<(f64, f64)>> {
    let mut ranges = args
        .inpaint_range
        .iter()
        .map(|s| parse_range(s))
        .collect::<Result<Vec<_>>>()?;
    if args.inpaint_start.len() != args.inpaint_end.len() {
        return Err(Error::Input(format!(
            "--inpaint-start and --inpaint-end must be given the same number of times \
             ({} and {})",
            args.inpaint_start.len(),
            args.inpaint_end.len()
        )));
    }
    ranges.extend(
        args.inpaint_start
            .iter()
            .copied()
            .zip(args.inpaint_end.iter().copied()),
    );
    if !ranges.is_empty() && args.inpaint_audio.is_none() {
        return Err(Error::Input(
            "--inpaint-range / --inpaint-start need --inpaint-audio".into(),
        ));
    }
    if ranges.is_empty() && args.inpaint_audio.is_some() {
        return Err(Error::Input(
            "--inpaint-audio needs --inpaint-range START,END or --inpaint-start/--inpaint-end"
                .into(),
        ));
    }
    Ok(ranges)
}

/// One batch item: prompt, negative prompt, duration.
pub struct Item {
    pub prompt: String,
    pub negative: Option<String>,
    pub seconds: f64,
}

/// The batch the flags describe, as the official CLI resolves it: the batch size is the
/// number of prompts unless `--batch-size` repeats a single prompt; durations and negative
/// prompts are one for all or one per item.
pub fn batch(args: &GenerateArgs) -> Result<Vec<Item>> {
    let n_prompts = args.prompt.len();
    let size = match args.batch_size {
        None => n_prompts,
        Some(0) => return Err(Error::Input("--batch-size must be at least 1".into())),
        Some(b) if n_prompts > 1 && b != n_prompts => {
            return Err(Error::Input(format!(
                "--batch-size {b} does not match the number of prompts ({n_prompts}); \
                 omit --batch-size to have it inferred"
            )))
        }
        Some(b) => b,
    };
    let per = |what: &str, n: usize| -> Result<()> {
        if n > 1 && n != size {
            return Err(Error::Input(format!(
                "{n} {what} values for a batch of {size}"
            )));
        }
        Ok(())
    };
    per("--seconds", args.seconds.len())?;
    per("--negative-prompt", args.negative_prompt.len())?;
    let pick = |v: &[String], i: usize| v.get(i).or(v.first()).cloned();
    (0..size)
        .map(|i| {
            let seconds = args.seconds.get(i).or(args.seconds.first()).copied();
            let seconds = seconds.unwrap_or(10.0);
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(Error::Input(format!(
                    "--seconds must be positive, got {seconds}"
                )));
            }
            Ok(Item {
                prompt: pick(&args.prompt, i).unwrap_or_default(),
                negative: pick(&args.negative_prompt, i),
                seconds,
            })
        })
        .collect()
}

/// `--seed`: `None` or −1 mean random; other negative values are an error.
pub fn seed(s: Option<i64>) -> Result<Option<u64>> {
    match s {
        None | Some(-1) => Ok(None),
        Some(v) if v < 0 => Err(Error::Input(format!(
            "--seed {v}: expected a non-negative seed or -1 (random)"
        ))),
        Some(v) => Ok(Some(v as u64)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gen(args: &[&str]) -> GenerateArgs {
        let mut v = vec!["aria", "generate"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v) {
            Ok(Cli {
                cmd: Cmd::Generate(g),
                ..
            }) => *g,
            Ok(_) => panic!("not generate"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn lora_paths_with_colons_parse() {
        assert_eq!(
            parse_lora(r"C:\x.safetensors").unwrap(),
            (PathBuf::from(r"C:\x.safetensors"), 1.0)
        );
        assert_eq!(
            parse_lora(r"C:\x.safetensors:0.5").unwrap(),
            (PathBuf::from(r"C:\x.safetensors"), 0.5)
        );
        assert_eq!(
            parse_lora("a.safetensors").unwrap(),
            (PathBuf::from("a.safetensors"), 1.0)
        );
        assert!(parse_lora("a.safetensors:0.5.1").is_err());
        assert!(parse_lora("a.safetensors:inf").is_err());
    }

    #[test]
    fn official_aliases_and_batches() {
        let g = gen(&[
            "-p",
            "a",
            "-p",
            "b",
            "--duration",
            "3",
            "4",
            "--cfg-scale",
            "7",
            "--lora-ckpt-path",
            "x.safetensors",
            "--lora-strength",
            "0.5",
            "--inpaint-start",
            "1",
            "--inpaint-end",
            "2",
            "--seed",
            "-1",
        ]);
        let b = batch(&g).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].seconds, b[1].seconds), (3.0, 4.0));
        assert_eq!((b[0].prompt.as_str(), b[1].prompt.as_str()), ("a", "b"));
        assert_eq!(g.cfg, Some(7.0));
        assert_eq!(
            loras(&g).unwrap(),
            vec![(PathBuf::from("x.safetensors"), 0.5)]
        );
        assert_eq!(seed(g.noise.seed).unwrap(), None);
        let g = gen(&["-p", "a", "b", "c"]);
        assert_eq!(batch(&g).unwrap().len(), 3);
        let g = gen(&["-p", "a", "--batch-size", "3"]);
        let b = batch(&g).unwrap();
        assert!(b.len() == 3 && b.iter().all(|i| i.prompt == "a"));
        assert!(batch(&gen(&["-p", "a", "b", "--batch-size", "3"])).is_err());
        assert!(batch(&gen(&["-p", "a", "b", "-s", "1", "2", "3"])).is_err());
        assert!(seed(Some(-2)).is_err());
        assert_eq!(seed(Some(7)).unwrap(), Some(7));
    }

    #[test]
    fn presets_and_sampling_flags() {
        let base = SamplingDefaults::for_objective(aria::pipeline::Objective::RectifiedFlow);
        let mut req = GenerateRequest::new("x", 1.0);
        apply_sampling(&gen(&["-p", "x"]), base, &mut req).unwrap();
        assert_eq!((req.steps, req.cfg_scale), (50, 7.0));
        assert_eq!(req.sampler, Some(SamplerKind::Euler));
        let g = gen(&[
            "-p",
            "x",
            "--steps",
            "12",
            "--cfg",
            "2",
            "--sampler",
            "dpmpp",
            "--shift",
            "flux:alpha_min=1.5,alpha_max=4",
            "--cfg-interval",
            "0.2,0.9",
            "--cfg-rescale",
            "0.7",
        ]);
        apply_sampling(&g, base, &mut req).unwrap();
        assert_eq!((req.steps, req.cfg_scale), (12, 2.0));
        assert_eq!(req.sampler, Some(SamplerKind::DpmPp));
        assert_eq!(req.cfg_interval, (0.2, 0.9));
        assert_eq!(req.cfg_rescale, 0.7);
        assert!(matches!(
            req.shift,
            Some(aria::pipeline::Shift::Flux { alpha_min, alpha_max, .. })
                if alpha_min == 1.5 && alpha_max == 4.0
        ));
        assert!(parse_shift("none").is_ok());
        assert!(parse_shift("flux:alpha=2").is_err());
        assert!(parse_shift("spiral").is_err());
        assert!(parse_shift("full:base_shift=x").is_err());
        let g = gen(&["-p", "x", "--cfg-interval", "0.2"]);
        assert!(apply_sampling(&g, base, &mut req).is_err());
    }

    #[test]
    fn value_enums_reject_unknown_values() {
        let mut v = vec!["aria", "generate", "-p", "x", "--sampler", "heun"];
        assert!(Cli::try_parse_from(&v).is_err());
        v[5] = "ping-pong";
        assert!(Cli::try_parse_from(&v).is_ok());
        let v = ["aria", "generate", "-p", "x", "--text-precision", "f16"];
        assert!(Cli::try_parse_from(v).is_err());
        let v = ["aria", "-t", "2", "--device", "cuda", "models"];
        assert!(Cli::try_parse_from(v).is_ok());
    }
}
