//! `cargo xtask synth-model --preset small-music|small-sfx|medium [--dtype f32|f16] --out DIR
//! [--seed N] [--dry-run]`: write a random checkpoint with the exact tensor names and shapes of a
//! released SA3 model, in the official folder layout (see `aria::synth`). `--dry-run` lists
//! the tensors (name, shape) and the totals without writing anything.

use std::path::PathBuf;
use std::time::Instant;

use aria::synth::{self, Preset};
use aria_core::DType;

struct Opts {
    preset: Preset,
    dtype: DType,
    out: Option<PathBuf>,
    seed: u64,
    dry_run: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        preset: Preset::SmallMusic,
        dtype: DType::F32,
        out: None,
        seed: 0,
        dry_run: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--preset" => {
                let v = val("--preset")?;
                o.preset = Preset::parse(&v).ok_or_else(|| {
                    format!("unknown preset `{v}` (small-music, small-sfx, medium, tiny)")
                })?;
            }
            "--dtype" => {
                o.dtype = match val("--dtype")?.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    other => return Err(format!("unknown dtype `{other}` (f32, f16, bf16)")),
                }
            }
            "--out" => o.out = Some(PathBuf::from(val("--out")?)),
            "--seed" => {
                o.seed = val("--seed")?
                    .parse()
                    .map_err(|_| "--seed needs an integer".to_string())?
            }
            "--dry-run" => o.dry_run = true,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--clap") {
        return clap(args);
    }
    let o = parse(args)?;
    let cfg = o.preset.model_config();
    let specs = synth::sa3_layout(&cfg).map_err(|e| e.to_string())?;
    let t5 = synth::t5_layout(&o.preset.t5_config()).map_err(|e| e.to_string())?;
    let params: usize = specs.iter().map(|s| s.numel()).sum();
    if o.dry_run {
        for s in &specs {
            println!("{}\t{:?}", s.name, s.shape);
        }
        for s in &t5 {
            println!("{}/{}\t{:?}", synth::T5_FOLDER, s.name, s.shape);
        }
        let bytes = synth::safetensors_size(&specs, o.dtype).map_err(|e| e.to_string())?;
        println!(
            "# {}: {} tensors, {params} parameters, {bytes} bytes; text encoder {} tensors",
            o.preset.name(),
            specs.len(),
            t5.len()
        );
        return Ok(());
    }
    let out = o.out.ok_or("--out DIR is required (or --dry-run)")?;
    let t0 = Instant::now();
    let mut last = Instant::now();
    let summary = synth::write_model(&out, o.preset, o.dtype, o.seed, &mut |done, total| {
        if last.elapsed().as_secs_f64() > 2.0 {
            eprintln!("  {:.1} / {:.1} GB", done as f64 / 1e9, total as f64 / 1e9);
            last = Instant::now();
        }
    })
    .map_err(|e| e.to_string())?;
    println!(
        "wrote {} ({}, {}): {} tensors, {} parameters, {:.2} GB; text encoder {} tensors, {:.2} GB; {:.1} s",
        summary.dir.display(),
        o.preset.name(),
        o.dtype,
        summary.tensors,
        summary.params,
        summary.bytes as f64 / 1e9,
        summary.t5_tensors,
        summary.t5_bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `synth-model --clap PRESET --out DIR [--tokenizer DIR] [--seed N]`: a random-weight CLAP
/// checkpoint in the released layout (see `aria_clap::synth`).
fn clap(args: &[String]) -> Result<(), String> {
    use aria_clap::synth::{parameter_count, write_random, Preset};
    let (mut preset, mut out, mut tok, mut seed) = (None, None, None, 0u64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--clap" => {
                let v = val()?;
                preset = Some(Preset::parse(&v).ok_or_else(|| {
                    format!("unknown CLAP preset `{v}` (htsat-unfused, htsat-fused, larger-music, tiny)")
                })?)
            }
            "--out" => out = Some(PathBuf::from(val()?)),
            "--tokenizer" => tok = Some(PathBuf::from(val()?)),
            "--seed" => {
                seed = val()?
                    .parse()
                    .map_err(|_| "--seed needs an integer".to_string())?
            }
            other => {
                return Err(format!(
                    "unknown option `{other}` with --clap (--out, --tokenizer, --seed)"
                ))
            }
        }
    }
    let preset = preset.ok_or("--clap needs a preset")?;
    let out = out.ok_or("--out DIR is required")?;
    let cfg = preset.config();
    let t0 = Instant::now();
    write_random(&out, &cfg, seed, tok.as_deref()).map_err(|e| e.to_string())?;
    println!(
        "wrote {} (CLAP {preset:?}, random weights): {} parameters; {:.1} s",
        out.display(),
        parameter_count(&cfg).map_err(|e| e.to_string())?,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
