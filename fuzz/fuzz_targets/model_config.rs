//! Arbitrary bytes as a checkpoint's `model_config.json`: parsed as JSON, then through
//! `ModelConfig::from_value` (the DiT and conditioner sections) and
//! `AutoencoderConfig::from_json` (the autoencoder section).
//!
//! Properties: no panic; every error names the file; an accepted configuration has sizes that
//! can reach an allocation safely: every width, depth and count at least 1 where the model
//! divides or indexes by it, none absurdly large (widths at most 65 536, depth at most 4096,
//! `sample_size` at most 2^30), `num_heads` dividing `embed_dim`, a positive
//! sample rate, and prompt and number conditioners that type-check.
#![no_main]

use std::path::Path;

use aria_codec::AutoencoderConfig;
use aria_dit::config::ModelConfig;
use libfuzzer_sys::fuzz_target;

/// Largest width (channels, embedding, conditioning) a configuration may declare.
const MAX_WIDTH: usize = 1 << 16;

fn width(what: &str, v: usize) {
    assert!((1..=MAX_WIDTH).contains(&v), "{what} = {v} accepted");
}

fn check_dit(cfg: &ModelConfig) {
    let dc = &cfg.model.diffusion.config;
    width("io_channels", dc.io_channels);
    width("embed_dim", dc.embed_dim);
    width("num_heads", dc.num_heads);
    width("timestep_features_dim", dc.timestep_features_dim);
    width("patch_size", dc.patch_size);
    width("ff_kwargs.mult", dc.ff_kwargs.mult);
    // Widths that may be 0 (a model without that conditioning).
    for (what, v) in [
        ("cond_token_dim", dc.cond_token_dim),
        ("global_cond_dim", dc.global_cond_dim),
        ("local_add_cond_dim", dc.local_add_cond_dim),
        ("num_memory_tokens", dc.num_memory_tokens),
        ("cond_dim", cfg.model.conditioning.cond_dim),
    ] {
        assert!(v <= MAX_WIDTH, "{what} = {v} accepted");
    }
    assert!((1..=4096).contains(&dc.depth), "depth = {}", dc.depth);
    assert_eq!(
        dc.embed_dim % dc.num_heads,
        0,
        "heads do not divide embed_dim"
    );
    assert!(cfg.sample_rate > 0, "sample_rate 0 accepted");
    assert!(
        (1..=1 << 30).contains(&cfg.sample_size),
        "sample_size = {} accepted",
        cfg.sample_size
    );
    assert!(
        (1..=64).contains(&cfg.audio_channels),
        "audio_channels = {} accepted",
        cfg.audio_channels
    );
    for (i, e) in cfg.model.conditioning.configs.iter().enumerate() {
        e.settings_at(&cfg.path, i)
            .expect("accepted conditioner types");
    }
    if let Ok((_, t5)) = cfg.prompt_conditioner() {
        assert!((1..=MAX_WIDTH).contains(&t5.max_length), "max_length");
    }
    for (_, n) in cfg.number_conditioners().expect("accepted numbers type") {
        assert!(n.max_val > n.min_val, "number range");
        assert!((n.max_val - n.min_val).is_finite(), "infinite number range");
    }
}

fn check_ae(ae: &AutoencoderConfig) {
    assert!(ae.sample_rate > 0, "autoencoder at 0 Hz");
    width("audio_channels", ae.audio_channels);
    width("latent_dim", ae.latent_dim);
    assert!(ae.patch_size >= 1 && ae.downsampling_ratio >= 1 && ae.latent_align >= 1);
}

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz/model_config.json");
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    match ModelConfig::from_value(value.clone(), path, Path::new("fuzz")) {
        Ok(cfg) => check_dit(&cfg),
        Err(e) => assert!(e.to_string().contains("model_config.json"), "unnamed: {e}"),
    }
    match AutoencoderConfig::from_json(&value, path) {
        Ok(ae) => check_ae(&ae),
        Err(e) => assert!(e.to_string().contains("model_config.json"), "unnamed: {e}"),
    }
});
