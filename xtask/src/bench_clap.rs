//! `cargo xtask bench clap`: CLAP embedding in aria and in the reference (`transformers`'
//! `ClapModel`, CPU), on the same checkpoint folder, the same machine, in the same run.
//!
//! aria runs twice: in f32 (the reference's arithmetic) and in the `fast` precision (bf16
//! products where the CPU runs them faster than f32, else f32 again), with the drift (1 − cos)
//! between the two runs' embeddings.
//!
//! Measures: one 10 s clip (feature extraction, then the audio tower and projection) and 1 000
//! captions (tokenization truncated to 77 tokens as LAION's pipeline does, then the text
//! tower and projection, in batches of 100 padded to their longest), each the
//! median of `--reps` runs after a warm-up, and each side's peak resident memory. Both sides run
//! as child processes, alternating, so that neither inherits the other's pages. The ratio is
//! reference / aria (above 1: aria is faster).
//!
//! The checkpoint: `--model DIR` (a release's folder, or any folder `aria clap` loads), else a
//! random-weight one at the `--preset` shapes (default `htsat-unfused`, the released
//! laion/clap-htsat-unfused) written to a temporary folder with the tokenizer files of
//! `--tokenizer DIR` (default: where `.ci/fetch-roberta-tokenizer.sh` puts them).
//! The reference side needs a Python with torch and transformers: `--ref-python PATH`, else
//! `$ARIA_REF_DIR/venv/bin/python`; without one only aria is measured, and the output says so.
//!
//! Options: `--model DIR`, `--preset P`, `--tokenizer DIR`, `--ref-python PATH`, `--reps N`
//! (default 5), `--threads N` (default: every CPU), `--captions FILE` (one caption a line;
//! default: the AudioCaps captions of `fixtures/tokenizer/gemma-audiocaps.jsonl`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria_clap::synth::{write_random, Preset};
use aria_clap::tokenizer::{Padding, CLAP_MAX_LENGTH};
use aria_clap::Clap;

const BATCH: usize = 100;

struct Opts {
    model: Option<PathBuf>,
    preset: Preset,
    tokenizer: PathBuf,
    ref_python: Option<PathBuf>,
    reps: usize,
    threads: usize,
    captions: Option<PathBuf>,
}

fn default_tokenizer() -> PathBuf {
    if let Some(p) = std::env::var_os("ARIA_ROBERTA_TOKENIZER_DIR") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("aria/roberta-gpt2-tokenizer")
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        model: None,
        preset: Preset::HtsatUnfused,
        tokenizer: default_tokenizer(),
        ref_python: std::env::var_os("ARIA_REF_DIR")
            .map(|d| PathBuf::from(d).join("venv/bin/python"))
            .filter(|p| p.exists()),
        reps: 5,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        captions: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--model" => o.model = Some(PathBuf::from(val()?)),
            "--preset" => {
                let v = val()?;
                o.preset = Preset::parse(&v).ok_or_else(|| {
                    format!("unknown preset `{v}` (htsat-unfused, htsat-fused, larger-music, tiny)")
                })?
            }
            "--tokenizer" => o.tokenizer = PathBuf::from(val()?),
            "--ref-python" => o.ref_python = Some(PathBuf::from(val()?)),
            "--reps" => o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--threads" => o.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--captions" => o.captions = Some(PathBuf::from(val()?)),
            other => {
                return Err(format!(
                    "unknown option `{other}` (--model DIR, --preset P, --tokenizer DIR, \
                     --ref-python PATH, --reps N, --threads N, --captions FILE)"
                ))
            }
        }
    }
    if o.reps == 0 || o.threads == 0 {
        return Err("--reps and --threads must be at least 1".into());
    }
    Ok(o)
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The caption file: given, or the AudioCaps captions of the tokenizer fixture written to a
/// temporary file.
fn captions_file(o: &Opts, tmp: &Path) -> Result<PathBuf, String> {
    if let Some(c) = &o.captions {
        return Ok(c.clone());
    }
    let src = workspace().join("fixtures/tokenizer/gemma-audiocaps.jsonl");
    let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let caps: Vec<String> = text
        .lines()
        // the first 12 lines are tokenizer edge cases, the rest AudioCaps captions
        .skip(12)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_string))
        .filter(|t| t.len() > 8 && !t.contains('\n'))
        .take(1000)
        .collect();
    let p = tmp.join("captions.txt");
    std::fs::write(&p, caps.join("\n")).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn wave(seconds: f64) -> Vec<f32> {
    let n = (seconds * 48_000.0) as usize;
    let mut s = 7u64;
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            0.3 * (std::f32::consts::TAU * 440.0 * i as f32 / 48_000.0).sin() + noise
        })
        .collect()
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |k| k / 1024.0)
}

/// The aria child: prints the same JSON as the reference script.
fn child(args: &[String]) -> Result<(), String> {
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .ok_or_else(|| format!("child: {k} missing"))
    };
    let model = PathBuf::from(get("--model")?);
    let captions = std::fs::read_to_string(get("--captions")?).map_err(|e| e.to_string())?;
    let reps: usize = get("--reps")?.parse().map_err(|e| format!("{e}"))?;
    let precision =
        aria_clap::Precision::parse(get("--precision")?).ok_or("child: bad precision")?;
    let caps: Vec<&str> = captions
        .lines()
        .filter(|l| !l.is_empty())
        .take(1000)
        .collect();
    let clap = Clap::load_with(&model, precision).map_err(|e| e.to_string())?;
    let tok = clap
        .tokenizer()
        .ok_or("the model folder has no tokenizer files")?;
    let x = wave(10.0);
    let (mut af, mut aw, mut at) = (Vec::new(), Vec::new(), Vec::new());
    let mut audio_embedding: Vec<Vec<f32>> = Vec::new();
    for rep in 0..=reps {
        let t0 = Instant::now();
        let mut draws = aria_clap::features::SeededDraws::new(0);
        let (f, longer) = clap
            .feature_extractor()
            .extract_batch(&[&x], &mut draws)
            .map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        audio_embedding = clap
            .embed_features(&f, &longer)
            .map_err(|e| e.to_string())?;
        let t2 = Instant::now();
        if rep > 0 {
            af.push((t1 - t0).as_secs_f64());
            aw.push((t2 - t1).as_secs_f64());
            at.push((t2 - t0).as_secs_f64());
        }
    }
    let (mut tt, mut tw, mut ttot) = (Vec::new(), Vec::new(), Vec::new());
    let mut text_embeddings = Vec::new();
    for rep in 0..=reps {
        let (mut a, mut b) = (0.0, 0.0);
        for group in caps.chunks(BATCH) {
            let t0 = Instant::now();
            let enc = tok
                .encode_batch(group, CLAP_MAX_LENGTH, Padding::Longest)
                .map_err(|e| e.to_string())?;
            let t1 = Instant::now();
            let e = clap
                .embed_token_ids(&enc.ids, &enc.mask, enc.batch, enc.len)
                .map_err(|e| e.to_string())?;
            if rep == 0 && text_embeddings.is_empty() {
                text_embeddings = e;
            }
            a += (t1 - t0).as_secs_f64();
            b += t1.elapsed().as_secs_f64();
        }
        if rep > 0 {
            tt.push(a);
            tw.push(b);
            ttot.push(a + b);
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "audio_10s": {"features_s": af, "forward_s": aw, "total_s": at},
            "captions_1000": {"tokenize_s": tt, "forward_s": tw, "total_s": ttot},
            "captions": caps.len(),
            "precision": clap.precision().name(),
            "peak_rss_mb": peak_rss_mb(),
            "audio_embedding": audio_embedding,
            "text_embeddings": text_embeddings,
        })
    );
    Ok(())
}

fn run_json(cmd: &mut Command, what: &str) -> Result<serde_json::Value, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s.lines().rev().find(|l| l.starts_with('{')).unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("{what}: no JSON result ({e}): {s}"))
}

/// Run the task.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let o = parse(args)?;
    let tmp = std::env::temp_dir().join(format!("aria-bench-clap-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let result = bench(&o, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn bench(o: &Opts, tmp: &Path) -> Result<(), String> {
    let model = match &o.model {
        Some(m) => m.clone(),
        None => {
            if !o.tokenizer.join("vocab.json").is_file()
                && !o.tokenizer.join("tokenizer.json").is_file()
            {
                return Err(format!(
                    "no tokenizer files in {} (run `bash .ci/fetch-roberta-tokenizer.sh`, or \
                     give --tokenizer DIR or --model DIR)",
                    o.tokenizer.display()
                ));
            }
            let d = tmp.join("model");
            eprintln!(
                "writing a random-weight {:?} checkpoint to {}",
                o.preset,
                d.display()
            );
            write_random(&d, &o.preset.config(), 0, Some(&o.tokenizer))
                .map_err(|e| e.to_string())?;
            d
        }
    };
    let captions = captions_file(o, tmp)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let threads = o.threads.to_string();
    let reps = o.reps.to_string();
    let aria_cmd = |precision: &str| {
        let mut c = Command::new(&exe);
        c.args(["bench", "clap", "--child", "--model"])
            .arg(&model)
            .arg("--captions")
            .arg(&captions)
            .args(["--reps", &reps, "--precision", precision])
            .env("RAYON_NUM_THREADS", &threads);
        c
    };
    let ref_cmd = o.ref_python.as_ref().map(|py| {
        let mut c = Command::new(py);
        c.arg(workspace().join("scripts/ref/clap_bench.py"))
            .arg("--model")
            .arg(&model)
            .arg("--tokenizer-dir")
            .arg(&o.tokenizer)
            .arg("--captions")
            .arg(&captions)
            .args([
                "--threads",
                &threads,
                "--reps",
                &reps,
                "--batch",
                &BATCH.to_string(),
            ])
            .env("PYTHONWARNINGS", "ignore")
            .env("OMP_NUM_THREADS", &threads);
        c
    });
    // Reference first, then aria (each a fresh process).
    let reference = match ref_cmd {
        Some(mut c) => Some(run_json(&mut c, "reference")?),
        None => None,
    };
    let aria = run_json(&mut aria_cmd("f32"), "aria f32")?;
    let fast = run_json(&mut aria_cmd("fast"), "aria fast")?;
    let fast_name = fast["precision"].as_str().unwrap_or("?").to_string();
    println!("{}", crate::bench_official::machine_line());
    println!(
        "CLAP {} · {} threads · median of {} runs after a warm-up",
        o.model
            .as_ref()
            .map(|m| m.display().to_string())
            .unwrap_or_else(|| format!("{:?} (random weights)", o.preset)),
        o.threads,
        o.reps
    );
    if reference.is_none() {
        println!("reference: not measured (give --ref-python or set ARIA_REF_DIR)");
    }
    println!(
        "{:<34} {:>12} {:>12} {:>8} {:>12} {:>8}",
        "measure",
        "reference s",
        "aria f32 s",
        "ratio",
        format!("{fast_name} s"),
        "ratio"
    );
    let rows = [
        ("10 s clip: features", "audio_10s", "features_s"),
        ("10 s clip: audio tower + proj.", "audio_10s", "forward_s"),
        ("10 s clip: total", "audio_10s", "total_s"),
        ("1 000 captions: tokenize", "captions_1000", "tokenize_s"),
        (
            "1 000 captions: text tower + proj.",
            "captions_1000",
            "forward_s",
        ),
        ("1 000 captions: total", "captions_1000", "total_s"),
    ];
    let med = |v: &serde_json::Value, a: &str, b: &str| -> f64 {
        let mut xs: Vec<f64> = v[a][b]
            .as_array()
            .map(|x| x.iter().filter_map(|y| y.as_f64()).collect())
            .unwrap_or_default();
        median(&mut xs)
    };
    for (label, a, b) in rows {
        let ar = med(&aria, a, b);
        let fa = med(&fast, a, b);
        match reference.as_ref().map(|r| med(r, a, b)) {
            Some(r) => println!(
                "{label:<34} {r:>12.4} {ar:>12.4} {:>7.2}× {fa:>12.4} {:>7.2}×",
                r / ar,
                r / fa
            ),
            None => println!("{label:<34} {:>12} {ar:>12.4} {:>8} {fa:>12.4}", "-", "-"),
        }
    }
    let rss = |v: &serde_json::Value| v["peak_rss_mb"].as_f64().unwrap_or(f64::NAN);
    let label = "peak resident memory (MB)";
    match &reference {
        Some(r) => println!(
            "{label:<34} {:>12.0} {:>12.0} {:>7.2}× {:>12.0} {:>7.2}×",
            rss(r),
            rss(&aria),
            rss(r) / rss(&aria),
            rss(&fast),
            rss(r) / rss(&fast)
        ),
        None => println!(
            "{label:<34} {:>12} {:>12.0} {:>8} {:>12.0}",
            "-",
            rss(&aria),
            "-",
            rss(&fast)
        ),
    }
    // How far the fast arithmetic moves the vectors (1 − cos against f32).
    let vecs = |v: &serde_json::Value, k: &str| -> Vec<Vec<f32>> {
        v[k].as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        r.as_array()
                            .map(|x| {
                                x.iter()
                                    .filter_map(|y| y.as_f64())
                                    .map(|y| y as f32)
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for (what, k) in [("audio", "audio_embedding"), ("text", "text_embeddings")] {
        let (a, b) = (vecs(&aria, k), vecs(&fast, k));
        if let Ok(d) = aria_clap::measure::drift(&a, &b) {
            println!(
                "{fast_name} against f32, {what} embeddings: drift (1 − cos) mean {:.2e}, max {:.2e} over {}",
                d.mean, d.max, d.n
            );
        }
    }
    Ok(())
}
