//! Extraction on the random-weight fixture model with a synthetic direction: the positive set
//! is the negative set with `α·n̄·d` added after block 0, so difference in means must recover
//! `d`, the probe must separate the sets there, and the dose-response of a steering along the
//! extracted direction must be monotone at low strength.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use aria::pipeline::{AudioOutput, GenerateRequest, Pipeline, RunOptions};
use aria::SeededNoise;
use aria_core::hooks::{ActivationHook, HookList};
use aria_core::Tensor;
use aria_steer::direction::{normalize, ContrastSet};
use aria_steer::extract::{build_direction_file, BlockContrast, ExtractionInfo};
use aria_steer::{
    DirectionFile, ModelIdentity, NormScope, ResidualCapture, Site, SteerError, SteerOp, Steering,
    SteeringHook,
};
use aria_testing::TempDir;

fn gen(pipe: &Pipeline, prompt: &str, seed: u64, hook: Option<&dyn ActivationHook>) -> Tensor {
    let mut req = GenerateRequest::new(prompt, 0.1);
    req.duration_padding_sec = 0.1;
    let mut noise = SeededNoise::new(seed);
    pipe.run(
        &req,
        &mut noise,
        RunOptions {
            hook,
            audio: AudioOutput::Skip,
            ..Default::default()
        },
    )
    .unwrap()
    .latents
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

#[test]
fn recovers_a_synthetic_direction() {
    let Some((pipe, _)) = common::pipeline("sa3-tiny") else {
        return;
    };
    let cfg = pipe.dit().config();
    let (e, depth) = (cfg.embed_dim, cfg.depth);
    let blocks: Vec<usize> = (0..depth).collect();
    let raw: Vec<f32> = (0..e)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) + 0.5 * (i as f32).cos())
        .collect();
    let (d, _) = normalize(&raw, "synthetic").unwrap();
    let prompts = [
        "warm ambient pad",
        "dusty vinyl drums",
        "bright synth lead",
        "deep bass",
    ];

    let capture = Arc::new(ResidualCapture::new(&blocks, NormScope::ValidLatentTokens));
    let mut pos: Vec<Vec<Vec<f32>>> = vec![Vec::new(); depth];
    let mut neg: Vec<Vec<Vec<f32>>> = vec![Vec::new(); depth];
    for (i, p) in prompts.iter().enumerate() {
        for seed in [11u64, 12] {
            let s = seed + 10 * i as u64;
            // negative: plain
            let mut list = HookList::new();
            list.push(capture.clone());
            gen(&pipe, p, s, list.as_hook());
            for (k, v) in capture.take_samples().unwrap() {
                neg[k].extend(v);
            }
            // positive: the synthetic direction injected after block 0, captured after it
            let inject =
                Steering::new(Site::Residual(0), SteerOp::Add, 0.3, d.clone(), 6.8).unwrap();
            let mut list = HookList::new();
            list.push(Arc::new(SteeringHook::from_steerings(vec![inject])));
            list.push(capture.clone());
            gen(&pipe, p, s, list.as_hook());
            for (k, v) in capture.take_samples().unwrap() {
                pos[k].extend(v);
            }
        }
    }
    let files = pipe.files();
    let id = ModelIdentity::from_model_files(&files.config, &files.weights).unwrap();
    let bcs: Vec<BlockContrast> = blocks
        .iter()
        .map(|&k| BlockContrast {
            block: k,
            pos: pos[k].clone(),
            neg: neg[k].clone(),
            mean_norm: capture.mean_norm(k).unwrap().unwrap(),
        })
        .collect();
    let info = ExtractionInfo {
        model: id.clone(),
        positive: ContrastSet {
            name: "injected".into(),
            count: 8,
        },
        negative: ContrastSet {
            name: "plain".into(),
            count: 8,
        },
        norm_scope: NormScope::ValidLatentTokens,
        folds: 4,
    };
    let file = build_direction_file(&bcs, &info).unwrap();
    let got = &file.entry(Site::Residual(0)).unwrap().direction;
    let cos = dot(got, &d);
    eprintln!("block 0: cosine with the synthetic direction {cos:.5}");
    eprintln!(
        "probe accuracy per block: {:?}, best {:?}",
        file.meta.probe_accuracy, file.meta.best_block
    );
    assert!(cos > 0.99, "extracted direction has cosine {cos}");
    let acc0 = file
        .meta
        .probe_accuracy
        .iter()
        .find(|(b, _)| *b == 0)
        .unwrap()
        .1;
    assert!(acc0 >= 0.95, "block 0 probe accuracy {acc0}");
    assert!(file.meta.best_block.is_some());
    assert!(file.entries.iter().all(|e| e.mean_norm > 0.0));

    // Round trip, model check, `force`.
    let dir = TempDir::new("steer-extract");
    let path = dir.join("synthetic.safetensors");
    file.save(&path).unwrap();
    let loaded = DirectionFile::load_for(&path, &id, false).unwrap();
    assert_eq!(loaded, file);
    let mut other = id.clone();
    other.weight_checksum = "0000000000000000".into();
    let err = DirectionFile::load_for(&path, &other, false).unwrap_err();
    assert!(matches!(err, SteerError::ModelMismatch { .. }), "{err}");
    DirectionFile::load_for(&path, &other, true).unwrap();
    let mut narrow = id.clone();
    narrow.dims.embed_dim += 1;
    let err = DirectionFile::load_for(&path, &narrow, true).unwrap_err();
    assert!(
        matches!(err, SteerError::Dimension { .. }),
        "force does not skip dimensions: {err}"
    );

    // Dose-response along the extracted direction, seed-matched: the block-0 residual's
    // projection and the latents' drift from the baseline grow monotonically with α.
    let entry = loaded.entry(Site::Residual(0)).unwrap();
    let cap = Arc::new(ResidualCapture::new(&[0], NormScope::ValidLatentTokens));
    let mut last = (f64::NEG_INFINITY, -1.0f32);
    let mut base: Option<Vec<f32>> = None;
    for alpha in [0.0f32, 0.02, 0.04, 0.06, 0.08] {
        let mut list = HookList::new();
        list.push(Arc::new(SteeringHook::from_steerings(vec![
            Steering::from_entry(entry, SteerOp::Add, alpha).unwrap(),
        ])));
        list.push(cap.clone());
        let lat = gen(&pipe, "warm ambient pad", 99, list.as_hook())
            .to_vec_f32()
            .unwrap();
        let proj = dot(&cap.take_samples().unwrap()[&0][0], &entry.direction);
        let b = base.get_or_insert_with(|| lat.clone());
        let drift = aria_testing::fixtures::max_abs_diff(&lat, b);
        eprintln!("alpha {alpha}: projection {proj:.5}, drift {drift:.3e}");
        assert!(proj > last.0 && drift > last.1 || alpha == 0.0 && drift == 0.0);
        last = (proj, drift);
    }
}
