//! Shared helpers of the DiT / sampler / LoRA parity tests (included with `#[path]`).
#![allow(dead_code, clippy::unwrap_used)]

use aria_core::{Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;
use aria_testing::fixtures::{fixture, fixture_tensors};

/// The DiT of a fixture model folder (`sa3-tiny`, `sa3-tiny-medium`, `sa3-tiny-extra`), or
/// `None` (skipped) when fixtures are absent.
pub fn load_dit(folder: &str) -> Option<(ModelConfig, Dit)> {
    let cfg_path = fixture(&format!("{folder}/model_config.json"))?;
    let model = fixture(&format!("{folder}/model.safetensors"))?;
    let cfg = ModelConfig::from_file(cfg_path).unwrap();
    let loader = WeightLoader::open_checkpoint(model).unwrap();
    let dit = Dit::load(&cfg.model.diffusion.config, &loader.pp("model.model")).unwrap();
    Some((cfg, dit))
}

/// A fixture tensor file, or `None` (skipped).
pub fn tensors(rel: &str) -> Option<WeightLoader> {
    fixture_tensors(rel).map(|r| r.unwrap())
}

/// Tensor `name` of `w` as f32.
pub fn get(w: &WeightLoader, name: &str) -> Tensor {
    w.get_any(name)
        .unwrap()
        .to_dtype(aria_core::DType::F32)
        .unwrap()
}

/// Tensor `name` if present.
pub fn try_get(w: &WeightLoader, name: &str) -> Option<Tensor> {
    w.contains(name).then(|| get(w, name))
}
