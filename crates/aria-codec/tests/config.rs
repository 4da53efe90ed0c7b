#![allow(clippy::unwrap_used)]
//! Typed configuration: both fixture layouts, and errors that name the file and key.

use aria_codec::{AutoencoderConfig, CodecError, SameAttention};
use aria_testing::fixtures::fixture;

#[test]
fn parses_small_and_medium_layouts() {
    let Some(p) = fixture("sa3-tiny/model_config.json") else {
        return;
    };
    let c = AutoencoderConfig::from_model_config(p).unwrap();
    assert_eq!(
        (c.patch_size, c.latent_dim, c.downsampling_ratio),
        (16, 16, 256)
    );
    assert!(c.chunked && !c.soft_clip && c.bottleneck.noise_regularize);
    assert_eq!(c.decoder.mapping_kernel(), 3);
    assert_eq!(c.encoder.mapping_kernel(), 1);
    assert_eq!(
        c.decoder.attention,
        SameAttention::Chunked {
            chunk_size: 32,
            midpoint_shift: true
        }
    );
    assert_eq!(c.decoder.cells_per_chunk(), Some(2));
    assert_eq!(c.decoder.mask_noise, 0.01);
    assert_eq!(c.encoder.mask_noise, 0.0);

    let Some(p) = fixture("sa3-tiny-medium/model_config.json") else {
        return;
    };
    let c = AutoencoderConfig::from_model_config(p).unwrap();
    assert_eq!(
        c.decoder.attention,
        SameAttention::Band { left: 1, right: 1 }
    );
    assert_eq!(c.decoder.band_tokens(), Some((17, 17)));
    assert_eq!(c.decoder.cells_per_chunk(), None);
    assert_eq!(c.decoder.depth(), 3);
    assert!(!c.decoder.is_sinusoidal(1) && c.decoder.is_sinusoidal(2));
    assert!(!c.encoder.is_sinusoidal(2));
}

#[test]
fn errors_name_file_and_key() {
    let Some(p) = fixture("sa3-tiny/model_config.json") else {
        return;
    };
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["model"]["pretransform"]["config"]["decoder"]["config"]
        .as_object_mut()
        .unwrap()
        .remove("latent_dim");
    let e = AutoencoderConfig::from_json(&v, "cfg.json").unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, CodecError::Config { .. }));
    assert!(
        s.contains("cfg.json") && s.contains("model.pretransform.config.decoder.config.latent_dim"),
        "{s}"
    );

    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["model"]["pretransform"]["config"]["bottleneck"]["type"] = "vae".into();
    let s = AutoencoderConfig::from_json(&v, "cfg.json")
        .unwrap_err()
        .to_string();
    assert!(
        s.contains("bottleneck.type") && s.contains("vae") && s.contains("allowed: `softnorm`"),
        "{s}"
    );

    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["model"]["pretransform"]["type"] = "dac".into();
    let s = AutoencoderConfig::from_json(&v, "cfg.json")
        .unwrap_err()
        .to_string();
    assert!(
        s.contains("model.pretransform.type") && s.contains("allowed: `autoencoder`"),
        "{s}"
    );

    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["model"]["pretransform"]["config"]["decoder"]["config"]["sliding_window"] =
        serde_json::json!([1, 2, 3]);
    let s = AutoencoderConfig::from_json(&v, "cfg.json")
        .unwrap_err()
        .to_string();
    assert!(s.contains("decoder.config.sliding_window"), "{s}");

    let e = AutoencoderConfig::from_model_config("/nonexistent/model_config.json").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model_config.json"));
}
