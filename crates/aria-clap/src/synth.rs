//! Random-weight checkpoints in the released layout, at the shapes of the LAION releases or of
//! any configuration: for benchmarks and for trying the tools without the released files. The
//! vectors of such a model mean nothing about sound; its cost and its code paths are the real
//! ones.

use std::path::Path;

use aria_core::{save_safetensors, Tensor};

use crate::features::{FeatureConfig, Truncation};
use crate::{AudioConfig, ClapConfig, ClapError, Result, TextConfig};

/// The configurations of the LAION releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// `laion/clap-htsat-unfused`: HTSAT-tiny (96 → 768, depths 2-2-6-2), RoBERTa-base, 512.
    HtsatUnfused,
    /// `laion/clap-htsat-fused`: the same with the fused input path.
    HtsatFused,
    /// `laion/larger_clap_music` (and `_and_speech`, `_general`): HTSAT-base (128 → 1024,
    /// depths 2-2-12-2), RoBERTa-base, 512.
    LargerMusic,
    /// A tiny model with the real input shapes (for tests).
    Tiny,
}

impl Preset {
    /// Parse `htsat-unfused`, `htsat-fused`, `larger-music` or `tiny`.
    pub fn parse(s: &str) -> Option<Preset> {
        Some(match s {
            "htsat-unfused" => Preset::HtsatUnfused,
            "htsat-fused" => Preset::HtsatFused,
            "larger-music" => Preset::LargerMusic,
            "tiny" => Preset::Tiny,
            _ => return None,
        })
    }

    /// The configuration.
    pub fn config(self) -> ClapConfig {
        let mut c = ClapConfig::default();
        match self {
            Preset::HtsatUnfused => {}
            Preset::HtsatFused => {
                c.audio_config.enable_fusion = true;
                c.audio_config.fusion_type = Some("aff_2d".into());
            }
            Preset::LargerMusic => {
                c.audio_config.patch_embeds_hidden_size = 128;
                c.audio_config.hidden_size = 1024;
                c.audio_config.depths = vec![2, 2, 12, 2];
            }
            Preset::Tiny => {
                c.audio_config = AudioConfig {
                    patch_embeds_hidden_size: 16,
                    hidden_size: 128,
                    depths: vec![2, 2, 2, 2],
                    num_attention_heads: vec![1, 2, 2, 4],
                    ..AudioConfig::default()
                };
                c.text_config = TextConfig {
                    hidden_size: 32,
                    num_hidden_layers: 2,
                    num_attention_heads: 4,
                    intermediate_size: 64,
                    ..TextConfig::default()
                };
                c.projection_dim = 24;
            }
        }
        c
    }
}

/// A small deterministic normal generator (SplitMix64 + Box–Muller).
struct Normal(u64);

impl Normal {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn fill(&mut self, n: usize, std: f64) -> Vec<f32> {
        let mut v = Vec::with_capacity(n + 1);
        while v.len() < n {
            let (u1, u2) = (self.uniform(), self.uniform());
            let r = (-2.0 * u1.ln()).sqrt() * std;
            let t = std::f64::consts::TAU * u2;
            v.push((r * t.cos()) as f32);
            v.push((r * t.sin()) as f32);
        }
        v.truncate(n);
        v
    }
}

struct Writer {
    rng: Normal,
    tensors: Vec<(String, Tensor)>,
    /// Count parameters only (no data).
    count_only: bool,
    count: usize,
}

impl Writer {
    fn put(&mut self, name: String, data: Vec<f32>, shape: &[usize]) -> Result<()> {
        self.tensors.push((name, Tensor::from_vec(data, shape)?));
        Ok(())
    }

    fn fill(
        &mut self,
        name: String,
        shape: &[usize],
        f: impl FnOnce(&mut Normal, usize) -> Vec<f32>,
    ) -> Result<()> {
        let n: usize = shape.iter().product();
        self.count += n;
        if self.count_only {
            return Ok(());
        }
        let v = f(&mut self.rng, n);
        self.put(name, v, shape)
    }

    /// A weight with fan-in scaling (activations stay O(1) through the layers).
    fn weight(&mut self, name: String, shape: &[usize]) -> Result<()> {
        let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
        self.fill(name, shape, |r, n| r.fill(n, 1.0 / (fan_in as f64).sqrt()))
    }

    fn small(&mut self, name: String, shape: &[usize], std: f64) -> Result<()> {
        self.fill(name, shape, |r, n| r.fill(n, std))
    }

    fn constant(&mut self, name: String, shape: &[usize], x: f32) -> Result<()> {
        self.fill(name, shape, |_, n| vec![x; n])
    }

    fn linear(&mut self, p: &str, i: usize, o: usize, bias: bool) -> Result<()> {
        self.weight(format!("{p}.weight"), &[o, i])?;
        if bias {
            self.small(format!("{p}.bias"), &[o], 0.02)?;
        }
        Ok(())
    }

    fn layer_norm(&mut self, p: &str, d: usize) -> Result<()> {
        self.constant(format!("{p}.weight"), &[d], 1.0)?;
        self.constant(format!("{p}.bias"), &[d], 0.0)
    }

    fn batch_norm(&mut self, p: &str, d: usize) -> Result<()> {
        self.layer_norm(p, d)?;
        self.constant(format!("{p}.running_mean"), &[d], 0.0)?;
        self.constant(format!("{p}.running_var"), &[d], 1.0)
    }

    fn conv(&mut self, p: &str, shape: &[usize]) -> Result<()> {
        self.weight(format!("{p}.weight"), shape)?;
        self.small(format!("{p}.bias"), &[shape[0]], 0.02)
    }
}

fn audio(w: &mut Writer, a: &AudioConfig) -> Result<()> {
    let e = "audio_model.audio_encoder";
    let c0 = a.patch_embeds_hidden_size;
    let p = a.patch_size;
    w.batch_norm(&format!("{e}.batch_norm"), a.num_mel_bins)?;
    w.conv(
        &format!("{e}.patch_embed.proj"),
        &[c0, a.patch_embed_input_channels, p, p],
    )?;
    if a.enable_patch_layer_norm {
        w.layer_norm(&format!("{e}.patch_embed.norm"), c0)?;
    }
    if a.enable_fusion {
        let f = format!("{e}.patch_embed");
        w.conv(&format!("{f}.mel_conv2d"), &[c0, 1, p, p * 3])?;
        let inter = c0 / a.aff_block_r.max(1);
        for (branch, first) in [("local_att", 0), ("global_att", 1)] {
            let b = format!("{f}.fusion_model.{branch}");
            w.conv(&format!("{b}.{first}"), &[inter, c0, 1, 1])?;
            w.batch_norm(&format!("{b}.{}", first + 1), inter)?;
            w.conv(&format!("{b}.{}", first + 3), &[c0, inter, 1, 1])?;
            w.batch_norm(&format!("{b}.{}", first + 4), c0)?;
        }
    }
    let win = a.window_size;
    let table = (2 * win - 1) * (2 * win - 1);
    for (i, (&depth, &heads)) in a.depths.iter().zip(&a.num_attention_heads).enumerate() {
        let d = c0 << i;
        let ff = (d as f64 * a.mlp_ratio) as usize;
        for j in 0..depth {
            let b = format!("{e}.layers.{i}.blocks.{j}");
            w.layer_norm(&format!("{b}.layernorm_before"), d)?;
            for q in ["query", "key", "value"] {
                w.linear(&format!("{b}.attention.self.{q}"), d, d, a.qkv_bias)?;
            }
            w.small(
                format!("{b}.attention.self.relative_position_bias_table"),
                &[table, heads],
                0.02,
            )?;
            w.linear(&format!("{b}.attention.output.dense"), d, d, true)?;
            w.layer_norm(&format!("{b}.layernorm_after"), d)?;
            w.linear(&format!("{b}.intermediate.dense"), d, ff, true)?;
            w.linear(&format!("{b}.output.dense"), ff, d, true)?;
        }
        if i + 1 < a.depths.len() {
            let m = format!("{e}.layers.{i}.downsample");
            w.layer_norm(&format!("{m}.norm"), 4 * d)?;
            w.linear(&format!("{m}.reduction"), 4 * d, 2 * d, false)?;
        }
    }
    w.layer_norm(&format!("{e}.norm"), a.hidden_size)
}

fn text(w: &mut Writer, t: &TextConfig) -> Result<()> {
    let h = t.hidden_size;
    let e = "text_model.embeddings";
    w.small(
        format!("{e}.word_embeddings.weight"),
        &[t.vocab_size, h],
        0.5,
    )?;
    w.small(
        format!("{e}.position_embeddings.weight"),
        &[t.max_position_embeddings, h],
        0.5,
    )?;
    w.small(
        format!("{e}.token_type_embeddings.weight"),
        &[t.type_vocab_size, h],
        0.5,
    )?;
    w.layer_norm(&format!("{e}.LayerNorm"), h)?;
    for i in 0..t.num_hidden_layers {
        let l = format!("text_model.encoder.layer.{i}");
        for q in ["query", "key", "value"] {
            w.linear(&format!("{l}.attention.self.{q}"), h, h, true)?;
        }
        w.linear(&format!("{l}.attention.output.dense"), h, h, true)?;
        w.layer_norm(&format!("{l}.attention.output.LayerNorm"), h)?;
        w.linear(
            &format!("{l}.intermediate.dense"),
            h,
            t.intermediate_size,
            true,
        )?;
        w.linear(&format!("{l}.output.dense"), t.intermediate_size, h, true)?;
        w.layer_norm(&format!("{l}.output.LayerNorm"), h)?;
    }
    w.linear("text_model.pooler.dense", h, h, true)
}

/// The number of parameters a checkpoint of `cfg` holds (as [`write_random`] writes it).
pub fn parameter_count(cfg: &ClapConfig) -> Result<usize> {
    Ok(build(cfg, 0, true)?.count)
}

fn random_tensors(cfg: &ClapConfig, seed: u64) -> Result<Vec<(String, Tensor)>> {
    Ok(build(cfg, seed, false)?.tensors)
}

fn build(cfg: &ClapConfig, seed: u64, count_only: bool) -> Result<Writer> {
    cfg.validate("configuration")?;
    let mut w = Writer {
        rng: Normal(seed ^ 0x00C1_A900),
        tensors: Vec::new(),
        count_only,
        count: 0,
    };
    audio(&mut w, &cfg.audio_config)?;
    text(&mut w, &cfg.text_config)?;
    let d = cfg.projection_dim;
    w.linear(
        "audio_projection.linear1",
        cfg.audio_config.hidden_size,
        d,
        true,
    )?;
    w.linear("audio_projection.linear2", d, d, true)?;
    w.linear(
        "text_projection.linear1",
        cfg.text_config.hidden_size,
        d,
        true,
    )?;
    w.linear("text_projection.linear2", d, d, true)?;
    let scale = (1.0f32 / 0.07).ln();
    w.fill("logit_scale_a".into(), &[], |_, _| vec![scale])?;
    w.fill("logit_scale_t".into(), &[], |_, _| vec![scale])?;
    Ok(w)
}

/// Write a random-weight checkpoint of `cfg` into `dir` (created if needed): `config.json`,
/// `model.safetensors` and `preprocessor_config.json`, as a release lays them out. Copies the
/// tokenizer files (`tokenizer.json`, `vocab.json`, `merges.txt`) from `tokenizer_dir` when
/// given, else writes the byte-level vocabulary (every text as its UTF-8 bytes; see
/// [`crate::tokenizer::byte_level_vocab`]).
pub fn write_random(
    dir: &Path,
    cfg: &ClapConfig,
    seed: u64,
    tokenizer_dir: Option<&Path>,
) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ClapError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tensors = random_tensors(cfg, seed)?;
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    save_safetensors(dir.join("model.safetensors"), &refs, None)?;
    let mut json =
        serde_json::to_value(cfg).map_err(|e| ClapError::config("config.json", e.to_string()))?;
    json["model_type"] = "clap".into();
    json["architectures"] = serde_json::json!(["ClapModel"]);
    json["audio_config"]["model_type"] = "clap_audio_model".into();
    json["text_config"]["model_type"] = "clap_text_model".into();
    let cfg_path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&json)
        .map_err(|e| ClapError::config("config.json", e.to_string()))?;
    std::fs::write(&cfg_path, text).map_err(io(&cfg_path))?;
    let f = FeatureConfig {
        truncation: if cfg.audio_config.enable_fusion {
            Truncation::Fusion
        } else {
            Truncation::RandTrunc
        },
        ..FeatureConfig::default()
    };
    let pre = dir.join("preprocessor_config.json");
    std::fs::write(&pre, f.to_json()).map_err(io(&pre))?;
    match tokenizer_dir {
        Some(t) => {
            for name in ["tokenizer.json", "vocab.json", "merges.txt"] {
                let from = t.join(name);
                if from.is_file() {
                    let to = dir.join(name);
                    std::fs::copy(&from, &to).map_err(io(&to))?;
                }
            }
        }
        None => crate::tokenizer::write_byte_level(dir)?,
    }
    Ok(())
}
