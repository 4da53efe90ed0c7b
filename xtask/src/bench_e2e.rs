//! `cargo xtask bench e2e`: the whole text-to-audio run on a real-shape checkpoint.
//!
//! Each measurement runs in a fresh child process (so "ready" is the time from process start
//! to a loaded model, and the peak resident set is that of one generation): load, encode the
//! prompt, 8 sampler steps, decode. Reported per clip length (medians over `--reps`): ready,
//! text, mean step, decode, total (process start to audio), peak RSS (`VmHWM`), and the DiT's
//! arithmetic rate as a share of this machine's f32 FMA peak measured in the same run.
//!
//! Options: `--model DIR` (default: a random small-music checkpoint, f32, written once under
//! `target/bench-models/`), `--seconds a,b` (default 10,30), `--reps N` (default 1),
//! `--steps N` (default 8). `ARIA_BENCH_DEVICE=wgpu` (xtask built with `--features wgpu`)
//! runs the models on the wgpu backend.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{GenerateRequest, LoadOptions, Pipeline};
use aria::synth::{self, Preset};
use aria::SeededNoise;

struct Opts {
    model: Option<PathBuf>,
    seconds: Vec<f64>,
    reps: usize,
    steps: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        model: None,
        seconds: vec![10.0, 30.0],
        reps: 1,
        steps: 8,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |n: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{n} needs a value"))
        };
        match a.as_str() {
            "--model" => o.model = Some(PathBuf::from(val("--model")?)),
            "--seconds" => o.seconds = seconds_list(&val("--seconds")?)?,
            "--reps" => {
                o.reps = val("--reps")?
                    .parse()
                    .map_err(|_| "--reps needs an integer".to_string())?
            }
            "--steps" => {
                o.steps = val("--steps")?
                    .parse()
                    .map_err(|_| "--steps needs an integer".to_string())?
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// A `--seconds a,b,…` list.
pub(crate) fn seconds_list(v: &str) -> Result<Vec<f64>, String> {
    v.split(',')
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .map_err(|_| format!("bad --seconds `{s}`"))
        })
        .collect()
}

/// Seconds since this process started (Linux `/proc`; `None` elsewhere).
pub(crate) fn process_age() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')')?.1;
    let start_ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // Linux reports start times in clock ticks of 1/100 s (USER_HZ).
    Some(uptime - start_ticks / 100.0)
}

/// Peak resident set size in bytes (`VmHWM`).
fn vm_hwm() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// f32 FMA peak of one core in GFLOP/s: the best of five runs of the probes of `bench core`
/// (`crate::bench_core::peak_gflops`: the 512-bit loop where AVX-512F exists, else the AVX2 one;
/// the DiT runs on the widest kernels, so a 256-bit peak would overstate its efficiency).
fn fma_peak_gflops() -> Option<f64> {
    crate::bench_core::best_peak_gflops(1, 5)
}

/// The DiT precision a child loads at: `ARIA_BENCH_PRECISION` (a `--precision` name; unset:
/// as stored).
pub(crate) fn precision_from_env() -> Result<(Option<aria::quant::WeightPrecision>, bool), String> {
    match std::env::var("ARIA_BENCH_PRECISION") {
        Ok(p) => parse_precision(&p)
            .map(|(p, w)| (Some(p), w))
            .map_err(|e| format!("ARIA_BENCH_PRECISION: {e}")),
        Err(_) => Ok((None, false)),
    }
}

/// A precision name as the benches take it: a [`aria::quant::WeightPrecision`] name, or
/// `q8+w8a8` (q8 with W8A8 products), and whether W8A8 is on.
pub(crate) fn parse_precision(name: &str) -> Result<(aria::quant::WeightPrecision, bool), String> {
    let (base, w8a8) = match name.strip_suffix("+w8a8") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let p = aria::quant::WeightPrecision::parse(base).map_err(|e| e.to_string())?;
    if w8a8 && p != aria::quant::WeightPrecision::Q8 {
        return Err(format!("`{name}`: W8A8 runs on q8 only (q8+w8a8)"));
    }
    Ok((p, w8a8))
}

/// The child: one generation, printed as `RESULT key=value ...`.
fn child(model: &Path, seconds: f64, steps: usize) -> Result<(), String> {
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default())
        .map_err(|e| e.to_string())?;
    // `ARIA_BENCH_DEVICE=wgpu` (with `--features wgpu`) runs the models on the wgpu backend.
    let device = match std::env::var("ARIA_BENCH_DEVICE").as_deref() {
        Ok("wgpu") => aria::pipeline::DeviceKind::Wgpu,
        Ok("cuda") => aria::pipeline::DeviceKind::Cuda,
        Ok("cpu") | Err(_) => aria::pipeline::DeviceKind::Cpu,
        Ok(other) => {
            return Err(format!(
                "ARIA_BENCH_DEVICE `{other}`: expected cpu, wgpu or cuda"
            ))
        }
    };
    let (precision, w8a8) = precision_from_env()?;
    let opts = LoadOptions {
        device,
        precision,
        w8a8,
        ..Default::default()
    };
    let pipe = Pipeline::load(&files, &opts).map_err(|e| e.to_string())?;
    let ready = process_age().unwrap_or(0.0);
    let t0 = Instant::now();
    let mut req = GenerateRequest::new("warm ambient pad with soft rain", seconds);
    req.steps = steps;
    // `ARIA_BENCH_SEED` (default 0) seeds the noise; `ARIA_BENCH_LATENTS=FILE` keeps the final
    // latents there as little-endian f32 (bench official's quality column reads them).
    let seed = match std::env::var("ARIA_BENCH_SEED") {
        Ok(s) => s
            .parse::<u64>()
            .map_err(|e| format!("ARIA_BENCH_SEED `{s}`: {e}"))?,
        Err(_) => 0,
    };
    let out = pipe
        .generate(&req, &mut SeededNoise::new(seed), &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    let gen = t0.elapsed().as_secs_f64();
    if let Some(path) = std::env::var_os("ARIA_BENCH_LATENTS") {
        let v = out.latents.to_vec_f32().map_err(|e| e.to_string())?;
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", Path::new(&path).display()))?;
    }
    let t = &out.timings;
    let step = t.steps.iter().map(|d| d.as_secs_f64()).sum::<f64>() / t.steps.len().max(1) as f64;
    let cfg = &pipe.config().model.diffusion.config;
    // DiT FLOPs per step and layer: per token 18·E² multiply-adds (self q/k/v/out 4E², cross
    // q/out 2E², SwiGLU FF 12E²), self-attention 4·N²·E, cross-attention 4·N·257·E.
    let n = (cfg.num_memory_tokens + out.lengths.latents) as f64;
    let e = cfg.embed_dim as f64;
    let per_layer = 2.0 * 18.0 * e * e * n + 4.0 * n * n * e + 4.0 * n * 257.0 * e;
    let dit_flops = per_layer * cfg.depth as f64;
    println!(
        "RESULT ready={ready:.3} text={:.3} step={step:.3} decode={:.3} total={:.3} rss={} latents={} dit_gflops={:.1}",
        t.text.as_secs_f64(),
        t.decode.as_secs_f64(),
        ready + gen,
        vm_hwm().unwrap_or(0),
        out.lengths.latents,
        dit_flops / step / 1e9
    );
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// The random small-music checkpoint the benches default to (see [`bench_model`]).
pub(crate) fn default_model() -> Result<PathBuf, String> {
    bench_model("small-music")
}

/// A random real-shape checkpoint of `preset` (`synth-model`, seed 0, f32) under
/// `target/bench-models/{preset}-f32`, written there the first time.
pub(crate) fn bench_model(preset: &str) -> Result<PathBuf, String> {
    let p = Preset::parse(preset).ok_or_else(|| format!("unknown preset `{preset}`"))?;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../target/bench-models/{preset}-f32"));
    if aria::discover::missing_files(&dir).is_empty() {
        return Ok(dir);
    }
    eprintln!(
        "writing a random {preset} checkpoint (f32) to {} ...",
        dir.display()
    );
    let t = Instant::now();
    synth::write_model(&dir, p, aria_core::DType::F32, 0, &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    eprintln!("  done in {:.1} s", t.elapsed().as_secs_f64());
    Ok(dir)
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--child") {
        let model = args.get(1).ok_or("--child MODEL SECONDS STEPS")?;
        let secs: f64 = args
            .get(2)
            .and_then(|s| s.parse().ok())
            .ok_or("--child: seconds")?;
        let steps: usize = args
            .get(3)
            .and_then(|s| s.parse().ok())
            .ok_or("--child: steps")?;
        return child(Path::new(model), secs, steps);
    }
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let model = match &o.model {
        Some(m) => m.clone(),
        None => default_model()?,
    };
    let peak = fma_peak_gflops();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let exe = crate::self_exe().map_err(|e| e.to_string())?;
    println!("model: {}", model.display());
    println!(
        "f32 FMA peak: {} GFLOP/s per core ({threads} threads available)",
        peak.map_or("n/a".to_string(), |p| format!("{p:.1}"))
    );
    println!(
        "{:>6} {:>5} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>10} {:>12}",
        "clip",
        "T",
        "ready",
        "text",
        "step",
        "decode",
        "total",
        "peak RSS",
        "DiT GF/s",
        "% FMA peak"
    );
    for &secs in &o.seconds {
        let mut rows: Vec<Vec<(String, f64)>> = Vec::new();
        for _ in 0..o.reps.max(1) {
            let out = Command::new(&exe)
                .args([
                    "bench",
                    "e2e",
                    "--child",
                    &model.display().to_string(),
                    &secs.to_string(),
                    &o.steps.to_string(),
                ])
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find(|l| l.starts_with("RESULT"))
                .ok_or_else(|| {
                    format!(
                        "child failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                })?;
            rows.push(
                line.split_whitespace()
                    .skip(1)
                    .filter_map(|kv| kv.split_once('='))
                    .filter_map(|(k, v)| v.parse::<f64>().ok().map(|v| (k.to_string(), v)))
                    .collect(),
            );
        }
        let m = |k: &str| {
            median(
                rows.iter()
                    .filter_map(|r| r.iter().find(|(kk, _)| kk == k).map(|x| x.1))
                    .collect(),
            )
        };
        let gf = m("dit_gflops");
        let pct = peak.map_or("n/a".to_string(), |p| {
            format!("{:.0} %", 100.0 * gf / (p * threads as f64))
        });
        println!(
            "{:>5.0}s {:>5} {:>7.2}s {:>7.2}s {:>8.2}s {:>7.2}s {:>7.2}s {:>7.2}GB {:>10.1} {:>12}",
            secs,
            m("latents"),
            m("ready"),
            m("text"),
            m("step"),
            m("decode"),
            m("total"),
            m("rss") / 1e9,
            gf,
            pct
        );
    }
    println!("targets: ready <= 1 s, peak RSS <= 3.0 GB (f32 weights), total <= 12 s");
    Ok(())
}
