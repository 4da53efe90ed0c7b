#![allow(clippy::unwrap_used, dead_code)]
//! Shared helpers of the integration tests.

use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::{Tensor, WeightLoader};
use aria_testing::fixtures::{fixture, fixture_tensors, rel_err};

/// The autoencoder of a fixture folder (`sa3-tiny` or `sa3-tiny-medium`), or `None` (skipped).
pub fn model(folder: &str) -> Option<Autoencoder> {
    let cfg_path = fixture(&format!("{folder}/model_config.json"))?;
    let weights = fixture(&format!("{folder}/model.safetensors"))?;
    let cfg = AutoencoderConfig::from_model_config(cfg_path).unwrap();
    let loader = WeightLoader::open(&[weights]).unwrap();
    Some(Autoencoder::load(&cfg, &loader).unwrap())
}

/// A fixture tensor file.
pub fn tensors(rel: &str) -> Option<WeightLoader> {
    fixture_tensors(rel).map(|r| r.unwrap())
}

/// Compare with the float32 reference at `tol` and report the error against both references.
pub fn check(what: &str, actual: &Tensor, t: &WeightLoader, name: &str, tol: f32) {
    let r = t.get_any(&format!("out.{name}")).unwrap();
    assert_eq!(actual.shape(), r.shape(), "{what}: shape");
    let a = actual.to_vec_f32().unwrap();
    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite");
    let e32 = rel_err(&a, &r.to_vec_f32().unwrap());
    let e64 = t
        .get_any(&format!("out64.{name}"))
        .ok()
        .map(|r| rel_err(&a, &r.to_vec_f32().unwrap()));
    eprintln!("{what}: rel err vs fp32 {e32:.2e}, vs fp64 {e64:?}");
    assert!(e32 <= tol, "{what}: relative error {e32:.3e} > {tol:.1e}");
    if let Some(e) = e64 {
        assert!(
            e <= tol,
            "{what}: relative error vs fp64 {e:.3e} > {tol:.1e}"
        );
    }
}

/// Bit-exact comparison.
pub fn assert_bits_eq(what: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let (x, y) = (a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert_eq!(
            p.to_bits(),
            q.to_bits(),
            "{what}: element {i} differs: {p} vs {q}"
        );
    }
}
