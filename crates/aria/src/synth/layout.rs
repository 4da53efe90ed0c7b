//! Tensor inventories of an SA3 checkpoint and of the T5Gemma encoder, derived from their
//! configuration files (names exactly as in the official files, shapes from the config).

use serde_json::Value;

use crate::{Error, Result};

/// How the random checkpoint fills a tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Gaussian `N(0, std²)`.
    Normal(f32),
    /// Every element equal to the value (norm gains, biases, running statistics).
    Const(f32),
    /// RoPE inverse frequencies `1 / 10000^(2i/(2n))` for a tensor of `n` elements.
    InvFreq,
}

/// One tensor of a checkpoint layout.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Full name as stored in the file.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// How the random checkpoint fills it.
    pub init: Init,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Standard deviation of random weight matrices.
pub const WEIGHT_STD: f32 = 0.02;

struct Builder {
    out: Vec<TensorSpec>,
}

impl Builder {
    fn w(&mut self, name: String, shape: &[usize]) {
        self.out.push(TensorSpec {
            name,
            shape: shape.to_vec(),
            init: Init::Normal(WEIGHT_STD),
        });
    }
    fn c(&mut self, name: String, shape: &[usize], v: f32) {
        self.out.push(TensorSpec {
            name,
            shape: shape.to_vec(),
            init: Init::Const(v),
        });
    }
    fn inv_freq(&mut self, name: String, n: usize) {
        self.out.push(TensorSpec {
            name,
            shape: vec![n],
            init: Init::InvFreq,
        });
    }
}

/// A JSON accessor that names the config key in its errors.
struct Cfg<'a> {
    v: &'a Value,
    what: &'a str,
}

impl<'a> Cfg<'a> {
    fn at(&self, path: &str) -> Result<&'a Value> {
        let mut cur = self.v;
        for k in path.split('/') {
            cur = cur
                .get(k)
                .ok_or_else(|| Error::Config(format!("{}: missing key `{path}`", self.what)))?;
        }
        Ok(cur)
    }
    fn usize(&self, path: &str) -> Result<usize> {
        let v = self.at(path)?;
        let first = v.as_array().and_then(|a| a.first()).unwrap_or(v);
        first.as_u64().map(|x| x as usize).ok_or_else(|| {
            Error::Config(format!(
                "{}: `{path}` must be a non-negative integer",
                self.what
            ))
        })
    }
    fn usize_or(&self, path: &str, default: usize) -> Result<usize> {
        if self.at(path).is_ok() {
            self.usize(path)
        } else {
            Ok(default)
        }
    }
    fn bool_or(&self, path: &str, default: bool) -> bool {
        self.at(path)
            .ok()
            .and_then(Value::as_bool)
            .unwrap_or(default)
    }
}

/// Every tensor of an SA3 `model.safetensors` for the `model_config.json` value `config`:
/// DiT (`model.model.*`), conditioner (`conditioner.conditioners.*`) and SAME autoencoder
/// (`pretransform.model.*`), sorted by name.
pub fn sa3_layout(config: &Value) -> Result<Vec<TensorSpec>> {
    let cfg = Cfg {
        v: config,
        what: "model_config.json",
    };
    let mut b = Builder { out: Vec::new() };
    dit_layout(&cfg, &mut b)?;
    conditioner_layout(&cfg, &mut b)?;
    same_layout(&cfg, &mut b)?;
    b.out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(b.out)
}

fn dit_layout(cfg: &Cfg<'_>, b: &mut Builder) -> Result<()> {
    let d = "model/diffusion/config/";
    let io = cfg.usize(&format!("{d}io_channels"))?;
    let e = cfg.usize(&format!("{d}embed_dim"))?;
    let depth = cfg.usize(&format!("{d}depth"))?;
    let heads = cfg.usize(&format!("{d}num_heads"))?;
    let cond = cfg.usize(&format!("{d}cond_token_dim"))?;
    let glob = cfg.usize(&format!("{d}global_cond_dim"))?;
    let tfeat = cfg.usize_or(&format!("{d}timestep_features_dim"), 256)?;
    let mem = cfg.usize_or(&format!("{d}num_memory_tokens"), 0)?;
    let local = cfg.usize_or(&format!("{d}local_add_cond_dim"), 0)?;
    let mult = cfg.usize_or(&format!("{d}ff_kwargs/mult"), 4)?;
    let diff = cfg.bool_or(&format!("{d}attn_kwargs/differential"), false);
    if heads == 0 || e % heads != 0 {
        return Err(Error::Config(format!(
            "model_config.json: embed_dim {e} is not a multiple of num_heads {heads}"
        )));
    }
    let hd = e / heads;
    let rot = (hd / 2).max(32);
    let f = e * mult;
    let p = |s: &str| format!("model.model.{s}");
    b.w(p("to_timestep_embed.0.weight"), &[e, tfeat]);
    b.c(p("to_timestep_embed.0.bias"), &[e], 0.0);
    b.w(p("to_timestep_embed.2.weight"), &[e, e]);
    b.c(p("to_timestep_embed.2.bias"), &[e], 0.0);
    b.w(p("to_cond_embed.0.weight"), &[e, cond]);
    b.w(p("to_cond_embed.2.weight"), &[e, e]);
    b.w(p("to_global_embed.0.weight"), &[e, glob]);
    b.w(p("to_global_embed.2.weight"), &[e, e]);
    b.w(p("preprocess_conv.weight"), &[io, io, 1]);
    b.w(p("postprocess_conv.weight"), &[io, io, 1]);
    b.w(p("transformer.project_in.weight"), &[e, io]);
    b.w(p("transformer.project_out.weight"), &[io, e]);
    b.inv_freq(p("transformer.rotary_pos_emb.inv_freq"), rot / 2);
    if mem > 0 {
        b.w(p("transformer.memory_tokens"), &[mem, e]);
    }
    b.w(p("transformer.global_cond_embedder.0.weight"), &[e, e]);
    b.c(p("transformer.global_cond_embedder.0.bias"), &[e], 0.0);
    b.w(p("transformer.global_cond_embedder.2.weight"), &[6 * e, e]);
    b.c(p("transformer.global_cond_embedder.2.bias"), &[6 * e], 0.0);
    let (qkv, q, kv) = if diff {
        (5 * e, 2 * e, 3 * e)
    } else {
        (3 * e, e, 2 * e)
    };
    for i in 0..depth {
        let l = |s: &str| format!("model.model.transformer.layers.{i}.{s}");
        b.c(l("pre_norm.gamma"), &[e], 1.0);
        b.w(l("self_attn.to_qkv.weight"), &[qkv, e]);
        b.w(l("self_attn.to_out.weight"), &[e, e]);
        b.c(l("self_attn.q_norm.gamma"), &[hd], 1.0);
        b.c(l("self_attn.k_norm.gamma"), &[hd], 1.0);
        b.c(l("cross_attend_norm.gamma"), &[e], 1.0);
        b.w(l("cross_attn.to_q.weight"), &[q, e]);
        b.w(l("cross_attn.to_kv.weight"), &[kv, e]);
        b.w(l("cross_attn.to_out.weight"), &[e, e]);
        b.c(l("cross_attn.q_norm.gamma"), &[hd], 1.0);
        b.c(l("cross_attn.k_norm.gamma"), &[hd], 1.0);
        b.c(l("ff_norm.gamma"), &[e], 1.0);
        b.w(l("ff.ff.0.proj.weight"), &[2 * f, e]);
        b.c(l("ff.ff.0.proj.bias"), &[2 * f], 0.0);
        b.w(l("ff.ff.2.weight"), &[e, f]);
        b.c(l("ff.ff.2.bias"), &[e], 0.0);
        b.c(l("to_scale_shift_gate"), &[6 * e], 0.0);
        if local > 0 {
            b.w(l("to_local_embed.0.weight"), &[e, local]);
            b.c(l("to_local_embed.0.bias"), &[e], 0.0);
            b.w(l("to_local_embed.2.weight"), &[e, e]);
            b.c(l("to_local_embed.2.bias"), &[e], 0.0);
        }
    }
    Ok(())
}

fn conditioner_layout(cfg: &Cfg<'_>, b: &mut Builder) -> Result<()> {
    let cond_dim = cfg.usize("model/conditioning/cond_dim")?;
    let entries = cfg
        .at("model/conditioning/configs")?
        .as_array()
        .ok_or_else(|| {
            Error::Config("model_config.json: `model/conditioning/configs` must be a list".into())
        })?;
    for entry in entries {
        let id = entry.get("id").and_then(Value::as_str).unwrap_or_default();
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let p = |s: &str| format!("conditioner.conditioners.{id}.{s}");
        match kind {
            "t5gemma" => b.w(p("padding_embedding"), &[cond_dim]),
            "number" => {
                b.w(p("embedder.embedding.1.weight"), &[cond_dim, 256]);
                b.c(p("embedder.embedding.1.bias"), &[cond_dim], 0.0);
            }
            other => {
                return Err(Error::Config(format!(
                    "model_config.json: conditioner `{id}` has unsupported type `{other}`"
                )))
            }
        }
    }
    Ok(())
}

struct SameSide {
    io: usize,
    d: usize,
    depth: usize,
    latent: usize,
    head_dim: usize,
    kernel: usize,
    differential: bool,
}

fn same_side(cfg: &Cfg<'_>, side: &str, io_key: &str) -> Result<SameSide> {
    let c = format!("model/pretransform/config/{side}/config/");
    let channels = cfg.usize(&format!("{c}channels"))?;
    let mult = cfg.usize(&format!("{c}c_mults"))?;
    if !cfg.bool_or(&format!("{c}dyt"), true) {
        return Err(Error::Config(format!(
            "model_config.json: `{c}dyt` = false is not supported (SA3 uses DyT)"
        )));
    }
    Ok(SameSide {
        io: cfg.usize(&format!("{c}{io_key}"))?,
        d: channels * mult,
        depth: cfg.usize(&format!("{c}transformer_depths"))?,
        latent: cfg.usize(&format!("{c}latent_dim"))?,
        head_dim: cfg.usize_or(&format!("{c}dim_heads"), 64)?,
        kernel: if cfg.bool_or(&format!("{c}conv_mapping"), false) {
            3
        } else {
            1
        },
        differential: cfg.bool_or(&format!("{c}differential"), true),
    })
}

fn same_block(b: &mut Builder, pre: &str, s: &SameSide) {
    let d = s.d;
    let hd = s.head_dim;
    let p = |x: &str| format!("{pre}.{x}");
    for norm in ["pre_norm", "ff_norm"] {
        b.c(p(&format!("{norm}.alpha")), &[1], 1.0);
        b.c(p(&format!("{norm}.gamma")), &[d], 1.0);
        b.c(p(&format!("{norm}.beta")), &[d], 0.0);
    }
    let qkv = if s.differential { 5 * d } else { 3 * d };
    b.w(p("self_attn.to_qkv.weight"), &[qkv, d]);
    b.w(p("self_attn.to_out.weight"), &[d, d]);
    for norm in ["self_attn.q_norm", "self_attn.k_norm"] {
        b.c(p(&format!("{norm}.alpha")), &[1], 1.0);
        b.c(p(&format!("{norm}.gamma")), &[hd], 1.0);
        b.c(p(&format!("{norm}.beta")), &[hd], 0.0);
    }
    b.w(p("ff.ff.0.proj.weight"), &[6 * d, d]);
    b.c(p("ff.ff.0.proj.bias"), &[6 * d], 0.0);
    b.w(p("ff.ff.2.weight"), &[d, 3 * d]);
    b.c(p("ff.ff.2.bias"), &[d], 0.0);
    b.inv_freq(p("rope.inv_freq"), (hd / 2).max(32) / 2);
}

fn same_layout(cfg: &Cfg<'_>, b: &mut Builder) -> Result<()> {
    let enc = same_side(cfg, "encoder", "in_channels")?;
    let dec = same_side(cfg, "decoder", "out_channels")?;
    let m = "pretransform.model";
    let e0 = format!("{m}.encoder.layers.0");
    b.c(format!("{e0}.mapping.weight_g"), &[enc.d, 1, 1], 1.0);
    b.w(
        format!("{e0}.mapping.weight_v"),
        &[enc.d, enc.io, enc.kernel],
    );
    b.c(format!("{e0}.mapping.bias"), &[enc.d], 0.0);
    b.w(format!("{e0}.new_tokens"), &[1, 1, enc.d]);
    for j in 0..enc.depth {
        same_block(b, &format!("{e0}.transformers.{j}"), &enc);
    }
    b.w(format!("{m}.encoder.layers.2.weight"), &[enc.latent, enc.d]);
    b.c(format!("{m}.encoder.layers.2.bias"), &[enc.latent], 0.0);
    b.w(format!("{m}.decoder.layers.1.weight"), &[dec.d, dec.latent]);
    b.c(format!("{m}.decoder.layers.1.bias"), &[dec.d], 0.0);
    let d3 = format!("{m}.decoder.layers.3");
    b.w(format!("{d3}.new_tokens"), &[1, 1, dec.d]);
    for j in 0..dec.depth {
        same_block(b, &format!("{d3}.transformers.{j}"), &dec);
    }
    b.c(format!("{d3}.mapping.weight_g"), &[dec.io, 1, 1], 1.0);
    b.w(
        format!("{d3}.mapping.weight_v"),
        &[dec.io, dec.d, dec.kernel],
    );
    b.c(format!("{d3}.mapping.bias"), &[dec.io], 0.0);
    let lat = cfg.usize_or(
        "model/pretransform/config/bottleneck/config/dim",
        dec.latent,
    )?;
    b.c(format!("{m}.bottleneck.scaling_factor"), &[1, lat, 1], 1.0);
    b.c(format!("{m}.bottleneck.bias"), &[1, lat, 1], 0.0);
    b.c(
        format!("{m}.bottleneck.noise_scaling_factor"),
        &[1, 0, 1],
        0.0,
    );
    b.c(format!("{m}.bottleneck.running_std"), &[1], 1.0);
    Ok(())
}

/// The encoder tensors of a T5Gemma `model.safetensors` for the `config.json` value `config`
/// (keys `encoder.*`, as in the bundled text-encoder folder), sorted by name.
pub fn t5_layout(config: &Value) -> Result<Vec<TensorSpec>> {
    let cfg = Cfg {
        v: config,
        what: "t5gemma config.json",
    };
    let vocab = cfg.usize("encoder/vocab_size")?;
    let h = cfg.usize("encoder/hidden_size")?;
    let layers = cfg.usize("encoder/num_hidden_layers")?;
    let heads = cfg.usize("encoder/num_attention_heads")?;
    let kv = cfg.usize_or("encoder/num_key_value_heads", heads)?;
    let hd = cfg.usize_or("encoder/head_dim", h / heads.max(1))?;
    let inter = cfg.usize("encoder/intermediate_size")?;
    let mut b = Builder { out: Vec::new() };
    b.w("encoder.embed_tokens.weight".into(), &[vocab, h]);
    for i in 0..layers {
        let l = |s: &str| format!("encoder.layers.{i}.{s}");
        b.w(l("self_attn.q_proj.weight"), &[heads * hd, h]);
        b.w(l("self_attn.k_proj.weight"), &[kv * hd, h]);
        b.w(l("self_attn.v_proj.weight"), &[kv * hd, h]);
        b.w(l("self_attn.o_proj.weight"), &[h, heads * hd]);
        b.w(l("mlp.gate_proj.weight"), &[inter, h]);
        b.w(l("mlp.up_proj.weight"), &[inter, h]);
        b.w(l("mlp.down_proj.weight"), &[h, inter]);
        for n in [
            "pre_self_attn_layernorm",
            "post_self_attn_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ] {
            // Gemma RMSNorm scales by (1 + w): w = 0 is the identity gain.
            b.c(l(&format!("{n}.weight")), &[h], 0.0);
        }
    }
    b.c("encoder.norm.weight".into(), &[h], 0.0);
    b.out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(b.out)
}
