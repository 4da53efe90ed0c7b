//! `cargo xtask bench dit`: one DiT forward at the real small-music shapes (E = 1024, 20 layers,
//! 16 heads, FF 4096, 64 memory tokens, io 256, cond 768) with random f32 weights.
//!
//! The weights are written by the bench into a temporary safetensors file (≈1.8 GB, streamed,
//! deleted afterwards) and memory-mapped, as a real checkpoint would be. For a 10 s clip
//! (T = 174) and a 30 s clip (T = 388) it reports the median time of one forward with the
//! conditioning prepared (what every sampler step costs), the one-off preparation (cross K/V,
//! local embeddings), GFLOP/s of the forward, % of the nominal FMA peak (96 GFLOP/s per core ×
//! threads, the figure the targets are stated in) and of the measured one (the widest FMA loop
//! of `bench core`: 512-bit where AVX-512F exists, so it can be far above the nominal), and the ratio of a run with a no-op activation
//! hook at every site to the run without hooks (measured interleaved in the same repetitions).
//!
//! Options: `--reps N` (default 3), `--threads N` (default 2), `--lengths a,b` (default 174,388),
//! `--prepack` (keep the step layers' weights packed between products, a full f32 copy of
//! them, instead of packing them in every product; to measure what keeping them saves).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use aria_core::hooks::NoopHook;
use aria_core::{threads, Tensor, WeightLoader};
use aria_dit::config::{DitConfig, ModelConfig};
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};

const PEAK_PER_CORE: f64 = 96.0;

struct Opts {
    reps: usize,
    threads: usize,
    lengths: Vec<usize>,
    prepack: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        reps: 3,
        threads: 2,
        lengths: vec![174, 388],
        prepack: false,
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
            "--prepack" => o.prepack = true,
            other => {
                return Err(format!(
                    "unknown option `{other}` (--reps N, --threads N, --lengths a,b, --prepack)"
                ))
            }
        }
    }
    Ok(o)
}

/// The small-music DiT configuration (the released model's preset).
fn small_music() -> Result<DitConfig, String> {
    let c = ModelConfig::preset("small-music")
        .map_err(|e| e.to_string())?
        .model
        .diffusion
        .config;
    if c.embed_dim != 1024 || c.depth != 20 || c.num_heads != 16 || c.attn_kwargs.differential {
        return Err(format!("unexpected small-music preset: {c:?}"));
    }
    Ok(c)
}

/// Every DiT tensor name, shape and the scale of its random values (0: all ones).
fn tensor_list(c: &DitConfig) -> Vec<(String, Vec<usize>, f32)> {
    let (e, io, f) = (c.embed_dim, c.io_channels, c.ff_kwargs.mult * c.embed_dim);
    let w = |_out: usize, i: usize| 1.0 / (i as f32).sqrt();
    let mut v: Vec<(String, Vec<usize>, f32)> = vec![
        ("to_timestep_embed.0.weight".into(), vec![e, 256], w(e, 256)),
        ("to_timestep_embed.0.bias".into(), vec![e], 0.02),
        ("to_timestep_embed.2.weight".into(), vec![e, e], w(e, e)),
        ("to_timestep_embed.2.bias".into(), vec![e], 0.02),
        ("to_cond_embed.0.weight".into(), vec![e, 768], w(e, 768)),
        ("to_cond_embed.2.weight".into(), vec![e, e], w(e, e)),
        ("to_global_embed.0.weight".into(), vec![e, 768], w(e, 768)),
        ("to_global_embed.2.weight".into(), vec![e, e], w(e, e)),
        ("preprocess_conv.weight".into(), vec![io, io, 1], w(io, io)),
        ("postprocess_conv.weight".into(), vec![io, io, 1], w(io, io)),
        (
            "transformer.project_in.weight".into(),
            vec![e, io],
            w(e, io),
        ),
        (
            "transformer.project_out.weight".into(),
            vec![io, e],
            w(io, e),
        ),
        (
            "transformer.memory_tokens".into(),
            vec![c.num_memory_tokens, e],
            1.0,
        ),
        (
            "transformer.global_cond_embedder.0.weight".into(),
            vec![e, e],
            w(e, e),
        ),
        (
            "transformer.global_cond_embedder.0.bias".into(),
            vec![e],
            0.02,
        ),
        (
            "transformer.global_cond_embedder.2.weight".into(),
            vec![6 * e, e],
            0.1 * w(e, e),
        ),
        (
            "transformer.global_cond_embedder.2.bias".into(),
            vec![6 * e],
            0.02,
        ),
    ];
    for l in 0..c.depth {
        let p = |s: &str| format!("transformer.layers.{l}.{s}");
        v.extend([
            (p("pre_norm.gamma"), vec![e], 0.0),
            (p("self_attn.to_qkv.weight"), vec![3 * e, e], w(e, e)),
            (p("self_attn.to_out.weight"), vec![e, e], w(e, e)),
            (p("self_attn.q_norm.gamma"), vec![64], 0.0),
            (p("self_attn.k_norm.gamma"), vec![64], 0.0),
            (p("cross_attend_norm.gamma"), vec![e], 0.0),
            (p("cross_attn.to_q.weight"), vec![e, e], w(e, e)),
            (p("cross_attn.to_kv.weight"), vec![2 * e, e], w(e, e)),
            (p("cross_attn.to_out.weight"), vec![e, e], w(e, e)),
            (p("cross_attn.q_norm.gamma"), vec![64], 0.0),
            (p("cross_attn.k_norm.gamma"), vec![64], 0.0),
            (p("ff_norm.gamma"), vec![e], 0.0),
            (p("ff.ff.0.proj.weight"), vec![2 * f, e], w(e, e)),
            (p("ff.ff.0.proj.bias"), vec![2 * f], 0.02),
            (p("ff.ff.2.weight"), vec![e, f], w(e, f)),
            (p("ff.ff.2.bias"), vec![e], 0.02),
            (p("to_scale_shift_gate"), vec![6 * e], 0.1),
            (p("to_local_embed.0.weight"), vec![e, 257], w(e, 257)),
            (p("to_local_embed.0.bias"), vec![e], 0.02),
            (p("to_local_embed.2.weight"), vec![e, e], w(e, e)),
            (p("to_local_embed.2.bias"), vec![e], 0.02),
        ]);
    }
    v
}

/// SplitMix64 uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        let z = aria_core::rng::splitmix64(&mut self.0);
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Stream a safetensors file of random f32 tensors (plus the RoPE `inv_freq`).
fn write_checkpoint(path: &Path, c: &DitConfig) -> Result<(), String> {
    let mut list = tensor_list(c);
    let inv: Vec<f32> = (0..16)
        .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / 32.0))
        .collect();
    list.push(("transformer.rotary_pos_emb.inv_freq".into(), vec![16], -1.0));
    let mut header = String::from("{");
    let mut off = 0usize;
    for (i, (name, shape, _)) in list.iter().enumerate() {
        let n: usize = shape.iter().product::<usize>() * 4;
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        if i > 0 {
            header.push(',');
        }
        header += &format!(
            "\"model.model.{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            dims.join(","),
            off + n
        );
        off += n;
    }
    header.push('}');
    while (header.len() + 8) % 8 != 0 {
        header.push(' ');
    }
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = BufWriter::with_capacity(1 << 22, File::create(path).map_err(io)?);
    f.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    f.write_all(header.as_bytes()).map_err(io)?;
    let mut rng = Rng(0x5eed);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 22);
    for (name, shape, scale) in &list {
        let n: usize = shape.iter().product();
        let is_inv = name.ends_with("inv_freq");
        for k in 0..n {
            let v = if is_inv {
                inv.get(k).copied().unwrap_or(0.0)
            } else if *scale == 0.0 {
                1.0
            } else {
                rng.next() * scale
            };
            buf.extend_from_slice(&v.to_le_bytes());
            if buf.len() >= 1 << 22 {
                f.write_all(&buf).map_err(io)?;
                buf.clear();
            }
        }
    }
    f.write_all(&buf).map_err(io)?;
    f.flush().map_err(io)?;
    // On disk before anything is timed: write-back running beside the forwards (or the peak
    // probe) would slow them.
    f.get_ref().sync_all().map_err(io)
}

/// Multiply-accumulate FLOPs (×2) of one forward with a prepared context.
pub(crate) fn forward_flops(c: &DitConfig, t: usize, n_ctx: usize) -> f64 {
    let (e, f, io) = (
        c.embed_dim as f64,
        (c.ff_kwargs.mult * c.embed_dim) as f64,
        c.io_channels as f64,
    );
    let n = (c.num_memory_tokens + t) as f64;
    let per_layer = 2.0 * n * e * (3.0 * e + e + e + e) // qkv, out, cross q, cross out
        + 4.0 * n * n * e // self-attention scores and values
        + 4.0 * n * n_ctx as f64 * e // cross-attention
        + 2.0 * n * e * 3.0 * f; // SwiGLU FF (2F in, F out)
    c.depth as f64 * per_layer + 2.0 * t as f64 * (2.0 * io * io + 2.0 * io * e)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rand_tensor(rng: &mut Rng, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|_| rng.next()).collect::<Vec<f32>>(), shape)
        .map_err(|e| e.to_string())
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let cfg = small_music()?;
    let path: PathBuf =
        std::env::temp_dir().join(format!("aria-bench-dit-{}.safetensors", std::process::id()));
    eprintln!(
        "writing random small-music DiT weights to {} ...",
        path.display()
    );
    let t0 = Instant::now();
    write_checkpoint(&path, &cfg)?;
    eprintln!("  written in {:.1} s", t0.elapsed().as_secs_f64());
    let res = bench(&o, &cfg, &path);
    let _ = std::fs::remove_file(&path);
    res
}

fn bench(o: &Opts, cfg: &DitConfig, path: &Path) -> Result<(), String> {
    let e = |x: aria_dit::DitError| x.to_string();
    let loader = WeightLoader::open_checkpoint(path).map_err(|x| x.to_string())?;
    let mut dit = Dit::load(cfg, &loader.pp("model.model")).map_err(e)?;
    dit.set_prepack(o.prepack);
    threads::set_num_threads(o.threads).map_err(|x| x.to_string())?;
    let peak = PEAK_PER_CORE * o.threads as f64;
    // The widest FMA loop this machine runs (512-bit where AVX-512F exists), best of five.
    let measured = crate::bench_core::best_peak_gflops(o.threads, 5);
    println!(
        "DiT forward, small-music shapes (E 1024, 20 layers, 16 heads, FF 4096, 64 memory tokens), f32 weights memory-mapped ({}), {} threads, median of {} reps; nominal peak {peak:.0} GFLOP/s, measured FMA peak {} GFLOP/s",
        if o.prepack {
            "step layers kept packed"
        } else {
            "packed in every product"
        },
        o.threads,
        o.reps,
        measured.map_or("n/a".to_string(), |m| format!("{m:.0}"))
    );
    println!("| T (latents) | prepare (s) | forward (s) | GFLOP | GFLOP/s | % of nominal peak | % of measured peak | no-op hook / no hook |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut rng = Rng(42);
    let n_ctx = 257;
    for &t in &o.lengths {
        let x = rand_tensor(&mut rng, &[1, 256, t])?;
        let c = rand_tensor(&mut rng, &[1, n_ctx, 768])?;
        let g = rand_tensor(&mut rng, &[1, 768])?;
        let l = Tensor::zeros(&[1, 257, t], aria_core::DType::F32);
        let pm = Tensor::full(&[1, t], 1.0);
        let cond = DitConditioning {
            cross_attn_cond: &c,
            global_cond: &g,
            local_add_cond: Some(&l),
        };
        let (mut prep, mut plain, mut hooked) = (Vec::new(), Vec::new(), Vec::new());
        let noop = NoopHook;
        let hook_opts = ForwardOptions {
            hook: Some(&noop),
            ..Default::default()
        };
        // Warm-up (page in the mapped weights).
        let ctx = dit.prepare(&cond, None).map_err(e)?;
        dit.forward_ctx(&x, &[0.9], &ctx, Some(&pm), &ForwardOptions::default())
            .map_err(e)?;
        for _ in 0..o.reps.max(1) {
            let s = Instant::now();
            let ctx = dit.prepare(&cond, None).map_err(e)?;
            prep.push(s.elapsed().as_secs_f64());
            let s = Instant::now();
            let a = dit
                .forward_ctx(&x, &[0.9], &ctx, Some(&pm), &ForwardOptions::default())
                .map_err(e)?;
            plain.push(s.elapsed().as_secs_f64());
            let s = Instant::now();
            let b = dit
                .forward_ctx(&x, &[0.9], &ctx, Some(&pm), &hook_opts)
                .map_err(e)?;
            hooked.push(s.elapsed().as_secs_f64());
            if a.v.to_vec_f32().map_err(|x| x.to_string())?
                != b.v.to_vec_f32().map_err(|x| x.to_string())?
            {
                return Err("a no-op hook changed the output".into());
            }
        }
        let (p, f, h) = (median(prep), median(plain.clone()), median(hooked.clone()));
        let ratios: Vec<f64> = hooked.iter().zip(&plain).map(|(h, p)| h / p).collect();
        let gflop = forward_flops(cfg, t, n_ctx) / 1e9;
        let rate = gflop / f;
        println!(
            "| {t} | {p:.3} | {f:.3} | {gflop:.1} | {rate:.1} | {:.1} % | {} | {:.3} |",
            100.0 * rate / peak,
            measured.map_or("n/a".to_string(), |m| format!("{:.1} %", 100.0 * rate / m)),
            median(ratios)
        );
        let _ = h;
    }
    threads::set_num_threads(0).map_err(|x| x.to_string())?;
    Ok(())
}
