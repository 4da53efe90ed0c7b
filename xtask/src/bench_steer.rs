//! `cargo xtask bench steer`: the cost of activation steering on one DiT forward at the real
//! small-music shapes (E 1024, 20 layers, 64 memory tokens) with random weights.
//!
//! The DiT tensors of a random small-music checkpoint (`aria::synth` layout, f32, ≈1.6 GB) are
//! written to a temporary file (deleted afterwards) and memory-mapped. For each latent length
//! it times, interleaved in the same repetitions (the order rotating per repetition, so drift
//! of a shared machine hits every variant alike):
//! * the forward without a hook;
//! * with a residual `add` after the middle block (one steering, as `--steer` makes it);
//! * with a residual `project` after the middle block;
//! * with an `add` after every block (the worst case of the residual site).
//!
//! It prints the medians and the median per-repetition ratio to the plain forward, then the
//! hooks timed on their own (every call a forward makes, on a residual-shaped tensor) as a
//! share of the plain forward — the figure that stays meaningful on a busy machine, where the
//! run-to-run noise of a whole forward exceeds the hook's cost. Target: ≤ 1 % for one steering.
//!
//! Options: `--reps N` (default 7), `--threads N` (default 2), `--lengths a,b` (default 174),
//! `--preset small-music|tiny` (tiny: a seconds-long smoke run).

use std::path::{Path, PathBuf};
use std::time::Instant;

use aria::synth::{self, Preset};
use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::{threads, DType, Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};
use aria_steer::{Site, SteerOp, Steering, SteeringHook};

struct Opts {
    reps: usize,
    threads: usize,
    lengths: Vec<usize>,
    preset: Preset,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        reps: 7,
        threads: 2,
        lengths: vec![174],
        preset: Preset::SmallMusic,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--reps" => o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--threads" => o.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--lengths" => {
                o.lengths = val()?
                    .split(',')
                    .map(|s| s.parse::<usize>().map_err(|e| format!("--lengths: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--preset" => {
                let v = val()?;
                o.preset = match v.as_str() {
                    "small-music" => Preset::SmallMusic,
                    "tiny" => Preset::Tiny,
                    other => return Err(format!("--preset `{other}`: small-music or tiny")),
                }
            }
            other => {
                return Err(format!(
                    "unknown option `{other}` (--reps N, --threads N, --lengths a,b, --preset P)"
                ))
            }
        }
    }
    if o.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    Ok(o)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Deterministic values in [-1, 1).
fn rand_tensor(state: &mut u64, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            let z = aria_core::rng::splitmix64(state);
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape).map_err(|e| e.to_string())
}

/// Per steering variant: name, hook calls per forward (one per block the hook wants), and the
/// median time those calls take on a `[1, memory + t, E]` residual.
fn hook_cost(
    variants: &[(&str, Option<&dyn ActivationHook>)],
    cfg: &aria_dit::config::DitConfig,
    t: usize,
) -> Result<Vec<(String, usize, f64)>, String> {
    let mut state = 9u64;
    let n = cfg.num_memory_tokens + t;
    let h = rand_tensor(&mut state, &[1, n, cfg.embed_dim])?;
    let mut out = Vec::new();
    for (name, hook) in variants.iter().skip(1) {
        let Some(hook) = hook else { continue };
        let sites: Vec<HookContext<'_>> = (0..cfg.depth)
            .filter(|&k| hook.wants(HookSite::Residual(k)))
            .map(|k| HookContext {
                step: Some(3),
                prefix_tokens: cfg.num_memory_tokens,
                ..HookContext::new(HookSite::Residual(k))
            })
            .collect();
        let mut per = Vec::new();
        for _ in 0..31 {
            let s = Instant::now();
            for ctx in &sites {
                let y = run_hook(Some(*hook), ctx, h.clone()).map_err(|x| x.to_string())?;
                std::hint::black_box(&y);
            }
            per.push(s.elapsed().as_secs_f64());
        }
        out.push((name.to_string(), sites.len(), median(per)));
    }
    Ok(out)
}

fn unit(e: usize, seed: u64) -> Result<Vec<f32>, String> {
    let mut s = seed;
    let v = rand_tensor(&mut s, &[e])?
        .to_vec_f32()
        .map_err(|x| x.to_string())?;
    aria_steer::direction::normalize(&v, "bench direction")
        .map(|(d, _)| d)
        .map_err(|x| x.to_string())
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let config = o.preset.model_config();
    let cfg = ModelConfig::from_value(config.clone(), Path::new("<preset>"), Path::new("."))
        .map_err(|e| e.to_string())?
        .model
        .diffusion
        .config;
    let specs: Vec<_> = synth::sa3_layout(&config)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| s.name.starts_with("model.model."))
        .collect();
    let path: PathBuf = std::env::temp_dir().join(format!(
        "aria-bench-steer-{}.safetensors",
        std::process::id()
    ));
    eprintln!(
        "writing random {} DiT weights to {} ...",
        o.preset.name(),
        path.display()
    );
    let t0 = Instant::now();
    synth::write_safetensors(&path, &specs, DType::F32, 7, &mut |_| {})
        .map_err(|e| e.to_string())?;
    eprintln!("  written in {:.1} s", t0.elapsed().as_secs_f64());
    let res = bench(&o, &cfg, &path);
    let _ = std::fs::remove_file(&path);
    res
}

fn bench(o: &Opts, cfg: &aria_dit::config::DitConfig, path: &Path) -> Result<(), String> {
    let e = |x: aria_dit::DitError| x.to_string();
    let loader = WeightLoader::open_checkpoint(path).map_err(|x| x.to_string())?;
    let dit = Dit::load(cfg, &loader.pp("model.model")).map_err(e)?;
    threads::set_num_threads(o.threads).map_err(|x| x.to_string())?;
    let (width, depth) = (cfg.embed_dim, cfg.depth);
    let mid = depth / 2;
    let steer = |site: Site, op: SteerOp, seed: u64| -> Result<Steering, String> {
        Steering::new(site, op, 0.1, unit(width, seed)?, 1.0).map_err(|x| x.to_string())
    };
    let add = SteeringHook::from_steerings(vec![steer(Site::Residual(mid), SteerOp::Add, 1)?]);
    let project =
        SteeringHook::from_steerings(vec![steer(Site::Residual(mid), SteerOp::Project, 2)?]);
    let every = SteeringHook::from_steerings(
        (0..depth)
            .map(|k| steer(Site::Residual(k), SteerOp::Add, 3 + k as u64))
            .collect::<Result<_, _>>()?,
    );
    let variants: [(&str, Option<&dyn ActivationHook>); 4] = [
        ("no hook", None),
        ("residual add, block mid", Some(&add)),
        ("residual project, block mid", Some(&project)),
        ("residual add, every block", Some(&every)),
    ];
    println!(
        "DiT forward with steering hooks, {} shapes (E {width}, {depth} layers, {} memory tokens), \
         f32 weights memory-mapped, {} threads, median of {} interleaved reps; mid = block {mid}",
        o.preset.name(),
        cfg.num_memory_tokens,
        o.threads,
        o.reps
    );
    println!("| T (latents) | variant | forward (s) | ratio to no hook | overhead |");
    println!("|---|---|---|---|---|");
    let mut rng = 42u64;
    let (io, cond_dim) = (cfg.io_channels, cfg.cond_token_dim);
    let n_ctx = 64;
    let mut costs = Vec::new();
    for &t in &o.lengths {
        let x = rand_tensor(&mut rng, &[1, io, t])?;
        let c = rand_tensor(&mut rng, &[1, n_ctx, cond_dim])?;
        let g = rand_tensor(&mut rng, &[1, cfg.global_cond_dim])?;
        let l = Tensor::zeros(&[1, io + 1, t], DType::F32);
        let pm = Tensor::full(&[1, t], 1.0);
        let cond = DitConditioning {
            cross_attn_cond: &c,
            global_cond: &g,
            local_add_cond: Some(&l),
        };
        let ctx = dit.prepare(&cond, None).map_err(e)?;
        let forward = |hook: Option<&dyn ActivationHook>| -> Result<(f64, Tensor), String> {
            let opts = ForwardOptions {
                hook,
                step: Some(3),
                ..Default::default()
            };
            let s = Instant::now();
            let out = dit
                .forward_ctx(&x, &[0.9], &ctx, Some(&pm), &opts)
                .map_err(e)?;
            Ok((s.elapsed().as_secs_f64(), out.v))
        };
        // Warm-up: page in the weights; check that every hook changes the output.
        let (_, base) = forward(None)?;
        let base = base.to_vec_f32().map_err(|x| x.to_string())?;
        for (name, h) in &variants[1..] {
            let (_, y) = forward(*h)?;
            if y.to_vec_f32().map_err(|x| x.to_string())? == base {
                return Err(format!("{name}: the steering did not change the output"));
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for rep in 0..o.reps {
            for j in 0..variants.len() {
                let i = (j + rep) % variants.len();
                times[i].push(forward(variants[i].1)?.0);
            }
        }
        let plain = times[0].clone();
        for (i, (name, _)) in variants.iter().enumerate() {
            let ratio = median(times[i].iter().zip(&plain).map(|(h, p)| h / p).collect());
            println!(
                "| {t} | {name} | {:.4} | {ratio:.4} | {:+.2} % |",
                median(times[i].clone()),
                100.0 * (ratio - 1.0)
            );
        }
        costs.push((t, median(plain), hook_cost(&variants, cfg, t)?));
    }
    // The hooks timed on their own (a residual-shaped tensor, many calls): a figure that the
    // noise of a shared machine does not swamp.
    println!();
    println!("| T (latents) | variant | hook calls per forward | hook time per forward (ms) | % of the plain forward |");
    println!("|---|---|---|---|---|");
    for (t, fwd, per) in costs {
        for (name, calls, secs) in per {
            println!(
                "| {t} | {name} | {calls} | {:.3} | {:.3} % |",
                secs * 1e3,
                100.0 * secs / fwd
            );
        }
    }
    threads::set_num_threads(0).map_err(|x| x.to_string())?;
    Ok(())
}
