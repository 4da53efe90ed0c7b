//! Item `i` of a batch is the request run alone, bit for bit: with a [`BatchNoise`] every draw
//! (initial noise, each ping-pong step's noise, the decoder's bottleneck and new-token noise)
//! comes from the item's own seed, and every batched op (text encoder, DiT GEMMs and
//! attention, guidance, decoder) computes each row as it does in a batch of one.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use aria::discover::{resolve_model, SearchPaths};
use aria::noise::{BatchNoise, SeedGenerator};
use aria::pipeline::{RunOptions, SameNoise};
use aria::synth::{self, Preset};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::{DType, Tensor};
use aria_testing::{SharedTempDir, TempDir};

/// The tiny model, shared by the tests of this binary that run at the same time (removed when
/// the last of them finishes).
fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("batch-items-model");
    DIR.get(|d| {
        synth::write_model(d, Preset::Tiny, DType::F32, 5, &mut |_, _| {}).unwrap();
    })
}

/// A pipeline of the tiny model, and the model's folder: keep it while the pipeline runs.
fn pipe(opts: &LoadOptions) -> (Pipeline, Arc<TempDir>) {
    let model = model_dir();
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).unwrap();
    (Pipeline::load(&files, opts).unwrap(), model)
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Row `i` of a `[B, …]` tensor.
fn row(t: &Tensor, i: usize) -> Tensor {
    t.narrow(0, i, 1).unwrap().contiguous().unwrap()
}

/// Prompts of different lengths (different token counts), distinct seeds.
fn requests(cfg: f32, negative: bool) -> Vec<(GenerateRequest, u64)> {
    let items = [
        ("rain", 11u64),
        (
            "a slow warm analog synth pad with tape hiss and distant thunder",
            12,
        ),
        ("dry snare roll", 13),
    ];
    items
        .iter()
        .map(|&(p, seed)| {
            let mut r = GenerateRequest::new(p, 1.0);
            r.steps = 4;
            r.cfg_scale = cfg;
            if negative {
                r.negative_prompt = Some(format!("not {p}"));
            }
            (r, seed)
        })
        .collect()
}

/// Run the batch once with per-item noise and each request alone; compare bits.
fn check(p: &Pipeline, cfg: f32, negative: bool) {
    let items = requests(cfg, negative);
    let reqs: Vec<GenerateRequest> = items.iter().map(|(r, _)| r.clone()).collect();
    let seeds: Vec<u64> = items.iter().map(|(_, s)| *s).collect();
    let mut noise = BatchNoise::seeded(SeedGenerator::Torch, &seeds);
    let batch = p
        .run_batch(&reqs, &mut noise, RunOptions::default())
        .unwrap();
    assert_eq!(batch.latents.shape()[0], items.len());
    assert_eq!(batch.audio.shape()[0], items.len());
    let mut alone_audio = Vec::new();
    for (i, (r, seed)) in items.iter().enumerate() {
        let one = p
            .run(r, &mut TorchNoise::new(*seed), RunOptions::default())
            .unwrap();
        assert_eq!(
            bits(&row(&batch.latents, i)),
            bits(&one.latents),
            "latents of item {i} (cfg {cfg}, negative {negative})"
        );
        assert_eq!(
            bits(&row(&batch.audio, i).squeeze(0).unwrap()),
            bits(&one.audio),
            "audio of item {i} (cfg {cfg}, negative {negative})"
        );
        alone_audio.push(bits(&one.audio));
    }
    // The items differ from each other (the comparison is not vacuous).
    assert_ne!(alone_audio[0], alone_audio[1]);
    assert_ne!(alone_audio[1], alone_audio[2]);
}

#[test]
fn batch_items_are_their_requests_alone() {
    let (p, _model) = pipe(&LoadOptions::default());
    check(&p, 1.0, false);
    check(&p, 3.5, false);
    check(&p, 3.5, true);
}

#[test]
fn batch_items_match_with_decoder_noise_on() {
    // The SAME stochastic terms on: bottleneck noise [B, C, T] and new-token noise
    // [B·cells, seg, D] are split per item too.
    let opts = LoadOptions {
        same_noise: Some(SameNoise {
            encoder_mask_noise: 0.0,
            decoder_mask_noise: 0.5,
            bottleneck_noise_regularize: true,
        }),
        ..Default::default()
    };
    let (p, _model) = pipe(&opts);
    check(&p, 3.5, false);
}

#[test]
fn equal_seeds_in_one_batch_give_equal_items() {
    let (p, _model) = pipe(&LoadOptions::default());
    let mut r = GenerateRequest::new("same prompt", 1.0);
    r.steps = 3;
    let reqs = vec![r.clone(), r.clone()];
    let mut noise = BatchNoise::seeded(SeedGenerator::Torch, &[4, 4]);
    let b = p
        .run_batch(&reqs, &mut noise, RunOptions::default())
        .unwrap();
    assert_eq!(bits(&row(&b.audio, 0)), bits(&row(&b.audio, 1)));
    // One shared source (the reference's batch draw) gives the items different noise.
    let shared = p
        .run_batch(&reqs, &mut TorchNoise::new(4), RunOptions::default())
        .unwrap();
    assert_ne!(bits(&row(&shared.audio, 0)), bits(&row(&shared.audio, 1)));
}
