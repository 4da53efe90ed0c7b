//! The `aria` command-line program: argument parsing, progress display and file output over the
//! `aria` library. Each subcommand is a short composition of library calls.

mod args;
mod cache;
mod output;
mod quantize;
mod score;
mod serve;
mod steer;
mod stream;
mod ui;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use aria::discover::{find_models, resolve_model, ModelFiles, ModelSource, SearchPaths};
use aria::noise::{NoiseSource, RecordingNoise, ReplayNoise};
use aria::pipeline::{AudioChunk, AudioOutput, InitAudio, Inpaint, RunOptions};
use aria::synth::{self, Preset};
use aria::{DeviceKind, Error, GenerateRequest, LoadOptions, Pipeline, Result};
use aria_codec::audio::read_audio;
use aria_core::backend::registry::BackendOptions;
use clap::Parser;
use serde_json::{json, Value};

use args::{Cli, Cmd, DecodeArgs, DemoArgs, EncodeArgs, GenerateArgs, InfoArgs, NoiseArgs};
use output::{AudioWriter, Container, Depth};
use ui::{secs, Ui};

/// What every subcommand gets besides its own arguments.
struct Ctx {
    ui: Ui,
    json: bool,
    device: DeviceKind,
    /// The device backend's settings, read here, at the program's edge, from the environment
    /// (see [`backend_options`]).
    backend: BackendOptions,
    /// `--threads`: carried by every pipeline this run loads ([`LoadOptions::threads`]) and
    /// entered for the rest of the command's work (no process-wide setting).
    threads: Option<usize>,
}

/// Settings of the `--device` backend from the environment: `ARIA_<BACKEND>_<NAME>=value`
/// becomes setting `name` (e.g. `ARIA_WGPU_GEMM_TILE=8`), and `ARIA_<BACKEND>_CACHE` the
/// kernel cache folder (`ARIA_CUDA_CACHE`). The libraries below read no environment variable.
fn backend_options(device: DeviceKind) -> BackendOptions {
    let prefix = format!("ARIA_{}_", device.name().to_uppercase());
    let mut o = BackendOptions::default();
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_lowercase(), v)))
        .collect();
    vars.sort();
    for (k, v) in vars {
        if k == "cache" {
            o.cache_dir = Some(PathBuf::from(v));
        } else {
            o.settings.push((k, v));
        }
    }
    o
}

/// The demo model folder (written on first use).
fn demo_model(ui: &Ui) -> Result<ModelFiles> {
    let dir = demo_dir();
    if !aria::discover::missing_files(&dir).is_empty() {
        let pb = ui.spinner("writing the tiny random-weight demo model");
        synth::write_model(&dir, Preset::Tiny, aria_core::DType::F32, 0, &mut |_, _| {})?;
        pb.finish_and_clear();
    }
    ui.note(&format!(
        "the demo model (tiny, random weights) is cached in {}",
        dir.display()
    ));
    resolve_model(&dir.display().to_string(), &SearchPaths::default())
}

fn demo_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("aria").join("demo-tiny-v1")
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ u64::from(std::process::id())) % 100_000
}

/// The noise of a run and the seed it was made from (`None`: replayed from a file).
fn noise_source(args: &NoiseArgs, ui: &Ui) -> Result<(Box<dyn NoiseSource>, Option<u64>)> {
    let seed = args::seed(args.seed)?;
    if let Some(p) = &args.noise {
        if seed.is_some() {
            return Err(Error::Input("--noise and --seed exclude each other".into()));
        }
        if !p.is_file() {
            return Err(Error::Noise {
                path: p.clone(),
                reason: "file not found".into(),
            });
        }
        return Ok((Box::new(ReplayNoise::open(p, "")?), None));
    }
    let seed = seed.unwrap_or_else(|| {
        let s = random_seed();
        ui.note(&format!("seed: {s}"));
        s
    });
    Ok((args.rng.source(seed), Some(seed)))
}

/// Locate the model (or the random-weight demo model, with a warning) and load it.
fn load(model: &Option<String>, opts: &LoadOptions, ui: &Ui) -> Result<Pipeline> {
    let files = match model {
        Some(m) => resolve_model(m, &SearchPaths::from_env())?,
        None => {
            ui.warn(
                "no --model given: using a tiny model with RANDOM weights; its output is noise.",
            );
            ui.note("For real audio pass --model small-music (downloaded Hugging Face folder) or --model <folder>.");
            demo_model(ui)?
        }
    };
    if opts.text_precision == Some(aria::pipeline::Precision::Bf16Dot)
        && opts.device == DeviceKind::Cpu
        && !aria_core::nn::Bf16DotWeight::native()
        && !aria_core::nn::Bf16DotWeight::amx()
    {
        ui.warn(
            "--text-precision bf16-dot: this CPU has no AVX-512 BF16, so its bf16 products are \
             emulated (the same bits, but tens of times slower than --text-precision f32).",
        );
    }
    let pb = ui.spinner(&format!("loading {}", files.dir.display()));
    let p = Pipeline::load(&files, opts);
    pb.finish_and_clear();
    p
}

/// Output files created so far, removed again if the run fails.
struct Outputs {
    writers: Vec<AudioWriter>,
    paths: Vec<PathBuf>,
    peaks: Vec<f32>,
    samples: usize,
}

impl Outputs {
    fn create(paths: Vec<PathBuf>, channels: usize, sr: u32, depth: Depth) -> Result<Self> {
        let mut o = Outputs {
            writers: Vec::new(),
            peaks: vec![0.0; paths.len()],
            paths: Vec::new(),
            samples: 0,
        };
        for p in paths {
            let w = AudioWriter::create(&p, channels, sr, depth);
            o.paths.push(p);
            match w {
                Ok(w) => o.writers.push(w),
                Err(e) => {
                    o.discard();
                    return Err(e);
                }
            }
        }
        Ok(o)
    }

    /// Write a chunk `[B, channels, n]`: item `i` to file `i`.
    fn write(&mut self, c: &AudioChunk<'_>) -> Result<()> {
        for (i, w) in self.writers.iter_mut().enumerate() {
            let a = c.audio.narrow(0, i, 1)?.contiguous()?;
            let peak = a
                .as_slice::<f32>()?
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            self.peaks[i] = self.peaks[i].max(peak);
            w.write(&a)?;
        }
        self.samples = c.start + c.audio.shape()[2];
        Ok(())
    }

    fn finish(mut self) -> Result<(Vec<PathBuf>, Vec<f32>, usize)> {
        let mut r = Ok(());
        for w in std::mem::take(&mut self.writers) {
            r = r.and(w.finish());
        }
        match r {
            Ok(()) => Ok((
                std::mem::take(&mut self.paths),
                std::mem::take(&mut self.peaks),
                self.samples,
            )),
            Err(e) => {
                self.discard();
                Err(e)
            }
        }
    }

    fn discard(&mut self) {
        self.writers.clear();
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn generate(args: &GenerateArgs, cx: &Ctx) -> Result<()> {
    if args.cache_opts.cache.is_some() {
        return cache::generate(args, &args.cache_opts, cx);
    }
    let ui = &cx.ui;
    let items = args::batch(args)?;
    let ranges = args::inpaint_ranges(args)?;
    let loras = args::loras(args)?;
    let paths = output::batch_paths(&args.output, items.len());
    for p in &paths {
        Container::of(p)?;
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
    let (mut noise, seed) = noise_source(&args.noise, ui)?;
    let opts = LoadOptions {
        loras,
        text_precision: args.text_precision.map(Into::into),
        chunked_decode: args.decode.chunked(),
        device: cx.device,
        backend: cx.backend.clone(),
        threads: cx.threads,
        precision: args.quant.precision(),
        w8a8: args.quant.w8a8,
        quantize_decoder: args.quant.quantize_decoder,
        quantize_text: args.quant.quantize_text,
        keep_resident: args.quant.keep_resident,
        ..Default::default()
    };
    let specs = steer::parse_specs(&args.steer)?;
    let pipe = load(&args.model.model, &opts, ui)?;
    warn_prompts(&pipe, items.iter().map(|it| it.prompt.as_str()), ui)?;
    let steering = steer::generate_hook(&pipe, &specs, args.force, ui)?;
    let ready = ui.start.elapsed();
    let reqs: Vec<GenerateRequest> = items
        .iter()
        .map(|it| {
            let mut req = GenerateRequest::new(it.prompt.clone(), it.seconds);
            args::apply_sampling(args, pipe.sampling_defaults(), &mut req)?;
            req.negative_prompt = it.negative.clone();
            req.duration_padding_sec = args.duration_padding;
            req.init_audio = init_audio.clone();
            req.inpaint = inpaint.clone();
            Ok(req)
        })
        .collect::<Result<_>>()?;

    // The audio goes to the files as it is decoded.
    let channels = pipe.autoencoder().config().audio_channels;
    let depth = Depth::of(args.pcm16, args.pcm24);
    let mut files = Outputs::create(paths, channels, pipe.sample_rate(), depth)?;
    let result = {
        let mut sink = |c: &AudioChunk<'_>| files.write(c);
        let mut progress = ui.generation_progress();
        let opts = RunOptions {
            hook: steering
                .as_ref()
                .map(|h| h as &dyn aria_core::hooks::ActivationHook),
            progress: Some(&mut progress),
            audio: AudioOutput::Stream(&mut sink),
            ..Default::default()
        };
        match &args.noise.noise_out {
            Some(p) => {
                let mut rec = RecordingNoise::new(noise.as_mut());
                let out = pipe.run_batch(&reqs, &mut rec, opts);
                out.and_then(|o| rec.save(p).map(|()| o).map_err(Error::from))
            }
            None => pipe.run_batch(&reqs, noise.as_mut(), opts),
        }
    };
    let out = match result {
        Ok(o) => o,
        Err(e) => {
            files.discard();
            return Err(e);
        }
    };
    let (paths, peaks, samples) = files.finish()?;
    if let Some(p) = &args.latents_out {
        aria_core::save_safetensors(p, &[("latents", &out.latents)], None)?;
    }
    let t = &out.timings;
    let sr = f64::from(pipe.sample_rate());
    if cx.json {
        let outputs: Vec<Value> = paths
            .iter()
            .zip(&items)
            .zip(&peaks)
            .map(|((p, it), peak)| {
                json!({
                    "path": p.display().to_string(),
                    "prompt": it.prompt,
                    "negative_prompt": it.negative,
                    "seconds": it.seconds,
                    "samples": samples,
                    "peak": peak,
                })
            })
            .collect();
        print_json(&json!({
            "command": "generate",
            "model": pipe.files().dir.display().to_string(),
            "seed": seed,
            "rng": args.noise.rng.to_string(),
            "noise_file": args.noise.noise.as_ref().map(|p| p.display().to_string()),
            "steps": reqs[0].steps,
            "cfg_scale": reqs[0].cfg_scale,
            "sample_rate": pipe.sample_rate(),
            "channels": channels,
            "latents": out.latents.shape(),
            "latents_out": args.latents_out.as_ref().map(|p| p.display().to_string()),
            "outputs": outputs,
            "timings_s": timings_json(ready, t, ui.start.elapsed()),
            "precision": precision_json(&pipe),
        }));
    }
    ui.detail(&pipe.quant_report().summary());
    ui.detail(&format!(
        "steps: {}",
        t.steps
            .iter()
            .map(|d| format!("{:.3} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !ui.quiet {
        let q = pipe.quant_report();
        eprintln!(
            "precision: DiT {}{}, text {:?}",
            q.precision,
            if q.w8a8 { " + W8A8" } else { "" },
            pipe.text().prompt().encoder().precision()
        );
        for (p, peak) in paths.iter().zip(&peaks) {
            eprintln!(
                "wrote {} ({:.2} s, {}, peak {peak:.3})",
                p.display(),
                samples as f64 / sr,
                depth.describe(p)
            );
        }
        let per_step = if t.steps.is_empty() {
            Duration::ZERO
        } else {
            t.steps.iter().sum::<Duration>() / t.steps.len() as u32
        };
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

/// Warn about prompts the model will not read as written: empty ones (the generation is then
/// unconditioned) and ones longer than the tokenizer's length (the rest is cut).
fn warn_prompts<'a>(
    pipe: &Pipeline,
    prompts: impl Iterator<Item = &'a str>,
    ui: &Ui,
) -> Result<()> {
    let tok = pipe.text().prompt().tokenizer();
    for (i, p) in prompts.enumerate() {
        if p.trim().is_empty() {
            ui.warn(&format!(
                "prompt {i} is empty: the generation has no text condition"
            ));
            continue;
        }
        let n = tok.length(p)?;
        if n > tok.max_length() {
            ui.warn(&format!(
                "prompt {i} is {n} tokens; the model reads the first {} (the rest is cut)",
                tok.max_length()
            ));
        }
    }
    Ok(())
}

/// The modes that ran: the DiT's weight precision (`fast` resolved), W8A8, the decoder's
/// weight kinds and the text encoder's arithmetic.
fn precision_json(pipe: &aria::Pipeline) -> Value {
    let q = pipe.quant_report();
    json!({
        "dit": q.precision.name(),
        "w8a8": q.w8a8,
        "decoder": q.decoder_kinds,
        "encoder": q.encoder_kinds,
        "text": format!("{:?}", pipe.text().prompt().encoder().precision()),
    })
}

fn timings_json(ready: Duration, t: &aria::Timings, total: Duration) -> Value {
    json!({
        "ready": ready.as_secs_f64(),
        "text": t.text.as_secs_f64(),
        "encode": t.encode.as_secs_f64(),
        "steps": t.steps.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
        "decode": t.decode.as_secs_f64(),
        "total": total.as_secs_f64(),
    })
}

fn print_json(v: &Value) {
    println!("{v}");
}

fn demo(a: &DemoArgs, cx: &Ctx) -> Result<()> {
    let argv = [
        "aria",
        "generate",
        "--prompt",
        &a.prompt,
        "--seed",
        &a.seed.to_string(),
        "--seconds",
        &a.seconds.to_string(),
        "--output",
        &a.output.display().to_string(),
    ]
    .map(String::from);
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            cmd: Cmd::Generate(g),
            ..
        }) => generate(&g, cx),
        Ok(_) => Err(Error::Input("demo: internal argument error".into())),
        Err(e) => Err(Error::Input(e.to_string())),
    }
}

fn encode(args: &EncodeArgs, cx: &Ctx) -> Result<()> {
    let clip = read_audio(&args.input)?;
    let (mut noise, _) = noise_source(&args.noise, &cx.ui)?;
    let opts = LoadOptions {
        device: cx.device,
        backend: cx.backend.clone(),
        threads: cx.threads,
        ..Default::default()
    };
    let pipe = load(&args.model.model, &opts, &cx.ui)?;
    let pb = cx.ui.spinner("encoding");
    let z = pipe.encode_audio(&clip, noise.as_mut())?;
    pb.finish_and_clear();
    aria_core::save_safetensors(&args.output, &[("latents", &z)], None)?;
    if cx.json {
        print_json(&json!({
            "command": "encode",
            "input": args.input.display().to_string(),
            "output": args.output.display().to_string(),
            "latents": z.shape(),
        }));
    }
    cx.ui
        .note(&format!("wrote {} {:?}", args.output.display(), z.shape()));
    Ok(())
}

/// The latents of a safetensors file: tensor `latents`, or its only tensor; `[C, T]` becomes
/// `[1, C, T]`.
fn read_latents(path: &Path) -> Result<aria_core::Tensor> {
    let w = aria_core::WeightLoader::open(&[path])?;
    let names = w.names();
    let name = if names.iter().any(|n| n == "latents") {
        "latents".to_string()
    } else if names.len() == 1 {
        names[0].clone()
    } else {
        return Err(Error::Input(format!(
            "{}: no tensor named `latents`",
            path.display()
        )));
    };
    let z = w.get_any(&name)?.to_dtype(aria_core::DType::F32)?;
    Ok(if z.rank() == 2 { z.unsqueeze(0)? } else { z })
}

fn decode(args: &DecodeArgs, cx: &Ctx) -> Result<()> {
    Container::of(&args.output)?;
    let z = read_latents(&args.input)?;
    let (mut noise, _) = noise_source(&args.noise, &cx.ui)?;
    let opts = LoadOptions {
        chunked_decode: args.decode.chunked(),
        device: cx.device,
        backend: cx.backend.clone(),
        threads: cx.threads,
        ..Default::default()
    };
    let pipe = load(&args.model.model, &opts, &cx.ui)?;
    let c = pipe.latent_channels();
    if z.rank() != 3 || z.shape()[0] != 1 || z.shape()[1] != c {
        return Err(Error::Input(format!(
            "{}: latents of shape {:?}, the model needs [1, {c}, T]",
            args.input.display(),
            z.shape()
        )));
    }
    let channels = pipe.autoencoder().config().audio_channels;
    let mut files = Outputs::create(
        vec![args.output.clone()],
        channels,
        pipe.sample_rate(),
        Depth::of(args.pcm16, args.pcm24),
    )?;
    let pb = cx.ui.spinner("decoding");
    let r = pipe.decode_latents_to(&z, noise.as_mut(), &mut |c: &AudioChunk<'_>| files.write(c));
    pb.finish_and_clear();
    if let Err(e) = r {
        files.discard();
        return Err(e);
    }
    let (_, peaks, samples) = files.finish()?;
    if cx.json {
        print_json(&json!({
            "command": "decode",
            "input": args.input.display().to_string(),
            "output": args.output.display().to_string(),
            "samples": samples,
            "sample_rate": pipe.sample_rate(),
            "peak": peaks.first(),
        }));
    }
    cx.ui.note(&format!("wrote {}", args.output.display()));
    Ok(())
}

fn info(args: &InfoArgs, cx: &Ctx) -> Result<()> {
    let files = match &args.model.model {
        Some(m) => resolve_model(m, &SearchPaths::from_env())?,
        None => demo_model(&cx.ui)?,
    };
    let info = aria::info::model_info(&files)?;
    let cfg = aria_dit::config::ModelConfig::from_file(&files.config)?;
    let ae = aria_codec::AutoencoderConfig::from_model_config(&files.config)?;
    let geometry = aria::plan::Geometry {
        sample_rate: cfg.sample_rate,
        downsampling_ratio: ae.downsampling_ratio,
        latent_align: ae.latent_align,
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
    print!("{}", quantize::memory_plan(&files)?);
    Ok(())
}

fn models(cx: &Ctx) -> Result<()> {
    let mut search = SearchPaths::from_env();
    search.local_roots.push(
        demo_dir()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    );
    let found = find_models(&search);
    if cx.json {
        let list: Vec<Value> = found
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "source": match m.source {
                        ModelSource::HubCache => "hub-cache",
                        ModelSource::Local => "local",
                    },
                    "dir": m.files.dir.display().to_string(),
                })
            })
            .collect();
        print_json(&json!({ "command": "models", "models": list }));
        return Ok(());
    }
    if found.is_empty() {
        println!(
            "no model found (looked in {}); download one with \
             `huggingface-cli download stabilityai/stable-audio-3-small-music`",
            search
                .hub_caches
                .iter()
                .chain(&search.local_roots)
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !found.is_empty() {
        println!("{:<28} {:<10} FOLDER", "NAME", "SOURCE");
    }
    for m in &found {
        let dir = m.files.dir.display().to_string();
        // A local folder is named by its path: show its last component as the name.
        let name = if m.name == dir {
            m.files
                .dir
                .file_name()
                .map_or(dir.clone(), |n| n.to_string_lossy().into_owned())
        } else {
            m.name.clone()
        };
        let source = match m.source {
            ModelSource::HubCache => "hub-cache",
            ModelSource::Local => "local",
        };
        println!("{name:<28} {source:<10} {dir}");
    }
    Ok(())
}

fn run(cli: &Cli, start: Instant) -> Result<()> {
    let pool = match cli.threads {
        Some(0) => return Err(Error::Input("--threads must be at least 1".into())),
        Some(n) => Some(aria_core::threads::Pool::new(n)?),
        None => None,
    };
    let device: DeviceKind = cli.device.into();
    device.check()?;
    let backend = backend_options(device);
    let cx = Ctx {
        backend,
        threads: cli.threads,
        ui: Ui {
            quiet: cli.quiet,
            verbose: cli.verbose,
            start,
        },
        json: cli.json,
        device,
    };
    let dispatch = || match &cli.cmd {
        Cmd::Generate(a) => generate(a, &cx),
        Cmd::Demo(a) => demo(a, &cx),
        Cmd::Encode(a) => encode(a, &cx),
        Cmd::Decode(a) => decode(a, &cx),
        Cmd::Info(a) => info(a, &cx),
        Cmd::Quantize(a) => quantize::run(a, &cx),
        Cmd::Models => models(&cx),
        Cmd::Steer(a) => steer::run(a, &cx),
        Cmd::Cache(a) => cache::run(a, &cx),
        Cmd::Stream(a) => stream::run(a, &cx),
        Cmd::Serve(a) => serve::run(a, &cx),
        Cmd::Clap(a) => score::run_clap(a, &cx),
        Cmd::Score(a) => score::run_score(a, &cx),
    };
    match pool {
        Some(p) => p.enter(dispatch),
        None => dispatch(),
    }
}

fn main() -> ExitCode {
    let start = Instant::now();
    // Activations are allocated and freed at every op: keep the freed memory for the next one.
    aria_core::alloc::retain_freed_memory();
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
