//! `cargo xtask cuda-check`: the device check of the CUDA backend, one prepared run for a GPU
//! machine.
//!
//! 1. builds the `aria-cuda` tests (release);
//! 2. runs them with `ARIA_REQUIRE_CUDA=1` and `CI=true`: every kernel compiles, every op and
//!    the DiT forward and 8-step sample match the CPU path on the fixtures, recorded (graph)
//!    and op by op (a missing device or fixture fails instead of skipping);
//! 3. times the 8-step denoising loop on the device for random real-shape small-music and
//!    medium checkpoints (`synth-model`, f32, written once under `target/bench-models/`) at
//!    10, 30 and 120 s: cold (a fresh process: backend, kernels, weight upload, first clip)
//!    and warm (the same process again, median of `--reps`), with the DiT evaluation recorded
//!    as CUDA graphs (the default) and op by op (`GuidedOptions::op_by_op`);
//! 4. prints the table of what it measured (and nothing it did not).
//!
//! The timed work is the sampler loop (where the DiT runs) with random conditioning; the text
//! encoder and the decoder are not timed here.
//!
//! Options: `--skip-tests`, `--presets a,b`, `--seconds a,b`, `--reps N` (default 3).
//! `--write-ptx DIR` only compiles every kernel with NVRTC (no GPU) into a PTX cache directory;
//! a device run with `ARIA_CUDA_CACHE=DIR` then loads the PTX instead of compiling it, so a GPU
//! machine without NVRTC can run the backend.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria_core::{Device, Tensor, WeightLoader};
use aria_cuda::kernels::{PtxCache, SOURCES};
use aria_cuda::CudaBackend;
use aria_dit::config::ModelConfig;
use aria_dit::dit::{Dit, DitConditioning};
use aria_dit::sampler::{
    sample, GuidedDit, GuidedOptions, ReplayNoise, SampleOptions, SamplerKind, Schedule,
};

use crate::bench_e2e::{bench_model, process_age, seconds_list};

struct Opts {
    skip_tests: bool,
    presets: Vec<String>,
    seconds: Vec<f64>,
    reps: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        skip_tests: false,
        presets: vec!["small-music".into(), "medium".into()],
        seconds: vec![10.0, 30.0, 120.0],
        reps: 3,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |n: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{n} needs a value"))
        };
        match a.as_str() {
            "--skip-tests" => o.skip_tests = true,
            "--presets" => o.presets = val("--presets")?.split(',').map(str::to_string).collect(),
            "--seconds" => o.seconds = seconds_list(&val("--seconds")?)?,
            "--reps" => {
                o.reps = val("--reps")?
                    .parse()
                    .map_err(|_| "--reps needs an integer".to_string())?
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// Latent frames of a clip (the pipeline's rule: 6 s of headroom, 4096 samples per latent at
/// 44.1 kHz, aligned to 2).
fn latents(secs: f64) -> usize {
    let n = ((secs + 6.0) * 44_100.0) as usize;
    n.div_ceil(4096 * 2) * 2
}

struct Rng(u64);

impl Rng {
    fn tensor(&mut self, shape: &[usize], dev: &Device) -> Result<Tensor, String> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        let t = Tensor::from_vec(v, shape).map_err(|e| e.to_string())?;
        dev.put(&t).map_err(|e| e.to_string())
    }
}

/// The child: one backend, one model, the 8-step loop timed cold then warm.
fn child(dir: &Path, secs: f64, reps: usize) -> Result<(), String> {
    let s = |e: aria_core::CoreError| e.to_string();
    let be = CudaBackend::with_cache(0, true, PtxCache::from_env()).map_err(|e| e.to_string())?;
    let dev = be.device();
    let cfg = ModelConfig::from_file(dir.join("model_config.json")).map_err(|e| e.to_string())?;
    let loader = WeightLoader::open_checkpoint(dir.join("model.safetensors")).map_err(s)?;
    let c = &cfg.model.diffusion.config;
    let mut dit = Dit::load(c, &loader.pp("model.model")).map_err(|e| e.to_string())?;
    dit.to_device(&dev).map_err(|e| e.to_string())?;
    let t = latents(secs);
    let mut rng = Rng(7);
    let cross = rng.tensor(&[1, 257, c.cond_token_dim], &dev)?;
    let global = rng.tensor(&[1, c.global_cond_dim], &dev)?;
    let local = (c.local_add_cond_dim > 0)
        .then(|| rng.tensor(&[1, c.local_add_cond_dim, t], &dev))
        .transpose()?;
    let mask = dev.put(&Tensor::full(&[1, t], 1.0)).map_err(s)?;
    let cond = DitConditioning {
        cross_attn_cond: &cross,
        global_cond: &global,
        local_add_cond: local.as_ref(),
    };
    let sigmas: Vec<f32> = (0..=8).map(|i| 1.0 - i as f32 / 8.0).collect();
    let mut run = |op_by_op: bool| -> Result<f64, String> {
        let x0 = rng.tensor(&[1, c.io_channels, t], &dev)?;
        let draws = (0..8)
            .map(|_| rng.tensor(&[1, c.io_channels, t], &dev))
            .collect::<Result<Vec<_>, _>>()?;
        let t0 = Instant::now();
        let opts = GuidedOptions {
            op_by_op,
            ..Default::default()
        };
        let model =
            GuidedDit::new(&dit, &cond, None, Some(&mask), opts).map_err(|e| e.to_string())?;
        let out = sample(
            &model,
            SamplerKind::PingPong,
            x0,
            &Schedule::from_values(sigmas.clone()).map_err(|e| e.to_string())?,
            &mut ReplayNoise::new(draws),
            SampleOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        out.to_cpu().map_err(s)?;
        Ok(t0.elapsed().as_secs_f64())
    };
    let first = run(false)?;
    let cold = process_age().unwrap_or(first);
    // Recorded and op by op alternating, so that both see the same machine state.
    let (mut warm, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        warm.push(run(false)?);
        direct.push(run(true)?);
    }
    warm.sort_by(f64::total_cmp);
    direct.sort_by(f64::total_cmp);
    println!(
        "RESULT latents={t} cold={cold:.4} first={first:.4} warm={:.4} op_by_op={:.4} device={}",
        warm[warm.len() / 2],
        direct[direct.len() / 2],
        be.device_name().replace(' ', "_")
    );
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    c
}

fn write_ptx(dir: &Path) -> Result<(), String> {
    let cache = PtxCache::new(Some(dir.to_path_buf()));
    for arch in ["compute_80", "compute_86", "compute_89", "compute_90"] {
        for k in SOURCES {
            cache.get(k, arch).map_err(|e| e.to_string())?;
        }
    }
    println!("{} PTX files in {}", cache.compiled(), dir.display());
    Ok(())
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("--child") => {
            let dir = args.get(1).ok_or("--child DIR SECONDS REPS")?;
            let secs = args
                .get(2)
                .and_then(|s| s.parse().ok())
                .ok_or("--child: seconds")?;
            let reps = args
                .get(3)
                .and_then(|s| s.parse().ok())
                .ok_or("--child: reps")?;
            return child(Path::new(dir), secs, reps);
        }
        Some("--write-ptx") => return write_ptx(Path::new(args.get(1).ok_or("--write-ptx DIR")?)),
        _ => {}
    }
    let o = parse(args)?;
    println!("== 1. build");
    let ok = |c: &mut Command, what: &str| -> Result<(), String> {
        let st = c.status().map_err(|e| format!("{what}: {e}"))?;
        st.success()
            .then_some(())
            .ok_or_else(|| format!("{what} failed ({st})"))
    };
    ok(
        cargo().args(["test", "-p", "aria-cuda", "--release", "--no-run"]),
        "build",
    )?;
    if o.skip_tests {
        println!("== 2. parity: skipped (--skip-tests)");
    } else {
        println!("== 2. parity (ARIA_REQUIRE_CUDA=1)");
        ok(
            cargo()
                .args(["test", "-p", "aria-cuda", "--release", "--", "--nocapture"])
                .env("ARIA_REQUIRE_CUDA", "1")
                .env("CI", "true"),
            "parity tests",
        )?;
        println!("== 2b. the op harness on CUDA (every op × format × shape against the CPU)");
        ok(
            cargo()
                .args([
                    "test",
                    "-p",
                    "aria-testing",
                    "--release",
                    "--test",
                    "op_harness",
                    "cuda",
                    "--",
                    "--nocapture",
                ])
                .env("ARIA_REQUIRE_CUDA", "1")
                .env("CI", "true"),
            "op harness",
        )?;
    }
    println!("== 3. timing (8-step ping-pong loop on the device, batch 1)");
    let exe = crate::self_exe().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for preset in &o.presets {
        let dir = bench_model(preset)?;
        for &secs in &o.seconds {
            let out = Command::new(&exe)
                .args([
                    "cuda-check",
                    "--child",
                    &dir.display().to_string(),
                    &secs.to_string(),
                    &o.reps.to_string(),
                ])
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find(|l| l.starts_with("RESULT"))
                .ok_or_else(|| {
                    format!(
                        "{preset} {secs} s: child failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                })?;
            let kv: Vec<(String, String)> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            let get = |k: &str| {
                kv.iter()
                    .find(|(n, _)| n == k)
                    .map_or("?".to_string(), |(_, v)| v.clone())
            };
            eprintln!("  {preset} {secs} s: {line}");
            rows.push((
                preset.clone(),
                secs,
                get("latents"),
                get("cold"),
                get("first"),
                get("warm"),
                get("op_by_op"),
                get("device"),
            ));
        }
    }
    println!("== 4. table");
    if let Some(r) = rows.first() {
        println!("device: {}", r.7.replace('_', " "));
    }
    println!(
        "{:<12} {:>6} {:>6} {:>10} {:>12} {:>10} {:>14} {:>8}",
        "preset", "clip", "T", "cold (s)", "1st clip (s)", "warm (s)", "op by op (s)", "ratio"
    );
    for (preset, secs, t, cold, first, warm, direct, _) in &rows {
        let ratio = match (direct.parse::<f64>(), warm.parse::<f64>()) {
            (Ok(d), Ok(w)) if w > 0.0 => format!("{:.2}x", d / w),
            _ => "?".into(),
        };
        println!(
            "{preset:<12} {:>5}s {t:>6} {cold:>10} {first:>12} {warm:>10} {direct:>14} {ratio:>8}",
            secs
        );
    }
    println!("(warm: the DiT evaluation recorded as CUDA graphs and replayed; op by op: launched");
    println!(" kernel by kernel; ratio: op by op / recorded, medians of alternating runs)");
    println!("(cold: process start to the first clip, incl. backend, kernels and weight upload)");
    Ok(())
}
