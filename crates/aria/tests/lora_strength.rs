//! LoRA strengths changed between requests without reloading: the re-merge from the
//! checkpoint weights gives the bits of a fresh load at that strength (DiT and duration
//! embedder), strength 0 and removal give the base model's. Blends of files of different
//! families likewise: several at once, each at its own strength, strengths changed, files
//! removed and added between requests — always the bits of a fresh load with that stack.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioOutput, RunOptions};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_testing::fixtures::fixture;

fn bits(t: &aria_core::Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Latents of a short generation and the duration embedding of two values.
fn run(p: &Pipeline) -> (Vec<u32>, Vec<u32>) {
    let mut r = GenerateRequest::new("warm ambient pad", 0.2);
    r.steps = 3;
    r.duration_padding_sec = 0.1;
    let opts = RunOptions {
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let out = p.run(&r, &mut TorchNoise::new(3), opts).unwrap();
    let e = p.seconds_embedding(&[0.2, 37.0]).unwrap();
    (bits(&out.latents), bits(&e))
}

#[test]
fn strength_changes_without_reloading() {
    let Some(dir) = fixture("sa3-tiny-extra") else {
        return;
    };
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    let lora = dir.join("lora_std.safetensors");
    let load = |s: Option<f32>| {
        let opts = LoadOptions {
            loras: s.map(|s| vec![(lora.clone(), s)]).unwrap_or_default(),
            ..Default::default()
        };
        Pipeline::load(&files, &opts).unwrap()
    };
    let base = run(&load(None));
    let at07 = run(&load(Some(0.7)));
    let at03 = run(&load(Some(0.3)));
    assert_ne!(at07.0, base.0);
    assert_ne!(at07.1, base.1, "the LoRA reaches the duration embedder");

    let mut p = load(Some(0.7));
    p.set_lora_strength(0, 0.3).unwrap();
    assert_eq!(run(&p), at03);
    p.set_lora_strength(0, 0.0).unwrap();
    assert_eq!(run(&p), base);
    p.set_lora_strength(0, 0.7).unwrap();
    assert_eq!(run(&p), at07);
    assert!(p.set_lora_strength(1, 0.5).is_err());
    assert!(p.set_lora_strength(0, f32::NAN).is_err());
    p.remove_lora(0).unwrap();
    assert_eq!(run(&p), base);
    p.add_lora(&lora, 0.7).unwrap();
    assert_eq!(run(&p), at07);
    assert_eq!(p.loras().len(), 1);
}

#[test]
fn blends_change_without_reloading() {
    let Some(dir) = fixture("sa3-tiny-extra") else {
        return;
    };
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    // lora (DiT + duration embedder), bora (layer 1) and lora-xs (SVD bases, every layer).
    let f: Vec<PathBuf> = ["lora_std", "lora_bora", "lora_xs"]
        .iter()
        .map(|n| dir.join(format!("{n}.safetensors")))
        .collect();
    let load = |stack: &[(usize, f32)]| {
        let opts = LoadOptions {
            loras: stack.iter().map(|&(i, s)| (f[i].clone(), s)).collect(),
            ..Default::default()
        };
        Pipeline::load(&files, &opts).unwrap()
    };
    let base = run(&load(&[]));
    let blend = run(&load(&[(0, 0.7), (1, 0.4), (2, 0.5)]));
    let other = run(&load(&[(0, 0.2), (1, 1.0), (2, 0.0)]));
    let two = run(&load(&[(1, 0.4), (2, 0.5)]));
    let reordered = run(&load(&[(1, 0.4), (2, 0.5), (0, 0.7)]));
    assert_ne!(blend.0, base.0);
    assert_ne!(blend.0, other.0);
    assert_ne!(
        blend.0, reordered.0,
        "the stack order matters for DoRA-like families"
    );

    let mut p = load(&[(0, 0.7), (1, 0.4), (2, 0.5)]);
    assert_eq!(run(&p), blend);
    p.set_lora_strength(0, 0.2).unwrap();
    p.set_lora_strength(1, 1.0).unwrap();
    p.set_lora_strength(2, 0.0).unwrap();
    assert_eq!(run(&p), other);
    p.set_lora_strength(0, 0.7).unwrap();
    p.set_lora_strength(1, 0.4).unwrap();
    p.set_lora_strength(2, 0.5).unwrap();
    assert_eq!(run(&p), blend);
    p.remove_lora(0).unwrap();
    assert_eq!(run(&p), two);
    p.add_lora(&f[0], 0.7).unwrap();
    assert_eq!(run(&p), reordered);
    for i in 0..3 {
        p.set_lora_strength(i, 0.0).unwrap();
    }
    assert_eq!(run(&p), base);
}
