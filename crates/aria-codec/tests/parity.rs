#![allow(clippy::unwrap_used)]
//! Parity against the official PyTorch SAME (fixtures sa3-tiny = SAME-S structure,
//! sa3-tiny-medium = SAME-L structure).

mod common;

use aria_codec::{NoiseSource, ReplayNoise};
use common::{check, model, tensors};

const TOL: f32 = 5e-6;

fn decode_groups(folder: &str) {
    let Some(ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_decode.safetensors")) else {
        return;
    };
    let depth = ae.config().decoder.depth();
    for g in ["dec_even", "dec_odd"] {
        let z = t.get_any(&format!("in.{g}.latents")).unwrap();
        let tr = ae.decode_traced(&z, None).unwrap();
        check(
            &format!("{folder} {g} bottleneck_out"),
            &tr.bottleneck_out,
            &t,
            &format!("{g}.bottleneck_out"),
            TOL,
        );
        assert_eq!(tr.block_outputs.len(), depth);
        for (i, b) in tr.block_outputs.iter().enumerate() {
            check(
                &format!("{folder} {g} block_{i}_out"),
                b,
                &t,
                &format!("{g}.block_{i}_out"),
                TOL,
            );
        }
        check(
            &format!("{folder} {g} patches"),
            &tr.patches,
            &t,
            &format!("{g}.patches"),
            TOL,
        );
        check(
            &format!("{folder} {g} audio"),
            &tr.audio,
            &t,
            &format!("{g}.audio"),
            TOL,
        );
        let via = ae.decode_default(&z, None).unwrap();
        check(
            &format!("{folder} {g} via pretransform"),
            &via,
            &t,
            &format!("{g}.audio_via_pretransform_decode"),
            TOL,
        );
    }
}

#[test]
fn same_s_decode_even_odd() {
    decode_groups("sa3-tiny");
}

#[test]
fn same_l_decode_even_odd() {
    decode_groups("sa3-tiny-medium");
}

fn noise_group(folder: &str) {
    let Some(ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_decode.safetensors")) else {
        return;
    };
    let z = t.get_any("in.dec_even.latents").unwrap();
    let mut noise = ReplayNoise::new(vec![
        t.get_any("in.dec_noise.draw_0").unwrap(),
        t.get_any("in.dec_noise.draw_1").unwrap(),
    ]);
    let a = ae
        .decode(&z, Some(&mut noise as &mut dyn NoiseSource))
        .unwrap();
    assert_eq!(noise.remaining(), 0, "every stored draw consumed");
    check(
        &format!("{folder} dec_noise audio"),
        &a,
        &t,
        "dec_noise.audio",
        TOL,
    );
    // The noise is real behaviour: switching it off changes the output.
    let quiet = ae.decode(&z, None).unwrap();
    let e = aria_testing::fixtures::rel_err(&quiet.to_vec_f32().unwrap(), &a.to_vec_f32().unwrap());
    assert!(e > 1e-3, "noise had no visible effect ({e:.2e})");
}

#[test]
fn same_s_decode_noise() {
    noise_group("sa3-tiny");
}

#[test]
fn same_l_decode_noise() {
    noise_group("sa3-tiny-medium");
}

fn chunked_group(folder: &str) {
    let Some(ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_decode.safetensors")) else {
        return;
    };
    let z = t.get_any("in.dec_chunked.latents").unwrap();
    assert_eq!(aria_codec::chunk_starts(300, 128, 32), vec![0, 96, 172]);
    let c = ae.decode_chunked(&z, None).unwrap();
    check(
        &format!("{folder} dec_chunked chunked"),
        &c,
        &t,
        "dec_chunked.audio_chunked",
        TOL,
    );
    let u = ae.decode(&z, None).unwrap();
    check(
        &format!("{folder} dec_chunked unchunked"),
        &u,
        &t,
        "dec_chunked.audio_unchunked",
        TOL,
    );
}

#[test]
fn same_s_decode_chunked() {
    chunked_group("sa3-tiny");
}

#[test]
fn same_l_decode_chunked() {
    chunked_group("sa3-tiny-medium");
}

fn encode_group(folder: &str) {
    let Some(ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_encode.safetensors")) else {
        return;
    };
    let w = t.get_any("in.enc.waveform").unwrap();
    let tr = ae.encode_traced(&w, None).unwrap();
    check(
        &format!("{folder} enc patches"),
        &tr.patches,
        &t,
        "enc.patches",
        TOL,
    );
    check(
        &format!("{folder} enc pre_bottleneck"),
        &tr.pre_bottleneck,
        &t,
        "enc.pre_bottleneck",
        TOL,
    );
    check(
        &format!("{folder} enc latents"),
        &tr.latents,
        &t,
        "enc.latents",
        TOL,
    );
    let via = ae.encode_chunked(&w, None).unwrap();
    check(
        &format!("{folder} enc via pretransform"),
        &via,
        &t,
        "enc.latents_via_pretransform_encode",
        TOL,
    );
}

#[test]
fn same_s_encode() {
    encode_group("sa3-tiny");
}

#[test]
fn same_l_encode() {
    encode_group("sa3-tiny-medium");
}

/// Audio-to-audio input path: the official `prepare_audio` (torchaudio resampling 48 kHz →
/// 44.1 kHz, zero padding) and the encoder with its new-token noise on (stored draw).
#[test]
fn same_l_prepare_audio_and_noisy_encode() {
    let Some(t) = tensors("sa3-tiny-medium/a2a.safetensors") else {
        return;
    };
    let Some(cfg_path) = aria_testing::fixtures::fixture("sa3-tiny-medium/model_config.json")
    else {
        return;
    };
    let Some(weights) = aria_testing::fixtures::fixture("sa3-tiny-medium/model.safetensors") else {
        return;
    };
    let init = t.get_any("in.a2a.init_audio").unwrap();
    let want = t.get_any("out.a2a.prepared_audio").unwrap();
    let clip = aria_codec::audio::AudioClip {
        data: init,
        sample_rate: 48000,
    };
    let got = aria_codec::audio::prepare_audio(&clip, 44100, Some(want.shape()[2]), 2).unwrap();
    check("a2a prepared_audio", &got, &t, "a2a.prepared_audio", 1e-5);

    let mut cfg = aria_codec::AutoencoderConfig::from_model_config(cfg_path).unwrap();
    cfg.encoder.mask_noise = 0.01; // the fixture's explicit override
    let ae =
        aria_codec::Autoencoder::load(&cfg, &aria_core::WeightLoader::open(&[weights]).unwrap())
            .unwrap();
    let mut noise = ReplayNoise::new(vec![t.get_any("in.a2a.draw_01").unwrap()]);
    let z = ae
        .encode_chunked(&want, Some(&mut noise as &mut dyn NoiseSource))
        .unwrap();
    assert_eq!(noise.remaining(), 0);
    check("a2a encoded_latents", &z, &t, "a2a.encoded_latents", TOL);
}
