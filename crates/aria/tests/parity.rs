//! End-to-end parity: the reference `generate()` cases of the fixtures replayed through
//! [`aria::Pipeline`] with every recorded random draw injected in call order. Latents and
//! audio must match the reference within 1e-5 relative (max |Δ| / max |ref|).
#![allow(clippy::unwrap_used)]

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{
    GenerateRequest, InitAudio, Inpaint, LoadOptions, Pipeline, Precision, SameNoise,
};
use aria::{AudioClip, ReplayNoise, SamplerKind};
use aria_core::{Tensor, WeightLoader};
use aria_dit::conditioner::Conditioning;
use aria_testing::fixtures::{fixture, rel_err};

const TOL: f32 = 1e-5;

fn pipeline(folder: &str, same_noise: Option<SameNoise>) -> Option<Pipeline> {
    let dir = fixture(folder)?;
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    Some(
        Pipeline::load(
            &files,
            &LoadOptions {
                same_noise,
                // The replay of the reference's bf16 text encoder (the default is f32).
                text_precision: Some(Precision::Bf16),
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

/// The reference value: `out64.<key>` when stored (accumulation-order independent), else `out.<key>`.
fn reference(w: &WeightLoader, key: &str) -> Tensor {
    let k64 = format!("out64.{key}");
    if w.contains(&k64) {
        w.get_any(&k64).unwrap()
    } else {
        w.get_any(&format!("out.{key}")).unwrap()
    }
}

fn check(what: &str, actual: &Tensor, reference: &Tensor) {
    check_tol(what, actual, reference, TOL);
}

fn check_tol(what: &str, actual: &Tensor, reference: &Tensor, tol: f32) {
    assert_eq!(actual.shape(), reference.shape(), "{what}: shape");
    let e = rel_err(
        &actual.to_vec_f32().unwrap(),
        &reference.to_vec_f32().unwrap(),
    );
    eprintln!("{what}: relative error {e:.2e}");
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.0e}");
}

/// The DiT conditioning generate() handed to the DiT (stored as `out.<case>.dit_in.*`).
fn dit_in(w: &WeightLoader, case: &str) -> (Conditioning, Option<Conditioning>) {
    let g = |k: &str| w.get_any(&format!("out.{case}.dit_in.{k}")).unwrap();
    let pos = Conditioning {
        cross_attn_cond: g("cross_attn_cond"),
        cross_attn_mask: g("cross_attn_mask"),
        global_cond: g("global_cond"),
    };
    let neg = w
        .contains(&format!("out.{case}.dit_in.negative_cross_attn_cond"))
        .then(|| Conditioning {
            cross_attn_cond: g("negative_cross_attn_cond"),
            cross_attn_mask: g("negative_cross_attn_mask"),
            global_cond: g("global_cond"),
        });
    (pos, neg)
}

/// Replay a case twice: with the conditioning generate() handed to the DiT injected (the DiT →
/// sampler → decoder chain alone), and from the text (tokenizer and bf16 text encoder too).
fn run(pipe: &Pipeline, file: &std::path::Path, case: &str, req: &GenerateRequest, prefix: &str) {
    run_tol(pipe, file, case, req, prefix, TOL);
    if req.conditioning.is_some() {
        let mut from_text = req.clone();
        from_text.conditioning = None;
        eprintln!("{case}: from the text");
        run_tol(pipe, file, case, &from_text, prefix, TOL);
    }
}

fn run_tol(
    pipe: &Pipeline,
    file: &std::path::Path,
    case: &str,
    req: &GenerateRequest,
    prefix: &str,
    tol: f32,
) {
    let w = WeightLoader::open(&[file]).unwrap();
    let mut noise = ReplayNoise::open(file, prefix).unwrap();
    let out = pipe
        .generate(
            req,
            &mut noise,
            &mut |_| std::ops::ControlFlow::Continue(()),
        )
        .unwrap();
    assert_eq!(
        noise.remaining(),
        0,
        "{case}: every recorded draw is consumed"
    );
    let key = |k: &str| {
        if case == "e2e" {
            k.to_string()
        } else {
            format!("{case}.{k}")
        }
    };
    let (lat, aud) = if case == "e2e" {
        (w.get_any("latents").unwrap(), w.get_any("audio").unwrap())
    } else {
        (reference(&w, &key("latents")), reference(&w, &key("audio")))
    };
    check_tol(&format!("{case} latents"), &out.latents, &lat, tol);
    check_tol(
        &format!("{case} audio"),
        &out.audio.unsqueeze(0).unwrap(),
        &aud,
        tol,
    );
}

fn e2e(folder: &str, tol: f32) {
    let Some(pipe) = pipeline(folder, None) else {
        return;
    };
    let Some(file) = fixture(&format!("{folder}/e2e.safetensors")) else {
        return;
    };
    let mut req = GenerateRequest::new("warm ambient pad", 0.1);
    req.duration_padding_sec = 0.1;
    run_tol(&pipe, &file, "e2e", &req, "", tol);
}

/// generate(prompt='warm ambient pad', duration=0.1, duration_padding_sec=0.1, steps=8,
/// seed=123), text encoder included (its default bf16 arithmetic, reproduced exactly), SAME
/// noise at the config values.
#[test]
fn e2e_small_structure() {
    e2e("sa3-tiny", TOL);
}

#[test]
fn e2e_medium_structure() {
    e2e("sa3-tiny-medium", TOL);
}

fn cfg_case(folder: &str, case: &str, apg: f32, sampler: Option<SamplerKind>) {
    let Some(pipe) = pipeline(folder, Some(SameNoise::OFF)) else {
        return;
    };
    let Some(file) = fixture(&format!("{folder}/cfg.safetensors")) else {
        return;
    };
    let w = WeightLoader::open(&[&file]).unwrap();
    let mut req = GenerateRequest::new("lofi house loop", 0.1);
    req.negative_prompt = Some("harsh noise".into());
    req.cfg_scale = 3.0;
    req.apg_scale = apg;
    req.sampler = sampler;
    req.duration_padding_sec = 0.1;
    req.conditioning = Some(dit_in(&w, case));
    run(&pipe, &file, case, &req, &format!("in.{case}."));
}

/// B = 2 (`cfg_b2`): two prompts, negative prompts (one empty), durations 0.1 and 0.03 s, in
/// one batch; with the DiT conditioning injected and from the text.
fn cfg_b2(folder: &str) {
    let Some(pipe) = pipeline(folder, Some(SameNoise::OFF)) else {
        return;
    };
    let Some(file) = fixture(&format!("{folder}/cfg.safetensors")) else {
        return;
    };
    let w = WeightLoader::open(&[&file]).unwrap();
    let (pos, neg) = dit_in(&w, "cfg_b2");
    let neg = neg.unwrap();
    let item = |c: &Conditioning, i: usize| Conditioning {
        cross_attn_cond: c
            .cross_attn_cond
            .narrow(0, i, 1)
            .unwrap()
            .contiguous()
            .unwrap(),
        cross_attn_mask: c
            .cross_attn_mask
            .narrow(0, i, 1)
            .unwrap()
            .contiguous()
            .unwrap(),
        global_cond: c.global_cond.narrow(0, i, 1).unwrap().contiguous().unwrap(),
    };
    let reqs: Vec<GenerateRequest> = [
        ("lofi house loop", "harsh noise", 0.1),
        ("Amen break 174 BPM", "", 0.03),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(p, n, s))| {
        let mut r = GenerateRequest::new(p, s);
        r.negative_prompt = Some(n.into());
        r.cfg_scale = 3.0;
        r.duration_padding_sec = 0.1;
        r.conditioning = Some((item(&pos, i), Some(item(&neg, i))));
        r
    })
    .collect();
    let from_text: Vec<GenerateRequest> = reqs
        .iter()
        .map(|r| GenerateRequest {
            conditioning: None,
            ..r.clone()
        })
        .collect();
    for (what, reqs) in [("injected", &reqs), ("from the text", &from_text)] {
        let mut noise = ReplayNoise::open(&file, "in.cfg_b2.").unwrap();
        let out = pipe
            .generate_batch(reqs, &mut noise, &mut |_| {
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(
            noise.remaining(),
            0,
            "cfg_b2: every recorded draw is consumed"
        );
        // Different durations: the reference returns the whole, uncropped batch.
        assert_eq!(out.audio.shape(), &[2, 2, 9216]);
        check(
            &format!("cfg_b2 {what} latents"),
            &out.latents,
            &reference(&w, "cfg_b2.latents"),
        );
        check(
            &format!("cfg_b2 {what} audio"),
            &out.audio,
            &reference(&w, "cfg_b2.audio"),
        );
    }
}

/// A batch shares steps, guidance and the like, and takes no audio inputs: clear errors.
#[test]
fn batch_rules() {
    let Some(pipe) = pipeline("sa3-tiny-extra", Some(SameNoise::OFF)) else {
        return;
    };
    let mut noise = aria::noise::SeededNoise::new(1);
    let mut go = |reqs: &[GenerateRequest]| {
        pipe.generate_batch(reqs, &mut noise, &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .map(|_| ())
        .unwrap_err()
        .to_string()
    };
    let a = GenerateRequest::new("a", 0.1);
    assert!(go(&[]).contains("at least one"));
    let mut b = GenerateRequest::new("b", 0.05);
    b.steps = 4;
    assert!(go(&[a.clone(), b]).contains("steps"));
    let mut b = GenerateRequest::new("b", 0.05);
    b.negative_prompt = Some("n".into());
    assert!(go(&[a.clone(), b]).contains("negative prompt"));
    let mut b = GenerateRequest::new("b", 0.05);
    b.init_audio = Some(InitAudio {
        clip: AudioClip {
            data: Tensor::from_vec(vec![0f32; 4410], &[1, 4410]).unwrap(),
            sample_rate: 44100,
        },
        noise_level: 0.5,
    });
    assert!(go(&[a.clone(), b]).contains("one request at a time"));
    let mut b = GenerateRequest::new("b", -1.0);
    b.steps = 8;
    assert!(go(&[a, b]).contains("duration"));
}

#[test]
fn cfg_batch_of_two() {
    cfg_b2("sa3-tiny-extra");
    cfg_b2("sa3-tiny-medium");
}

#[test]
fn cfg_apg() {
    cfg_case("sa3-tiny-extra", "cfg_apg", 1.0, None);
    cfg_case("sa3-tiny-medium", "cfg_apg", 1.0, None);
}

#[test]
fn cfg_vanilla() {
    cfg_case("sa3-tiny-extra", "cfg_vanilla", 0.0, None);
    cfg_case("sa3-tiny-medium", "cfg_vanilla", 0.0, None);
}

#[test]
fn cfg_euler() {
    cfg_case("sa3-tiny-extra", "cfg_euler", 1.0, Some(SamplerKind::Euler));
    cfg_case(
        "sa3-tiny-medium",
        "cfg_euler",
        1.0,
        Some(SamplerKind::Euler),
    );
}

fn inpaint(folder: &str) {
    let Some(pipe) = pipeline(folder, Some(SameNoise::OFF)) else {
        return;
    };
    let Some(file) = fixture(&format!("{folder}/inpaint.safetensors")) else {
        return;
    };
    let w = WeightLoader::open(&[&file]).unwrap();
    let mut req = GenerateRequest::new("lofi house loop", 0.1);
    req.duration_padding_sec = 0.1;
    let clip = AudioClip {
        data: w.get_any("in.inpaint.inpaint_audio").unwrap(),
        sample_rate: 44100,
    };
    req.inpaint = Some(Inpaint {
        clip,
        ranges: vec![(0.02, 0.04), (0.06, 0.08)],
    });
    req.conditioning = Some(dit_in(&w, "inpaint"));
    run(&pipe, &file, "inpaint", &req, "in.inpaint.");
}

#[test]
fn inpainting() {
    inpaint("sa3-tiny-extra");
    inpaint("sa3-tiny-medium");
}

fn a2a(folder: &str) {
    let all_on = SameNoise {
        encoder_mask_noise: 0.01,
        decoder_mask_noise: 0.01,
        bottleneck_noise_regularize: true,
    };
    let Some(pipe) = pipeline(folder, Some(all_on)) else {
        return;
    };
    let Some(file) = fixture(&format!("{folder}/a2a.safetensors")) else {
        return;
    };
    let w = WeightLoader::open(&[&file]).unwrap();
    let mut req = GenerateRequest::new("lofi house loop", 0.1);
    req.duration_padding_sec = 0.1;
    let clip = AudioClip {
        data: w.get_any("in.a2a.init_audio").unwrap(),
        sample_rate: 48000,
    };
    // The reference's input preparation (torchaudio resampling 48 → 44.1 kHz, zero padding).
    let prepared = aria::audio::prepare_audio(&clip, 44100, Some(9216), 2).unwrap();
    check(
        "a2a prepared_audio",
        &prepared,
        &w.get_any("out.a2a.prepared_audio").unwrap(),
    );
    req.init_audio = Some(InitAudio {
        clip,
        noise_level: 0.8,
    });
    req.conditioning = Some(dit_in(&w, "a2a"));
    run(&pipe, &file, "a2a", &req, "in.a2a.");
}

#[test]
fn audio_to_audio() {
    a2a("sa3-tiny-extra");
    a2a("sa3-tiny-medium");
}

/// A LoRA file changes the DiT and the duration embedder; the conditioning then matches the
/// reference's (`StableAudioModel.load_lora` + `set_lora_strength(0.7)`).
#[test]
fn lora_reaches_the_duration_embedder() {
    for case in ["lora_std", "lora_dora"] {
        let Some(dir) = fixture("sa3-tiny-extra") else {
            return;
        };
        let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
        let opts = LoadOptions {
            loras: vec![(dir.join(format!("{case}.safetensors")), 0.7)],
            ..Default::default()
        };
        let pipe = Pipeline::load(&files, &opts).unwrap();
        let w = WeightLoader::open(&[dir.join("lora_forward.safetensors")]).unwrap();
        let secs = w
            .get_any("in.lora.seconds_values")
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let e = pipe.seconds_embedding(&secs).unwrap();
        let e = e.reshape(&[secs.len(), 1, e.shape()[1]]).unwrap();
        check(
            &format!("{case} seconds embedding"),
            &e,
            &reference(&w, &format!("{case}.seconds_embedding")),
        );
    }
}
