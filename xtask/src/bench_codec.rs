//! `cargo xtask bench codec`: SAME-S decode at real shapes (D = 768, 6 blocks, 512 patch
//! features, 256 latent channels) with random weights written to a temporary safetensors file.
//!
//! Wall time is the headline number; CPU time (user + system of the child) is printed beside it
//! because wall time is unreliable on a loaded machine.
//!
//! Every measurement runs in a child process (this binary, `bench codec --child ...`) so that
//! its peak resident memory (`VmHWM`) belongs to that measurement alone.
//!
//! Options: `--reps N` (timed repetitions, median reported; default 3), `--durations A,B`
//! (seconds for timing; default 10,30), `--mem-durations A,B,C` (seconds for the memory sweep of
//! the windowed / streaming / chunked decoders; default 10,60,120), `--mem-modes M,N` (which of
//! them), `--skip-mem`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use aria_codec::{
    Autoencoder, AutoencoderConfig, NoiseSource, SameAttention, SeededNoise, StreamingDecoder,
    WindowedDecoder,
};
use aria_core::{Tensor, WeightLoader};

const D: usize = 768;
const DEPTH: usize = 6;
const FEATS: usize = 512;
const LATENT: usize = 256;
const PATCH: usize = 256;

/// Latents the official `generate()` decodes for `secs` of audio (duration + 6 s headroom,
/// rounded up to a multiple of 8192 samples).
fn latents_for(secs: f64) -> usize {
    let samples = ((secs + 6.0) * 44100.0).ceil() as usize;
    samples.div_ceil(8192) * 2
}

fn config_json() -> String {
    let side = |io: &str, extra: &str| {
        format!(
            r#"{{"type":"same","config":{{"{io}":{FEATS},"channels":128,"c_mults":[6],"strides":[16],"latent_dim":{LATENT},
            "transformer_depths":[{DEPTH}],"differential":true,"dyt":true,"dim_heads":64,"variable_stride":true,
            "chunk_size":32,"chunk_midpoint_shift":true{extra}}}}}"#
        )
    };
    format!(
        r#"{{"sample_rate":44100,"model":{{"pretransform":{{"type":"autoencoder","chunked":true,"config":{{
        "encoder":{},"decoder":{},
        "bottleneck":{{"type":"softnorm","config":{{"dim":{LATENT},"noise_augment_dim":0,"noise_regularize":true,"auto_scale":true}}}},
        "pretransform":{{"type":"patched","config":{{"channels":2,"patch_size":{PATCH}}}}},
        "latent_dim":{LATENT},"downsampling_ratio":4096,"io_channels":2}}}}}}}}"#,
        side("in_channels", r#","conv_mapping":false,"mask_noise":0.0"#),
        side(
            "out_channels",
            r#","conv_mapping":true,"sinusoidal_blocks":[0],"mask_noise":0.01"#
        ),
    )
}

/// Collects random tensors under the official key layout.
struct Weights {
    rng: SeededNoise,
    tensors: Vec<(String, Tensor)>,
}

impl Weights {
    /// A Gaussian tensor with standard deviation `scale`, or a fixed value for the DyT α, the
    /// RoPE frequencies and `running_std`.
    fn add(&mut self, name: &str, shape: &[usize], scale: f32) -> Result<(), String> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = if name.ends_with(".alpha") {
            vec![0.5]
        } else if name.ends_with("rope.inv_freq") {
            (0..16)
                .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / 32.0))
                .collect()
        } else if name.ends_with("running_std") {
            vec![1.3]
        } else {
            (0..n).map(|_| self.rng.sample() * scale).collect()
        };
        let t = Tensor::from_vec(v, shape).map_err(|e| e.to_string())?;
        self.tensors.push((format!("pretransform.model.{name}"), t));
        Ok(())
    }

    fn blocks(&mut self, prefix: &str) -> Result<(), String> {
        let fan = |k: usize| 1.0 / (k as f32).sqrt();
        for j in 0..DEPTH {
            let b = format!("{prefix}.transformers.{j}");
            for norm in [
                "pre_norm",
                "ff_norm",
                "self_attn.q_norm",
                "self_attn.k_norm",
            ] {
                let d = if norm.starts_with("self_attn") { 64 } else { D };
                self.add(&format!("{b}.{norm}.alpha"), &[1], 0.0)?;
                self.add(&format!("{b}.{norm}.gamma"), &[d], 0.1)?;
                self.add(&format!("{b}.{norm}.beta"), &[d], 0.01)?;
            }
            self.add(&format!("{b}.self_attn.to_qkv.weight"), &[5 * D, D], fan(D))?;
            self.add(&format!("{b}.self_attn.to_out.weight"), &[D, D], fan(D))?;
            self.add(&format!("{b}.ff.ff.0.proj.weight"), &[6 * D, D], fan(D))?;
            self.add(&format!("{b}.ff.ff.0.proj.bias"), &[6 * D], 0.01)?;
            self.add(&format!("{b}.ff.ff.2.weight"), &[D, 3 * D], fan(3 * D))?;
            self.add(&format!("{b}.ff.ff.2.bias"), &[D], 0.01)?;
            self.add(&format!("{b}.rope.inv_freq"), &[16], 0.0)?;
        }
        Ok(())
    }
}

/// Random real-shape SAME-S weights in the official key layout, written to `dir`.
fn write_weights(dir: &Path) -> Result<PathBuf, String> {
    let mut w = Weights {
        rng: SeededNoise::new(20240531),
        tensors: Vec::new(),
    };
    w.blocks("encoder.layers.0")?;
    w.blocks("decoder.layers.3")?;
    let fan = |k: usize| 1.0 / (k as f32).sqrt();
    w.add("encoder.layers.0.mapping.weight_g", &[D, 1, 1], 1.0)?;
    w.add("encoder.layers.0.mapping.weight_v", &[D, FEATS, 1], 1.0)?;
    w.add("encoder.layers.0.mapping.bias", &[D], 0.01)?;
    w.add("encoder.layers.0.new_tokens", &[1, 1, D], 1.0)?;
    w.add("encoder.layers.2.weight", &[LATENT, D], fan(D))?;
    w.add("encoder.layers.2.bias", &[LATENT], 0.01)?;
    w.add("decoder.layers.1.weight", &[D, LATENT], fan(LATENT))?;
    w.add("decoder.layers.1.bias", &[D], 0.01)?;
    w.add("decoder.layers.3.new_tokens", &[1, 1, D], 1.0)?;
    w.add("decoder.layers.3.mapping.weight_g", &[FEATS, 1, 1], 1.0)?;
    w.add("decoder.layers.3.mapping.weight_v", &[FEATS, D, 3], 1.0)?;
    w.add("decoder.layers.3.mapping.bias", &[FEATS], 0.01)?;
    w.add("bottleneck.scaling_factor", &[1, LATENT, 1], 1.0)?;
    w.add("bottleneck.bias", &[1, LATENT, 1], 0.01)?;
    w.add("bottleneck.running_std", &[1], 0.0)?;
    let path = dir.join("same_s_random.safetensors");
    let refs: Vec<(&str, &Tensor)> = w.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    aria_core::save_safetensors(&path, &refs, None).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Floating-point operations (2 per multiply-add) of the matrix products of one whole
/// (unchunked) decode of `t` latents by the decoder of `ae`, in GFLOP: the input projection, the
/// blocks (QKV, output, GLU feed-forward; with the midpoint shift the blocks after it see one
/// extra chunk), the mapping convolution. Attention and the elementwise ops are left out (under
/// 1 % at the SAME-S shapes), so this counts low, never high.
pub(crate) fn decode_gflop(ae: &AutoencoderConfig, t: usize) -> f64 {
    let c = &ae.decoder;
    let d = c.width();
    let inner = (d as f64 * c.ff_mult) as usize;
    let nproj = if c.differential { 5 } else { 3 };
    let modulo = c.cells_per_chunk().unwrap_or(1).max(1);
    let tp = t.div_ceil(modulo) * modulo;
    let tokens = (tp * c.cell()) as f64;
    let per_token_block = (nproj * d * d + d * d + d * 2 * inner + inner * d) as f64;
    let (first, extra) = match c.attention {
        SameAttention::Chunked {
            midpoint_shift: true,
            ..
        } => (c.depth() / 2, (modulo * c.cell()) as f64),
        _ => (c.depth(), 0.0),
    };
    let blocks = first as f64 * tokens + (c.depth() - first) as f64 * (tokens + extra);
    let mapping = (tp * c.stride() * c.io_channels * c.mapping_kernel() * d) as f64;
    let input = (t * ae.latent_dim * d) as f64;
    2.0 * (blocks * per_token_block + mapping + input) / 1e9
}

/// [`decode_gflop`] summed over the latent spans a decode runs one after the other (each its
/// own sequence; `Autoencoder::chunked_spans` for the chunked decode).
pub(crate) fn spans_gflop(ae: &AutoencoderConfig, spans: &[std::ops::Range<usize>]) -> f64 {
    spans.iter().map(|r| decode_gflop(ae, r.len())).sum()
}

fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU seconds (user + system) this process has used so far, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    // rest = " state ppid ...": field 3 (state) is index 0, utime (14) index 11, stime index 12.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok());
    match (num(11), num(12)) {
        (Some(u), Some(st)) => (u + st) / 100.0,
        _ => f64::NAN,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Child: `--child MODE T REPS DIR` → prints `RESULT <median s> <peak MiB>`.
fn child(args: &[String]) -> Result<(), String> {
    let [mode, t, reps, dir] = args else {
        return Err("child: MODE T REPS DIR".into());
    };
    let t: usize = t.parse().map_err(|_| "bad T")?;
    let reps: usize = reps.parse().map_err(|_| "bad REPS")?;
    let dir = PathBuf::from(dir);
    let cfg = AutoencoderConfig::from_model_config(dir.join("model_config.json"))
        .map_err(|e| e.to_string())?;
    let loader =
        WeightLoader::open(&[dir.join("same_s_random.safetensors")]).map_err(|e| e.to_string())?;
    let ae = Autoencoder::load(&cfg, &loader).map_err(|e| e.to_string())?;
    let z = SeededNoise::new(7)
        .draw(&[1, LATENT, t], "latents")
        .map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        let c0 = cpu_seconds();
        let out = match mode.as_str() {
            "whole" => ae.decode(&z, None),
            "chunked" => ae.decode_chunked(&z, None),
            "windowed" => WindowedDecoder::new(&ae, 0).decode(&z),
            "streaming" => {
                // Latents arrive 16 at a time; emitted audio is dropped (written out).
                let mut s = StreamingDecoder::new(&ae, 0);
                let mut n = 0usize;
                let mut at = 0;
                while at < t {
                    let k = 16.min(t - at);
                    let part = z
                        .narrow(2, at, k)
                        .and_then(|p| p.contiguous())
                        .map_err(|e| e.to_string())?;
                    n += s.push(&part).map_err(|e| e.to_string())?.shape()[2];
                    at += k;
                }
                n += s.finish().map_err(|e| e.to_string())?.shape()[2];
                Tensor::from_vec(vec![n as f32], &[1]).map_err(Into::into)
            }
            m => return Err(format!("unknown mode {m}")),
        }
        .map_err(|e| e.to_string())?;
        times.push(t0.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c0);
        drop(out);
    }
    println!(
        "RESULT {} {} {}",
        median(&mut times),
        peak_rss_mib(),
        median(&mut cpu)
    );
    Ok(())
}

/// `(median wall seconds, peak RSS MiB, median CPU seconds)` of one child run.
fn measure(dir: &Path, mode: &str, t: usize, reps: usize) -> Result<(f64, f64, f64), String> {
    let exe = crate::self_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args([
            "bench",
            "codec",
            "--child",
            mode,
            &t.to_string(),
            &reps.to_string(),
        ])
        .arg(dir)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| {
            format!(
                "child {mode} T={t} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    match v.as_slice() {
        [s, m, c] => Ok((*s, *m, *c)),
        _ => Err(format!("bad child output `{line}`")),
    }
}

fn list(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("bad number `{x}`"))
        })
        .collect()
}

/// Run the benchmark.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let mut reps = 3;
    let mut durations = vec![10.0, 30.0];
    let mut mem_durations = vec![10.0, 60.0, 120.0];
    let mut skip_mem = false;
    let mut mem_modes: Vec<String> = ["windowed", "streaming", "chunked"]
        .map(String::from)
        .to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--reps" => reps = it.next().and_then(|v| v.parse().ok()).ok_or("--reps N")?,
            "--durations" => durations = list(it.next().ok_or("--durations A,B")?)?,
            "--mem-durations" => mem_durations = list(it.next().ok_or("--mem-durations A,B,C")?)?,
            "--skip-mem" => skip_mem = true,
            "--mem-modes" => {
                mem_modes = it
                    .next()
                    .ok_or("--mem-modes M,N")?
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            o => return Err(format!("unknown option `{o}`")),
        }
    }
    println!("machine: {}", crate::bench_official::machine_line());
    let dir = std::env::temp_dir().join(format!("aria-bench-codec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let res = (|| -> Result<(), String> {
        std::fs::write(dir.join("model_config.json"), config_json()).map_err(|e| e.to_string())?;
        eprintln!("writing random SAME-S weights (D={D}, {DEPTH} blocks) ...");
        write_weights(&dir)?;
        println!(
            "SAME-S decode, random real-shape weights, {} threads, median of {reps}",
            rayon_threads()
        );
        println!(
            "{:>6} {:>5} {:>10} {:>9} {:>9} {:>10} {:>9}",
            "audio", "T", "mode", "wall s", "cpu s", "peak MiB", "vs whole"
        );
        // One core's FMA peak on its own CPU time, so that a loaded machine does not lower it;
        // set against the decode's GFLOP per CPU-second it says how close the whole decode runs
        // to the machine's limit (CPU time counts only the time the decode was on a core).
        let peak1 = crate::bench_core::best_peak_gflops(1, 5);
        let ae_cfg = AutoencoderConfig::from_model_config(dir.join("model_config.json"))
            .map_err(|e| e.to_string())?;
        let mut eff = Vec::new();
        for &secs in &durations {
            let t = latents_for(secs);
            let (whole, wm, wc) = measure(&dir, "whole", t, reps)?;
            println!(
                "{secs:>5}s {t:>5} {:>10} {whole:>9.3} {wc:>9.3} {wm:>10.0} {:>9}",
                "whole", "1.00"
            );
            eff.push((secs, decode_gflop(&ae_cfg, t), wc));
            for mode in ["chunked", "windowed", "streaming"] {
                let (s, m, c) = measure(&dir, mode, t, reps)?;
                println!(
                    "{secs:>5}s {t:>5} {mode:>10} {s:>9.3} {c:>9.3} {m:>10.0} {:>9.2}",
                    s / whole
                );
            }
        }
        for (secs, gf, cpu) in eff {
            let rate = gf / cpu;
            match peak1 {
                Some(p) => println!(
                    "whole {secs}s: {gf:.1} GFLOP of matrix products, {rate:.1} GFLOP per CPU-second \
                     = {:.0} % of one core's FMA peak ({p:.1} GFLOP/s)",
                    100.0 * rate / p
                ),
                None => println!(
                    "whole {secs}s: {gf:.1} GFLOP of matrix products, {rate:.1} GFLOP per CPU-second"
                ),
            }
        }
        if !skip_mem {
            println!("peak RSS vs duration (one child process per point, reps 1):");
            println!(
                "{:>6} {:>5} {:>10} {:>9} {:>9} {:>10}",
                "audio", "T", "mode", "wall s", "cpu s", "peak MiB"
            );
            for mode in &mem_modes {
                for &secs in &mem_durations {
                    let t = latents_for(secs);
                    let (s, m, c) = measure(&dir, mode, t, 1)?;
                    println!("{secs:>5}s {t:>5} {mode:>10} {s:>9.3} {c:>9.3} {m:>10.0}");
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    res
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_s() -> AutoencoderConfig {
        let v: serde_json::Value = serde_json::from_str(&config_json()).expect("bench config");
        AutoencoderConfig::from_json(&v, "bench").expect("SAME-S config")
    }

    /// The work of a 10 s decode (174 latents) at SAME-S shapes, counted by hand: 174 latents
    /// in 2-cell chunks of 17 tokens (2958 tokens); per token and block 5 + 1 QKV/output and
    /// 6 + 3 feed-forward D² products; the 3 blocks after the midpoint shift see one more chunk
    /// (34 tokens); the kernel-3 mapping to 512 features for 16 tokens a latent; the 256 → D
    /// input projection.
    #[test]
    fn decode_work_matches_a_hand_count() {
        let cfg = same_s();
        let d = 768.0f64;
        let blocks = (3.0 * 2958.0 + 3.0 * (2958.0 + 34.0)) * 15.0 * d * d;
        let mapping = 174.0 * 16.0 * 512.0 * 3.0 * d;
        let input = 174.0 * 256.0 * d;
        let want = 2.0 * (blocks + mapping + input) / 1e9;
        assert!((decode_gflop(&cfg, 174) - want).abs() < 1e-9 * want);
        // An odd length is padded to whole 2-cell chunks.
        // (the blocks and the mapping see 174; the input projection 173 latents).
        let one_latent_input = 2.0 * 256.0 * d / 1e9;
        assert!((decode_gflop(&cfg, 173) - (want - one_latent_input)).abs() < 1e-9 * want);
        // Spans add up, each its own sequence (its own padding and shifted chunk).
        let two = spans_gflop(&cfg, &[0..64, 14..128]);
        assert!((two - decode_gflop(&cfg, 114) - decode_gflop(&cfg, 64)).abs() < 1e-9 * two);
        assert!(spans_gflop(&cfg, &[0..87, 87..174]) > decode_gflop(&cfg, 174));
    }
}
