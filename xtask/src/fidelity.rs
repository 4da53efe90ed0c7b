//! `cargo xtask fidelity --model DIR --cases FILE [--base REF]`: aria's f32 DiT forward and
//! SAME decode against references computed by the official implementation on the same inputs.
//!
//! `DIR` is a checkpoint folder in the official layout; `FILE` a safetensors file with inputs
//! `in.dit_<case>.{x,t,cross_attn_cond,global_cond[,local_add_cond][,padding_mask]}` and
//! `in.dec_<case>.latents`, and reference sets `<ref>.dit_<case>.{v,hidden_state_<i>}`,
//! `<ref>.dec_<case>.{bottleneck_out,block_<i>_out,patches,audio}`. A float64 reference is
//! stored as two float32 tensors, `NAME` (rounded) and `NAME@lo` (the remainder), and is
//! rebuilt to float64 here. aria is compared with every reference set, and every other set with
//! the base set (`--base`, default the last in name order), so that aria's rounding error can be
//! read against the official float32 code's own.
//!
//! Errors are `max|Δ| / max|ref|` and `rms(Δ) / rms(ref)`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::{DType, Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A tensor of the cases file as f64 (`NAME` plus `NAME@lo` when present).
fn read64(w: &WeightLoader, name: &str) -> Result<Vec<f64>, String> {
    let hi = w
        .get_any(name)
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.to_vec_f32())
        .map_err(err)?;
    let lo_name = format!("{name}@lo");
    if !w.contains(&lo_name) {
        return Ok(hi.iter().map(|&v| f64::from(v)).collect());
    }
    let lo = w
        .get_any(&lo_name)
        .and_then(|t| t.to_vec_f32())
        .map_err(err)?;
    Ok(hi
        .iter()
        .zip(&lo)
        .map(|(&h, &l)| f64::from(h) + f64::from(l))
        .collect())
}

fn get32(w: &WeightLoader, name: &str) -> Result<Tensor, String> {
    w.get_any(name)
        .and_then(|t| t.to_dtype(DType::F32))
        .map_err(err)
}

/// `(max|a-r| / max|r|, rms(a-r) / rms(r))`; infinite on a length mismatch or a non-finite
/// value.
fn diff(a: &[f64], r: &[f64]) -> (f64, f64) {
    if a.len() != r.len() || !a.iter().chain(r).all(|v| v.is_finite()) {
        return (f64::INFINITY, f64::INFINITY);
    }
    let (mut mx, mut mr, mut s, mut sr) = (0f64, 0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(r) {
        mx = mx.max((x - y).abs());
        mr = mr.max(y.abs());
        s += (x - y) * (x - y);
        sr += y * y;
    }
    let q = |n: f64, d: f64| if d == 0.0 { n } else { n / d };
    (q(mx, mr), q(s.sqrt(), sr.sqrt()))
}

struct Table {
    /// Reference sets; the base set is last.
    refs: Vec<String>,
}

impl Table {
    fn header(&self) {
        let best = self.refs.last().map_or("", String::as_str);
        print!("{:<28}", "tensor");
        for r in &self.refs {
            print!(" {:>21}", format!("aria vs {r}"));
        }
        for r in &self.refs[..self.refs.len().saturating_sub(1)] {
            print!(" {:>21}", format!("{r} vs {best}"));
        }
        println!();
    }

    /// One row: aria's output `a` against every reference set, then every set against the last.
    fn row(&self, w: &WeightLoader, name: &str, a: &Tensor) -> Result<(), String> {
        let av: Vec<f64> = a
            .to_vec_f32()
            .map_err(err)?
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let mut refs = Vec::new();
        for r in &self.refs {
            let full = format!("{r}.{name}");
            refs.push(if w.contains(&full) {
                let v = read64(w, &full)?;
                if v.len() != av.len() {
                    return Err(format!(
                        "{full}: {} values, aria gave {} (shape {:?})",
                        v.len(),
                        av.len(),
                        a.shape()
                    ));
                }
                Some(v)
            } else {
                None
            });
        }
        let cell = |d: Option<(f64, f64)>| {
            d.map_or(format!("{:>21}", "-"), |(m, r)| {
                format!("{:>21}", format!("{m:.2e} / {r:.2e}"))
            })
        };
        print!("{name:<28}");
        for r in &refs {
            print!(" {}", cell(r.as_ref().map(|r| diff(&av, r))));
        }
        if let Some(Some(best)) = refs.last() {
            for r in &refs[..refs.len() - 1] {
                print!(" {}", cell(r.as_ref().map(|r| diff(r, best))));
            }
        }
        println!();
        Ok(())
    }
}

/// Run the task with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    let (mut model, mut cases, mut base) = (None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model" => model = it.next().map(PathBuf::from),
            "--cases" => cases = it.next().map(PathBuf::from),
            "--base" => base = it.next().cloned(),
            o => return Err(format!("unknown option `{o}`")),
        }
    }
    let model = model.ok_or("--model DIR is required")?;
    let cases = cases.ok_or("--cases FILE is required")?;
    let w = WeightLoader::open(&[&cases]).map_err(err)?;
    let names = w.names();
    let mut refs: Vec<String> = Vec::new();
    let mut dit_cases = BTreeSet::new();
    let mut dec_cases = BTreeSet::new();
    for n in &names {
        let mut parts = n.splitn(3, '.');
        let (Some(set), Some(case)) = (parts.next(), parts.next()) else {
            continue;
        };
        if set == "in" {
            if let Some(c) = case.strip_prefix("dit_") {
                dit_cases.insert(c.to_string());
            } else if let Some(c) = case.strip_prefix("dec_") {
                dec_cases.insert(c.to_string());
            }
        } else if !refs.iter().any(|r| r == set) {
            refs.push(set.to_string());
        }
    }
    refs.sort();
    if let Some(b) = base {
        let i = refs
            .iter()
            .position(|r| *r == b)
            .ok_or_else(|| format!("no reference set `{b}` (have {})", refs.join(", ")))?;
        let b = refs.remove(i);
        refs.push(b);
    }
    let table = Table { refs };

    let cfg_path = model.join("model_config.json");
    let weights = model.join("model.safetensors");
    let cfg = ModelConfig::from_file(&cfg_path).map_err(err)?;
    let loader = WeightLoader::open_checkpoint(&weights).map_err(err)?;
    println!(
        "model {} ; cases {} ; {} threads",
        model.display(),
        cases.display(),
        aria_core::threads::num_threads()
    );
    println!("errors: max|d|/max|ref| / rms(d)/rms(ref)");
    table.header();
    if !dit_cases.is_empty() {
        let dit = Dit::load(&cfg.model.diffusion.config, &loader.pp("model.model")).map_err(err)?;
        for c in &dit_cases {
            let g = format!("dit_{c}");
            let opt = |k: &str| {
                let n = format!("in.{g}.{k}");
                if w.contains(&n) {
                    get32(&w, &n).map(Some)
                } else {
                    Ok(None)
                }
            };
            let t0 = std::time::Instant::now();
            let (v, hidden) = dit
                .forward_with_hidden(
                    &get32(&w, &format!("in.{g}.x"))?,
                    &get32(&w, &format!("in.{g}.t"))?,
                    &get32(&w, &format!("in.{g}.cross_attn_cond"))?,
                    &get32(&w, &format!("in.{g}.global_cond"))?,
                    opt("local_add_cond")?.as_ref(),
                    opt("padding_mask")?.as_ref(),
                )
                .map_err(err)?;
            eprintln!("  {g}: {:.2} s", t0.elapsed().as_secs_f64());
            for (i, h) in hidden.iter().enumerate() {
                table.row(&w, &format!("{g}.hidden_state_{i}"), h)?;
            }
            table.row(&w, &format!("{g}.v"), &v)?;
        }
    }
    if !dec_cases.is_empty() {
        let acfg = AutoencoderConfig::from_model_config(&cfg_path).map_err(err)?;
        let ae = Autoencoder::load(&acfg, &WeightLoader::open(&[&weights]).map_err(err)?)
            .map_err(err)?;
        for c in &dec_cases {
            let g = format!("dec_{c}");
            let t0 = std::time::Instant::now();
            let tr = ae
                .decode_traced(&get32(&w, &format!("in.{g}.latents"))?, None)
                .map_err(err)?;
            eprintln!("  {g}: {:.2} s", t0.elapsed().as_secs_f64());
            table.row(&w, &format!("{g}.bottleneck_out"), &tr.bottleneck_out)?;
            for (i, b) in tr.block_outputs.iter().enumerate() {
                table.row(&w, &format!("{g}.block_{i}_out"), b)?;
            }
            table.row(&w, &format!("{g}.patches"), &tr.patches)?;
            table.row(&w, &format!("{g}.audio"), &tr.audio)?;
        }
    }
    Ok(())
}
