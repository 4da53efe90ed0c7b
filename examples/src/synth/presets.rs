//! `model_config.json` and T5Gemma `config.json` of the released SA3 variants (values from the
//! architecture specification) and of a tiny variant for the no-download demo.

use serde_json::{json, Value};

/// Which model a random checkpoint imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// `stabilityai/stable-audio-3-small-music` (DiT 1024×20, SAME-S).
    SmallMusic,
    /// `stabilityai/stable-audio-3-small-sfx` (same architecture as small-music).
    SmallSfx,
    /// `stabilityai/stable-audio-3-medium` (differential DiT 1536×24, SAME-L).
    Medium,
    /// A tiny model with the small-model structure and the real latent rate (for the demo).
    Tiny,
}

impl Preset {
    /// Parse `small-music`, `small-sfx`, `medium` or `tiny`.
    pub fn parse(s: &str) -> Option<Preset> {
        match s {
            "small-music" => Some(Preset::SmallMusic),
            "small-sfx" => Some(Preset::SmallSfx),
            "medium" => Some(Preset::Medium),
            "tiny" => Some(Preset::Tiny),
            _ => None,
        }
    }

    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::SmallMusic => "small-music",
            Preset::SmallSfx => "small-sfx",
            Preset::Medium => "medium",
            Preset::Tiny => "tiny",
        }
    }

    /// The Hugging Face repository the preset imitates (`None` for tiny).
    pub fn repo_id(self) -> Option<&'static str> {
        match self {
            Preset::SmallMusic => Some("stabilityai/stable-audio-3-small-music"),
            Preset::SmallSfx => Some("stabilityai/stable-audio-3-small-sfx"),
            Preset::Medium => Some("stabilityai/stable-audio-3-medium"),
            Preset::Tiny => None,
        }
    }

    /// The preset's `model_config.json`.
    pub fn model_config(self) -> Value {
        let p = dims(self);
        let mut enc = json!({
            "in_channels": p.patch * 2, "channels": p.same_channels, "c_mults": [p.same_mult], "strides": [16],
            "latent_dim": p.latent, "transformer_depths": [p.same_depth], "checkpointing": false,
            "differential": true, "dim_heads": 64, "variable_stride": true, "conv_mapping": false,
            "mask_noise": 0.0
        });
        let mut dec = json!({
            "out_channels": p.patch * 2, "channels": p.same_channels, "c_mults": [p.same_mult], "strides": [16],
            "latent_dim": p.latent, "transformer_depths": [p.same_depth],
            "sinusoidal_blocks": [p.sinusoidal], "checkpointing": false, "differential": true,
            "dim_heads": 64, "variable_stride": true, "conv_mapping": !p.sliding, "mask_noise": 0.01
        });
        for side in [&mut enc, &mut dec] {
            if let Some(o) = side.as_object_mut() {
                if p.sliding {
                    o.insert("sliding_window".into(), json!([1, 1]));
                } else {
                    o.insert("dyt".into(), json!(true));
                    o.insert("chunk_size".into(), json!(32));
                    o.insert("chunk_midpoint_shift".into(), json!(true));
                }
            }
        }
        let prompt_cfg = match self.repo_id() {
            Some(repo) => json!({
                "model_name": "google/t5gemma-b-b-ul2", "max_length": 256, "padding_mode": "learned",
                "repo_id": repo, "subfolder": "t5gemma-b-b-ul2"
            }),
            None => json!({
                "model_name": "google/t5gemma-b-b-ul2", "max_length": 256, "padding_mode": "learned",
                "model_path": "t5gemma-b-b-ul2"
            }),
        };
        let mut attn = json!({ "qk_norm": "rms" });
        if p.differential {
            if let Some(o) = attn.as_object_mut() {
                o.insert("differential".into(), json!(true));
            }
        }
        json!({
            "model_type": "diffusion_cond",
            "sample_size": p.sample_size,
            "sample_rate": 44100,
            "audio_channels": 2,
            "model": {
                "io_channels": p.latent,
                "pretransform": {
                    "type": "autoencoder", "chunked": true, "iterate_batch": false,
                    "config": {
                        "encoder": { "type": "same", "config": enc },
                        "decoder": { "type": "same", "config": dec, "soft_clip": false },
                        "bottleneck": { "type": "softnorm", "config": {
                            "dim": p.latent, "noise_augment_dim": 0, "noise_regularize": true,
                            "auto_scale": true, "freeze": true } },
                        "pretransform": { "type": "patched", "config": { "channels": 2, "patch_size": p.patch } },
                        "latent_dim": p.latent,
                        "downsampling_ratio": p.patch * 16,
                        "io_channels": 2
                    }
                },
                "conditioning": {
                    "configs": [
                        { "id": "prompt", "type": "t5gemma", "config": prompt_cfg },
                        { "id": "seconds_total", "type": "number", "config": {
                            "min_val": 0, "max_val": 384, "fourier_features_type": "expo" } }
                    ],
                    "cond_dim": 768
                },
                "diffusion": {
                    "diffusion_objective": "rf_denoiser",
                    "cross_attention_cond_ids": ["prompt", "seconds_total"],
                    "global_cond_ids": ["seconds_total"],
                    "local_add_cond_ids": ["inpaint_mask", "inpaint_masked_input"],
                    "mask_padding_attention": true,
                    "use_effective_length_for_schedule": true,
                    "type": "dit",
                    "config": {
                        "io_channels": p.latent, "patch_size": 1, "embed_dim": p.embed, "depth": p.depth,
                        "num_heads": p.embed / 64, "cond_token_dim": 768, "project_cond_tokens": true,
                        "global_cond_dim": 768, "project_global_cond": true,
                        "transformer_type": "continuous_transformer", "global_cond_type": "adaLN",
                        "timestep_features_type": "expo", "timestep_features_dim": 256,
                        "timestep_features_logsnr": false, "num_memory_tokens": p.memory,
                        "local_add_cond_dim": p.latent + 1, "norm_type": "rms_norm",
                        "norm_kwargs": { "force_fp32": true }, "attn_kwargs": attn,
                        "ff_kwargs": { "mult": 4 }
                    }
                }
            }
        })
    }

    /// The preset's T5Gemma `config.json` (encoder and decoder sub-configs, as bundled).
    pub fn t5_config(self) -> Value {
        let (layers, heads, inter, vocab) = match self {
            Preset::Tiny => (2usize, 2usize, 256usize, 512usize),
            _ => (12, 12, 2048, 256_000),
        };
        let layer_types: Vec<&str> = (0..layers)
            .map(|i| {
                if i % 2 == 0 {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let side = |decoder: bool| {
            let mut v = json!({
                "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": 50.0,
                "bos_token_id": 2, "dropout_rate": 0.0, "eos_token_id": 1,
                "final_logit_softcapping": 30.0, "head_dim": 64,
                "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 768,
                "initializer_range": 0.02, "intermediate_size": inter, "is_decoder": decoder,
                "layer_types": layer_types, "max_position_embeddings": 8192,
                "model_type": "t5_gemma_module", "num_attention_heads": heads,
                "num_hidden_layers": layers, "num_key_value_heads": heads, "pad_token_id": 0,
                "query_pre_attn_scalar": 64, "rms_norm_eps": 1e-6,
                "rope_parameters": { "rope_theta": 10000.0, "rope_type": "default" },
                "sliding_window": 4096, "tie_word_embeddings": true, "use_cache": true,
                "vocab_size": vocab
            });
            if decoder {
                if let Some(o) = v.as_object_mut() {
                    o.insert("cross_attention_hidden_size".into(), json!(768));
                }
            }
            v
        };
        json!({
            "attention_dropout": 0.0, "bos_token_id": 2, "classifier_dropout_rate": 0.0,
            "decoder": side(true), "dropout_rate": 0.0, "dtype": "bfloat16", "encoder": side(false),
            "eos_token_id": 1, "initializer_range": 0.02, "is_encoder_decoder": true,
            "model_type": "t5gemma", "pad_token_id": 0, "tie_word_embeddings": true,
            "transformers_version": "5.8.0", "vocab_size": vocab
        })
    }
}

struct Dims {
    embed: usize,
    depth: usize,
    memory: usize,
    differential: bool,
    latent: usize,
    patch: usize,
    same_channels: usize,
    same_mult: usize,
    same_depth: usize,
    sliding: bool,
    sinusoidal: usize,
    sample_size: usize,
}

fn dims(p: Preset) -> Dims {
    match p {
        Preset::SmallMusic | Preset::SmallSfx => Dims {
            embed: 1024,
            depth: 20,
            memory: 64,
            differential: false,
            latent: 256,
            patch: 256,
            same_channels: 128,
            same_mult: 6,
            same_depth: 6,
            sliding: false,
            sinusoidal: 0,
            sample_size: 5_292_032,
        },
        Preset::Medium => Dims {
            embed: 1536,
            depth: 24,
            memory: 64,
            differential: true,
            latent: 256,
            patch: 256,
            same_channels: 256,
            same_mult: 6,
            same_depth: 12,
            sliding: true,
            sinusoidal: 8,
            sample_size: 16_777_216,
        },
        Preset::Tiny => Dims {
            embed: 128,
            depth: 2,
            memory: 4,
            differential: false,
            latent: 16,
            patch: 256,
            same_channels: 32,
            same_mult: 4,
            same_depth: 2,
            sliding: false,
            sinusoidal: 0,
            sample_size: 1_327_104,
        },
    }
}

/// A byte-level stand-in for the Gemma `tokenizer.json`: ids = `[2 (<bos>)] + [4 + byte, …]`,
/// `<pad>`=0, `<eos>`=1, `<bos>`=2, `<unk>`=3 — the convention of the parity fixtures. It lets a
/// random checkpoint run without the 17 MB Gemma vocabulary (the output is noise anyway).
pub fn stand_in_tokenizer() -> Value {
    let specials = ["<pad>", "<eos>", "<bos>", "<unk>"];
    let mut vocab = serde_json::Map::new();
    for (i, s) in specials.iter().enumerate() {
        vocab.insert((*s).to_string(), json!(i));
    }
    for (b, ch) in byte_to_unicode().iter().enumerate() {
        vocab.insert(ch.to_string(), json!(4 + b));
    }
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({ "id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true })
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [ { "SpecialToken": { "id": "<bos>", "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } } ],
            "pair": [ { "SpecialToken": { "id": "<bos>", "type_id": 0 } }, { "Sequence": { "id": "A", "type_id": 0 } },
                      { "Sequence": { "id": "B", "type_id": 0 } } ],
            "special_tokens": { "<bos>": { "id": "<bos>", "ids": [2], "tokens": ["<bos>"] } }
        },
        "decoder": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    })
}

/// `tokenizer_config.json` next to the stand-in tokenizer.
pub fn stand_in_tokenizer_config(max_length: usize) -> Value {
    json!({
        "backend": "tokenizers", "bos_token": "<bos>", "eos_token": "<eos>",
        "model_max_length": max_length, "pad_token": "<pad>", "padding_side": "right",
        "tokenizer_class": "TokenizersBackend", "unk_token": "<unk>"
    })
}

/// The GPT-2 byte-to-unicode table used by the byte-level pre-tokenizer: entry `b` is the
/// character that stands for byte `b`.
fn byte_to_unicode() -> Vec<char> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut n = 0u32;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap_or('?')
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap_or('?')
            }
        })
        .collect()
}
