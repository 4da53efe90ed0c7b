//! Activation steering on the command line: `generate --steer`, `steer extract`, `steer sweep`
//! and `steer show`, over the `aria-steer` library.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aria::pipeline::{AudioOutput, InitAudio, RunOptions};
use aria::{Error, Event, GenerateRequest, LoadOptions, Pipeline, Result, SeedGenerator};
use aria_codec::audio::{read_audio, write_wav, WavFormat};
use aria_core::hooks::{ActivationHook, FnHook, HookContext, HookList, HookSite};
use aria_core::Tensor;
use aria_steer::direction::ContrastSet;
use aria_steer::extract::{build_direction_file, BlockContrast, ExtractionInfo};
use aria_steer::spec::hook_from_specs;
use aria_steer::sweep::{self, Latents, SweepPoint};
use aria_steer::{
    DirectionFile, ExtractSettings, ModelIdentity, NormScope, Site, SteerError, SteerOp, SteerSpec,
    Steering, SteeringHook,
};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::args::{ModelArg, TextPrecision};
use crate::ui::{secs, Ui};
use crate::Ctx;

/// Noise level at which audio-side contrast clips are fed through audio-to-audio by default.
pub const AUDIO_NOISE_LEVEL: f32 = 0.5;

/// `aria steer …`.
#[derive(Args)]
pub struct SteerArgs {
    #[command(subcommand)]
    pub cmd: SteerCmd,
}

#[derive(Subcommand)]
pub enum SteerCmd {
    /// Extract per-block directions by difference in means over two contrast sets, with a
    /// cross-validated logistic-probe separability report.
    Extract(Box<ExtractArgs>),
    /// Seed-matched dose-response of one direction: CSV and PNG plot.
    Sweep(Box<SweepArgs>),
    /// Print a direction file's metadata and probe report.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Duration of each run in seconds (default: 10, or the model's maximum when lower;
    /// audio-side runs: the clip's, capped at the model's maximum).
    #[arg(long, short)]
    pub seconds: Option<f64>,
    /// Headroom (seconds) added to the duration when sizing the latents.
    #[arg(long, default_value_t = 6.0)]
    pub duration_padding: f64,
    /// Sampler steps.
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    /// Classifier-free guidance scale (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub cfg: f32,
    /// Seed (extract: example i uses seed + i, so pairs share their noise).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Generator the seed drives (torch or aria).
    #[arg(long, default_value_t = SeedGenerator::Torch)]
    pub rng: SeedGenerator,
    /// Text-encoder arithmetic (default: what the model folder asks for).
    #[arg(long, value_enum)]
    pub text_precision: Option<TextPrecision>,
}

#[derive(Args)]
pub struct ExtractArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Positive captions, one per line (blank lines and lines starting with # skipped).
    #[arg(long, requires = "neg")]
    pub pos: Option<PathBuf>,
    /// Negative captions; line i pairs with line i of --pos (same seed).
    #[arg(long, requires = "pos")]
    pub neg: Option<PathBuf>,
    /// Folder of positive clips (wav, flac, mp3, ogg), fed through audio-to-audio.
    #[arg(long, requires = "neg_audio")]
    pub pos_audio: Option<PathBuf>,
    /// Folder of negative clips.
    #[arg(long, requires = "pos_audio")]
    pub neg_audio: Option<PathBuf>,
    /// Noise level of the audio-to-audio runs of --pos-audio/--neg-audio, in (0, 1].
    #[arg(long, default_value_t = AUDIO_NOISE_LEVEL)]
    pub audio_noise_level: f32,
    /// Prompt of the audio-to-audio runs.
    #[arg(long, default_value = "")]
    pub audio_prompt: String,
    /// Blocks to extract: `all` or a list (`0,5,10`).
    #[arg(long, default_value = "all")]
    pub blocks: String,
    /// Cross-validation folds of the separability probe.
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    #[command(flatten)]
    pub run: RunArgs,
    /// The direction file to write.
    #[arg(long, short)]
    pub output: PathBuf,
}

#[derive(Args)]
pub struct SweepArgs {
    /// The direction: FILE[:site=…][:block=K][:steps=LO-HI][:op=add|project][:scale=norm|raw]
    /// (no strength: that is what varies).
    #[arg(long)]
    pub dir: String,
    /// Strengths to run, comma-separated (`0,0.05,0.1`).
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 1..,
        allow_negative_numbers = true,
        default_value = "0,0.05,0.1,0.2,0.4"
    )]
    pub strengths: Vec<f32>,
    #[command(flatten)]
    pub model: ModelArg,
    /// The prompt (every run uses it with the same seed).
    #[arg(long, short, default_value = "warm ambient pad")]
    pub prompt: String,
    #[command(flatten)]
    pub run: RunArgs,
    /// Use a direction file made for another model (widths are still checked).
    #[arg(long)]
    pub force: bool,
    /// Skip decoding (no audio level, no WAVs).
    #[arg(long)]
    pub latents_only: bool,
    /// Also write one WAV per strength into the output folder.
    #[arg(long, conflicts_with = "latents_only")]
    pub wav: bool,
    /// Output folder (sweep.csv, sweep.png, optional WAVs).
    #[arg(long, short, default_value = "sweep")]
    pub out_dir: PathBuf,
    /// A CLAP checkpoint (folder or repository id, with its tokenizer): adds the CLAP score of
    /// each strength's clip against the prompt and its CLAP drift from the unsteered clip, beside
    /// the re-seed floor (the unsteered prompt with the next seed); written to sweep_clap.csv.
    #[arg(
        long = "clap",
        value_name = "DIR|REPO",
        conflicts_with = "latents_only"
    )]
    pub clap: Option<String>,
}

#[derive(Args)]
pub struct ShowArgs {
    /// The direction file.
    pub file: PathBuf,
}

fn steer_err(e: SteerError) -> Error {
    match e {
        SteerError::Core(c) => Error::Core(c),
        other => Error::Input(other.to_string()),
    }
}

/// The identity of a loaded pipeline's DiT.
fn identity(pipe: &Pipeline) -> Result<ModelIdentity> {
    let f = pipe.files();
    ModelIdentity::from_model_files(&f.config, &f.weights).map_err(steer_err)
}

/// Parse the `--steer` values (before the model loads, so a typo fails fast).
pub fn parse_specs(specs: &[String]) -> Result<Vec<SteerSpec>> {
    specs
        .iter()
        .map(|s| SteerSpec::parse(s).map_err(steer_err))
        .collect()
}

/// A one-line description of a steering.
fn describe(s: &Steering) -> String {
    let op = match s.op() {
        SteerOp::Add => "add",
        SteerOp::Project => "project",
    };
    let steps = s.steps().map_or("every step".to_string(), |sp| {
        format!("steps {}-{}", sp.lo, sp.hi)
    });
    format!("{} {op} strength {} ({steps})", s.site(), s.strength())
}

/// The steering hook of `generate --steer` (None without specs): every file is checked against
/// the loaded model (`force` overrides the identity check, never the widths); the steerings
/// apply in the order given.
pub fn generate_hook(
    pipe: &Pipeline,
    specs: &[SteerSpec],
    force: bool,
    ui: &Ui,
) -> Result<Option<SteeringHook>> {
    if specs.is_empty() {
        return Ok(None);
    }
    let id = identity(pipe)?;
    if force {
        for s in specs {
            let f = DirectionFile::load(&s.path).map_err(steer_err)?;
            if let Err(e @ SteerError::ModelMismatch { .. }) = f.check_model(&s.path, &id, false) {
                ui.warn(&format!("--force: {e}"));
            }
        }
    }
    let hook = hook_from_specs(specs, &id, force).map_err(steer_err)?;
    for (i, (s, spec)) in hook.steerings().iter().zip(specs).enumerate() {
        ui.note(&format!(
            "steering {}: {} from {}",
            i + 1,
            describe(s),
            spec.path.display()
        ));
    }
    Ok(Some(hook))
}

fn bar(ui: &Ui, len: usize, what: &str) -> ProgressBar {
    if ui.quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len as u64);
    let t = format!("{what} {{bar:30}} {{pos}}/{{len}} runs {{elapsed_precise}} {{msg}}");
    if let Ok(st) = ProgressStyle::with_template(&t) {
        pb.set_style(st);
    }
    pb
}

fn load_pipe(model: &Option<String>, run: &RunArgs, cx: &Ctx) -> Result<Pipeline> {
    let opts = LoadOptions {
        text_precision: run.text_precision.map(Into::into),
        device: cx.device,
        backend: cx.backend.clone(),
        threads: cx.threads,
        ..Default::default()
    };
    crate::load(model, &opts, &cx.ui)
}

/// The duration of the runs: `--seconds`, else 10 s or the model's maximum when lower.
fn run_seconds(run: &RunArgs, pipe: &Pipeline) -> f64 {
    run.seconds.unwrap_or_else(|| 10f64.min(pipe.max_seconds()))
}

fn request(prompt: &str, run: &RunArgs, seconds: f64) -> GenerateRequest {
    let mut req = GenerateRequest::new(prompt, seconds);
    req.steps = run.steps;
    req.cfg_scale = run.cfg;
    req.duration_padding_sec = run.duration_padding;
    req
}

/// Captions of a text contrast file.
fn captions(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let v: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if v.is_empty() {
        return Err(Error::Input(format!(
            "{}: no caption (one per line expected)",
            path.display()
        )));
    }
    Ok(v)
}

/// Audio files of a contrast folder, sorted by name.
fn clips(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension().and_then(|x| x.to_str()).is_some_and(|x| {
                    ["wav", "flac", "mp3", "ogg"].contains(&x.to_ascii_lowercase().as_str())
                })
        })
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(Error::Input(format!(
            "{}: no audio file (wav, flac, mp3, ogg)",
            dir.display()
        )));
    }
    Ok(v)
}

/// `all` or `0,5,10`.
pub fn parse_blocks(s: &str, depth: usize) -> Result<Vec<usize>> {
    if s.trim() == "all" {
        return Ok((0..depth).collect());
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let k: usize = part
            .trim()
            .parse()
            .map_err(|_| Error::Input(format!("--blocks `{s}`: `{part}` is not a block index")))?;
        if k >= depth {
            return Err(Error::Input(format!(
                "--blocks: block {k} does not exist (the model has {depth}: 0-{})",
                depth.saturating_sub(1)
            )));
        }
        if !v.contains(&k) {
            v.push(k);
        }
    }
    if v.is_empty() {
        return Err(Error::Input("--blocks: no block given".into()));
    }
    v.sort_unstable();
    Ok(v)
}

/// One contrast run: what to generate and which set it belongs to.
struct Example {
    positive: bool,
    label: String,
    req: GenerateRequest,
    seed: u64,
}

fn extract(a: &ExtractArgs, cx: &Ctx) -> Result<()> {
    let ui = &cx.ui;
    let run = &a.run;
    if a.pos.is_none() && a.pos_audio.is_none() {
        return Err(Error::Input(
            "steer extract needs --pos/--neg caption files or --pos-audio/--neg-audio folders"
                .into(),
        ));
    }
    if a.pos_audio.is_some() && !(a.audio_noise_level > 0.0 && a.audio_noise_level <= 1.0) {
        return Err(Error::Input(format!(
            "--audio-noise-level must be in (0, 1], got {}",
            a.audio_noise_level
        )));
    }
    let text_sets = match (&a.pos, &a.neg) {
        (Some(p), Some(n)) => Some((captions(p)?, captions(n)?)),
        _ => None,
    };
    let audio_sets = match (&a.pos_audio, &a.neg_audio) {
        (Some(p), Some(n)) => Some((clips(p)?, clips(n)?)),
        _ => None,
    };
    let pipe = load_pipe(&a.model.model, run, cx)?;
    let depth = pipe.dit().config().depth;
    let blocks = parse_blocks(&a.blocks, depth)?;
    let id = identity(&pipe)?;

    let mut examples: Vec<Example> = Vec::new();
    let (mut names, mut counts) = ([Vec::new(), Vec::new()], [0usize, 0]);
    if let Some((pos, neg)) = &text_sets {
        for (positive, set) in [(true, pos), (false, neg)] {
            for (i, c) in set.iter().enumerate() {
                examples.push(Example {
                    positive,
                    label: c.clone(),
                    req: request(c, run, run_seconds(run, &pipe)),
                    seed: run.seed + i as u64,
                });
            }
        }
        for (k, p) in [a.pos.as_ref(), a.neg.as_ref()].into_iter().enumerate() {
            names[k].push(p.map(|p| p.display().to_string()).unwrap_or_default());
        }
        counts[0] += pos.len();
        counts[1] += neg.len();
    }
    if let Some((pos, neg)) = &audio_sets {
        let max = pipe.max_seconds();
        for (positive, set) in [(true, pos), (false, neg)] {
            for (i, p) in set.iter().enumerate() {
                let clip = read_audio(p)?;
                let secs = (clip.frames() as f64 / f64::from(clip.sample_rate.max(1))).min(max);
                let mut req = request(&a.audio_prompt, run, secs);
                req.init_audio = Some(InitAudio {
                    clip,
                    noise_level: a.audio_noise_level,
                });
                examples.push(Example {
                    positive,
                    label: p
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    req,
                    seed: run.seed + i as u64,
                });
            }
        }
        for (k, p) in [a.pos_audio.as_ref(), a.neg_audio.as_ref()]
            .into_iter()
            .enumerate()
        {
            names[k].push(format!(
                "{} (audio, noise level {})",
                p.map(|p| p.display().to_string()).unwrap_or_default(),
                a.audio_noise_level
            ));
        }
        counts[0] += pos.len();
        counts[1] += neg.len();
    }
    let folds = a.folds.min(counts[0]).min(counts[1]);
    if folds < 2 {
        return Err(Error::Input(format!(
            "the probe needs at least 2 examples per set ({} positive, {} negative) and \
             --folds ≥ 2",
            counts[0], counts[1]
        )));
    }

    let capture = Arc::new(aria_steer::ResidualCapture::new(
        &blocks,
        NormScope::ValidLatentTokens,
    ));
    let mut pos: Vec<Vec<Vec<f32>>> = vec![Vec::new(); blocks.len()];
    let mut neg: Vec<Vec<Vec<f32>>> = vec![Vec::new(); blocks.len()];
    let pb = bar(ui, examples.len(), "extracting");
    let t0 = Instant::now();
    for ex in &examples {
        pb.set_message(format!(
            "{} `{}`",
            if ex.positive { "+" } else { "-" },
            ex.label
        ));
        let mut list = HookList::new();
        list.push(capture.clone());
        let mut noise = run.rng.source(ex.seed);
        let msg = pb.message();
        let mut progress = |e: &Event| {
            if let Event::Step { index, total, .. } = e {
                pb.set_message(format!("{msg} step {}/{total}", index + 1));
            }
        };
        pipe.run(
            &ex.req,
            noise.as_mut(),
            RunOptions {
                hook: list.as_hook(),
                progress: Some(&mut progress),
                audio: AudioOutput::Skip,
                ..Default::default()
            },
        )?;
        let samples = capture.take_samples().map_err(steer_err)?;
        for (i, k) in blocks.iter().enumerate() {
            let rows = samples.get(k).cloned().unwrap_or_default();
            if ex.positive {
                pos[i].extend(rows);
            } else {
                neg[i].extend(rows);
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    let gen_time = t0.elapsed();

    let mut bcs = Vec::with_capacity(blocks.len());
    for (i, &k) in blocks.iter().enumerate() {
        let mean_norm = capture.mean_norm(k).map_err(steer_err)?.ok_or_else(|| {
            Error::Input(format!(
                "block {k}: the runs produced no residual to measure"
            ))
        })?;
        bcs.push(BlockContrast {
            block: k,
            pos: std::mem::take(&mut pos[i]),
            neg: std::mem::take(&mut neg[i]),
            mean_norm,
        });
    }
    let set = |k: usize| ContrastSet {
        name: names[k].join(" + "),
        count: counts[k],
    };
    let info = ExtractionInfo {
        model: id,
        positive: set(0),
        negative: set(1),
        norm_scope: NormScope::ValidLatentTokens,
        folds,
    };
    let pb = ui.spinner("difference in means and probes");
    let mut file = build_direction_file(&bcs, &info).map_err(steer_err)?;
    pb.finish_and_clear();
    file.meta.settings = Some(ExtractSettings {
        seconds: run_seconds(run, &pipe),
        duration_padding: run.duration_padding,
        steps: run.steps,
        cfg_scale: run.cfg,
        seed: run.seed,
        rng: run.rng.to_string(),
        audio_noise_level: audio_sets.as_ref().map(|_| a.audio_noise_level),
        audio_prompt: audio_sets.as_ref().map(|_| a.audio_prompt.clone()),
        folds,
    });
    file.save(&a.output).map_err(steer_err)?;
    if cx.json {
        crate::print_json(&json!({
            "command": "steer extract",
            "output": a.output.display().to_string(),
            "runs": examples.len(),
            "blocks": blocks,
            "probe_accuracy": file.meta.probe_accuracy,
            "best_block": file.meta.best_block,
            "mean_norm": file.entries.iter().map(|e| e.mean_norm).collect::<Vec<_>>(),
            "timings_s": { "runs": gen_time.as_secs_f64(), "total": ui.start.elapsed().as_secs_f64() },
        }));
    }
    if !ui.quiet {
        eprint!("{}", probe_report(&file));
        eprintln!(
            "wrote {} ({} blocks; {} runs in {}, total {})",
            a.output.display(),
            blocks.len(),
            examples.len(),
            secs(gen_time),
            secs(ui.start.elapsed())
        );
    }
    Ok(())
}

/// The separability report of a direction file, one line per block.
pub fn probe_report(f: &DirectionFile) -> String {
    let m = &f.meta;
    let mut s = format!(
        "separability per block (cross-validated logistic probe{}; 0.5 = chance):\n",
        m.settings
            .as_ref()
            .map_or(String::new(), |st| format!(", {} folds", st.folds))
    );
    for &(b, acc) in &m.probe_accuracy {
        let norm = f
            .entry(Site::Residual(b))
            .map_or(String::new(), |e| format!("  mean norm {:.4}", e.mean_norm));
        let n = (acc.clamp(0.0, 1.0) * 40.0).round() as usize;
        s += &format!(
            "  block {b:>2}  {acc:.3}  {:<40}{}{norm}\n",
            "#".repeat(n),
            if m.best_block == Some(b) {
                " <- best"
            } else {
                ""
            }
        );
    }
    s
}

fn show(a: &ShowArgs, cx: &Ctx) -> Result<()> {
    let f = DirectionFile::load(&a.file).map_err(steer_err)?;
    if cx.json {
        let meta = serde_json::to_value(&f.meta).map_err(|e| Error::Input(e.to_string()))?;
        crate::print_json(
            &json!({ "command": "steer show", "file": a.file.display().to_string(), "meta": meta }),
        );
        return Ok(());
    }
    let m = &f.meta;
    println!(
        "direction file {} (format {})",
        a.file.display(),
        m.format_version
    );
    let d = &m.model.dims;
    println!(
        "model: width {}, {} blocks, {} latent channels, conditioning width {}; signature {}, weights {}",
        d.embed_dim, d.depth, d.io_channels, d.cond_token_dim, m.model.signature, m.model.weight_checksum
    );
    let conv = match m.strength_convention {
        aria_steer::StrengthConvention::MeanNorm => "units of the mean norm",
        aria_steer::StrengthConvention::Raw => "raw",
    };
    let scope = match m.norm_scope {
        NormScope::ValidLatentTokens => "valid latent tokens",
        NormScope::AllTokens => "all tokens",
    };
    println!(
        "method: {}; strength in {conv}; mean norms over {scope}",
        m.method
    );
    if let Some(st) = &m.settings {
        println!(
            "runs: {} s (+{} s headroom), {} steps, cfg {}, seed {} ({}){}",
            st.seconds,
            st.duration_padding,
            st.steps,
            st.cfg_scale,
            st.seed,
            st.rng,
            st.audio_noise_level.map_or(String::new(), |l| format!(
                ", audio-to-audio at noise level {l}"
            ))
        );
    }
    for (k, s) in [("positive", &m.positive), ("negative", &m.negative)] {
        if let Some(s) = s {
            println!("{k}: {} ({} examples)", s.name, s.count);
        }
    }
    let sites: Vec<String> = f.entries.iter().map(|e| e.site.to_string()).collect();
    println!("entries: {}", sites.join(", "));
    if !m.probe_accuracy.is_empty() {
        print!("{}", probe_report(&f));
    }
    Ok(())
}

/// The projection of the text conditioning on `d` (mean over the conditional rows' valid
/// tokens), recorded by a hook placed after the steering.
type Slot = Arc<Mutex<Option<f64>>>;

fn text_probe(d: Vec<f32>, slot: Slot) -> impl ActivationHook {
    FnHook::new(
        Some(vec![HookSite::TextConditioning]),
        move |ctx: &HookContext<'_>, x: &Tensor| {
            let s = x.shape();
            if s.len() != 3 || s[2] != d.len() {
                return Ok(None);
            }
            let (b, n, e) = (s[0], s[1], s[2]);
            let v = x.to_cpu()?.contiguous()?.to_vec_f32()?;
            let mask = match ctx.token_mask {
                Some(m) if m.shape() == [b, n] => Some(m.to_cpu()?.to_vec_f32()?),
                _ => None,
            };
            let rows = ctx.guidance_rows.unwrap_or(b).min(b);
            let (mut sum, mut cnt) = (0f64, 0usize);
            for bi in 0..rows {
                for ni in 0..n {
                    if mask.as_ref().is_some_and(|m| m[bi * n + ni] == 0.0) {
                        continue;
                    }
                    let r = &v[(bi * n + ni) * e..(bi * n + ni + 1) * e];
                    sum += r
                        .iter()
                        .zip(&d)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>();
                    cnt += 1;
                }
            }
            if let Ok(mut g) = slot.lock() {
                *g = Some(sum / cnt.max(1) as f64);
            }
            Ok(None)
        },
    )
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// What one sweep run measured.
struct Measured {
    latents: Vec<f32>,
    shape: (usize, usize, usize),
    proj_site: f64,
    proj_output: Option<f64>,
    audio: Option<Tensor>,
}

fn sweep_run(
    pipe: &Pipeline,
    a: &SweepArgs,
    steering: Option<Steering>,
    site: Site,
    direction: &[f32],
    seed_offset: u64,
) -> Result<Measured> {
    let run = &a.run;
    let req = request(&a.prompt, run, run_seconds(run, pipe));
    let mut list = HookList::new();
    if let Some(s) = steering {
        list.push(Arc::new(SteeringHook::from_steerings(vec![s])));
    }
    let depth = pipe.dit().config().depth;
    let capture = match site {
        Site::Residual(k) => {
            let c = Arc::new(aria_steer::ResidualCapture::new(
                &[k, depth - 1],
                NormScope::ValidLatentTokens,
            ));
            list.push(c.clone());
            Some(c)
        }
        _ => None,
    };
    let slot: Slot = Arc::new(Mutex::new(None));
    if site == Site::Text {
        list.push(Arc::new(text_probe(direction.to_vec(), slot.clone())));
    }
    let mut noise = run.rng.source(run.seed.wrapping_add(seed_offset));
    let out = pipe.run(
        &req,
        noise.as_mut(),
        RunOptions {
            hook: list.as_hook(),
            audio: if a.latents_only {
                AudioOutput::Skip
            } else {
                AudioOutput::Tensor
            },
            ..Default::default()
        },
    )?;
    let s = out.latents.shape();
    let (c, t) = (s[1], s[2]);
    let valid = out.lengths.effective.min(t);
    let latents = out.latents.to_cpu()?.contiguous()?.to_vec_f32()?;
    let lat = Latents {
        data: &latents,
        channels: c,
        frames: t,
        valid,
    };
    let (proj_site, proj_output) =
        match site {
            Site::Residual(k) => {
                let cap = capture.ok_or_else(|| Error::Input("capture missing".into()))?;
                let m = cap.take_samples().map_err(steer_err)?;
                let first = |b: usize| -> Result<f64> {
                    let row = m.get(&b).and_then(|r| r.first()).ok_or_else(|| {
                        Error::Input(format!("no residual captured at block {b}"))
                    })?;
                    Ok(dot(row, direction))
                };
                (first(k)?, Some(first(depth - 1)?))
            }
            Site::Latent => {
                let p = lat.projection(direction).map_err(steer_err)?;
                (p, Some(p))
            }
            Site::Text => {
                let p =
                    slot.lock().ok().and_then(|g| *g).ok_or_else(|| {
                        Error::Input("the text conditioning was not observed".into())
                    })?;
                (p, None)
            }
        };
    Ok(Measured {
        latents,
        shape: (c, t, valid),
        proj_site,
        proj_output,
        audio: (!a.latents_only).then_some(out.audio),
    })
}

fn sweep(a: &SweepArgs, cx: &Ctx) -> Result<()> {
    let ui = &cx.ui;
    let mut spec = SteerSpec::parse(&a.dir).map_err(steer_err)?;
    if spec.strength.is_some() {
        return Err(Error::Input(format!(
            "--dir `{}`: no strength= here, --strengths gives them",
            a.dir
        )));
    }
    if a.strengths.iter().any(|s| !s.is_finite()) {
        return Err(Error::Input("--strengths must be finite numbers".into()));
    }
    let pipe = load_pipe(&a.model.model, &a.run, cx)?;
    let id = identity(&pipe)?;
    let file = DirectionFile::load_for(&spec.path, &id, a.force).map_err(steer_err)?;
    spec.strength = Some(1.0);
    let probe = spec.resolve(&file).map_err(steer_err)?;
    let (site, direction) = (probe.site(), probe.direction().to_vec());
    let what = {
        let d = describe(&probe);
        d.replace(" strength 1 ", " ")
    };
    std::fs::create_dir_all(&a.out_dir).map_err(|e| Error::io(&a.out_dir, e))?;
    let sr = pipe.sample_rate();
    let pb = bar(ui, a.strengths.len() + 1, "sweeping");
    pb.set_message("baseline");
    let t0 = Instant::now();
    let clap = a
        .clap
        .as_deref()
        .map(crate::score::SweepClap::load)
        .transpose()?;
    let base = sweep_run(&pipe, a, None, site, &direction, 0)?;
    let mut clap_rows = Vec::new();
    let base_emb = match (&clap, &base.audio) {
        (Some(c), Some(x)) => Some(c.embed(x, sr)?),
        _ => None,
    };
    pb.inc(1);
    let (c, t, valid) = base.shape;
    let base_lat = Latents {
        data: &base.latents,
        channels: c,
        frames: t,
        valid,
    };
    let mut points = Vec::new();
    let point = |m: &Measured, strength: f32| -> Result<SweepPoint> {
        let lat = Latents {
            data: &m.latents,
            channels: c,
            frames: t,
            valid,
        };
        let audio_rms_dbfs = match &m.audio {
            Some(x) => Some(sweep::rms_dbfs(&x.to_cpu()?.contiguous()?.to_vec_f32()?)),
            None => None,
        };
        Ok(SweepPoint {
            strength,
            proj_site: m.proj_site,
            proj_output: m.proj_output,
            drift: lat.drift(&base_lat).map_err(steer_err)?,
            latent_rms: lat.rms().map_err(steer_err)?,
            audio_rms_dbfs,
        })
    };
    for &alpha in &a.strengths {
        pb.set_message(format!("strength {alpha}"));
        // Strength 0 is bit-identical to no steering: the baseline is that run.
        let m = if alpha == 0.0 {
            None
        } else {
            spec.strength = Some(alpha);
            let s = spec.resolve(&file).map_err(steer_err)?;
            Some(sweep_run(&pipe, a, Some(s), site, &direction, 0)?)
        };
        let m = m.as_ref().unwrap_or(&base);
        points.push(point(m, alpha)?);
        if let (Some(c), Some(x)) = (&clap, &m.audio) {
            clap_rows.push((alpha.to_string(), c.embed(x, sr)?));
        }
        if a.wav {
            if let Some(x) = &m.audio {
                let p = a.out_dir.join(format!("strength_{alpha}.wav"));
                write_wav(&p, x, sr, WavFormat::F32)?;
            }
        }
        pb.inc(1);
    }
    let clap_report = match (&clap, &base_emb) {
        (Some(c), Some(b)) => {
            pb.set_message("re-seed floor");
            let reseed = sweep_run(&pipe, a, None, site, &direction, 1)?;
            if let Some(x) = &reseed.audio {
                clap_rows.push(("reseed".into(), c.embed(x, sr)?));
            }
            Some(c.report(&a.prompt, b, &clap_rows, &a.out_dir.join("sweep_clap.csv"))?)
        }
        _ => None,
    };
    pb.finish_and_clear();
    let csv = a.out_dir.join("sweep.csv");
    let png = a.out_dir.join("sweep.png");
    sweep::write_csv(&csv, &points).map_err(steer_err)?;
    sweep::write_png(&png, &points, &what).map_err(steer_err)?;
    if cx.json {
        let pts: Vec<serde_json::Value> = points
            .iter()
            .map(|p| {
                json!({
                    "strength": p.strength, "proj_site": p.proj_site, "proj_output": p.proj_output,
                    "drift": p.drift, "latent_rms": p.latent_rms, "audio_rms_dbfs": p.audio_rms_dbfs,
                })
            })
            .collect();
        crate::print_json(&json!({
            "command": "steer sweep",
            "direction": what,
            "csv": csv.display().to_string(),
            "png": png.display().to_string(),
            "points": pts,
            "clap": clap_report.as_ref().map(|r| r.json.clone()),
            "timings_s": { "runs": t0.elapsed().as_secs_f64(), "total": ui.start.elapsed().as_secs_f64() },
        }));
    }
    if !ui.quiet {
        eprintln!("dose-response of {what} (seed {}):", a.run.seed);
        eprint!("{}", sweep::csv(&points));
        if let Some(r) = &clap_report {
            eprint!("{}", r.text);
        }
        eprintln!(
            "wrote {} and {} ({} runs in {})",
            csv.display(),
            png.display(),
            a.strengths.iter().filter(|s| **s != 0.0).count() + 1,
            secs(t0.elapsed())
        );
    }
    Ok(())
}

/// Run `aria steer …`.
pub fn run(a: &SteerArgs, cx: &Ctx) -> Result<()> {
    match &a.cmd {
        SteerCmd::Extract(x) => extract(x, cx),
        SteerCmd::Sweep(x) => sweep(x, cx),
        SteerCmd::Show(x) => show(x, cx),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::args::{Cli, Cmd};
    use aria_steer::spec::SiteKind;
    use aria_steer::{Scale, StepSpan};
    use clap::Parser;

    fn parse(v: &[&str]) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(v)
    }

    #[test]
    fn generate_takes_repeated_steer_specs_in_order() {
        let cli = parse(&[
            "aria",
            "generate",
            "-p",
            "x",
            "--steer",
            "a.safetensors:block=3:strength=0.1:steps=2-5",
            "--steer",
            r"C:\d\b.safetensors:site=latent:op=project:strength=-0.5",
            "--steer",
            "c.safetensors:site=text:strength=2:scale=raw",
            "--force",
        ])
        .unwrap();
        let Cmd::Generate(g) = cli.cmd else {
            panic!("not generate")
        };
        assert!(g.force);
        let s = parse_specs(&g.steer).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].path, PathBuf::from("a.safetensors"));
        assert_eq!(
            (s[0].block, s[0].strength, s[0].steps),
            (Some(3), Some(0.1), Some(StepSpan { lo: 2, hi: 5 }))
        );
        assert_eq!(s[1].path, PathBuf::from(r"C:\d\b.safetensors"));
        assert_eq!(
            (s[1].site, s[1].op, s[1].strength),
            (Some(SiteKind::Latent), Some(SteerOp::Project), Some(-0.5))
        );
        assert_eq!(
            (s[2].site, s[2].scale),
            (Some(SiteKind::Text), Some(Scale::Raw))
        );
        // No --steer: nothing, no force.
        let Cmd::Generate(g) = parse(&["aria", "generate", "-p", "x"]).unwrap().cmd else {
            panic!()
        };
        assert!(g.steer.is_empty() && !g.force);
    }

    #[test]
    fn bad_steer_specs_are_named_errors() {
        for (spec, needle) in [
            ("a.safetensors:strength=x", "strength `x`"),
            ("a.safetensors:steps=5-2", "LO is after HI"),
            ("a.safetensors:op=scale", "op `scale`"),
            ("a.safetensors:site=latent:block=2", "residual site only"),
            ("a.safetensors:strength=1:strength=2", "given twice"),
            (":strength=1", "no direction file"),
        ] {
            let e = parse_specs(&[spec.to_string()]).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn steer_subcommands_parse() {
        let cli = parse(&[
            "aria",
            "steer",
            "extract",
            "--pos",
            "p.txt",
            "--neg",
            "n.txt",
            "--blocks",
            "0,5",
            "-o",
            "d.safetensors",
        ])
        .unwrap();
        let Cmd::Steer(s) = cli.cmd else { panic!() };
        let SteerCmd::Extract(x) = s.cmd else {
            panic!()
        };
        assert_eq!(x.blocks, "0,5");
        assert_eq!(x.audio_noise_level, AUDIO_NOISE_LEVEL);
        // --pos needs --neg.
        assert!(parse(&["aria", "steer", "extract", "--pos", "p.txt", "-o", "d"]).is_err());
        let cli = parse(&[
            "aria",
            "steer",
            "sweep",
            "--dir",
            "d.safetensors:block=2",
            "--strengths",
            "0,0.05,-0.1",
            "--seed",
            "4",
        ])
        .unwrap();
        let Cmd::Steer(s) = cli.cmd else { panic!() };
        let SteerCmd::Sweep(x) = s.cmd else { panic!() };
        assert_eq!(x.strengths, vec![0.0, 0.05, -0.1]);
        assert_eq!(x.run.seed, 4);
        assert_eq!(parse_blocks("all", 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_blocks("2,0,2", 3).unwrap(), vec![0, 2]);
        assert!(parse_blocks("3", 3).is_err());
        assert!(parse_blocks("x", 3).is_err());
    }
}
