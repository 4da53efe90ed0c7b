#![allow(clippy::unwrap_used)]
//! Loading: standalone autoencoder files (no `pretransform.model.` prefix), soft clip, and
//! errors naming the missing tensor.

mod common;

use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::{Tensor, WeightLoader};
use aria_testing::fixtures::fixture;
use aria_testing::TempDir;
use common::{assert_bits_eq, tensors};

fn cfg() -> Option<AutoencoderConfig> {
    Some(AutoencoderConfig::from_model_config(fixture("sa3-tiny/model_config.json")?).unwrap())
}

#[test]
fn standalone_file_without_prefix_loads_the_same_model() {
    let Some(cfg) = cfg() else { return };
    let Some(weights) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let Some(t) = tensors("sa3-tiny/same_decode.safetensors") else {
        return;
    };
    let full = WeightLoader::open(&[&weights]).unwrap();
    let ae = full.pp("pretransform.model");
    let owned: Vec<(String, Tensor)> = ae
        .names()
        .into_iter()
        .map(|n| (n.clone(), ae.get_any(&n).unwrap()))
        .collect();
    let refs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let dir = TempDir::new("codec-standalone");
    let path = dir.join("same.safetensors");
    aria_core::save_safetensors(&path, &refs, None).unwrap();

    let a = Autoencoder::load(&cfg, &full).unwrap();
    let b = Autoencoder::load(&cfg, &WeightLoader::open(&[&path]).unwrap()).unwrap();
    let z = t.get_any("in.dec_even.latents").unwrap();
    assert_bits_eq(
        "standalone vs prefixed",
        &b.decode(&z, None).unwrap(),
        &a.decode(&z, None).unwrap(),
    );
}

#[test]
fn soft_clip_applies_tanh() {
    let Some(mut cfg) = cfg() else { return };
    let Some(weights) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let Some(t) = tensors("sa3-tiny/same_decode.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[weights]).unwrap();
    let plain = Autoencoder::load(&cfg, &loader).unwrap();
    cfg.soft_clip = true;
    let clipped = Autoencoder::load(&cfg, &loader).unwrap();
    let z = t.get_any("in.dec_even.latents").unwrap();
    let p = plain.decode(&z, None).unwrap().to_vec_f32().unwrap();
    let c = clipped.decode(&z, None).unwrap().to_vec_f32().unwrap();
    assert!(
        p.iter().zip(&c).any(|(x, y)| x != y),
        "soft clip changed nothing"
    );
    for (x, y) in p.iter().zip(&c) {
        assert_eq!(x.tanh().to_bits(), y.to_bits());
    }
}

#[test]
fn missing_tensor_is_named() {
    let Some(cfg) = cfg() else { return };
    let Some(weights) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[weights]).unwrap().pp("model.model");
    let e = Autoencoder::load(&cfg, &loader).unwrap_err().to_string();
    assert!(
        e.contains("model.model.encoder.layers.0.mapping.weight_g"),
        "{e}"
    );
}
