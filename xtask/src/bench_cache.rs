//! `cargo xtask bench cache`: a replay of AudioCaps prompts through the warm-start cache.
//!
//! The trace: the AudioCaps captions of `tokenizer/gemma-audiocaps.jsonl` (≈3 000, unique, at
//! least two words) in a fixed seeded order; request `t` asks for the caption of Zipf rank `r`
//! (exponent `--zipf`, so popular captions repeat), for a duration synthesized per caption
//! (uniform in `--seconds LO,HI`) times a per-request jitter in [0.75, 1.25] (AudioCaps clips are
//! all 10 s; the jitter exercises the duration gate and the phase vocoder). Every request runs
//! through [`aria_cache::Cache::generate`] with a fixed skip (`--skip`, a fraction of the steps)
//! on an empty cache that admits every result.
//!
//! Reported: hit rate, latent reuse, steps skipped and the hits by start step (the skip
//! distribution), hits from a segment of a longer clip (the pyramid index, with an audio
//! embedder), the cache's per-request overhead (embedding, search, selection, fetch, vocoder and
//! encoder) against one DiT step, and the end-to-end latency of the warm path against cold
//! generations of the same requests: every hit, and every K-th request (`--cold-every K`).
//! With CLAP (`--clap DIR`, or `ARIA_CLAP`), every request's CLAP score (prompt against output)
//! of the warm output and of the cold one where it ran, and their means over the hits. Then
//! the manager's eviction replay at the paper's capacity of 1 000 entries (10 000 requests, a
//! stand-in generator; `--no-eviction` skips it).
//!
//! Options: `--model DIR` (default: the random tiny preset written once under
//! `target/bench-models/`; `cargo xtask synth-model --preset small-music --dtype f32 --out DIR`
//! makes the real-shape one), `--requests N` (default 120), `--steps N` (8), `--skip F` (0.5),
//! `--zipf S` (1.1), `--seconds LO,HI` (2,8), `--cold-every K` (10), `--seed N` (0),
//! `--cfg SCALE` (classifier-free guidance, e.g. 7 with `--steps 50` for a `-base`
//! configuration; default the model's), `--precision P` (the DiT's, as `aria generate`),
//! `--embedder clap|minilm|t5gemma` (default: MiniLM when `scripts/fetch-minilm.sh` has fetched
//! it, else the model's own T5Gemma conditioning, mean-pooled; `clap` selects on audio and
//! indexes segments), `--clap DIR` (a CLAP checkpoint; `cargo xtask synth-model --clap
//! htsat-unfused --out DIR` writes a random real-shape one), `--texts FILE`, `--cache DIR`
//! (default: a fresh folder under the system temp dir, removed afterwards), `--skip gated` (the
//! skip gater decides each hit's skip and learns from it; the mean steps skipped per hit and its
//! time are reported), `--gater-only` (only the simulator table below, no model),
//! `--eviction` (only the cache manager's replay at two capacities, no model; see
//! [`eviction_report`]).
//!
//! Then the skip gater on its simulator (`aria_cache::gater::sim`): regret against the oracle
//! at 100, 1000 and 5000 requests for UCB, ε-greedy, UCB with the online rank window, mixed
//! 8/50-step schedules and greedy serving after offline training, and its time per request.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aria::cache::{t5gemma_embedder, CacheGenerator};
use aria::discover::{resolve_model, SearchPaths};
use aria::noise::SeedGenerator;
use aria::pipeline::{GenerateRequest, LoadOptions, Pipeline};
use aria::synth::{self, Preset};
use aria_cache::embed::{ClapEmbedder, MiniLm};
use aria_cache::select::SplitMix64;
use aria_cache::{store, Cache, CacheConfig, Embedder, Generator, Request, SkipPolicy};

struct Opts {
    model: Option<PathBuf>,
    texts: PathBuf,
    requests: usize,
    steps: usize,
    skip: f32,
    zipf: f64,
    seconds: (f64, f64),
    cold_every: usize,
    seed: u64,
    embedder: Option<String>,
    cache: Option<PathBuf>,
    gated: bool,
    /// Classifier-free guidance scale (`--cfg`; the model's default when absent).
    cfg: Option<f32>,
    /// DiT precision (`--precision`, a `--precision` name of `aria generate`).
    precision: Option<String>,
    /// CLAP checkpoint folder (`--clap`): the per-request CLAP scores of warm and cold outputs,
    /// and the embedder of `--embedder clap`.
    clap: Option<PathBuf>,
    /// Skip the eviction replay at the paper's capacity (`--no-eviction`).
    no_eviction: bool,
}

fn default_texts() -> PathBuf {
    let rel = "tokenizer/gemma-audiocaps.jsonl";
    match std::env::var_os("ARIA_FIXTURES") {
        Some(p) => PathBuf::from(p).join(rel),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures")
            .join(rel),
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        model: None,
        texts: default_texts(),
        requests: 120,
        steps: 8,
        skip: 0.5,
        zipf: 1.1,
        seconds: (2.0, 8.0),
        cold_every: 10,
        seed: 0,
        embedder: None,
        cache: None,
        gated: false,
        cfg: None,
        precision: None,
        clap: None,
        no_eviction: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        let num = |s: String| {
            s.parse::<f64>()
                .map_err(|_| format!("{a}: bad number `{s}`"))
        };
        match a.as_str() {
            "--model" => o.model = Some(PathBuf::from(val()?)),
            "--texts" => o.texts = PathBuf::from(val()?),
            "--cache" => o.cache = Some(PathBuf::from(val()?)),
            "--embedder" => o.embedder = Some(val()?),
            "--requests" => o.requests = num(val()?)? as usize,
            "--steps" => o.steps = num(val()?)? as usize,
            "--cold-every" => o.cold_every = (num(val()?)? as usize).max(1),
            "--seed" => o.seed = num(val()?)? as u64,
            "--skip" => match val()? {
                v if v == "gated" => o.gated = true,
                v => o.skip = num(v)? as f32,
            },
            "--zipf" => o.zipf = num(val()?)?,
            "--cfg" => o.cfg = Some(num(val()?)? as f32),
            "--precision" => o.precision = Some(val()?),
            "--clap" => o.clap = Some(PathBuf::from(val()?)),
            "--no-eviction" => o.no_eviction = true,
            "--seconds" => {
                let v = val()?;
                let (lo, hi) = v
                    .split_once(',')
                    .ok_or_else(|| format!("--seconds wants LO,HI, got `{v}`"))?;
                o.seconds = (num(lo.to_string())?, num(hi.to_string())?);
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if !(o.seconds.0 > 0.0 && o.seconds.0 <= o.seconds.1) {
        return Err("--seconds needs 0 < LO <= HI".into());
    }
    Ok(o)
}

fn captions(path: &PathBuf) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (set --texts or ARIA_FIXTURES)", path.display()))?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(t) = v["text"].as_str() {
            let t = t.trim().to_string();
            if t.split_whitespace().count() >= 2 && seen.insert(t.clone()) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// The trace: `(caption, seconds)` per request.
fn trace(caps: &[String], o: &Opts) -> Vec<(String, f64)> {
    let mut rng = SplitMix64::new(o.seed ^ 0xA0D1_0CA9);
    // Fixed seeded order (Fisher–Yates).
    let mut order: Vec<usize> = (0..caps.len()).collect();
    for i in (1..order.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    // Zipf CDF over ranks.
    let w: Vec<f64> = (1..=caps.len())
        .map(|r| 1.0 / (r as f64).powf(o.zipf))
        .collect();
    let z: f64 = w.iter().sum();
    let mut cdf = Vec::with_capacity(w.len());
    let mut acc = 0.0;
    for x in &w {
        acc += x / z;
        cdf.push(acc);
    }
    let (lo, hi) = o.seconds;
    (0..o.requests)
        .map(|_| {
            let u = rng.next_f64();
            let r = cdf.partition_point(|&c| c < u).min(caps.len() - 1);
            let c = order[r];
            // Per caption base duration, then a per-request jitter.
            let base = lo + (hi - lo) * SplitMix64::new(c as u64 ^ o.seed).next_f64();
            let jitter = 0.75 + 0.5 * rng.next_f64();
            let s = (base * jitter).clamp(lo * 0.75, hi * 1.25);
            (caps[c].clone(), (s * 100.0).round() / 100.0)
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--gater-only") {
        return gater_report();
    }
    if args.iter().any(|a| a == "--eviction") {
        return eviction_report(args);
    }
    let o = parse(args)?;
    let caps = captions(&o.texts)?;
    if caps.is_empty() {
        return Err(format!("{}: no captions", o.texts.display()));
    }
    let model = match &o.model {
        Some(m) => m.clone(),
        None => {
            let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-models/tiny");
            if !aria::discover::missing_files(&d).is_empty() {
                eprintln!("writing the random tiny model to {}", d.display());
                synth::write_model(&d, Preset::Tiny, aria_core::DType::F32, 0, &mut |_, _| {})
                    .map_err(|e| e.to_string())?;
            }
            d
        }
    };
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default())
        .map_err(|e| e.to_string())?;
    let load_opts = LoadOptions {
        precision: o
            .precision
            .as_deref()
            .map(aria::quant::WeightPrecision::parse)
            .transpose()
            .map_err(|e| format!("--precision: {e}"))?,
        ..Default::default()
    };
    let pipe = Arc::new(Pipeline::load(&files, &load_opts).map_err(|e| e.to_string())?);
    let max = pipe.max_seconds();
    let trace: Vec<(String, f64)> = trace(&caps, &o)
        .into_iter()
        .map(|(c, s)| (c, s.min(max)))
        .collect();
    // CLAP: `--clap DIR`, else the checkpoint `ARIA_CLAP` names.
    let clap: Option<Arc<ClapEmbedder>> = match &o.clap {
        Some(d) => Some(Arc::new(
            ClapEmbedder::load(d).map_err(|e| format!("--clap: {e}"))?,
        )),
        None => ClapEmbedder::from_env()
            .map_err(|e| format!("ARIA_CLAP: {e}"))?
            .map(Arc::new),
    };
    let emb: Arc<dyn Embedder> = match o.embedder.as_deref() {
        Some("clap") => match &clap {
            Some(c) => c.clone(),
            None => return Err("--embedder clap needs --clap DIR (or ARIA_CLAP)".into()),
        },
        Some("minilm") => Arc::new(MiniLm::load_default().map_err(|e| e.to_string())?),
        Some("t5gemma") => Arc::new(t5gemma_embedder(pipe.clone())),
        None if MiniLm::locate().is_some() => {
            Arc::new(MiniLm::load_default().map_err(|e| e.to_string())?)
        }
        None => {
            eprintln!(
                "MiniLM not fetched (scripts/fetch-minilm.sh): using the model's T5Gemma \
                 mean-pool embedder"
            );
            Arc::new(t5gemma_embedder(pipe.clone()))
        }
        Some(other) => {
            return Err(format!(
                "unknown --embedder `{other}` (clap, minilm, t5gemma)"
            ))
        }
    };
    let tmp = o.cache.is_none();
    let dir = o.cache.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("aria-bench-cache-{}", std::process::id()))
    });
    if tmp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut template = GenerateRequest::new("", 1.0);
    if let Some(c) = o.cfg {
        template.cfg_scale = c;
    }
    let gen = CacheGenerator::with_template(&pipe, template, SeedGenerator::Aria);
    let cfg = CacheConfig {
        skip: if o.gated {
            SkipPolicy::Gated(aria_cache::gater::GaterConfig::default())
        } else {
            SkipPolicy::Fraction(o.skip)
        },
        seed: o.seed,
        ..Default::default()
    };
    let st = store::open(&dir.display().to_string()).map_err(|e| e.to_string())?;
    let mut cache = Cache::open(st, emb.clone(), cfg).map_err(|e| e.to_string())?;
    eprintln!(
        "replay: {} requests over {} captions (zipf {}), {}–{} s, {} steps, cfg {}, \
         precision {}, skip {}, embedder {}, model {}",
        trace.len(),
        caps.len(),
        o.zipf,
        o.seconds.0,
        o.seconds.1,
        o.steps,
        o.cfg.map_or("default".to_string(), |c| c.to_string()),
        o.precision.as_deref().unwrap_or("as stored"),
        if o.gated {
            "gated".to_string()
        } else {
            o.skip.to_string()
        },
        emb.name(),
        files.dir.display()
    );

    let (mut hits, mut stored, mut skipped, mut total_steps) = (0usize, 0usize, 0usize, 0usize);
    // Hits whose stored latents were cropped or tiled to the request (no encode).
    let mut fitted = 0usize;
    let (mut warm_e2e, mut over_all, mut over_hit, mut step_ms) = (vec![], vec![], vec![], vec![]);
    let (mut cold_e2e, mut warm_same) = (vec![], vec![]);
    let (mut cold_hit, mut warm_hit) = (vec![], vec![]);
    let (mut embed, mut search, mut select, mut voc, mut enc) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut gate = vec![];
    let mut admit = vec![];
    // Hits by start step, hits from a segment of a longer clip.
    let mut starts: std::collections::BTreeMap<usize, usize> = Default::default();
    let mut segments = 0usize;
    let mut scores: Vec<ScoreRow> = vec![];
    let unique: HashSet<&str> = trace.iter().map(|(c, _)| c.as_str()).collect();
    for (t, (cap, secs)) in trace.iter().enumerate() {
        let req = Request::new(cap.clone(), *secs, o.steps, o.seed.wrapping_add(t as u64));
        let t0 = std::time::Instant::now();
        let out = cache.generate(&gen, &req).map_err(|e| e.to_string())?;
        let e2e = ms(t0.elapsed());
        warm_e2e.push(e2e);
        total_steps += o.steps;
        skipped += out.start_step;
        step_ms.extend(out.generation.step_times.iter().map(|d| ms(*d)));
        let ov = &out.overhead;
        over_all.push(ms(ov.before_generation()));
        embed.push(ms(ov.embed));
        search.push(ms(ov.search));
        select.push(ms(ov.select));
        admit.push(ms(ov.admit));
        let how = match (out.reference, out.alignment) {
            (None, _) => "cold",
            (_, Some(aria_cache::warm::Alignment::StoredLatents)) => "stored",
            (_, Some(aria_cache::warm::Alignment::FittedLatents { .. })) => "fitted",
            _ => "stretched",
        };
        if out.reference.is_some() {
            *starts.entry(out.start_step).or_default() += 1;
            segments += usize::from(out.segment.is_some());
            hits += 1;
            over_hit.push(ms(ov.before_generation()));
            voc.push(ms(ov.vocoder));
            gate.push(ms(ov.gate) * 1e3);
            enc.push(ms(ov.encode));
            match out.alignment {
                Some(aria_cache::warm::Alignment::StoredLatents) => stored += 1,
                Some(aria_cache::warm::Alignment::FittedLatents { .. }) => fitted += 1,
                _ => {}
            }
        }
        let mut cold_score = None;
        if t % o.cold_every == 0 || out.reference.is_some() {
            let t0 = std::time::Instant::now();
            let c = gen.generate(&req, None).map_err(|e| e.to_string())?;
            let cold = ms(t0.elapsed());
            if let Some(m) = &clap {
                cold_score = Some(clap_score(m.as_ref(), cap, &c.audio)?);
            }
            if out.reference.is_some() {
                cold_hit.push(cold);
                warm_hit.push(e2e);
            }
            cold_e2e.push(cold);
            warm_same.push(e2e);
        }
        if let Some(m) = &clap {
            let warm = clap_score(m.as_ref(), cap, &out.generation.audio)?;
            let how = if out.segment.is_some() {
                "segment"
            } else {
                how
            };
            scores.push(ScoreRow {
                t,
                caption: cap.clone(),
                seconds: *secs,
                how,
                step: out.start_step,
                warm,
                cold: cold_score,
            });
        }
        if (t + 1) % 20 == 0 {
            eprintln!("  {} requests, {hits} hits", t + 1);
        }
    }
    let n = trace.len().max(1);
    let step = median(&step_ms);
    println!(
        "requests: {} ({} distinct captions)",
        trace.len(),
        unique.len()
    );
    println!(
        "hit rate: {:.1} % ({hits} hits; latents reused on {:.1} % of them: {stored} as stored, \
         {fitted} cropped or tiled; {} stretched + encoded)",
        100.0 * hits as f64 / n as f64,
        100.0 * (stored + fitted) as f64 / hits.max(1) as f64,
        hits - stored - fitted
    );
    println!(
        "steps skipped: {skipped} of {total_steps} ({:.1} %)",
        100.0 * skipped as f64 / total_steps.max(1) as f64
    );
    println!("one DiT step (median): {step:.2} ms");
    println!(
        "admission after the generation (mean, in the warm path's time): {:.2} ms",
        mean(&admit)
    );
    println!(
        "overhead per request (mean, ms): all {:.2} | hits {:.2} = {:.2} DiT steps | embed {:.2}, \
         search {:.3}, select {:.3}, vocoder {:.2} (hits), encode {:.2} (hits)",
        mean(&over_all),
        mean(&over_hit),
        mean(&over_hit) / step.max(1e-9),
        mean(&embed),
        mean(&search),
        mean(&select),
        mean(&voc),
        mean(&enc)
    );
    println!(
        "end to end (mean ms over {} sampled requests, hits and misses): warm path {:.1} vs cold {:.1} \
         ({:.2}× faster); warm mean over all requests {:.1}",
        cold_e2e.len(),
        mean(&warm_same),
        mean(&cold_e2e),
        mean(&cold_e2e) / mean(&warm_same).max(1e-9),
        mean(&warm_e2e)
    );
    println!(
        "end to end on the {} hits (mean ms): warm {:.1} vs cold {:.1} ({:.2}× faster)",
        cold_hit.len(),
        mean(&warm_hit),
        mean(&cold_hit),
        mean(&cold_hit) / mean(&warm_hit).max(1e-9)
    );
    let dist: Vec<String> = starts
        .iter()
        .map(|(k, n)| format!("step {k}: {n}"))
        .collect();
    println!(
        "hits by start step: {}; from a segment of a longer clip: {segments}",
        if dist.is_empty() {
            "none".to_string()
        } else {
            dist.join(", ")
        }
    );
    if let Some(m) = &clap {
        print_scores(m.name(), &scores);
    } else {
        println!("CLAP scores: not measured (give --clap DIR or set ARIA_CLAP)");
    }
    if o.gated {
        println!(
            "skip gater in the replay: {:.2} steps skipped per hit (mean of {} hits); its time \
             per hit (decide + update + save in the store), median {:.0} µs",
            skipped as f64 / hits.max(1) as f64,
            hits,
            median(&gate)
        );
    }
    drop(cache);
    if tmp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if !o.no_eviction {
        // The paper's cache size: admission, eviction and the cache path at 1 000 entries
        // (a stand-in generator, so the replay is long enough to fill it).
        eviction_report(&[
            "--capacities".into(),
            "1000".into(),
            "--requests".into(),
            "10000".into(),
            "--seed".into(),
            o.seed.to_string(),
        ])?;
    }
    gater_report()
}

/// The CLAP score of `audio` for `prompt`: the cosine of their CLAP embeddings.
fn clap_score(m: &dyn Embedder, prompt: &str, audio: &aria_cache::Audio) -> Result<f32, String> {
    let interleaved = audio.interleaved(0..audio.frames());
    let a = m
        .embed_audio(&interleaved, audio.channels, audio.sample_rate)
        .map_err(|e| e.to_string())?
        .ok_or("the CLAP embedder has no audio side")?;
    let t = m.embed_texts(&[prompt]).map_err(|e| e.to_string())?;
    let t = t
        .first()
        .ok_or("the CLAP embedder returned no text vector")?;
    Ok(a.iter().zip(t).map(|(x, y)| x * y).sum())
}

/// One request of the CLAP table.
struct ScoreRow {
    t: usize,
    caption: String,
    seconds: f64,
    /// How it started: cold, stored, fitted, stretched or segment.
    how: &'static str,
    /// The start step.
    step: usize,
    /// CLAP score of the warm output.
    warm: f32,
    /// CLAP score of the cold output of the same request, when one ran.
    cold: Option<f32>,
}

/// The per-request CLAP table and the means over the hits (warm against cold).
fn print_scores(name: &str, rows: &[ScoreRow]) {
    println!(
        "CLAP scores ({name}; cosine of prompt and output; with random CLAP weights they say \
         nothing about the music):"
    );
    println!("  req | seconds | start     | step | warm    | cold    | caption");
    for r in rows {
        let cap: String = r.caption.chars().take(48).collect();
        println!(
            "  {:>3} | {:>7.2} | {:<9} | {:>4} | {:>7.4} | {} | {cap}",
            r.t,
            r.seconds,
            r.how,
            r.step,
            r.warm,
            r.cold
                .map_or("   —   ".to_string(), |c| format!("{c:>7.4}"))
        );
    }
    let pairs: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.how != "cold")
        .filter_map(|r| Some((f64::from(r.warm), f64::from(r.cold?))))
        .collect();
    if !pairs.is_empty() {
        let w: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let c: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        println!(
            "  hits: mean CLAP score warm {:.4} vs cold {:.4} (difference {:+.4}, over {} hits)",
            mean(&w),
            mean(&c),
            mean(&w) - mean(&c),
            pairs.len()
        );
    }
}

/// The skip gater on its simulator (`aria_cache::gater::sim`): mean regret against the oracle
/// as requests accumulate, steps skipped, and the time of one decision + update (also alone:
/// `cargo xtask bench cache --gater-only`).
fn gater_report() -> Result<(), String> {
    use aria_cache::gater::sim::{self, SimConfig, Simulator};
    use aria_cache::gater::{Exploration, Gater, GaterConfig, SKIP_PERCENTS};
    let err = |e: aria_cache::CacheError| e.to_string();
    const N: usize = 5000;
    let ucb = Exploration::Ucb { beta: 1.0 };
    let mixed = SimConfig {
        distilled_share: 0.5,
        ..Default::default()
    };
    let variants: [(&str, GaterConfig, SimConfig, bool); 5] = [
        (
            "UCB β=1",
            GaterConfig::default(),
            SimConfig::default(),
            false,
        ),
        (
            "ε-greedy 0.1",
            GaterConfig {
                exploration: Exploration::EpsilonGreedy { epsilon: 0.1 },
                ..Default::default()
            },
            SimConfig::default(),
            false,
        ),
        (
            "UCB, rank W=64",
            GaterConfig {
                exploration: ucb,
                rank_window: 64,
                ..Default::default()
            },
            SimConfig::default(),
            false,
        ),
        ("UCB, 8+50 steps", GaterConfig::default(), mixed, false),
        (
            "offline+greedy",
            GaterConfig {
                exploration: Exploration::Greedy,
                ..Default::default()
            },
            SimConfig::default(),
            true,
        ),
    ];
    println!(
        "skip gater on the simulator ({} arms; regret = oracle's expected reward − chosen's):",
        SKIP_PERCENTS.len()
    );
    println!(
        "  {:<16} | regret over requests (N−100, N] at N = 100 / 1000 / 5000 | cumulative mean \
         at 5000 | steps skipped (last 1000) vs oracle | fallbacks",
        "gater"
    );
    let mut times = Vec::with_capacity(N);
    for (name, cfg, sc, offline) in variants {
        let mut s = Simulator::new(sc);
        let mut g = Gater::new(cfg, sc.embed_dim).map_err(err)?;
        if offline {
            let mut logs_sim = Simulator::new(SimConfig { seed: 11, ..sc });
            g.train_offline(&logs_sim.sweep(1000)).map_err(err)?;
        }
        let mut run = sim::SimRun::default();
        let (mut chosen, mut oracle) = (0.0, 0.0);
        for t in 0..N {
            let req = s.next_request();
            let t0 = std::time::Instant::now();
            let d = g.decide(&req.context).map_err(err)?;
            let q = s.quality(&req, d.level);
            g.update(&d, q).map_err(err)?;
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            run.regrets.push(s.regret(&req, d.level));
            run.fallbacks += usize::from(d.fallback.is_some());
            if t >= N - 1000 {
                chosen += d.skip_steps as f64;
                let o = s.oracle(&req);
                oracle += aria_cache::gater::skip_steps(SKIP_PERCENTS[o], req.context.steps) as f64;
            }
        }
        println!(
            "  {:<16} | {:.4} / {:.4} / {:.4} | {:.4} | {:.2} vs {:.2} | {}",
            name,
            run.mean_regret(0..100),
            run.mean_regret(900..1000),
            run.mean_regret(N - 100..N),
            run.mean_regret(0..N),
            chosen / 1000.0,
            oracle / 1000.0,
            run.fallbacks
        );
    }
    let g = Gater::new(GaterConfig::default(), 768).map_err(err)?;
    println!(
        "gater time per request (decide + update, 16-dim prompts): median {:.1} µs over {} \
         requests; state size {} bytes untrained at 768 dims",
        median(&times),
        times.len(),
        g.to_bytes().len()
    );
    Ok(())
}

/// `--eviction`: the cache manager under a replayed stream, without a model.
///
/// Request `t` asks for prompt `p<r>` where the rank `r` follows a Zipf law (`--zipf S`, 1.0)
/// over `--prompts U` (50 000) distinct prompts; each prompt's vector is a seeded random unit
/// vector (96 dimensions), so only repeats of a prompt retrieve each other. A stand-in
/// generator makes tiny latents instantly (no audio kept), so the times are the cache's own:
/// embedding, search, selection, fetch, recording the reuse, admission and eviction through
/// the SQLite store. For each capacity of `--capacities A,B` (1000,10000) and `--requests N`
/// (20 000): hit rate (all, and over the second half), evictions, entries at the end, and the
/// per-request overhead: mean and p99 of the whole cache path, and of its admission + eviction
/// part. The ideal hit rate (every repeat a hit, unbounded cache) is printed for reference.
fn eviction_report(args: &[String]) -> Result<(), String> {
    use aria_cache::manager::{Admission, Capacity, ManagerConfig};
    use aria_cache::{Audio, Generation, WarmLatents};
    use aria_core::Tensor;

    const DIM: usize = 96;
    struct Ids;
    impl Embedder for Ids {
        fn name(&self) -> &str {
            "bench-ids-96"
        }
        fn dim(&self) -> usize {
            DIM
        }
        fn embed_texts(&self, texts: &[&str]) -> aria_cache::Result<Vec<Vec<f32>>> {
            Ok(texts
                .iter()
                .map(|t| {
                    let h = t.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
                    });
                    let mut r = SplitMix64::new(h);
                    // Sum of uniforms: close enough to Gaussian for random directions.
                    let mut v: Vec<f32> = (0..DIM)
                        .map(|_| (0..4).map(|_| r.next_f64() as f32 - 0.5).sum())
                        .collect();
                    aria_cache::embed::normalize(&mut v);
                    v
                })
                .collect())
        }
    }
    struct Instant0;
    impl Generator for Instant0 {
        fn id(&self) -> String {
            "bench-instant".into()
        }
        fn sample_rate(&self) -> u32 {
            1000
        }
        fn latent_shape(&self, _r: &Request) -> aria_cache::Result<Vec<usize>> {
            Ok(vec![1, 4, 16])
        }
        fn sigmas(&self, r: &Request) -> aria_cache::Result<Vec<f32>> {
            Ok((0..=r.steps)
                .map(|i| 1.0 - i as f32 / r.steps.max(1) as f32)
                .collect())
        }
        fn encode(&self, _a: &Audio, _r: &Request) -> aria_cache::Result<Tensor> {
            Ok(Tensor::from_vec(vec![0.0; 64], &[1, 4, 16])?)
        }
        fn generate(
            &self,
            r: &Request,
            _w: Option<&WarmLatents>,
        ) -> aria_cache::Result<Generation> {
            let n = (r.seconds * 1000.0) as usize;
            Ok(Generation {
                audio: Audio::new(vec![0.1; n], 1, 1000)?,
                latents: Tensor::from_vec(vec![r.seed as f32; 64], &[1, 4, 16])?,
                step_times: Vec::new(),
                total: Duration::ZERO,
            })
        }
        fn decode(&self, _l: &Tensor, r: &Request) -> aria_cache::Result<Audio> {
            Audio::new(vec![0.0; (r.seconds * 1000.0) as usize], 1, 1000)
        }
    }

    let (mut requests, mut prompts, mut zipf, mut seed) = (20_000usize, 50_000usize, 1.0f64, 0u64);
    let mut caps = vec![1000usize, 10_000];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        let num = |s: String| {
            s.parse::<f64>()
                .map_err(|_| format!("{a}: bad number `{s}`"))
        };
        match a.as_str() {
            "--eviction" => {}
            "--requests" => requests = num(val()?)? as usize,
            "--prompts" => prompts = (num(val()?)? as usize).max(1),
            "--zipf" => zipf = num(val()?)?,
            "--seed" => seed = num(val()?)? as u64,
            "--capacities" => {
                caps = val()?
                    .split(',')
                    .map(|c| num(c.to_string()).map(|x| x as usize))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("--eviction: unknown option `{other}`")),
        }
    }
    // The stream: Zipf ranks over a seeded permutation of the prompts.
    let mut rng = SplitMix64::new(seed ^ 0xE71C);
    let w: Vec<f64> = (1..=prompts).map(|r| 1.0 / (r as f64).powf(zipf)).collect();
    let z: f64 = w.iter().sum();
    let mut acc = 0.0;
    let cdf: Vec<f64> = w
        .iter()
        .map(|x| {
            acc += x / z;
            acc
        })
        .collect();
    let stream: Vec<usize> = (0..requests)
        .map(|_| {
            let u = rng.next_f64();
            cdf.partition_point(|&c| c < u).min(prompts - 1)
        })
        .collect();
    let mut seen = HashSet::new();
    let repeats = stream.iter().filter(|p| !seen.insert(**p)).count();
    println!(
        "eviction replay: {requests} requests over {prompts} prompts (zipf {zipf}), {} distinct; \
         ideal hit rate (unbounded) {:.1} %",
        seen.len(),
        100.0 * repeats as f64 / requests.max(1) as f64
    );
    println!(
        "  capacity | hit rate all / 2nd half | evictions | entries | cache path mean / p99 ms | \
         admit+evict mean / p99 ms"
    );
    let p99 = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() * 99 / 100).copied().unwrap_or(0.0)
    };
    for &cap in &caps {
        let dir =
            std::env::temp_dir().join(format!("aria-bench-evict-{}-{cap}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = CacheConfig {
            skip: SkipPolicy::Fraction(0.5),
            seed,
            keep_audio: false,
            manager: Some(ManagerConfig {
                capacity: Capacity::entries(cap),
                admission: Admission::Always,
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = store::open(&dir.display().to_string()).map_err(|e| e.to_string())?;
        let mut cache = Cache::open(st, Arc::new(Ids), cfg).map_err(|e| e.to_string())?;
        let (mut hits, mut hits2, mut admitted) = (0usize, 0usize, 0usize);
        let (mut path, mut admit) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
        for (t, p) in stream.iter().enumerate() {
            let req = Request::new(format!("p{p}"), 5.0, 8, t as u64);
            let t0 = std::time::Instant::now();
            let out = cache.generate(&Instant0, &req).map_err(|e| e.to_string())?;
            path.push(ms(t0.elapsed()));
            admit.push(ms(out.overhead.admit));
            let hit = usize::from(out.reference.is_some());
            hits += hit;
            if t >= requests / 2 {
                hits2 += hit;
            }
            admitted += usize::from(out.admitted.is_some());
        }
        let entries = cache.len();
        println!(
            "  {cap:>8} | {:>6.1} % / {:>6.1} %      | {:>9} | {:>7} | {:>8.3} / {:>6.3}       | \
             {:>6.3} / {:>6.3}",
            100.0 * hits as f64 / requests.max(1) as f64,
            100.0 * hits2 as f64 / (requests - requests / 2).max(1) as f64,
            admitted - entries,
            entries,
            mean(&path),
            p99(&mut path),
            mean(&admit),
            p99(&mut admit)
        );
        drop(cache);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
