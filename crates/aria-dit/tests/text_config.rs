//! Typed `model_config.json`: fixtures, presets, key errors, text-encoder folder resolution.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use aria_core::WeightLoader;
use aria_dit::conditioner::TextConditioner;
use aria_dit::config::{ConditionerSettings, FourierKind, ModelConfig, PaddingMode};
use aria_dit::t5gemma::{
    AttnImplementation, HiddenActivation, LayerType, Precision, RopeType, T5GemmaConfig,
};
use aria_testing::fixtures::fixture;
use aria_testing::TempDir;
use serde_json::Value;

fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

fn fixture_json(model: &str) -> Option<Value> {
    let p = fixture(&format!("{model}/model_config.json"))?;
    Some(serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
}

/// Parse `v` written to a scratch folder; the error message if it fails.
fn parse_err(name: &str, v: &Value) -> String {
    let d = TempDir::new(&format!("text-config-{name}"));
    let p = d.join("model_config.json");
    write_json(&p, v);
    let e = ModelConfig::from_file(&p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()),
        "error names the file: {e}"
    );
    e
}

#[test]
fn fixture_configs_parse_and_resolve() {
    for model in ["sa3-tiny", "sa3-tiny-medium", "sa3-tiny-extra"] {
        let Some(p) = fixture(&format!("{model}/model_config.json")) else {
            return;
        };
        let cfg = ModelConfig::from_file(&p).unwrap();
        let (id, t5) = cfg.prompt_conditioner().unwrap();
        assert_eq!(
            (id, t5.max_length, t5.padding_mode),
            ("prompt", 16, PaddingMode::Learned)
        );
        let nums = cfg.number_conditioners().unwrap();
        assert_eq!(nums.len(), 1);
        assert_eq!(nums[0].0, "seconds_total");
        assert_eq!(
            (
                nums[0].1.min_val,
                nums[0].1.max_val,
                nums[0].1.fourier_features_type
            ),
            (0.0, 384.0, FourierKind::Expo)
        );
        let folder = cfg.t5_folder().unwrap();
        assert_eq!(folder, p.parent().unwrap().join("t5gemma-b-b-ul2"));
        let t5cfg = T5GemmaConfig::from_file(folder.join("config.json")).unwrap();
        assert_eq!(
            (t5cfg.hidden_size, t5cfg.num_hidden_layers, t5cfg.vocab_size),
            (768, 2, 512)
        );
        assert_eq!(t5cfg.attn_implementation, AttnImplementation::Sdpa);
        assert_eq!(t5cfg.attn_logit_softcapping, Some(50.0));
        assert_eq!(
            cfg.model.diffusion.config.attn_kwargs.differential,
            model == "sa3-tiny-medium"
        );
    }
}

#[test]
fn presets() {
    for name in ModelConfig::PRESETS {
        let cfg = ModelConfig::preset(name).unwrap();
        let medium = name.starts_with("medium");
        let d = &cfg.model.diffusion;
        assert_eq!(
            d.diffusion_objective,
            if name.ends_with("-base") {
                "rectified_flow"
            } else {
                "rf_denoiser"
            }
        );
        let dit = &d.config;
        assert_eq!(
            (dit.embed_dim, dit.depth, dit.num_heads),
            if medium {
                (1536, 24, 24)
            } else {
                (1024, 20, 16)
            }
        );
        assert_eq!(
            (
                dit.io_channels,
                dit.num_memory_tokens,
                dit.local_add_cond_dim,
                dit.head_dim()
            ),
            (256, 64, 257, 64)
        );
        assert_eq!(dit.attn_kwargs.differential, medium);
        assert_eq!(cfg.sample_size, if medium { 16_777_216 } else { 5_292_032 });
        let (_, t5) = cfg.prompt_conditioner().unwrap();
        assert_eq!(t5.max_length, 256);
        assert_eq!(t5.subfolder.as_deref(), Some("t5gemma-b-b-ul2"));
        assert_eq!(
            t5.repo_id,
            Some(format!("stabilityai/stable-audio-3-{name}"))
        );
        let enc = &cfg.model.pretransform["config"]["encoder"]["config"];
        assert_eq!(enc["transformer_depths"][0], if medium { 12 } else { 6 });
    }
    let e = ModelConfig::preset("large").unwrap_err().to_string();
    assert!(e.contains("unknown preset `large`"), "{e}");
}

/// The small preset agrees with the fixture (a tiny small-structure model) on every key that does
/// not depend on the widths.
#[test]
fn preset_matches_fixture_layout() {
    let Some(fx) = fixture_json("sa3-tiny") else {
        return;
    };
    let pre = ModelConfig::preset("small-music").unwrap();
    let fxc = ModelConfig::from_value(fx, Path::new("fixture"), Path::new(".")).unwrap();
    let (a, b) = (&pre.model.diffusion, &fxc.model.diffusion);
    assert_eq!(a.cross_attention_cond_ids, b.cross_attention_cond_ids);
    assert_eq!(a.global_cond_ids, b.global_cond_ids);
    assert_eq!(a.local_add_cond_ids, b.local_add_cond_ids);
    assert_eq!(a.config.attn_kwargs.qk_norm, b.config.attn_kwargs.qk_norm);
    assert_eq!(
        pre.model.conditioning.configs[1].config,
        fxc.model.conditioning.configs[1].config
    );
}

#[test]
fn key_errors_name_file_and_key() {
    let Some(base) = fixture_json("sa3-tiny") else {
        return;
    };

    let mut v = base.clone();
    v["model"]["diffusion"]["config"]["bogus_width"] = 3.into();
    let e = parse_err("unknown-dit", &v);
    assert!(
        e.contains("unknown key `model.diffusion.config.bogus_width`"),
        "{e}"
    );

    let mut v = base.clone();
    v["model"]["diffusion"]["config"]
        .as_object_mut()
        .unwrap()
        .remove("embed_dim");
    let e = parse_err("missing-dit", &v);
    assert!(
        e.contains("missing key `model.diffusion.config.embed_dim`"),
        "{e}"
    );

    let mut v = base.clone();
    v["model"]["conditioning"]["configs"][0]["config"]["max_len"] = 3.into();
    let e = parse_err("unknown-cond", &v);
    assert!(
        e.contains("model.conditioning.configs[0].config") && e.contains("max_len"),
        "{e}"
    );

    let mut v = base.clone();
    v["model"]["conditioning"]["configs"][1]["type"] = "chroma".into();
    let e = parse_err("bad-type", &v);
    assert!(e.contains("configs[1].type") && e.contains("chroma"), "{e}");

    let mut v = base.clone();
    v["model"]["conditioning"]["configs"][0]["config"]["max_length"] = "long".into();
    let e = parse_err("bad-value", &v);
    assert!(e.contains("model.conditioning.configs[0].config"), "{e}");

    let mut v = base.clone();
    v["model"]["diffusion"]["cross_attention_cond_ids"] = serde_json::json!(["prompt", "bpm"]);
    let e = parse_err("bad-id", &v);
    assert!(
        e.contains("cross_attention_cond_ids") && e.contains("bpm"),
        "{e}"
    );

    let mut v = base.clone();
    v["model"]["conditioning"]
        .as_object_mut()
        .unwrap()
        .remove("cond_dim");
    let e = parse_err("missing-cond-dim", &v);
    assert!(
        e.contains("missing key `model.conditioning.cond_dim`"),
        "{e}"
    );
}

/// Link (or copy) the fixture's text-encoder files into `dst`, leaving out `skip`.
fn t5_copy(src: &Path, dst: &Path, skip: &str) {
    std::fs::create_dir_all(dst).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        if f != skip {
            std::fs::copy(src.join(f), dst.join(f)).unwrap();
        }
    }
}

/// Released layout: `repo_id` + `subfolder`, the folder beside `model_config.json`; a missing
/// tokenizer or a vocabulary that does not fit the embedding is an error naming file and key.
#[test]
fn released_layout_and_folder_errors() {
    let Some(t5) = fixture("sa3-tiny/t5gemma-b-b-ul2") else {
        return;
    };
    let Some(ckpt) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let d = TempDir::new("text-config-released");
    let cfg = ModelConfig::preset("small-sfx").unwrap().with_dir(&d);
    // No folder yet.
    let e = cfg.t5_folder().unwrap_err().to_string();
    assert!(
        e.contains("config.subfolder") && e.contains("not found"),
        "{e}"
    );
    // Folder without a tokenizer.
    t5_copy(&t5, &d.join("t5gemma-b-b-ul2"), "tokenizer.json");
    let e = cfg.t5_folder().unwrap_err().to_string();
    assert!(e.contains("tokenizer.json is missing"), "{e}");
    std::fs::copy(
        t5.join("tokenizer.json"),
        d.join("t5gemma-b-b-ul2/tokenizer.json"),
    )
    .unwrap();
    assert_eq!(cfg.t5_folder().unwrap(), d.join("t5gemma-b-b-ul2"));
    // The conditioner loads in this layout (the tiny encoder is 768 wide like the real one).
    let loader = WeightLoader::open_checkpoint(&ckpt).unwrap();
    let cond = TextConditioner::load(&cfg, &loader).unwrap();
    let (emb, mask) = cond.encode_prompts(&["rain on a tin roof"]).unwrap();
    assert_eq!(
        (emb.shape(), mask.shape()),
        (&[1, 256, 768][..], &[1, 256][..])
    );
    // A config.json vocabulary that does not match the embedding.
    let cj = d.join("t5gemma-b-b-ul2/config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&cj).unwrap()).unwrap();
    v["encoder"]["vocab_size"] = 300.into();
    write_json(&cj, &v);
    let e = TextConditioner::load(&cfg, &loader)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("encoder.vocab_size") && e.contains("config.json") && e.contains("512 rows"),
        "{e}"
    );
    // attn_implementation selects the soft-cap; unknown values are errors.
    v["encoder"]["vocab_size"] = 512.into();
    v["attn_implementation"] = "eager".into();
    write_json(&cj, &v);
    assert_eq!(
        T5GemmaConfig::from_file(&cj).unwrap().attn_implementation,
        AttnImplementation::Eager
    );
    v["attn_implementation"] = "flex".into();
    write_json(&cj, &v);
    let e = T5GemmaConfig::from_file(&cj).unwrap_err().to_string();
    assert!(e.contains("attn_implementation"), "{e}");
    v.as_object_mut().unwrap().remove("attn_implementation");
    v["encoder"].as_object_mut().unwrap().remove("hidden_size");
    write_json(&cj, &v);
    let e = T5GemmaConfig::from_file(&cj).unwrap_err().to_string();
    assert!(e.contains("`encoder.hidden_size`: missing key"), "{e}");
}

#[test]
fn typed_conditioner_settings() {
    let cfg = ModelConfig::preset("medium").unwrap();
    let s = cfg.model.conditioning.configs[1].settings().unwrap();
    match s {
        ConditionerSettings::Number(n) => assert_eq!(n.max_val, 384.0),
        other => panic!("unexpected {other:?}"),
    }
}

/// The string settings of the encoder config are parsed once into enums; an unknown value is
/// an error naming the key and the allowed spellings.
#[test]
fn t5gemma_string_settings_are_typed() {
    let Some(t5) = fixture("sa3-tiny/t5gemma-b-b-ul2") else {
        return;
    };
    let root: Value =
        serde_json::from_str(&std::fs::read_to_string(t5.join("config.json")).unwrap()).unwrap();
    let path = Path::new("config.json");
    let c = T5GemmaConfig::from_json(&root, path).unwrap();
    assert_eq!(c.hidden_activation, HiddenActivation::GeluPytorchTanh);
    assert_eq!(c.rope_type, RopeType::Default);
    assert_eq!(c.layer_types, vec![LayerType::Sliding, LayerType::Full]);
    assert_eq!(c.dtype, Some(Precision::Bf16));
    let err = |edit: &dyn Fn(&mut Value)| {
        let mut v = root.clone();
        edit(&mut v);
        T5GemmaConfig::from_json(&v, path).unwrap_err().to_string()
    };
    let e = err(&|v| v["encoder"]["hidden_activation"] = "relu".into());
    assert!(
        e.contains("`encoder.hidden_activation`")
            && e.contains("\"relu\"")
            && e.contains("`gelu_pytorch_tanh`"),
        "{e}"
    );
    let e = err(&|v| v["encoder"]["rope_parameters"]["rope_type"] = "yarn".into());
    assert!(
        e.contains("`encoder.rope_parameters.rope_type`") && e.contains("`default`"),
        "{e}"
    );
    let e = err(&|v| v["encoder"]["layer_types"][1] = "local_attention".into());
    assert!(
        e.contains("`encoder.layer_types[1]`")
            && e.contains("`full_attention`, `sliding_attention`"),
        "{e}"
    );
    let e = err(&|v| v["attn_implementation"] = "flex".into());
    assert!(
        e.contains("`attn_implementation`") && e.contains("`sdpa`, `eager`"),
        "{e}"
    );
    let e = err(&|v| v["dtype"] = "float16".into());
    assert!(
        e.contains("`dtype`") && e.contains("`bfloat16`, `float32`"),
        "{e}"
    );
    let e = err(&|v| v["encoder"]["attention_bias"] = "no".into());
    assert!(e.contains("`encoder.attention_bias`"), "{e}");
}
