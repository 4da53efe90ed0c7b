//! What a model folder holds: tensors and parameters per component, dtypes, file sizes, and a
//! memory plan for a generation (read from the safetensors headers; nothing is loaded).

use std::collections::BTreeMap;
use std::fmt::Write;

use aria_core::{DType, WeightLoader};

use crate::discover::ModelFiles;
use crate::plan::Geometry;
use crate::Result;

/// Tensors, parameters and bytes of one component, per dtype.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Number of tensors.
    pub tensors: usize,
    /// Number of parameters.
    pub params: usize,
    /// Bytes on disk.
    pub bytes: usize,
    /// Parameters per dtype.
    pub dtypes: BTreeMap<String, usize>,
}

/// The summary of a model folder.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// `model.model.*` (DiT), `conditioner.*`, `pretransform.*` (autoencoder), `text encoder`.
    pub groups: BTreeMap<String, Group>,
    /// Lines of `model_config.json` facts (widths, depths, latent rate).
    pub facts: Vec<String>,
}

fn group_of(name: &str) -> &'static str {
    if name.starts_with("model.model.") {
        "dit"
    } else if name.starts_with("conditioner.") {
        "conditioner"
    } else if name.starts_with("pretransform.") {
        "autoencoder"
    } else {
        "other"
    }
}

fn add(groups: &mut BTreeMap<String, Group>, key: &str, dtype: DType, shape: &[usize]) {
    let g = groups.entry(key.to_string()).or_default();
    let n: usize = shape.iter().product();
    g.tensors += 1;
    g.params += n;
    g.bytes += n * dtype.size();
    *g.dtypes.entry(dtype.to_string()).or_default() += n;
}

/// Read the headers of a model folder.
pub fn model_info(files: &ModelFiles) -> Result<ModelInfo> {
    let mut groups = BTreeMap::new();
    let w = WeightLoader::open_checkpoint(&files.weights)?;
    for n in w.names() {
        let (_, i) = w.info(&n)?;
        add(&mut groups, group_of(&n), i.dtype, &i.shape);
    }
    let t5 = WeightLoader::open(&[files.t5_dir.join("model.safetensors")])?;
    for n in t5.names() {
        let (_, i) = t5.info(&n)?;
        let key = if n.contains("decoder.") {
            "text encoder (unused decoder)"
        } else {
            "text encoder"
        };
        add(&mut groups, key, i.dtype, &i.shape);
    }
    let t5_cfg = aria_dit::t5gemma::T5GemmaConfig::from_file(files.t5_dir.join("config.json"))?;
    let embed_bf16 = t5
        .names()
        .iter()
        .filter(|n| n.ends_with("embed_tokens.weight") && !n.contains("decoder"))
        .any(|n| {
            t5.info(n)
                .map(|(_, i)| i.dtype == DType::BF16)
                .unwrap_or(false)
        });
    let bf16 = match t5_cfg.dtype {
        Some(p) => p == aria_dit::t5gemma::Precision::Bf16,
        None => embed_bf16,
    };
    let default = crate::pipeline::default_text_precision(crate::pipeline::DeviceKind::Cpu);
    let arith = match default {
        aria_dit::t5gemma::Precision::Bf16Dot if aria_core::cpu::bf16dot::use_tiles() => {
            "bf16 products with f32 accumulation on the AMX tile unit (this CPU has AMX-BF16; \
             --text-precision f32 computes in f32)"
        }
        aria_dit::t5gemma::Precision::Bf16Dot => {
            "bf16 products with f32 accumulation (this CPU runs AVX-512 BF16 products at twice \
             the f32 rate; --text-precision f32 computes in f32)"
        }
        _ if aria_core::nn::Bf16DotWeight::native() => {
            "f32 (this CPU's AVX-512 BF16 products run slower than its f32 ones; \
             --text-precision bf16-dot uses them)"
        }
        _ => "f32",
    };
    let text_arith = if bf16 {
        format!("{arith}, on the bf16 weights (the reference computes in bf16; --text-precision bf16 replays it)")
    } else {
        arith.to_string()
    };
    let cfg = aria_core::config::read_json(&files.config)?;
    let d = cfg
        .pointer("/model/diffusion/config")
        .cloned()
        .unwrap_or_default();
    let g = |p: &str| d.pointer(p).and_then(|v| v.as_u64()).unwrap_or(0);
    let mut facts = vec![format!(
        "DiT: width {}, {} blocks, {} heads, {} memory tokens, {} attention",
        g("/embed_dim"),
        g("/depth"),
        g("/num_heads"),
        g("/num_memory_tokens"),
        if d.pointer("/attn_kwargs/differential")
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
        {
            "differential"
        } else {
            "standard"
        }
    )];
    if let Some(ds) = cfg
        .pointer("/model/pretransform/config/downsampling_ratio")
        .and_then(|v| v.as_u64())
    {
        let sr = cfg
            .get("sample_rate")
            .and_then(|v| v.as_u64())
            .unwrap_or(44100);
        facts.push(format!(
            "latents: {} channels at {:.4} Hz ({ds} samples each)",
            g("/io_channels"),
            sr as f64 / ds as f64
        ));
    }
    facts.push(format!(
        "text encoder: {} layers, width {}, computed in {text_arith}",
        t5_cfg.num_hidden_layers, t5_cfg.hidden_size
    ));
    Ok(ModelInfo { groups, facts })
}

fn gb(b: usize) -> f64 {
    b as f64 / 1e9
}

impl ModelInfo {
    /// A human-readable report with a memory plan for `seconds` of audio.
    pub fn report(&self, geometry: &Geometry, embed_dim: usize, seconds: &[f64]) -> String {
        let mut s = String::new();
        for f in &self.facts {
            let _ = writeln!(s, "{f}");
        }
        let _ = writeln!(
            s,
            "{:<30} {:>8} {:>16} {:>10}  dtypes",
            "component", "tensors", "parameters", "GB"
        );
        let mut mapped = 0usize;
        for (k, g) in &self.groups {
            let dt: Vec<String> = g.dtypes.keys().cloned().collect();
            let _ = writeln!(
                s,
                "{k:<30} {:>8} {:>16} {:>10.3}  {}",
                g.tensors,
                g.params,
                gb(g.bytes),
                dt.join(",")
            );
            if k.contains("unused") {
                continue;
            }
            // Weights stay in the memory map in their stored dtype (16-bit panels are widened
            // on the fly by the matrix kernels), so each byte on disk is resident at most once.
            mapped += g.bytes;
        }
        let _ = writeln!(
            s,
            "memory plan: {:.2} GB of weights memory-mapped in their stored dtype (no copy)",
            gb(mapped)
        );
        for &sec in seconds {
            let l = geometry.lengths(sec, 6.0);
            // DiT residual stream and attention/FF temporaries (~12 live [N, E] f32 buffers, FF 8E).
            let n = 64 + l.latents;
            let act = n * embed_dim * 4 * 20;
            let audio = l.samples * 2 * 4 * 3;
            let _ = writeln!(
                s,
                "  {sec:>5.1} s: T = {:>4} latents, ~{:.2} GB activations + audio, total ~{:.2} GB",
                l.latents,
                gb(act + audio),
                gb(mapped + act + audio)
            );
        }
        s
    }
}
