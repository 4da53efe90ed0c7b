//! The HTSAT audio tower against the reference's recorded boundaries (random weights at the
//! tiny fixture shapes), plus its input checks.
//!
//! Boundaries with a float64 twin (`<name>.f64`) must lie within 1e-5 of it. The early ones have
//! no twin (size); there the reference's own f32 run is the comparison, and the bound is that
//! run's recorded distance from float64 (`manifest.json`) plus 1e-5: this tower computes the
//! bicubic stretch with f64 coordinates and weights, so it tracks the float64 run, not the f32
//! one's rounding of the stretch.

mod support;

use std::path::Path;

use aria_clap::audio::{AudioOutput, AudioTower};
use aria_clap::{ClapConfig, ClapError};
use aria_core::{Tensor, WeightLoader};

/// Tolerance against the float64 run (`max|Δ| / max|ref|`).
const TOL: f64 = 1e-5;

fn load(dir: &Path) -> (ClapConfig, AudioTower) {
    let cfg = ClapConfig::from_file(dir.join("config.json")).expect("config");
    let vb = WeightLoader::open(&[dir.join("model.safetensors")]).expect("weights");
    let tower = AudioTower::load(&vb.pp("audio_model"), &cfg.audio_config).expect("audio tower");
    (cfg, tower)
}

/// The fixture's audio batch: the short, exact and long clips' features, concatenated.
fn input(dir: &Path) -> Tensor {
    let fx = support::Tensors::open(&dir.join("features.safetensors"));
    let mode = if fx.has("fusion.short.input_features") {
        "fusion"
    } else {
        "rand_trunc"
    };
    let parts: Vec<Tensor> = ["short", "exact", "long"]
        .iter()
        .map(|clip| {
            let (shape, data) = fx.get(&format!("{mode}.{clip}.input_features"));
            Tensor::from_vec(data.iter().map(|&v| v as f32).collect(), shape).expect("features")
        })
        .collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::cat(&refs, 0).expect("batch")
}

fn flags(fx: &support::Tensors, name: &str) -> Vec<bool> {
    fx.get(name).1.iter().map(|&v| v != 0.0).collect()
}

/// The reference f32 run's distance from float64 at `name`, from the manifest.
fn f32_floor(manifest: &serde_json::Value, name: &str) -> f64 {
    manifest["tensors"][name]["tolerance"]["fp32_vs_fp64"]["max_abs_over_max_ref"]
        .as_f64()
        .unwrap_or_else(|| panic!("manifest: no f32-vs-float64 statistic for {name}"))
}

/// Compare one traced boundary; returns its error.
fn compare(
    fx: &support::Tensors,
    manifest: &serde_json::Value,
    name: &str,
    t: &Tensor,
) -> aria_core::Result<f64> {
    let v = t.to_vec_f32()?;
    let twin = format!("{name}.f64");
    let (reference, tol) = if fx.has(&twin) {
        (fx.get(&twin), TOL)
    } else {
        (fx.get(name), f32_floor(manifest, name) + TOL)
    };
    Ok(support::check(name, t.shape(), &v, reference, tol))
}

fn run(folder: &str) {
    let Some(dir) = support::folder(folder) else {
        return;
    };
    let (_, tower) = load(&dir);
    let fx = support::Tensors::open(&dir.join("audio.safetensors"));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest"),
    )
    .expect("manifest json");
    let x = input(&dir);
    let longer = flags(&fx, "audio.is_longer");
    let mut seen = Vec::new();
    let out = tower
        .forward_traced(&x, &longer, &mut |name, t| {
            if fx.has(name) {
                compare(&fx, &manifest, name, t)?;
                seen.push(name.to_string());
            }
            Ok(())
        })
        .expect("forward");
    // Every recorded tower boundary was produced and compared.
    for name in fx.map.keys() {
        let own = !name.ends_with(".f64")
            && !name.starts_with("audio.mixed.")
            && !["audio.is_longer", "audio.proj", "audio.embeds"].contains(&name.as_str());
        assert!(!own || seen.contains(name), "{name} was not traced");
    }
    // `forward` computes what `forward_traced` does.
    let plain = tower.forward(&x, &longer).expect("forward");
    assert_eq!(
        plain.pooler.to_vec_f32().expect("pooler"),
        out.pooler.to_vec_f32().expect("pooler")
    );
    // Fused: the same clips with the flags of one extractor call on all three.
    if fx.has("audio.mixed.is_longer") {
        let mixed = tower
            .forward(&x, &flags(&fx, "audio.mixed.is_longer"))
            .expect("forward");
        compare(&fx, &manifest, "audio.mixed.pooler", &mixed.pooler).expect("compare");
    }
}

#[test]
fn audio_tower_matches_reference_unfused() {
    run("clap-tiny-unfused");
}

#[test]
fn audio_tower_matches_reference_fused() {
    run("clap-tiny-fused");
}

fn shape_error(r: aria_clap::Result<AudioOutput>) -> String {
    match r {
        Err(ClapError::Shape { what, .. }) => what,
        Err(e) => panic!("expected a shape error, got {e}"),
        Ok(_) => panic!("expected a shape error, got an output"),
    }
}

#[test]
fn audio_tower_rejects_bad_inputs() {
    let Some(dir) = support::folder("clap-tiny-unfused") else {
        return;
    };
    let (cfg, tower) = load(&dir);
    let f = cfg.audio_config.num_mel_bins;
    let t = tower.max_frames();
    let zeros = |s: &[usize]| Tensor::zeros(s, aria_core::DType::F32);
    // Rank, channels, mel bins, too many frames, no frames, an empty batch.
    for s in [
        vec![1, t, f],
        vec![1, 4, 100, f],
        vec![1, 1, 100, f + 1],
        vec![1, 1, t + 1, f],
        vec![1, 1, 0, f],
        vec![0, 1, 100, f],
    ] {
        let what = shape_error(tower.forward(&zeros(&s), &[]));
        assert!(what.contains("audio"), "{what}");
    }
    let what = shape_error(tower.forward(&zeros(&[2, 1, 100, f]), &[true]));
    assert!(what.contains("is_longer"), "{what}");
    // A short clip is stretched, a full-length one is not: both run.
    for frames in [1, 37, t] {
        let out = tower
            .forward(&zeros(&[1, 1, frames, f]), &[])
            .expect("forward");
        assert_eq!(out.pooler.shape(), &[1, cfg.audio_config.hidden_size]);
        assert_eq!(out.last_hidden_state.dim(0).expect("batch"), 1);
    }
}
