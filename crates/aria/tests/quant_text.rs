//! The T5Gemma encoder's matrices packed as q8_0 at load (`LoadOptions::quantize_text`): every
//! layer matrix is packed, the conditioning stays close to f32, the final latents stay well
//! under the f32 seed-to-seed spread, and the bf16 replay (which needs the dense weights) is
//! refused with a clear error.
#![cfg(feature = "quant")]
#![allow(clippy::unwrap_used)]

use aria::discover::{resolve_model, ModelFiles, SearchPaths};
use aria::pipeline::{AudioOutput, Precision, RunOptions};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::nn::Weight;
use aria_testing::fixtures::fixture;

const PROMPTS: [&str; 3] = [
    "warm ambient pad",
    "fast techno beat with a deep kick",
    "gentle piano melody in a small room",
];

fn files() -> Option<ModelFiles> {
    let dir = fixture("sa3-tiny-extra")?;
    Some(resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap())
}

fn load(files: &ModelFiles, quantize_text: bool, w8a8: bool) -> Pipeline {
    let opts = LoadOptions {
        quantize_text,
        w8a8,
        // W8A8 needs packed DiT weights too.
        precision: w8a8.then_some(aria::quant::WeightPrecision::Q8),
        ..Default::default()
    };
    Pipeline::load(files, &opts).unwrap()
}

/// `‖a − b‖ / ‖b‖`; infinite on a non-finite value.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    if !a.iter().chain(b).all(|v| v.is_finite()) {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

fn conditioning(p: &Pipeline) -> Vec<f32> {
    let (emb, _mask) = p.text().encode_prompts(&PROMPTS).unwrap();
    emb.to_vec_f32().unwrap()
}

fn latents(p: &Pipeline, seed: u64) -> Vec<f32> {
    let mut r = GenerateRequest::new(PROMPTS[0], 0.5);
    r.steps = 4;
    r.duration_padding_sec = 0.1;
    let opts = RunOptions {
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let out = p.run(&r, &mut TorchNoise::new(seed), opts).unwrap();
    out.latents.to_vec_f32().unwrap()
}

#[test]
fn q8_text_encoder_is_packed_and_close_to_f32() {
    let Some(files) = files() else { return };
    let f32p = load(&files, false, false);
    let q8 = load(&files, true, false);
    let enc = q8.text().prompt().encoder();
    let mut n = 0;
    for l in enc.linears() {
        match l.weight() {
            Weight::Packed(p) => assert_eq!(p.format(), "q8_0/v1", "{}", l.name()),
            Weight::Dense(_) => panic!("{} stayed dense", l.name()),
        }
        n += 1;
    }
    assert!(n >= 7, "only {n} matrices");

    let (a, b) = (conditioning(&f32p), conditioning(&q8));
    let err = rel_rms(&b, &a);
    eprintln!("q8 text encoder: conditioning rel-RMS {err:.2e} against f32");
    assert!(err > 0.0, "packing changed nothing");
    assert!(err < 2e-2, "conditioning error {err}");

    let (l0, l1) = (latents(&f32p, 1), latents(&f32p, 2));
    let floor = rel_rms(&l1, &l0);
    let lerr = rel_rms(&latents(&q8, 1), &l0);
    eprintln!(
        "q8 text encoder: final-latent rel-RMS {lerr:.2e}, f32 seed-to-seed {floor:.3}, ratio {:.2e}",
        lerr / floor
    );
    assert!(lerr < 0.01 * floor, "latent error {lerr} vs floor {floor}");
}

#[test]
fn w8a8_text_encoder_runs_int8_and_stays_close() {
    let Some(files) = files() else { return };
    let f32p = load(&files, false, false);
    let w8 = load(&files, true, true);
    assert!(w8
        .text()
        .prompt()
        .encoder()
        .linears()
        .all(|l| l.weight().kind().contains("+w8a8")));
    let err = rel_rms(&conditioning(&w8), &conditioning(&f32p));
    eprintln!("W8A8 text encoder: conditioning rel-RMS {err:.2e} against f32");
    assert!(err > 0.0 && err < 5e-2, "conditioning error {err}");
}

#[test]
fn bf16_replay_with_a_packed_text_encoder_is_refused() {
    let Some(files) = files() else { return };
    let opts = LoadOptions {
        quantize_text: true,
        text_precision: Some(Precision::Bf16),
        ..Default::default()
    };
    let e = Pipeline::load(&files, &opts).err().unwrap().to_string();
    assert!(e.contains("bf16") && e.contains("text"), "{e}");
}
