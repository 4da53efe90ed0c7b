//! `model_config.json` and T5Gemma `config.json` of the released SA3 variants (the model
//! configurations are those of [`ModelConfig::preset_json`]) and of a tiny variant for the
//! no-download demo.

use aria_dit::config::ModelConfig;
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

    /// The preset's `model_config.json`: that of the released model
    /// ([`ModelConfig::preset_json`]); tiny is small-music with smaller dimensions, a latent of
    /// 16 channels and the text encoder in a `t5gemma-b-b-ul2` subfolder of the model folder.
    pub fn model_config(self) -> Value {
        let name = match self {
            Preset::Tiny => Preset::SmallMusic.name(),
            p => p.name(),
        };
        let mut c = ModelConfig::preset_json(name).unwrap_or(Value::Null);
        if self == Preset::Tiny {
            shrink_to_tiny(&mut c);
        }
        c
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

/// Turn the small-music configuration into the tiny one (DiT 128×2 with 2 heads and 4 memory
/// tokens, SAME 32 channels × 4 with 2 blocks, 16 latent channels, 30 s of audio).
fn shrink_to_tiny(c: &mut Value) {
    const LATENT: usize = 16;
    c["sample_size"] = json!(1_327_104);
    let m = &mut c["model"];
    m["io_channels"] = json!(LATENT);
    let ae = &mut m["pretransform"]["config"];
    for side in ["encoder", "decoder"] {
        let s = &mut ae[side]["config"];
        s["channels"] = json!(32);
        s["c_mults"] = json!([4]);
        s["latent_dim"] = json!(LATENT);
        s["transformer_depths"] = json!([2]);
    }
    ae["bottleneck"]["config"]["dim"] = json!(LATENT);
    ae["latent_dim"] = json!(LATENT);
    m["conditioning"]["configs"][0]["config"] = json!({
        "model_name": "google/t5gemma-b-b-ul2", "max_length": 256, "padding_mode": "learned",
        "model_path": "t5gemma-b-b-ul2"
    });
    let d = &mut m["diffusion"]["config"];
    d["io_channels"] = json!(LATENT);
    d["embed_dim"] = json!(128);
    d["depth"] = json!(2);
    d["num_heads"] = json!(2);
    d["num_memory_tokens"] = json!(4);
    d["local_add_cond_dim"] = json!(LATENT + 1);
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
