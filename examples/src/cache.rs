//! The warm-start cache on the command line: `aria generate --cache DIR|URL` (lookup, warm start
//! from a close cached clip, admit the result) and `aria cache stats|list|import|clear`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aria::cache::{t5gemma_embedder, CacheGenerator};
use aria::{Error, GenerateRequest, LoadOptions, Pipeline, Result};
use aria_cache::embed::{ClapEmbedder, MiniLm};
use aria_cache::warm::Alignment;
use aria_cache::{store, Audio, Cache, CacheConfig, CacheError, Embedder, Request, SkipPolicy};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::args::{GenerateArgs, ModelArg};
use crate::output::AudioWriter;
use crate::ui::secs;
use crate::Ctx;

/// `--cache-embedder`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// CLAP when $ARIA_CLAP names a checkpoint, else MiniLM when its files are fetched, else
    /// the model's T5Gemma mean-pool.
    Auto,
    /// CLAP ($ARIA_CLAP: a folder or repository id): entries are indexed by the CLAP embedding
    /// of their audio, so a cached clip is chosen by how its sound fits the prompt.
    Clap,
    /// all-MiniLM-L6-v2 (scripts/fetch-minilm.sh).
    Minilm,
    /// The generating model's own prompt encoder, mean-pooled.
    T5gemma,
}

/// The cache flags of `aria generate`.
#[derive(Args)]
pub struct CacheOpts {
    /// Warm-start cache: a folder, a .sqlite file or sqlite://PATH ("default": the user cache
    /// folder). A close cached clip starts the generation; the result is added.
    #[arg(long, value_name = "DIR|URL")]
    pub cache: Option<String>,
    /// Steps a cache hit skips: `gated` (the skip gater decides per request, learns from each
    /// result and is saved with the cache) or a fixed fraction of the steps, e.g. 0.5.
    #[arg(long, default_value = "gated", value_parser = parse_skip)]
    pub cache_skip: SkipArg,
    /// Prompt embedder of the cache.
    #[arg(long, value_enum, default_value_t = EmbedderKind::Auto)]
    pub cache_embedder: EmbedderKind,
    /// Do not add the result to the cache.
    #[arg(long)]
    pub cache_no_admit: bool,
    /// Most entries the cache keeps; beyond it the least important go (0: no bound).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub cache_max_entries: usize,
    /// Most bytes of audio and latents the cache keeps, e.g. 4G, 512M (0: no bound).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    pub cache_max_bytes: u64,
}

impl CacheOpts {
    /// The cache's bounds from `--cache-max-entries` and `--cache-max-bytes`.
    pub fn capacity(&self) -> aria_cache::manager::Capacity {
        capacity(self.cache_max_entries, self.cache_max_bytes)
    }
}

/// Bounds from an entry count and a byte count, 0 meaning no bound.
pub fn capacity(entries: usize, bytes: u64) -> aria_cache::manager::Capacity {
    aria_cache::manager::Capacity {
        max_entries: (entries > 0).then_some(entries),
        max_bytes: (bytes > 0).then_some(bytes),
    }
}

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024; a trailing `B`
/// or `iB` is allowed).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("expected a size such as 4G, 512M or 1000000, got `{s}`"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size `{s}` is too large"))
}

/// `--cache-skip`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SkipArg {
    /// A fixed fraction of the steps.
    Fraction(f32),
    /// The skip gater.
    Gated,
}

impl SkipArg {
    /// The cache's skip policy.
    pub fn policy(self) -> SkipPolicy {
        match self {
            SkipArg::Fraction(f) => SkipPolicy::Fraction(f),
            SkipArg::Gated => SkipPolicy::Gated(Default::default()),
        }
    }
}

pub(crate) fn parse_skip(s: &str) -> std::result::Result<SkipArg, String> {
    if s.eq_ignore_ascii_case("gated") {
        return Ok(SkipArg::Gated);
    }
    match s.parse::<f32>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(SkipArg::Fraction(f)),
        _ => Err(format!(
            "expected a fraction of the steps in [0, 1] or `gated`, got `{s}`"
        )),
    }
}

/// `aria cache`.
#[derive(Args)]
pub struct CacheArgs {
    /// The cache: a folder, a .sqlite file or sqlite://PATH (default: the user cache folder).
    #[arg(long, value_name = "DIR|URL", global = true)]
    pub cache: Option<String>,
    #[command(subcommand)]
    pub cmd: CacheCmd,
}

/// The subcommands of `aria cache`.
#[derive(Subcommand)]
pub enum CacheCmd {
    /// Totals: entries, payload, reuses, embedders.
    Stats,
    /// One line per entry.
    List,
    /// Add audio files (resampled to 44.1 kHz stereo) described by a prompt.
    Import(ImportArgs),
    /// Remove every entry.
    Clear {
        /// Confirm.
        #[arg(long)]
        yes: bool,
    },
}

/// `aria cache import`.
#[derive(Args)]
pub struct ImportArgs {
    /// Audio files (WAV, FLAC, MP3, …).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The prompt of every file (default: FILE.txt next to it, else the file name).
    #[arg(long, short)]
    pub prompt: Option<String>,
    /// Prompt embedder.
    #[arg(long, value_enum, default_value_t = EmbedderKind::Auto)]
    pub embedder: EmbedderKind,
    #[command(flatten)]
    pub model: ModelArg,
}

fn cerr(e: CacheError) -> Error {
    Error::Config(format!("cache: {e}"))
}

/// The store a `--cache` value names ("default" or absent: the user cache folder).
fn store_spec(spec: Option<&str>) -> Result<String> {
    match spec {
        Some(s) if s != "default" => Ok(s.to_string()),
        _ => store::default_dir()
            .map(|d| d.display().to_string())
            .ok_or_else(|| Error::Input("no user cache folder (HOME unset); pass --cache".into())),
    }
}

/// The embedder: CLAP, MiniLM, or the T5Gemma mean-pool of `pipe` (loaded on demand by `load`).
fn embedder(
    kind: EmbedderKind,
    pipe: &mut dyn FnMut() -> Result<Arc<Pipeline>>,
) -> Result<Arc<dyn Embedder>> {
    let minilm =
        || -> Result<Arc<dyn Embedder>> { Ok(Arc::new(MiniLm::load_default().map_err(cerr)?)) };
    let clap = || -> Result<Arc<dyn Embedder>> {
        let dir =
            aria_clap::discover::find(None).map_err(|e| Error::Config(format!("cache: {e}")))?;
        Ok(Arc::new(ClapEmbedder::load(&dir).map_err(cerr)?))
    };
    match kind {
        EmbedderKind::Clap => clap(),
        EmbedderKind::Auto if std::env::var_os(aria_clap::discover::ENV).is_some() => clap(),
        EmbedderKind::Minilm => minilm(),
        EmbedderKind::Auto if MiniLm::locate().is_some() => minilm(),
        _ => Ok(Arc::new(t5gemma_embedder(pipe()?))),
    }
}

/// `aria generate --cache …`: one request through the cache.
pub fn generate(args: &GenerateArgs, opts: &CacheOpts, cx: &Ctx) -> Result<()> {
    let ui = &cx.ui;
    let items = crate::args::batch(args)?;
    let [item] = items.as_slice() else {
        return Err(Error::Input(
            "--cache serves one request at a time (one prompt, batch size 1)".into(),
        ));
    };
    if args.init_audio.is_some() || args.inpaint_audio.is_some() || !args.steer.is_empty() {
        return Err(Error::Input(
            "--cache does not combine with --init-audio, --inpaint-audio or --steer".into(),
        ));
    }
    if args.noise.noise.is_some() || args.noise.noise_out.is_some() {
        return Err(Error::Input(
            "--cache draws from --seed; --noise and --noise-out are not supported with it".into(),
        ));
    }
    let seed = match crate::args::seed(args.noise.seed)? {
        Some(s) => s,
        None => {
            let s = crate::random_seed();
            ui.note(&format!("seed: {s}"));
            s
        }
    };
    let load_opts = LoadOptions {
        loras: crate::args::loras(args)?,
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
    // The store first: a bad --cache fails before the model loads.
    let st = store::open(&store_spec(opts.cache.as_deref())?).map_err(cerr)?;
    let pipe = Arc::new(crate::load(&args.model.model, &load_opts, ui)?);
    let mut template = GenerateRequest::new("", item.seconds);
    crate::args::apply_sampling(args, pipe.sampling_defaults(), &mut template)?;
    let steps = template.steps;
    template.duration_padding_sec = args.duration_padding;
    let gen = CacheGenerator::with_template(&pipe, template, args.noise.rng);
    let emb = embedder(opts.cache_embedder, &mut || Ok(pipe.clone()))?;
    let cfg = CacheConfig {
        skip: opts.cache_skip.policy(),
        admit: !opts.cache_no_admit,
        seed,
        manager: Some(aria_cache::manager::ManagerConfig {
            capacity: opts.capacity(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut cache = Cache::open(st, emb, cfg).map_err(cerr)?;
    let req = Request {
        prompt: item.prompt.clone(),
        negative_prompt: item.negative.clone(),
        seconds: item.seconds,
        steps,
        seed,
    };
    let pb = ui.spinner("generating through the cache");
    let out = cache.generate(&gen, &req).map_err(cerr);
    pb.finish_and_clear();
    let out = out?;
    let a = &out.generation.audio;
    let audio = aria_core::Tensor::from_vec(a.samples.clone(), &[a.channels, a.frames()])?;
    let depth = crate::output::Depth::of(args.pcm16, args.pcm24);
    let mut w = AudioWriter::create(&args.output, a.channels, a.sample_rate, depth)?;
    w.write(&audio)?;
    w.finish()?;
    if let Some(p) = &args.latents_out {
        aria_core::save_safetensors(p, &[("latents", &out.generation.latents)], None)?;
    }
    let o = &out.overhead;
    let alignment = match out.alignment {
        Some(Alignment::StoredLatents) => "stored latents".to_string(),
        Some(Alignment::FittedLatents { rate }) => {
            format!("stored latents fitted at rate {rate:.3}")
        }
        Some(Alignment::Stretched { rate }) => format!("audio stretched at rate {rate:.3}"),
        None => "cold".to_string(),
    };
    let steps: Duration = out.generation.step_times.iter().sum();
    if cx.json {
        crate::print_json(&json!({
            "command": "generate",
            "cache": cache.store().location(),
            "embedder": cache.embedder().name(),
            "seed": seed,
            "output": args.output.display().to_string(),
            "reference": out.reference,
            "alignment": alignment,
            "start_step": out.start_step,
            "sigma": out.sigma,
            "steps_run": out.steps_run,
            "admitted": out.admitted,
            "overhead_s": {
                "embed": o.embed.as_secs_f64(), "search": o.search.as_secs_f64(),
                "select": o.select.as_secs_f64(), "fetch": o.fetch.as_secs_f64(),
                "vocoder": o.vocoder.as_secs_f64(), "encode": o.encode.as_secs_f64(),
                "admit": o.admit.as_secs_f64(),
            },
            "steps_s": steps.as_secs_f64(),
            "generation_s": out.generation.total.as_secs_f64(),
        }));
    }
    if !ui.quiet {
        match out.reference {
            Some(id) => eprintln!(
                "cache hit: entry {id} ({alignment}), from step {} (σ {:.3}): {} of {} steps",
                out.start_step, out.sigma, out.steps_run, req.steps
            ),
            None => eprintln!("cache miss: cold generation of {} steps", req.steps),
        }
        eprintln!(
            "wrote {} ({:.2} s) | cache overhead {} (embed {}, search {}, vocoder {}, encode {}) \
             | steps {} | total {}",
            args.output.display(),
            a.seconds(),
            secs(o.before_generation()),
            secs(o.embed),
            secs(o.search),
            secs(o.vocoder),
            secs(o.encode),
            secs(steps),
            secs(ui.start.elapsed())
        );
        if let Some(id) = out.admitted {
            eprintln!("admitted as entry {id} in {}", cache.store().location());
        }
    }
    Ok(())
}

/// The prompt of an imported file: `--prompt`, FILE.txt, or the file name.
fn import_prompt(p: &Path, given: Option<&str>) -> Result<String> {
    if let Some(g) = given {
        return Ok(g.to_string());
    }
    let side = p.with_extension("txt");
    if side.is_file() {
        let s = std::fs::read_to_string(&side).map_err(|e| Error::io(&side, e))?;
        return Ok(s.trim().to_string());
    }
    Ok(p.file_stem()
        .map(|s| s.to_string_lossy().replace(['_', '-'], " "))
        .unwrap_or_default())
}

/// `aria cache …`.
pub fn run(a: &CacheArgs, cx: &Ctx) -> Result<()> {
    let spec = store_spec(a.cache.as_deref())?;
    match &a.cmd {
        CacheCmd::Stats => {
            let st = store::open(&spec).map_err(cerr)?;
            let s = st.stats().map_err(cerr)?;
            let counters = st.counters().map_err(cerr)?;
            if cx.json {
                crate::print_json(&json!({
                    "command": "cache stats", "cache": spec, "entries": s.entries,
                    "with_audio": s.with_audio, "with_latents": s.with_latents, "hits": s.hits,
                    "payload_bytes": s.payload_bytes, "seconds": s.seconds,
                    "embedders": s.embedders.iter().map(|(n, c)| json!({"name": n, "entries": c})).collect::<Vec<_>>(),
                    "counters": counters,
                }));
            } else {
                println!("cache: {spec}");
                println!(
                    "entries: {} ({} with audio, {} with latents), {:.1} s of audio, {:.1} MB",
                    s.entries,
                    s.with_audio,
                    s.with_latents,
                    s.seconds,
                    s.payload_bytes as f64 / 1e6
                );
                println!("reuses: {}", s.hits);
                for (n, c) in &s.embedders {
                    println!("embedder {n}: {c} entries");
                }
                print_counters(&counters);
            }
        }
        CacheCmd::List => {
            let l = store::open(&spec).map_err(cerr)?.list().map_err(cerr)?;
            if cx.json {
                let v: Vec<_> = l
                    .iter()
                    .map(|e| {
                        json!({"id": e.id, "prompt": e.data.prompt, "seconds": e.data.seconds,
                               "origin": e.data.origin, "hits": e.hits,
                               "importance": e.data.importance, "created_ms": e.created_ms,
                               "used_ms": e.used_ms, "quality": e.data.quality})
                    })
                    .collect();
                crate::print_json(&json!({"command": "cache list", "cache": spec, "entries": v}));
            } else {
                for e in &l {
                    println!(
                        "{:>6}  {:>6.2} s  {:>4} hits  {:>8.1} imp  {:<9} {}",
                        e.id,
                        e.data.seconds,
                        e.hits,
                        e.data.importance,
                        e.data.origin,
                        e.data.prompt
                    );
                }
            }
        }
        CacheCmd::Import(args) => {
            let emb = embedder(args.embedder, &mut || {
                Ok(Arc::new(crate::load(
                    &args.model.model,
                    &LoadOptions::default(),
                    &cx.ui,
                )?))
            })?;
            let mut cache = Cache::open(
                store::open(&spec).map_err(cerr)?,
                emb,
                CacheConfig::default(),
            )
            .map_err(cerr)?;
            for f in &args.files {
                let clip = aria_codec::audio::read_audio(f)?;
                let x = aria_codec::audio::prepare_audio(&clip, 44_100, None, 2)?;
                let n = x.shape()[2];
                let audio = Audio::new(x.contiguous()?.to_vec_f32()?, 2, 44_100).map_err(cerr)?;
                let prompt = import_prompt(f, args.prompt.as_deref())?;
                let id = cache.import(&prompt, audio).map_err(cerr)?;
                if !cx.ui.quiet {
                    eprintln!(
                        "imported {} as entry {id} ({:.2} s): {prompt}",
                        f.display(),
                        n as f64 / 44_100.0
                    );
                }
            }
        }
        CacheCmd::Clear { yes } => {
            if !yes {
                return Err(Error::Input(format!(
                    "`aria cache clear` removes every entry of {spec}; pass --yes to confirm"
                )));
            }
            let n = store::open(&spec).map_err(cerr)?.clear().map_err(cerr)?;
            if !cx.ui.quiet {
                eprintln!("removed {n} entries from {spec}");
            }
        }
    }
    Ok(())
}

/// The store's counters as `aria cache stats` prints them.
fn print_counters(n: &std::collections::BTreeMap<String, u64>) {
    use aria_cache::cache::counter;
    if n.is_empty() {
        return;
    }
    let get = |k: &str| n.get(k).copied().unwrap_or(0);
    let hits = get(counter::HITS);
    println!(
        "requests: {}, hits: {hits} ({} from stored latents, {} from fitted latents, {} stretched \
         and encoded; {} from a segment of a longer clip), steps skipped: {}",
        get(counter::REQUESTS),
        get(counter::STORED_LATENTS),
        get(counter::FITTED_LATENTS),
        get(counter::STRETCHED_AUDIO),
        get(counter::SEGMENT),
        get(counter::SKIPPED_STEPS)
    );
    println!(
        "admitted: {}, evicted: {}, refinement attempts: {} ({} entries replaced)",
        get(counter::ADMITTED),
        get(counter::EVICTED),
        get(counter::REFINE_ATTEMPTS),
        get(counter::REFINE_REPLACED)
    );
    let mut starts: Vec<(usize, u64)> = n
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(counter::START_STEP)?.parse().ok()?, *v)))
        .collect();
    starts.sort_unstable();
    if !starts.is_empty() {
        let s: Vec<String> = starts
            .iter()
            .map(|(k, v)| format!("step {k}: {v}"))
            .collect();
        println!("hits by start step: {}", s.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::{capacity, parse_size};

    #[test]
    fn sizes_parse_with_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("10kb"), Ok(10 << 10));
        assert_eq!(parse_size("1000000"), Ok(1_000_000));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in ["", "G", "-1G", "1.5G", "4X", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(capacity(0, 0), aria_cache::manager::Capacity::UNBOUNDED);
        assert_eq!(
            capacity(1000, 4 << 30),
            aria_cache::manager::Capacity::DEFAULT
        );
    }
}
