//! `cargo xtask bench official`: the official PyTorch implementation and aria side by side, on
//! the same model folder, the same machine and in the same run.
//!
//! The official side is the reference harness (`bench.py` of `../shared/ref-harness/`, see its
//! README) run with the Python environment of a prepared reference folder, given by
//! `--ref-dir DIR` or the `ARIA_REF_DIR` environment variable (`DIR/venv`, `DIR/stable-audio-3`,
//! by default the model `DIR/sm-random`). Without a reference folder only aria is measured, and
//! the output says so.
//!
//! Measures, per clip length: text encoding, one DiT forward (t = 0.9, the padding mask of the
//! request), 8 sampler steps, SAME decode chunked (the configured default) and unchunked, the
//! model load, `generate()` after the load, and the whole process from start to exit. Every
//! measurement runs in a child process; the official and aria children alternate (official
//! first in even rounds, aria first in odd ones) so that drift of the machine hits both sides
//! alike. Each figure is the minimum over rounds (and over `--reps` inside a child). The ratio
//! is official / aria (above 1: aria is faster).
//!
//! The e2e children also report their peak resident memory (the official process's
//! `ru_maxrss`, aria's `VmHWM`), and aria's children keep the final latents of the first clip
//! length: each precision's latents are compared with f32's (seed 0), next to f32's
//! seed-to-seed spread (one more f32 child at seed 1). A last **summary** table puts, per
//! precision, the `generate()` and whole-process ratios, both peaks and that latent error side
//! by side: every figure from this one run (the README's first table is this table).
//!
//! Beside each measure with a known amount of work it prints the GFLOP of aria's matrix products
//! (counted from the model configuration, low rather than high), aria's rate as a share of the
//! machine's f32 FMA peak (probed in the aria child with the same threads), and the **f32
//! ceiling**: official seconds × peak / GFLOP, the ratio that doing those products at the full
//! peak would give. A target ratio above the ceiling cannot be met by any f32 implementation on
//! that machine; only less work (or narrower arithmetic) could.
//!
//! Options: `--ref-dir DIR`, `--model DIR`, `--harness DIR` (default `../shared/ref-harness`
//! next to the workspace, or `ARIA_REF_HARNESS`), `--seconds a,b` (default 10,30), `--reps N`
//! (default 2), `--rounds N` (default 2), `--threads N` (default: every CPU), `--no-e2e`,
//! `--no-components`, `--precision LIST` (aria's precisions, each with its own table: `f32`,
//! `fast`, `bf16-dot`, `q8`, `q8+w8a8`, … ; default `f32`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{LoadOptions, Pipeline};
use aria_core::Tensor;

const PROMPT: &str = "Upbeat lofi house loop with warm Rhodes chords, deep sub bass and crisp \
                      hi-hats, 122 BPM";
/// Headroom `generate()` adds after the requested duration (the reference default).
const HEADROOM_S: f64 = 6.0;

struct Opts {
    ref_dir: Option<PathBuf>,
    model: Option<PathBuf>,
    harness: PathBuf,
    seconds: Vec<f64>,
    reps: usize,
    rounds: usize,
    threads: usize,
    e2e: bool,
    components: bool,
    /// aria's precisions (`--precision`): each gets its own children and its own table
    /// against the same official runs.
    precisions: Vec<String>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut o = Opts {
        ref_dir: std::env::var_os("ARIA_REF_DIR").map(PathBuf::from),
        model: None,
        harness: std::env::var_os("ARIA_REF_HARNESS")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("../shared/ref-harness")),
        seconds: vec![10.0, 30.0],
        reps: 2,
        rounds: 2,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        e2e: true,
        components: true,
        precisions: vec!["f32".to_string()],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let num = |v: &String| v.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--ref-dir" => o.ref_dir = Some(PathBuf::from(val()?)),
            "--model" => o.model = Some(PathBuf::from(val()?)),
            "--harness" => o.harness = PathBuf::from(val()?),
            "--seconds" => {
                o.seconds = val()?
                    .split(',')
                    .map(|s| s.trim().parse::<f64>().map_err(|e| format!("{a}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--reps" => o.reps = num(val()?)?.max(1),
            "--rounds" => o.rounds = num(val()?)?.max(1),
            "--threads" => o.threads = num(val()?)?.max(1),
            "--no-e2e" => o.e2e = false,
            "--no-components" => o.components = false,
            "--precision" => {
                o.precisions = val()?
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect();
                for p in &o.precisions {
                    crate::bench_e2e::parse_precision(p).map_err(|e| format!("{a}: {e}"))?;
                }
                if o.precisions.is_empty() {
                    return Err(format!("{a} needs at least one precision"));
                }
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// `model name` and the ISA flags that matter for the kernels, from `/proc/cpuinfo`.
pub fn machine_line() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags").unwrap_or_default();
    let have: Vec<&str> = flags.split_whitespace().collect();
    let isa: Vec<String> = [
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "amx_bf16",
        "amx_int8",
    ]
    .iter()
    .map(|f| format!("{f}={}", if have.contains(f) { "yes" } else { "no" }))
    .collect();
    format!(
        "{} ; {} CPUs ; {}",
        field("model name").unwrap_or_else(|| "unknown CPU".into()),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        if flags.is_empty() {
            "ISA flags unknown".to_string()
        } else {
            isa.join(" ")
        }
    )
}

/// Minimum per measure over all runs.
struct Mins {
    min: BTreeMap<String, f64>,
    /// The f32 FMA peak of the threads used, GFLOP/s (the largest probe; NaN: not measured).
    peak: f64,
}

impl Default for Mins {
    fn default() -> Self {
        Mins {
            min: BTreeMap::new(),
            peak: f64::NAN,
        }
    }
}

impl Mins {
    fn add(&mut self, k: impl Into<String>, v: f64) {
        if !v.is_finite() {
            return;
        }
        let e = self.min.entry(k.into()).or_insert(v);
        *e = e.min(v);
    }
    fn get(&self, k: &str) -> Option<f64> {
        self.min.get(k).copied()
    }

    /// GFLOP of the matrix products behind measure `k` (a lower bound of the work; `None` where
    /// not counted).
    fn gflop(&self, k: &str) -> Option<f64> {
        let (what, len) = k.split_once('.').unwrap_or((k, ""));
        let g = |name: &str| self.get(&format!("gflop_{name}.{len}"));
        match what {
            "text" | "text_released" => self.get("gflop_text"),
            "text_full" => self.get("gflop_text_full"),
            "dit" => g("dit"),
            "dec_chunked" => g("dec_chunked"),
            "dec_unchunked" => g("dec"),
            "steps8" => g("dit").map(|d| 8.0 * d),
            // What generate() runs: the text encoder, 8 forwards, the configured decode.
            "generate" | "process" => {
                Some(self.get("gflop_text").unwrap_or(0.0) + 8.0 * g("dit")? + g("dec_default")?)
            }
            _ => None,
        }
    }
}

/// `RESULT k=v ...` lines of a child's stdout.
fn results(stdout: &str) -> Vec<(String, f64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| v.parse::<f64>().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Run `cmd`, returning (stdout, wall seconds from spawn to exit).
fn run_child(cmd: &mut Command, what: &str) -> Result<(String, f64), String> {
    let t0 = Instant::now();
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    let wall = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), wall))
}

fn key(secs: f64) -> String {
    format!("{secs}s")
}

// ---- official side ----------------------------------------------------------------------------

struct Reference {
    python: PathBuf,
    sa3_src: PathBuf,
    bench_py: PathBuf,
}

impl Reference {
    fn new(dir: &Path, harness: &Path) -> Result<Reference, String> {
        let r = Reference {
            python: dir.join("venv/bin/python"),
            sa3_src: dir.join("stable-audio-3"),
            bench_py: harness.join("bench.py"),
        };
        for (p, what) in [
            (&r.python, "the harness venv"),
            (&r.sa3_src, "the official source tree"),
            (&r.bench_py, "the harness bench.py"),
        ] {
            if !p.exists() {
                return Err(format!(
                    "{} not found ({what}; see the ref-harness README)",
                    p.display()
                ));
            }
        }
        Ok(r)
    }

    fn command(&self, model: &Path, threads: usize, out: &Path) -> Command {
        let mut c = Command::new(&self.python);
        c.arg(&self.bench_py)
            .arg("--model-dir")
            .arg(model)
            .arg("--threads")
            .arg(threads.to_string())
            .arg("--out")
            .arg(out)
            .env("SA3_SRC", &self.sa3_src)
            .env("PYTHONWARNINGS", "ignore");
        c
    }

    fn components(&self, o: &Opts, model: &Path, m: &mut Mins) -> Result<(), String> {
        let out = std::env::temp_dir().join(format!("aria-official-{}.json", std::process::id()));
        let mut c = self.command(model, o.threads, &out);
        c.args(["--mode", "components", "--reps", &o.reps.to_string()])
            .arg("--durations")
            .args(o.seconds.iter().map(|s| s.to_string()));
        run_child(&mut c, "official components")?;
        let v = read_json(&out)?;
        let _ = std::fs::remove_file(&out);
        let min_wall = |x: &serde_json::Value| x["min_wall_s"].as_f64();
        if let Some(s) = min_wall(&v["load"]) {
            m.add("load", s);
        }
        let comp = &v["components"];
        if let Some(s) = min_wall(&comp["text_encode"]) {
            m.add("text", s);
        }
        for &secs in &o.seconds {
            // bench.py names durations as Python prints them (10 for 10.0)
            let d = if secs.fract() == 0.0 {
                format!("{}s", secs as i64)
            } else {
                format!("{secs}s")
            };
            let k = key(secs);
            for (src, dst) in [
                ("dit_forward_", "dit"),
                ("sampling_8_steps_", "steps8"),
                ("same_decode_", "dec_chunked"),
                ("same_decode_unchunked_", "dec_unchunked"),
            ] {
                if let Some(s) = min_wall(&comp[format!("{src}{d}")]) {
                    m.add(format!("{dst}.{k}"), s);
                }
            }
        }
        Ok(())
    }

    fn e2e(&self, o: &Opts, model: &Path, secs: f64, m: &mut Mins) -> Result<(), String> {
        let out = std::env::temp_dir().join(format!("aria-official-{}.json", std::process::id()));
        let mut c = self.command(model, o.threads, &out);
        c.args(["--mode", "e2e", "--duration", &secs.to_string()]);
        let (_, wall) = run_child(&mut c, "official e2e")?;
        let v = read_json(&out)?;
        let _ = std::fs::remove_file(&out);
        let k = key(secs);
        m.add(format!("process.{k}"), wall);
        if let Some(s) = v["e2e"]["generate"]["min_wall_s"].as_f64() {
            m.add(format!("generate.{k}"), s);
        }
        // bench.py's ru_maxrss of the whole process, in GiB.
        if let Some(g) = v["mem_end"]["rss_peak_so_far_gib"].as_f64() {
            m.add(format!("rss.{k}"), g * f64::from(1u32 << 30));
        }
        Ok(())
    }
}

fn read_json(p: &Path) -> Result<serde_json::Value, String> {
    let s = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&s).map_err(|e| format!("{}: {e}", p.display()))
}

// ---- aria side --------------------------------------------------------------------------------

fn aria_components(o: &Opts, model: &Path, precision: &str, m: &mut Mins) -> Result<(), String> {
    let exe = crate::self_exe().map_err(|e| e.to_string())?;
    let secs: Vec<String> = o.seconds.iter().map(|s| s.to_string()).collect();
    let mut c = Command::new(exe);
    c.args(["bench", "official", "--aria-child"])
        .arg(model)
        .arg(secs.join(","))
        .arg(o.reps.to_string())
        .env("RAYON_NUM_THREADS", o.threads.to_string())
        .env("ARIA_BENCH_PRECISION", precision);
    let (out, _) = run_child(&mut c, "aria components")?;
    for (k, v) in results(&out) {
        if k == "peak" {
            // The largest of the rounds' probes (a loaded machine only lowers it).
            m.peak = m.peak.max(v);
        } else {
            m.add(k, v);
        }
    }
    Ok(())
}

/// Where an aria e2e child of `precision` and `seed` keeps its final latents.
fn latents_file(precision: &str, seed: u64) -> PathBuf {
    std::env::temp_dir().join(format!(
        "aria-official-{}-{precision}-seed{seed}.f32",
        std::process::id()
    ))
}

/// One aria e2e child: `generate()` of `secs` at `precision` with noise seed `seed`; the final
/// latents are kept in [`latents_file`] when `keep` is set.
fn aria_e2e(
    o: &Opts,
    model: &Path,
    (secs, seed, keep): (f64, u64, bool),
    precision: &str,
    m: &mut Mins,
) -> Result<(), String> {
    let exe = crate::self_exe().map_err(|e| e.to_string())?;
    let mut c = Command::new(exe);
    c.args(["bench", "e2e", "--child"])
        .arg(model)
        .arg(secs.to_string())
        .arg("8")
        .env("RAYON_NUM_THREADS", o.threads.to_string())
        .env("ARIA_BENCH_PRECISION", precision)
        .env("ARIA_BENCH_SEED", seed.to_string());
    if keep {
        c.env("ARIA_BENCH_LATENTS", latents_file(precision, seed));
    }
    let (out, wall) = run_child(&mut c, "aria e2e")?;
    let r: BTreeMap<String, f64> = results(&out).into_iter().collect();
    let k = key(secs);
    m.add(format!("process.{k}"), wall);
    if let Some(&rss) = r.get("rss") {
        m.add(format!("rss.{k}"), rss);
    }
    if let (Some(total), Some(ready)) = (r.get("total"), r.get("ready")) {
        m.add(format!("generate.{k}"), total - ready);
    }
    if let Some(step) = r.get("step") {
        m.add(format!("steps8.{k}"), 8.0 * step);
    }
    Ok(())
}

/// Deterministic values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> Result<T, String>) -> Result<f64, String> {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The aria components child: the measures of `bench.py --mode components`, printed as
/// `RESULT key=seconds` lines.
fn child(model: &Path, seconds: &str, reps: usize) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let t0 = Instant::now();
    let files =
        resolve_model(&model.display().to_string(), &SearchPaths::default()).map_err(|x| e(&x))?;
    let (precision, w8a8) = crate::bench_e2e::precision_from_env()?;
    let opts = LoadOptions {
        precision,
        w8a8,
        ..Default::default()
    };
    let pipe = Pipeline::load(&files, &opts).map_err(|x| e(&x))?;
    println!("RESULT load={:.4}", t0.elapsed().as_secs_f64());
    let text = pipe.text();
    text.encode_prompts(&[PROMPT]).map_err(|x| e(&x))?; // first call, as bench.py discards it
    let t_text = best_of(reps, || text.encode_prompts(&[PROMPT]).map_err(|x| e(&x)))?;
    println!("RESULT text={t_text:.4}");
    // The replay of the reference's bf16 arithmetic (`--text-precision bf16`), for comparison.
    let mut replay = text.clone();
    replay
        .prompt_mut()
        .encoder_mut()
        .set_precision(aria::pipeline::Precision::Bf16);
    replay.encode_prompts(&[PROMPT]).map_err(|x| e(&x))?;
    let t_replay = best_of(reps, || replay.encode_prompts(&[PROMPT]).map_err(|x| e(&x)))?;
    println!("RESULT text_replay={t_replay:.4}");
    // The other paths that run natively here: f32 arithmetic, bf16 products (on the AMX unit
    // where the CPU has one, else `vdpbf16ps`; not timed where they would only be emulated:
    // tens of times slower, and never chosen by default there).
    use aria::pipeline::Precision as P;
    let default = text.prompt().encoder().precision();
    for (alt, tag, runs) in [
        (P::F32, "f32", true),
        (
            P::Bf16Dot,
            "bf16dot",
            aria_core::nn::Bf16DotWeight::native() || aria_core::nn::Bf16DotWeight::amx(),
        ),
    ] {
        if !runs || alt == default {
            continue;
        }
        let mut other = text.clone();
        other.prompt_mut().encoder_mut().set_precision(alt);
        other.encode_prompts(&[PROMPT]).map_err(|x| e(&x))?;
        let t_other = best_of(reps, || other.encode_prompts(&[PROMPT]).map_err(|x| e(&x)))?;
        println!("RESULT text_{tag}={t_other:.4}");
    }
    let tag = match default {
        P::F32 => "f32",
        P::Bf16Dot if aria_core::nn::Bf16DotWeight::amx() => "bf16-amx",
        P::Bf16Dot => "bf16-dot",
        P::Bf16 => "bf16",
    };
    println!("RESULT text_default_{tag}=1");
    // What a request pays on top when the pages (and packed matrices) were released after the
    // previous one, as generate() does by default: the encode with its packing.
    let t_cold = best_of(reps, || {
        text.prompt().encoder().release_pages().map_err(|x| e(&x))?;
        text.encode_prompts(&[PROMPT]).map_err(|x| e(&x))
    })?;
    println!("RESULT text_released={t_cold:.4}");
    let (emb, _) = text.encode_prompts(&[PROMPT]).map_err(|x| e(&x))?;
    // The encoder over every position, as the official code runs it (the conditioner stops at
    // the last real token, rounded up to 32 positions, where the pad rows are replaced).
    let prompt = text.prompt();
    let tokens = prompt.tokenize(&[PROMPT]).map_err(|x| e(&x))?;
    let (ids, m) = tokens
        .to_device(prompt.encoder().device())
        .map_err(|x| e(&x))?;
    let t_full = best_of(reps, || {
        prompt.encoder().forward(&ids, &m).map_err(|x| e(&x))?;
        Ok(())
    })?;
    println!("RESULT text_full={t_full:.4}");
    println!(
        "RESULT text_positions={} text_len={}",
        prompt.rows_needed(&tokens),
        tokens.len
    );
    // Work of the f32 paths, for the ceiling column (a bf16 default is not bound by the f32 peak).
    if prompt.encoder().precision() == aria::pipeline::Precision::F32 {
        let enc = prompt.encoder();
        let gf = enc.flops(1, prompt.rows_needed(&tokens)) / 1e9;
        println!("RESULT gflop_text={gf:.4}");
        println!(
            "RESULT gflop_text_full={:.4}",
            enc.flops(1, tokens.len) / 1e9
        );
    }
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let peak = crate::bench_core::best_peak_gflops(threads, 10).unwrap_or(f64::NAN);
    println!("RESULT peak={peak:.2}");
    let n_cond = emb.shape().get(1).copied().unwrap_or(0) + 1;
    let cond_dim = emb.shape().last().copied().unwrap_or(0);
    let channels = pipe.config().model.io_channels;
    for s in seconds.split(',') {
        let secs: f64 = s.parse().map_err(|_| format!("bad seconds `{s}`"))?;
        let k = key(secs);
        let len = pipe.geometry().lengths(secs, HEADROOM_S);
        let t = len.latents;
        let tensor = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(v, shape).map_err(|x| e(&x));
        let x = tensor(random(channels * t, 1), &[1, channels, t])?;
        let time = tensor(vec![0.9], &[1])?;
        let cross = tensor(random(n_cond * cond_dim, 2), &[1, n_cond, cond_dim])?;
        let global = tensor(random(cond_dim, 3), &[1, cond_dim])?;
        let local = tensor(vec![0.0; (channels + 1) * t], &[1, channels + 1, t])?;
        let mask: Vec<f32> = (0..t)
            .map(|i| if i < len.valid { 1.0 } else { 0.0 })
            .collect();
        let mask = tensor(mask, &[1, t])?;
        let dit = pipe.dit();
        let fwd = best_of(reps, || {
            dit.forward(&x, &time, &cross, &global, Some(&local), Some(&mask))
                .map_err(|x| e(&x))
        })?;
        let gf = crate::bench_dit::forward_flops(dit.config(), t, n_cond) / 1e9;
        println!("RESULT dit.{k}={fwd:.4} gflop_dit.{k}={gf:.4}");
        let ae = pipe.autoencoder();
        let z = tensor(random(channels * t, 4), &[1, channels, t])?;
        let dc = best_of(reps, || ae.decode_chunked(&z, None).map_err(|x| e(&x)))?;
        let du = best_of(reps, || ae.decode(&z, None).map_err(|x| e(&x)))?;
        let gf = crate::bench_codec::decode_gflop(ae.config(), t);
        let gc = crate::bench_codec::spans_gflop(ae.config(), &ae.chunked_spans(t));
        let gd = if ae.config().chunked { gc } else { gf };
        println!(
            "RESULT dec_chunked.{k}={dc:.4} dec_unchunked.{k}={du:.4} gflop_dec.{k}={gf:.4} \
             gflop_dec_chunked.{k}={gc:.4} gflop_dec_default.{k}={gd:.4}"
        );
    }
    Ok(())
}

// ---- report -----------------------------------------------------------------------------------

fn row(label: &str, k: &str, off: Option<&Mins>, aria: &Mins) {
    row_vs(label, k, k, off, aria)
}

/// A row comparing the official measure `ko` with aria's `ka`.
fn row_vs(label: &str, ko: &str, ka: &str, off: Option<&Mins>, aria: &Mins) {
    let a = aria.get(ka);
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let gf = aria.gflop(ka);
    let peak = Some(aria.peak).filter(|p| p.is_finite() && *p > 0.0);
    let of_peak = match (gf, a, peak) {
        (Some(g), Some(a), Some(p)) if a > 0.0 => format!("{:.0} %", 100.0 * g / a / p),
        _ => "-".into(),
    };
    match off {
        Some(off) => {
            let o = off.get(ko);
            let ratio = match (o, a) {
                (Some(o), Some(a)) if a > 0.0 => format!("{:.2}x", o / a),
                _ => "-".into(),
            };
            // What official / aria would be if aria did these products at the full FMA peak.
            let ceiling = match (o, gf, peak) {
                (Some(o), Some(g), Some(p)) if g > 0.0 => format!("{:.2}x", o * p / g),
                _ => "-".into(),
            };
            println!(
                "| {label} | {} | {} | {ratio} | {} | {of_peak} | {ceiling} |",
                f(o),
                f(a),
                gf.map_or("-".to_string(), |g| format!("{g:.0}"))
            );
        }
        None => println!(
            "| {label} | {} | {} | {of_peak} |",
            f(a),
            gf.map_or("-".to_string(), |g| format!("{g:.0}"))
        ),
    }
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--aria-child") {
        let model = args.get(1).ok_or("--aria-child MODEL SECONDS REPS")?;
        let secs = args.get(2).ok_or("--aria-child: seconds")?;
        let reps = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(1);
        return child(Path::new(model), secs, reps);
    }
    let o = parse(args)?;
    println!("machine: {}", machine_line());
    let reference = match &o.ref_dir {
        Some(d) => Some(Reference::new(d, &o.harness)?),
        None => {
            println!(
                "no reference folder (--ref-dir DIR or ARIA_REF_DIR; see the ref-harness README): \
                 the official implementation is not measured"
            );
            None
        }
    };
    let model = match (&o.model, &o.ref_dir) {
        (Some(m), _) => m.clone(),
        (None, Some(r)) => r.join("sm-random"),
        (None, None) => crate::bench_e2e::default_model()?,
    };
    println!(
        "model: {} ; {} threads ; {} round(s), {} rep(s) per child; minimum of all runs",
        model.display(),
        o.threads,
        o.rounds,
        o.reps
    );
    let mut off = Mins::default();
    let mut arias: Vec<Mins> = o.precisions.iter().map(|_| Mins::default()).collect();
    for round in 0..o.rounds {
        let official_first = round % 2 == 0;
        // (official?, clip length for e2e, precision index for aria)
        let mut steps: Vec<(bool, Option<f64>, usize)> = Vec::new();
        let pair = |steps: &mut Vec<(bool, Option<f64>, usize)>, secs: Option<f64>| {
            let arias = (0..o.precisions.len()).map(|i| (false, secs, i));
            if official_first {
                steps.push((true, secs, 0));
                steps.extend(arias);
            } else {
                steps.extend(arias);
                steps.push((true, secs, 0));
            }
        };
        if o.components {
            pair(&mut steps, None);
        }
        if o.e2e {
            for &s in &o.seconds {
                pair(&mut steps, Some(s));
            }
        }
        for (is_official, secs, pi) in steps {
            let t = Instant::now();
            let p = &o.precisions[pi];
            let what = match (is_official, secs) {
                (true, None) => "official components".to_string(),
                (false, None) => format!("aria components ({p})"),
                (true, Some(s)) => format!("official e2e {s} s"),
                (false, Some(s)) => format!("aria e2e {s} s ({p})"),
            };
            match (is_official, secs, &reference) {
                (true, _, None) => continue,
                (true, None, Some(r)) => r.components(&o, &model, &mut off)?,
                (true, Some(s), Some(r)) => r.e2e(&o, &model, s, &mut off)?,
                (false, None, _) => aria_components(&o, &model, p, &mut arias[pi])?,
                (false, Some(s), _) => {
                    // The first clip length's latents feed the quality column.
                    let keep = round == 0 && Some(&s) == o.seconds.first();
                    aria_e2e(&o, &model, (s, 0, keep), p, &mut arias[pi])?
                }
            }
            eprintln!(
                "  round {}: {what} ({:.0} s)",
                round + 1,
                t.elapsed().as_secs_f64()
            );
        }
    }
    let off_ref = reference.as_ref().map(|_| &off);
    let quality = if o.e2e {
        Some(quality(&o, &model)?)
    } else {
        None
    };
    for (p, aria) in o.precisions.iter().zip(&arias) {
        println!();
        println!("### aria at --precision {p}");
        report(&o, off_ref, aria);
    }
    if let Some(q) = &quality {
        summary(&o, off_ref, &arias, q);
    }
    if reference.is_some() {
        println!(
            "(official: text encoder in its folder dtype; aria: its default text path. aria's 8 \
             steps are from generate() in the e2e child, the official ones from bench.py's sampling)"
        );
    }
    Ok(())
}

/// One table: aria's measures at one precision against the official ones.
fn report(o: &Opts, off_ref: Option<&Mins>, aria: &Mins) {
    println!();
    match off_ref {
        Some(_) => {
            println!(
                "| measure (wall s) | official | aria | official / aria | GFLOP | aria % of f32 \
                 peak | f32 ceiling |"
            );
            println!("|---|---|---|---|---|---|---|");
        }
        None => {
            println!("| measure (wall s) | aria | GFLOP | aria % of f32 peak |");
            println!("|---|---|---|---|");
        }
    }
    if o.components {
        row("load", "load", off_ref, aria);
        let default = ["f32", "bf16-dot", "bf16-amx", "bf16"]
            .into_iter()
            .find(|t| aria.get(&format!("text_default_{t}")).is_some())
            .unwrap_or("?");
        row(
            &format!("text encode (default path: aria {default})"),
            "text",
            off_ref,
            aria,
        );
        row_vs(
            "text encode (aria default, every position as the official code)",
            "text",
            "text_full",
            off_ref,
            aria,
        );
        row_vs(
            "text encode (aria: bf16 replay)",
            "text",
            "text_replay",
            off_ref,
            aria,
        );
        for (label, k) in [
            ("text encode (aria: f32)", "text_f32"),
            (
                "text encode (aria: bf16-dot, on the CPU's unit for it)",
                "text_bf16dot",
            ),
            (
                "text encode (aria default, pages released before)",
                "text_released",
            ),
        ] {
            if aria.get(k).is_some() {
                row_vs(label, "text", k, off_ref, aria);
            }
        }
    }
    for &s in &o.seconds {
        let k = key(s);
        if o.components {
            row(
                &format!("DiT forward {k}"),
                &format!("dit.{k}"),
                off_ref,
                aria,
            );
            row(
                &format!("SAME decode {k} chunked"),
                &format!("dec_chunked.{k}"),
                off_ref,
                aria,
            );
            row(
                &format!("SAME decode {k} unchunked"),
                &format!("dec_unchunked.{k}"),
                off_ref,
                aria,
            );
        }
        if o.components || o.e2e {
            row(
                &format!("8 sampler steps {k}"),
                &format!("steps8.{k}"),
                off_ref,
                aria,
            );
        }
        if o.e2e {
            row(
                &format!("generate() {k} after load"),
                &format!("generate.{k}"),
                off_ref,
                aria,
            );
            row(
                &format!("whole process {k}"),
                &format!("process.{k}"),
                off_ref,
                aria,
            );
        }
    }
    if let (Some(used), Some(len)) = (aria.get("text_positions"), aria.get("text_len")) {
        println!(
            "(aria's text encode ran {used} of the {len} positions: up to the prompt's last real \
             token, rounded up to 32, whose pad rows are replaced afterwards; the official code \
             and the \"every position\" row run all {len})"
        );
    }
    if aria.peak.is_finite() {
        println!(
            "(f32 FMA peak of {} threads: {:.1} GFLOP/s, the largest of the probes. GFLOP: aria's \
             matrix products only (text + 8 forwards + the configured decode for generate() and \
             the process), so they count low. f32 ceiling = official × \
             peak / GFLOP: the ratio an implementation doing these products at the full peak \
             would reach, the most any f32 implementation can.)",
            o.threads, aria.peak
        );
    }
}

/// The quality column: each precision's final latents (first clip length, seed 0) against f32's,
/// and the floor: f32's latents of seed 1 against seed 0 (the seed-to-seed spread).
struct Quality {
    /// `‖x − x_f32‖ / ‖x_f32‖` per precision, in `Opts::precisions` order.
    err: Vec<f64>,
    floor: f64,
}

fn read_latents(precision: &str, seed: u64) -> Result<Vec<f32>, String> {
    let p = latents_file(precision, seed);
    let b = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let _ = std::fs::remove_file(&p);
    if b.is_empty() || b.len() % 4 != 0 {
        return Err(format!(
            "{}: {} bytes is not a latent tensor",
            p.display(),
            b.len()
        ));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// `‖a − b‖ / ‖b‖`; an error on a length mismatch or a value that is not finite.
fn rel_rms(a: &[f32], b: &[f32], what: &str) -> Result<f64, String> {
    if a.len() != b.len() {
        return Err(format!(
            "{what}: {} latent values against {}",
            a.len(),
            b.len()
        ));
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*y).powi(2);
    }
    let r = (num / den.max(1e-30)).sqrt();
    if r.is_finite() {
        Ok(r)
    } else {
        Err(format!("{what}: the latents are not finite"))
    }
}

fn quality(o: &Opts, model: &Path) -> Result<Quality, String> {
    let Some(&secs) = o.seconds.first() else {
        return Err("--seconds is empty".into());
    };
    let t = Instant::now();
    let mut scratch = Mins::default();
    if !o.precisions.iter().any(|p| p == "f32") {
        aria_e2e(o, model, (secs, 0, true), "f32", &mut scratch)?;
    }
    aria_e2e(o, model, (secs, 1, true), "f32", &mut scratch)?;
    let mut lat: BTreeMap<&str, Vec<f32>> = BTreeMap::new();
    for p in o.precisions.iter().map(String::as_str).chain(["f32"]) {
        if !lat.contains_key(p) {
            lat.insert(p, read_latents(p, 0)?);
        }
    }
    let base = &lat["f32"];
    let floor = rel_rms(&read_latents("f32", 1)?, base, "f32 seed 1")?;
    let err = o
        .precisions
        .iter()
        .map(|p| rel_rms(&lat[p.as_str()], base, p))
        .collect::<Result<_, _>>()?;
    eprintln!("  quality: {:.0} s", t.elapsed().as_secs_f64());
    Ok(Quality { err, floor })
}

/// The summary: one row per precision, every figure from this run (the README's first table).
fn summary(o: &Opts, off: Option<&Mins>, arias: &[Mins], q: &Quality) {
    let gb = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2} GB", b / 1e9));
    let first = o.seconds.first().map(|&s| key(s)).unwrap_or_default();
    let mut cols: Vec<(String, String)> = vec![
        (format!("`generate()` {first}"), format!("generate.{first}")),
        (format!("whole process {first}"), format!("process.{first}")),
    ];
    for &s in o.seconds.iter().skip(1) {
        let k = key(s);
        cols.push((format!("`generate()` {k}"), format!("generate.{k}")));
    }
    println!();
    println!(
        "### summary: {}",
        if off.is_some() {
            "every precision against the official code, one run (official / aria wall time)"
        } else {
            "aria alone (no reference folder; wall time in seconds)"
        }
    );
    println!();
    let heads: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    println!(
        "| `--precision` | {} | peak RSS {first}: official / aria | final latents vs f32 |",
        heads.join(" | ")
    );
    println!("|---|{}---|---|", "---|".repeat(cols.len()));
    for ((p, aria), err) in o.precisions.iter().zip(arias).zip(&q.err) {
        let cells: Vec<String> = cols
            .iter()
            .map(|(_, k)| match (off.and_then(|m| m.get(k)), aria.get(k)) {
                (Some(of), Some(a)) if a > 0.0 => format!("{:.2}×", of / a),
                (None, Some(a)) => format!("{a:.2} s"),
                _ => "-".into(),
            })
            .collect();
        let rss_k = format!("rss.{first}");
        let quality = if p == "f32" {
            "— (the reference)".to_string()
        } else {
            format!(
                "{:.2} % ({:.3} of the seed-to-seed spread)",
                100.0 * err,
                err / q.floor.max(1e-30)
            )
        };
        println!(
            "| `{p}` | {} | {} / {} | {quality} |",
            cells.join(" | "),
            gb(off.and_then(|m| m.get(&rss_k))),
            gb(aria.get(&rss_k)),
        );
    }
    println!(
        "(ratios: minimum wall time over rounds, official / aria, above 1 aria is faster; peak \
         RSS: the smallest peak of the e2e children, ru_maxrss for the official process, VmHWM \
         for aria's; final latents: ‖x − x_f32‖ / ‖x_f32‖ at seed 0, the spread is f32 seed 1 \
         against seed 0, {:.1} %)",
        100.0 * q.floor
    );
}
