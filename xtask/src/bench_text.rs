//! `cargo xtask bench text`: the T5Gemma b-b-ul2 encoder on a 256-token prompt at the real
//! shapes (12 layers, hidden 768, 12 heads × 64, MLP 2048, vocabulary 256 000), with random bf16
//! weights written to a temporary folder (`config.json` + `model.safetensors`, removed at the
//! end).
//!
//! Reported per thread count: the median wall time of the default forward (f32 arithmetic on
//! the bf16 weights used from the memory map), its GFLOP/s, its ratio to a baseline measured in
//! the same run (the same forward with every weight converted to f32 in memory beforehand), and
//! the bf16 replay (`Precision::Bf16`, PyTorch's AVX2 bf16 arithmetic) and the bf16 products
//! with f32 accumulation (`Precision::Bf16Dot`, the pipeline's default on CPUs with AVX-512
//! BF16; the matrices packed once before timing). The official
//! implementation is compared on the same machine by `cargo xtask bench official`.
//!
//! Options: `--reps N` (timed repetitions after one warm-up; default 5), `--threads A,B`
//! (default 1,2), `--len L` (prompt tokens; default 256), `--paths P,Q` (any of `default`,
//! `copy`, `replay`, `dot`, `amx`; default all five), `--keep` (keep the weights folder).

use std::path::{Path, PathBuf};
use std::time::Instant;

use aria_core::{bf16, save_safetensors, threads, DType, Tensor, WeightLoader};
use aria_dit::t5gemma::{Precision, T5GemmaConfig, T5GemmaEncoder};

const HIDDEN: usize = 768;
const LAYERS: usize = 12;
const HEADS: usize = 12;
const HEAD_DIM: usize = 64;
const FF: usize = 2048;
const VOCAB: usize = 256_000;

struct Opts {
    reps: usize,
    threads: Vec<usize>,
    len: usize,
    paths: Vec<String>,
    keep: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        reps: 5,
        threads: vec![1, 2],
        len: 256,
        paths: vec![
            "default".into(),
            "copy".into(),
            "replay".into(),
            "dot".into(),
            "amx".into(),
        ],
        keep: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--reps" => o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--len" => o.len = val()?.parse().map_err(|e| format!("--len: {e}"))?,
            "--threads" => {
                o.threads = val()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--threads: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--paths" => {
                o.paths = val()?.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(p) = o
                    .paths
                    .iter()
                    .find(|p| !["default", "copy", "replay", "dot", "amx"].contains(&p.as_str()))
                {
                    return Err(format!(
                        "--paths: `{p}` is not default, copy, replay, dot or amx"
                    ));
                }
            }
            "--keep" => o.keep = true,
            other => {
                return Err(format!(
                    "unknown option `{other}` (--reps N, --threads A,B, --len L, --paths P,Q, \
                     --keep)"
                ))
            }
        }
    }
    if o.reps == 0 || o.len == 0 || o.threads.is_empty() {
        return Err("--reps, --len and --threads must be positive".into());
    }
    Ok(o)
}

/// xorshift64* uniform numbers in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((r >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn config_json() -> String {
    let types: Vec<String> = (0..LAYERS)
        .map(|i| {
            if i % 2 == 0 {
                "\"sliding_attention\"".into()
            } else {
                "\"full_attention\"".into()
            }
        })
        .collect();
    format!(
        r#"{{"model_type":"t5gemma","dtype":"bfloat16","encoder":{{
        "hidden_size":{HIDDEN},"num_hidden_layers":{LAYERS},"num_attention_heads":{HEADS},
        "num_key_value_heads":{HEADS},"head_dim":{HEAD_DIM},"intermediate_size":{FF},"vocab_size":{VOCAB},
        "rms_norm_eps":1e-6,"rope_parameters":{{"rope_theta":10000.0,"rope_type":"default"}},
        "attn_logit_softcapping":50.0,"query_pre_attn_scalar":{HEAD_DIM},"hidden_activation":"gelu_pytorch_tanh",
        "sliding_window":4096,"layer_types":[{}],"attention_bias":false}}}}"#,
        types.join(",")
    )
}

/// Random bf16 weights in the official layout (`encoder.` prefix), uniform ±1/sqrt(fan_in).
fn write_model(dir: &Path) -> Result<(), String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut add = |name: String, shape: &[usize], scale: f32| -> Result<(), String> {
        let n: usize = shape.iter().product();
        let v: Vec<bf16> = (0..n).map(|_| bf16::from_f32(rng.next() * scale)).collect();
        tensors.push((
            format!("encoder.{name}"),
            Tensor::from_vec(v, shape).map_err(|e| e.to_string())?,
        ));
        Ok(())
    };
    let fan = |k: usize| 1.0 / (k as f32).sqrt();
    add("embed_tokens.weight".into(), &[VOCAB, HIDDEN], 0.05)?;
    let q = HEADS * HEAD_DIM;
    for l in 0..LAYERS {
        let p = |s: &str| format!("layers.{l}.{s}");
        add(p("self_attn.q_proj.weight"), &[q, HIDDEN], fan(HIDDEN))?;
        add(p("self_attn.k_proj.weight"), &[q, HIDDEN], fan(HIDDEN))?;
        add(p("self_attn.v_proj.weight"), &[q, HIDDEN], fan(HIDDEN))?;
        add(p("self_attn.o_proj.weight"), &[HIDDEN, q], fan(q))?;
        add(p("mlp.gate_proj.weight"), &[FF, HIDDEN], fan(HIDDEN))?;
        add(p("mlp.up_proj.weight"), &[FF, HIDDEN], fan(HIDDEN))?;
        add(p("mlp.down_proj.weight"), &[HIDDEN, FF], fan(FF))?;
        for n in [
            "pre_self_attn_layernorm",
            "post_self_attn_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            add(p(&format!("{n}.weight")), &[HIDDEN], 0.1)?;
        }
    }
    add("norm.weight".into(), &[HIDDEN], 0.1)?;
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    save_safetensors(dir.join("model.safetensors"), &refs, None).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("config.json"), config_json()).map_err(|e| e.to_string())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU seconds (user + system, all threads) of this process so far, from `/proc/self/stat`
/// (clock ticks of 10 ms); `None` where unavailable.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Median wall seconds of `reps` forwards (after one warm-up) on `n` threads, and the mean CPU
/// seconds per forward (all threads).
fn time(
    enc: &T5GemmaEncoder,
    ids: &Tensor,
    mask: &Tensor,
    n: usize,
    reps: usize,
) -> Result<(f64, f64), String> {
    time_on(enc, ids, mask, n, reps, true)
}

/// [`time`], with the AMX tile unit left out of bf16 products when `tiles` is false.
fn time_on(
    enc: &T5GemmaEncoder,
    ids: &Tensor,
    mask: &Tensor,
    n: usize,
    reps: usize,
    tiles: bool,
) -> Result<(f64, f64), String> {
    threads::with_threads(n, || -> Result<(f64, f64), String> {
        // Set on the pool's thread, where the forward chooses its units.
        let fwd = || {
            if tiles {
                enc.forward(ids, mask)
            } else {
                aria_core::cpu::bf16dot::without_tiles(|| enc.forward(ids, mask))
            }
        };
        fwd().map_err(|e| e.to_string())?;
        let mut t = Vec::with_capacity(reps);
        let c0 = cpu_seconds();
        for _ in 0..reps {
            let s = Instant::now();
            let out = fwd().map_err(|e| e.to_string())?;
            t.push(s.elapsed().as_secs_f64());
            std::hint::black_box(out);
        }
        let cpu = match (c0, cpu_seconds()) {
            (Some(a), Some(b)) => (b - a) / reps as f64,
            _ => f64::NAN,
        };
        Ok((median(t), cpu))
    })
    .map_err(|e| e.to_string())?
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let dir: PathBuf = std::env::temp_dir().join(format!("aria-bench-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let res = bench(&o, &dir);
    if !o.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("weights kept in {}", dir.display());
    }
    res
}

fn bench(o: &Opts, dir: &Path) -> Result<(), String> {
    let s = Instant::now();
    write_model(dir)?;
    println!(
        "T5Gemma b-b-ul2 shapes, random bf16 weights written in {:.1} s",
        s.elapsed().as_secs_f64()
    );
    let enc = T5GemmaEncoder::load(dir).map_err(|e| e.to_string())?;
    if enc.precision() != Precision::F32 {
        return Err(format!(
            "the default precision is {:?}, not F32",
            enc.precision()
        ));
    }
    let mut enc_bf16 = enc.clone();
    enc_bf16.set_precision(Precision::Bf16);
    let mut enc_dot = enc.clone();
    enc_dot.set_precision(Precision::Bf16Dot);
    enc_dot.prepare().map_err(|e| e.to_string())?;
    let cfg: T5GemmaConfig = enc.config().clone();
    let file = dir.join("model.safetensors");
    let loader = WeightLoader::open_checkpoint(&file).map_err(|e| e.to_string())?;
    let enc_f32 =
        T5GemmaEncoder::from_loader(cfg, &loader.with_dtype(Some(DType::F32)), dir, &file)
            .map_err(|e| e.to_string())?;
    let mut rng = Rng(42);
    let ids: Vec<i64> = (0..o.len)
        .map(|_| ((rng.next() + 1.0) * 0.5 * (VOCAB - 1) as f32) as i64)
        .collect();
    let ids = Tensor::from_vec(ids, &[1, o.len]).map_err(|e| e.to_string())?;
    let mask = Tensor::from_vec(vec![1u8; o.len], &[1, o.len]).map_err(|e| e.to_string())?;
    let gflop = enc.flops(1, o.len) / 1e9;
    println!(
        "prompt of {} tokens: {gflop:.1} GFLOP per forward; median of {} runs",
        o.len, o.reps
    );
    println!(
        "{:>7} | {:>12} {:>8} {:>8} | {:>12} {:>8} | {:>7} | {:>14} {:>8} | {:>7} | {:>13} {:>8} | {:>7} | {:>13} {:>8} | {:>7}",
        "threads",
        "default (s)",
        "GFLOP/s",
        "cpu s",
        "f32 copy (s)",
        "GFLOP/s",
        "map/cpy",
        "bf16 replay (s)",
        "GFLOP/s",
        "rpl/dft",
        "bf16-dot (s)",
        "GFLOP/s",
        "dot/dft",
        "bf16-amx (s)",
        "GFLOP/s",
        "amx/dft",
    );
    let want = |p: &str| o.paths.iter().any(|q| q == p);
    let cell = |v: Option<f64>, w: usize, prec: usize| match v {
        Some(v) => format!("{v:>w$.prec$}"),
        None => format!("{:>w$}", "-"),
    };
    for &n in &o.threads {
        let t = if want("default") {
            Some(time(&enc, &ids, &mask, n, o.reps)?)
        } else {
            None
        };
        let b = if want("copy") {
            Some(time(&enc_f32, &ids, &mask, n, o.reps)?.0)
        } else {
            None
        };
        let x = if want("replay") {
            Some(time(&enc_bf16, &ids, &mask, n, o.reps)?.0)
        } else {
            None
        };
        // Emulated where the CPU has no AVX-512 BF16 (tens of times slower): not timed there.
        let d = if want("dot") && aria_core::nn::Bf16DotWeight::native() {
            Some(time_on(&enc_dot, &ids, &mask, n, o.reps, false)?.0)
        } else {
            None
        };
        // Only where the CPU has an AMX-BF16 unit.
        let am = if want("amx") && aria_core::nn::Bf16DotWeight::amx() {
            Some(time(&enc_dot, &ids, &mask, n, o.reps)?.0)
        } else {
            None
        };
        let td = t.map(|v| v.0);
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        println!(
            "{n:>7} | {} {} {} | {} {} | {} | {} {} | {} | {} {} | {} | {} {} | {}",
            cell(td, 12, 3),
            cell(td.map(|v| gflop / v), 8, 1),
            cell(t.map(|v| v.1), 8, 2),
            cell(b, 12, 3),
            cell(b.map(|v| gflop / v), 8, 1),
            cell(ratio(td, b), 7, 2),
            cell(x, 15, 3),
            cell(x.map(|v| gflop / v), 8, 1),
            cell(ratio(x, td), 7, 2),
            cell(d, 13, 3),
            cell(d.map(|v| gflop / v), 8, 1),
            cell(ratio(d, td), 7, 2),
            cell(am, 13, 3),
            cell(am.map(|v| gflop / v), 8, 1),
            cell(ratio(am, td), 7, 2),
        );
    }
    println!("(wall-clock medians; cpu s: CPU seconds per forward over all threads, a check on contention;");
    println!(" default: f32 arithmetic on the bf16 weights in the map; f32 copy: the same on an");
    println!(
        " in-memory f32 copy; bf16 replay: PyTorch's bf16 CPU arithmetic on AVX2, its summation"
    );
    println!(" orders included (`Precision::Bf16`); bf16-dot: bf16 products with f32 accumulation");
    println!(" (`Precision::Bf16Dot` with the tile unit left out: `vdpbf16ps` where the CPU has AVX-512 BF16; \"-\" elsewhere, where it is emulated);");
    println!(" bf16-amx: `Precision::Bf16Dot` as the CPU runs it where it has an AMX tile unit (the products and the attention's there; \"-\" without one);");
    println!(" `bench official` compares with the official code)");
    Ok(())
}
