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
//! Reported: hit rate, steps skipped, the cache's per-request overhead (embedding, search,
//! selection, fetch, vocoder and encoder) against one DiT step, and the end-to-end latency of
//! the warm path against cold generations of the same requests: every hit, and every K-th
//! request (`--cold-every K`).
//!
//! Options: `--model DIR` (default: the random tiny preset written once under
//! `target/bench-models/`; `cargo xtask synth-model --preset small-music --dtype f32 --out DIR`
//! makes the real-shape one), `--requests N` (default 120), `--steps N` (8), `--skip F` (0.5),
//! `--zipf S` (1.1), `--seconds LO,HI` (2,8), `--cold-every K` (10), `--seed N` (0),
//! `--embedder minilm|t5gemma` (default: MiniLM when `scripts/fetch-minilm.sh` has fetched it,
//! else the model's own T5Gemma conditioning, mean-pooled), `--texts FILE`, `--cache DIR`
//! (default: a fresh folder under the system temp dir, removed afterwards).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aria::cache::{t5gemma_embedder, CacheGenerator};
use aria::discover::{resolve_model, SearchPaths};
use aria::noise::SeedGenerator;
use aria::pipeline::{GenerateRequest, LoadOptions, Pipeline};
use aria::synth::{self, Preset};
use aria_cache::embed::MiniLm;
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
}

fn default_texts() -> PathBuf {
    let rel = "tokenizer/gemma-audiocaps.jsonl";
    match std::env::var_os("ARIA_FIXTURES") {
        Some(p) => PathBuf::from(p).join(rel),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures")
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
            "--skip" => o.skip = num(val()?)? as f32,
            "--zipf" => o.zipf = num(val()?)?,
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
    let pipe =
        Arc::new(Pipeline::load(&files, &LoadOptions::default()).map_err(|e| e.to_string())?);
    let max = pipe.max_seconds();
    let trace: Vec<(String, f64)> = trace(&caps, &o)
        .into_iter()
        .map(|(c, s)| (c, s.min(max)))
        .collect();
    let emb: Arc<dyn Embedder> = match o.embedder.as_deref() {
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
        Some(other) => return Err(format!("unknown --embedder `{other}` (minilm, t5gemma)")),
    };
    let tmp = o.cache.is_none();
    let dir = o.cache.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("aria-bench-cache-{}", std::process::id()))
    });
    if tmp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let template = GenerateRequest::new("", 1.0);
    let gen = CacheGenerator::with_template(&pipe, template, SeedGenerator::Aria);
    let cfg = CacheConfig {
        skip: SkipPolicy::Fraction(o.skip),
        seed: o.seed,
        ..Default::default()
    };
    let st = store::open(&dir.display().to_string()).map_err(|e| e.to_string())?;
    let mut cache = Cache::open(st, emb.clone(), cfg).map_err(|e| e.to_string())?;
    eprintln!(
        "replay: {} requests over {} captions (zipf {}), {}–{} s, {} steps, skip {}, \
         embedder {}, model {}",
        trace.len(),
        caps.len(),
        o.zipf,
        o.seconds.0,
        o.seconds.1,
        o.steps,
        o.skip,
        emb.name(),
        files.dir.display()
    );

    let (mut hits, mut stored, mut skipped, mut total_steps) = (0usize, 0usize, 0usize, 0usize);
    let (mut warm_e2e, mut over_all, mut over_hit, mut step_ms) = (vec![], vec![], vec![], vec![]);
    let (mut cold_e2e, mut warm_same) = (vec![], vec![]);
    let (mut cold_hit, mut warm_hit) = (vec![], vec![]);
    let (mut embed, mut search, mut select, mut voc, mut enc) =
        (vec![], vec![], vec![], vec![], vec![]);
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
        if out.reference.is_some() {
            hits += 1;
            over_hit.push(ms(ov.before_generation()));
            voc.push(ms(ov.vocoder));
            enc.push(ms(ov.encode));
            if out.alignment == Some(aria_cache::warm::Alignment::StoredLatents) {
                stored += 1;
            }
        }
        if t % o.cold_every == 0 || out.reference.is_some() {
            let t0 = std::time::Instant::now();
            gen.generate(&req, None).map_err(|e| e.to_string())?;
            let cold = ms(t0.elapsed());
            if out.reference.is_some() {
                cold_hit.push(cold);
                warm_hit.push(e2e);
            }
            cold_e2e.push(cold);
            warm_same.push(e2e);
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
        "hit rate: {:.1} % ({hits} hits; {stored} reused stored latents, {} stretched + encoded)",
        100.0 * hits as f64 / n as f64,
        hits - stored
    );
    println!(
        "steps skipped: {skipped} of {total_steps} ({:.1} %)",
        100.0 * skipped as f64 / total_steps.max(1) as f64
    );
    println!("one DiT step (median): {step:.2} ms");
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
    drop(cache);
    if tmp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
