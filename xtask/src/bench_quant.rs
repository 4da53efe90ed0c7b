//! `cargo xtask bench quant`: quantized DiT weights on a real-shape checkpoint.
//!
//! 1. **Memory and speed** (one child process per precision, so each peak is its own): peak
//!    RSS (`VmHWM`) of a whole generation (load, pack, text, DiT steps, decode), load time
//!    (with packing), mean DiT step, decode and the whole `generate()` call, with their ratios
//!    to f32 measured in the same run.
//! 2. **Quality against the noise floor**: for each prompt × seed, the relative RMS error
//!    against f32 of one DiT velocity (σ = 1, the prompt's conditioning), of the final latents
//!    and of the decoded audio, next to the f32 seed-to-seed spread of the same quantity (same
//!    prompt, the next seed): the floor.
//! 3. **Sensitivity** (`--sensitivity`): the velocity error with only one layer group packed
//!    (the rest f32), per group and format: which layers matter.
//! 4. **Text encoder** (`--text`): T5Gemma's matrices packed as q8_0 (and W8A8): the
//!    conditioning's error against the f32 encoder and the encode time.
//!
//! 5. **CLAP** (`--clap DIR|REPO`, a CLAP checkpoint with its tokenizer): per precision, the CLAP
//!    score of each clip against its prompt, the drift (1 − cos of CLAP audio embeddings) from
//!    the f32 clip of the same prompt and seed, and the FAD between the precision's clips and
//!    f32's, each next to its floor: the same measure between f32's clips and f32 clips of other
//!    seeds (`aria_clap::eval`). Clips are brought to −14 LUFS first.
//!
//! Options: `--model DIR` (default: a random small-music checkpoint written once to the
//! system temp folder), `--seconds S` (memory runs, 10), `--steps N` (8), `--threads N` (2),
//! `--precisions LIST` (`f32,q8,q8+w8a8,q4,q4-mixed`), `--prompts N` (of 8, default 2),
//! `--seeds N` (2), `--quality-seconds S` (3), `--rounds N` (memory runs per variant, the
//! minimum kept; 1), `--no-memory`, `--no-quality`, `--sensitivity`, `--text`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioOutput, RunOptions};
use aria::quant::WeightPrecision;
use aria::synth::{self, Preset};
use aria::{GenerateRequest, LoadOptions, Pipeline, SeededNoise};
use aria_core::Tensor;
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};
use aria_quant::Format;

const PROMPTS: [&str; 8] = [
    "warm ambient pad, slow evolving",
    "fast techno beat with a deep kick",
    "solo acoustic guitar, fingerpicked folk",
    "orchestral strings swelling, cinematic",
    "lo-fi hip hop with vinyl crackle",
    "jazz trio, brushed drums and upright bass",
    "distorted electric guitar riff, heavy rock",
    "gentle piano melody in a small room",
];

struct Opts {
    model: Option<PathBuf>,
    seconds: f64,
    steps: usize,
    threads: usize,
    variants: Vec<(WeightPrecision, bool)>,
    prompts: usize,
    seeds: usize,
    quality_seconds: f64,
    memory: bool,
    quality: bool,
    sensitivity: bool,
    rounds: usize,
    text: bool,
    /// A CLAP checkpoint (`--clap DIR|REPO`): the quality table gains the CLAP measures.
    clap: Option<String>,
}

fn variant(s: &str) -> Result<(WeightPrecision, bool), String> {
    let (p, w) = match s.strip_suffix("+w8a8") {
        Some(p) => (p, true),
        None => (s, false),
    };
    Ok((WeightPrecision::parse(p).map_err(|e| e.to_string())?, w))
}

fn vname(v: (WeightPrecision, bool)) -> String {
    format!("{}{}", v.0, if v.1 { "+w8a8" } else { "" })
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        model: None,
        seconds: 10.0,
        steps: 8,
        threads: 2,
        variants: ["f32", "q8", "q8+w8a8", "q4", "q4-mixed"]
            .iter()
            .map(|s| variant(s))
            .collect::<Result<_, _>>()?,
        prompts: 2,
        seeds: 2,
        quality_seconds: 3.0,
        memory: true,
        quality: true,
        sensitivity: false,
        rounds: 1,
        text: false,
        clap: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |n: &str| it.next().cloned().ok_or(format!("{n} needs a value"));
        let num = |v: String, n: &str| v.parse::<f64>().map_err(|_| format!("{n}: a number"));
        match a.as_str() {
            "--model" => o.model = Some(PathBuf::from(val(a)?)),
            "--seconds" => o.seconds = num(val(a)?, a)?,
            "--steps" => o.steps = num(val(a)?, a)? as usize,
            "--threads" => o.threads = num(val(a)?, a)? as usize,
            "--prompts" => o.prompts = (num(val(a)?, a)? as usize).clamp(1, PROMPTS.len()),
            "--seeds" => o.seeds = (num(val(a)?, a)? as usize).max(2),
            "--quality-seconds" => o.quality_seconds = num(val(a)?, a)?,
            "--precisions" => {
                o.variants = val(a)?.split(',').map(variant).collect::<Result<_, _>>()?
            }
            "--rounds" => o.rounds = (num(val(a)?, a)? as usize).max(1),
            "--no-memory" => o.memory = false,
            "--no-quality" => o.quality = false,
            "--sensitivity" => o.sensitivity = true,
            "--text" => o.text = true,
            "--clap" => o.clap = Some(val(a)?),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

fn vm_hwm() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

fn default_model() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join("aria-bench-small-music-f32");
    if aria::discover::missing_files(&dir).is_empty() {
        return Ok(dir);
    }
    eprintln!(
        "writing a random small-music checkpoint (f32) to {} ...",
        dir.display()
    );
    synth::write_model(
        &dir,
        Preset::SmallMusic,
        aria_core::DType::F32,
        0,
        &mut |_, _| {},
    )
    .map_err(e)?;
    Ok(dir)
}

fn load(model: &Path, v: (WeightPrecision, bool)) -> Result<Pipeline, String> {
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).map_err(e)?;
    let opts = LoadOptions {
        precision: Some(v.0),
        w8a8: v.1,
        ..Default::default()
    };
    Pipeline::load(&files, &opts).map_err(e)
}

/// The child: one whole generation at one precision, printed as `RESULT key=value ...`.
fn child(args: &[String]) -> Result<(), String> {
    let get = |i: usize| {
        args.get(i)
            .cloned()
            .ok_or("--child MODEL VARIANT SECONDS STEPS THREADS")
    };
    let model = PathBuf::from(get(0)?);
    let v = variant(&get(1)?)?;
    let secs: f64 = get(2)?.parse().map_err(e)?;
    let steps: usize = get(3)?.parse().map_err(e)?;
    let threads: usize = get(4)?.parse().map_err(e)?;
    aria_core::threads::set_num_threads(threads).map_err(e)?;
    let t0 = Instant::now();
    let pipe = load(&model, v)?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut req = GenerateRequest::new(PROMPTS[0], secs);
    req.steps = steps;
    let t_gen = Instant::now();
    let out = pipe
        .generate(&req, &mut SeededNoise::new(0), &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .map_err(e)?;
    let gen_s = t_gen.elapsed().as_secs_f64();
    let t = &out.timings;
    let step = t.steps.iter().map(|d| d.as_secs_f64()).sum::<f64>() / t.steps.len().max(1) as f64;
    println!(
        "RESULT load={load_s:.3} generate={gen_s:.3} text={:.3} step={step:.4} decode={:.3} rss={} held={} latents={}",
        t.text.as_secs_f64(),
        t.decode.as_secs_f64(),
        vm_hwm().unwrap_or(0),
        pipe.quant_report().held_bytes,
        out.lengths.latents
    );
    Ok(())
}

fn memory(o: &Opts, model: &Path) -> Result<(), String> {
    let exe = crate::self_exe().map_err(e)?;
    println!(
        "\n## memory and speed: `aria generate` equivalent, {} s, {} steps, {} threads, one process each, {} round(s)",
        o.seconds, o.steps, o.threads, o.rounds
    );
    // Per variant, the minimum of each measure over the rounds (the peak RSS: the maximum).
    // The variants run in turn, in reverse order every other round, so that a drift of the
    // machine's load hits them alike.
    let mut best: Vec<Option<BTreeMap<String, f64>>> = vec![None; o.variants.len()];
    let mut failed: Vec<Option<String>> = vec![None; o.variants.len()];
    for round in 0..o.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..o.variants.len()).collect()
        } else {
            (0..o.variants.len()).rev().collect()
        };
        for i in order {
            let v = o.variants[i];
            let out = Command::new(&exe)
                .args([
                    "bench",
                    "quant",
                    "--child",
                    &model.display().to_string(),
                    &vname(v),
                ])
                .args([
                    o.seconds.to_string(),
                    o.steps.to_string(),
                    o.threads.to_string(),
                ])
                .output()
                .map_err(e)?;
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(line) = text.lines().find(|l| l.starts_with("RESULT")) else {
                failed[i] = Some(String::from_utf8_lossy(&out.stderr).trim().to_string());
                continue;
            };
            let m: BTreeMap<String, f64> = line
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, x)| x.parse().ok().map(|x| (k.to_string(), x)))
                .collect();
            let slot = best[i].get_or_insert_with(BTreeMap::new);
            for (k, x) in m {
                let e = slot.entry(k.clone()).or_insert(x);
                *e = if k == "rss" || k == "held" {
                    e.max(x)
                } else {
                    e.min(x)
                };
            }
            eprintln!("round {round}: {} {line}", vname(v));
        }
    }
    println!("| precision | DiT linears (GB) | peak RSS (GB) | load+pack (s) | DiT step (s) | step / f32 | decode (s) | generate() (s) | generate / f32 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let f32_of = |k: &str| {
        o.variants
            .iter()
            .position(|v| *v == (WeightPrecision::F32, false))
            .and_then(|i| best[i].as_ref())
            .and_then(|m| m.get(k).copied())
    };
    let (f32_step, f32_gen) = (f32_of("step"), f32_of("generate"));
    for (i, &v) in o.variants.iter().enumerate() {
        let Some(m) = &best[i] else {
            println!(
                "| {} | failed: {} |",
                vname(v),
                failed[i].as_deref().unwrap_or("no result")
            );
            continue;
        };
        let g = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
        let ratio =
            |base: Option<f64>, k: &str| base.map_or("n/a".into(), |f| format!("{:.2}", g(k) / f));
        println!(
            "| {} | {:.3} | {:.3} | {:.2} | {:.3} | {} | {:.2} | {:.2} | {} |",
            vname(v),
            g("held") / 1e9,
            g("rss") / 1e9,
            g("load"),
            g("step"),
            ratio(f32_step, "step"),
            g("decode"),
            g("generate"),
            ratio(f32_gen, "generate")
        );
    }
    Ok(())
}

/// `‖a − b‖ / ‖b‖`.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// A fixed standard-normal tensor (Box–Muller over a 64-bit LCG).
fn normal(seed: u64, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut u = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let v: Vec<f32> = (0..n)
        .map(|_| ((-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos()) as f32)
        .collect();
    Tensor::from_vec(v, shape).map_err(e)
}

/// The conditioning of each prompt and the noise of each seed for one velocity.
struct Inputs {
    conds: Vec<aria_dit::conditioner::Conditioning>,
    noise: Vec<Tensor>,
}

fn inputs(pipe: &Pipeline, o: &Opts) -> Result<Inputs, String> {
    let lat = pipe.lengths(o.quality_seconds, 1.0).latents;
    let conds = PROMPTS[..o.prompts]
        .iter()
        .map(|p| {
            pipe.text()
                .conditioning(&[p], &[o.quality_seconds as f32])
                .map_err(e)
        })
        .collect::<Result<_, _>>()?;
    let noise = (0..o.seeds)
        .map(|s| normal(s as u64 + 1, &[1, pipe.latent_channels(), lat]))
        .collect::<Result<_, _>>()?;
    Ok(Inputs { conds, noise })
}

fn velocity(dit: &Dit, inp: &Inputs, p: usize, s: usize) -> Result<Vec<f32>, String> {
    let c = &inp.conds[p];
    let cond = DitConditioning {
        cross_attn_cond: &c.cross_attn_cond,
        global_cond: &c.global_cond,
        local_add_cond: None,
    };
    let ctx = dit.prepare(&cond, None).map_err(e)?;
    let out = dit
        .forward_ctx(
            &inp.noise[s],
            &[1.0],
            &ctx,
            None,
            &ForwardOptions::default(),
        )
        .map_err(e)?;
    out.v.to_vec_f32().map_err(e)
}

/// Velocity, final latents and audio of each (prompt, seed).
type Outputs = Vec<[Vec<f32>; 3]>;

fn outputs(pipe: &Pipeline, inp: &Inputs, o: &Opts, decoder: &Pipeline) -> Result<Outputs, String> {
    let mut v = Vec::new();
    for (p, prompt) in PROMPTS.iter().enumerate().take(o.prompts) {
        for s in 0..o.seeds {
            let vel = velocity(pipe.dit(), inp, p, s)?;
            let mut req = GenerateRequest::new(*prompt, o.quality_seconds);
            req.steps = o.steps;
            req.duration_padding_sec = 1.0;
            let opts = RunOptions {
                audio: AudioOutput::Skip,
                ..Default::default()
            };
            let out = pipe
                .run(&req, &mut SeededNoise::new(s as u64 + 1), opts)
                .map_err(e)?;
            let audio = decoder
                .decode_latents(&out.latents, &mut SeededNoise::new(7))
                .map_err(e)?;
            v.push([
                vel,
                out.latents.to_vec_f32().map_err(e)?,
                audio.to_vec_f32().map_err(e)?,
            ]);
        }
    }
    Ok(v)
}

fn stats(v: &[f64]) -> String {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = v.iter().copied().fold(0.0, f64::max);
    format!("{:.2} % (max {:.2} %)", 100.0 * mean, 100.0 * max)
}

fn quality(o: &Opts, model: &Path) -> Result<(), String> {
    aria_core::threads::set_num_threads(o.threads).map_err(e)?;
    let t0 = Instant::now();
    let f32p = load(model, (WeightPrecision::F32, false))?;
    let inp = inputs(&f32p, o)?;
    let reference = outputs(&f32p, &inp, o, &f32p)?;
    // The floor: the same prompt with the next seed (seed-to-seed spread of f32).
    let mut clips: Vec<(String, Vec<Vec<f32>>)> = vec![(
        "f32".into(),
        reference.iter().map(|r| r[2].clone()).collect(),
    )];
    let mut floor = [Vec::new(), Vec::new(), Vec::new()];
    for p in 0..o.prompts {
        for s in 0..o.seeds {
            let (a, b) = (
                &reference[p * o.seeds + s],
                &reference[p * o.seeds + (s + 1) % o.seeds],
            );
            for k in 0..3 {
                floor[k].push(rel_rms(&b[k], &a[k]));
            }
        }
    }
    println!(
        "\n## quality: rel-RMS vs f32, {} prompts x {} seeds, {} s clips, {} steps (floor: f32, same prompt, next seed)",
        o.prompts, o.seeds, o.quality_seconds, o.steps
    );
    println!("| precision | DiT velocity | final latents | audio | latents / floor |");
    println!("|---|---|---|---|---|");
    let fmean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "| f32 seed-to-seed (floor) | {} | {} | {} | 1 |",
        stats(&floor[0]),
        stats(&floor[1]),
        stats(&floor[2])
    );
    for &v in o
        .variants
        .iter()
        .filter(|v| v.0 != WeightPrecision::F32 || v.1)
    {
        let q = load(model, v)?;
        let got = outputs(&q, &inp, o, &f32p)?;
        clips.push((vname(v), got.iter().map(|g| g[2].clone()).collect()));
        let mut err = [Vec::new(), Vec::new(), Vec::new()];
        for (g, r) in got.iter().zip(&reference) {
            for k in 0..3 {
                err[k].push(rel_rms(&g[k], &r[k]));
            }
        }
        println!(
            "| {} | {} | {} | {} | {:.3} |",
            vname(v),
            stats(&err[0]),
            stats(&err[1]),
            stats(&err[2]),
            fmean(&err[1]) / fmean(&floor[1])
        );
    }
    eprintln!("quality: {:.0} s", t0.elapsed().as_secs_f64());
    if let Some(c) = &o.clap {
        crate::quant_clap::report(
            c,
            &f32p,
            o.prompts,
            o.seeds,
            o.quality_seconds,
            o.steps,
            &PROMPTS,
            &clips,
        )?;
    }
    Ok(())
}

/// Layer groups of the DiT, by substring of the checkpoint key.
const GROUPS: [(&str, &[&str]); 7] = [
    ("self-attn qkv", &["self_attn.to_qkv"]),
    ("self-attn out", &["self_attn.to_out"]),
    ("cross-attn q", &["cross_attn.to_q"]),
    ("cross-attn out", &["cross_attn.to_out"]),
    ("ffn in (ff.ff.0)", &["ff.ff.0"]),
    ("ffn out (ff.ff.2)", &["ff.ff.2"]),
    ("embeddings, conditioning, in/out", &[]),
];

fn in_group(key: &str, g: &[&str]) -> bool {
    if g.is_empty() {
        let layer = GROUPS
            .iter()
            .flat_map(|(_, k)| k.iter())
            .any(|k| key.contains(k));
        !layer && !key.contains("cross_attn.to_kv")
    } else {
        g.iter().any(|k| key.contains(k))
    }
}

fn sensitivity(o: &Opts, model: &Path) -> Result<(), String> {
    aria_core::threads::set_num_threads(o.threads).map_err(e)?;
    let f32p = load(model, (WeightPrecision::F32, false))?;
    let inp = inputs(&f32p, o)?;
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).map_err(e)?;
    let weights = aria_core::WeightLoader::open_checkpoint(&files.weights).map_err(e)?;
    let cfg = &f32p.config().model.diffusion.config;
    let mut refs = Vec::new();
    for p in 0..o.prompts {
        refs.push(velocity(f32p.dit(), &inp, p, 0)?);
    }
    println!(
        "\n## sensitivity: DiT velocity rel-RMS with one layer group packed (rest f32), {} prompts, seed 1",
        o.prompts
    );
    println!("| group | bytes f32 (MB) | q8_0 | q6_k | q4_k |");
    println!("|---|---|---|---|---|");
    for (name, g) in GROUPS {
        let mut cells = Vec::new();
        let mut bytes = 0usize;
        for f in [Format::Q8_0, Format::Q6K, Format::Q4K] {
            let mut dit = Dit::load(cfg, &weights.pp("model.model")).map_err(e)?;
            let choose = |k: &str, s: [usize; 2]| {
                let fits = f == Format::Q8_0 || s[1].is_multiple_of(Format::Q4K.block_elems());
                (in_group(k, g) && fits).then_some(f)
            };
            aria::quant::pack_linears(&mut dit, &weights, &choose, false).map_err(e)?;
            bytes = dit
                .linears()
                .iter()
                .filter(|l| in_group(&format!("{}.weight", l.name()), g))
                .map(|l| l.in_dim() * l.out_dim() * 4)
                .sum::<usize>();
            let errs: Vec<f64> = (0..o.prompts)
                .map(|p| velocity(&dit, &inp, p, 0).map(|v| rel_rms(&v, &refs[p])))
                .collect::<Result<_, _>>()?;
            cells.push(format!(
                "{:.2} %",
                100.0 * errs.iter().sum::<f64>() / errs.len() as f64
            ));
        }
        println!(
            "| {name} | {:.0} | {} |",
            bytes as f64 / 1e6,
            cells.join(" | ")
        );
    }
    Ok(())
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let model = match &o.model {
        Some(m) => m.clone(),
        None => default_model()?,
    };
    println!("model: {}", model.display());
    if o.memory {
        memory(&o, &model)?;
    }
    if o.quality {
        quality(&o, &model)?;
    }
    if o.sensitivity {
        sensitivity(&o, &model)?;
    }
    if o.text {
        text(&o, &model)?;
    }
    Ok(())
}

/// The T5Gemma encoder packed as q8_0 (`LoadOptions::quantize_text`), plain and W8A8: the
/// conditioning's relative error against f32 over the prompts and the encode time, alternating
/// f32 and packed encoders over 3 rounds (minimum kept).
fn text(o: &Opts, model: &Path) -> Result<(), String> {
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).map_err(e)?;
    aria_core::threads::set_num_threads(o.threads).map_err(e)?;
    let pipe = |quantize_text: bool, w8a8: bool| {
        let opts = LoadOptions {
            quantize_text,
            w8a8,
            precision: w8a8.then_some(WeightPrecision::Q8),
            ..Default::default()
        };
        Pipeline::load(&files, &opts).map_err(e)
    };
    let prompts: Vec<&str> = PROMPTS[..o.prompts].to_vec();
    let variants = [
        ("f32 (bf16 weights)", pipe(false, false)?),
        ("q8", pipe(true, false)?),
        ("q8+w8a8", pipe(true, true)?),
    ];
    let mut best = [f64::INFINITY; 3];
    let mut outs: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 3];
    for round in 0..3 {
        for (i, (_, p)) in variants.iter().enumerate() {
            let mut embs = Vec::new();
            let t0 = Instant::now();
            for q in &prompts {
                let (emb, _) = p.text().encode_prompts(&[q]).map_err(e)?;
                embs.push(emb.to_vec_f32().map_err(e)?);
            }
            best[i] = best[i].min(t0.elapsed().as_secs_f64());
            if round == 0 {
                outs[i] = embs;
            }
        }
    }
    println!(
        "\n## text encoder: {} prompts, {} threads (time: all prompts, minimum of 3 rounds)",
        prompts.len(),
        o.threads
    );
    println!(
        "| text encoder | conditioning rel-RMS vs f32 (mean / max) | encode (s) | time / f32 |"
    );
    println!("|---|---|---|---|");
    for (i, (name, _)) in variants.iter().enumerate() {
        let errs: Vec<f64> = outs[i]
            .iter()
            .zip(&outs[0])
            .map(|(a, b)| rel_rms(a, b))
            .collect();
        let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
        let max = errs.iter().copied().fold(0.0, f64::max);
        println!(
            "| {name} | {:.2e} / {:.2e} | {:.3} | {:.2} |",
            mean,
            max,
            best[i],
            best[i] / best[0]
        );
    }
    Ok(())
}
