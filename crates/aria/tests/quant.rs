//! Quantized DiT weights on the fixtures: packing at load releases the dense pages and keeps
//! the final latents well under the f32 seed-to-seed spread; a pre-quantized folder loads the
//! same packed bits without reading the dense weights it replaces; corrupt, truncated and
//! mismatched packed files are refused; LoRA runs on a packed base as a run-time delta.
#![cfg(feature = "quant")]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use aria::discover::{resolve_model, ModelFiles, SearchPaths};
use aria::pipeline::{AudioOutput, RunOptions};
use aria::quant::WeightPrecision;
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::nn::Weight;
use aria_testing::fixtures::fixture;

fn files() -> Option<ModelFiles> {
    let dir = fixture("sa3-tiny-extra")?;
    Some(resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap())
}

fn load(files: &ModelFiles, precision: Option<WeightPrecision>, w8a8: bool) -> Pipeline {
    let opts = LoadOptions {
        precision,
        w8a8,
        ..Default::default()
    };
    Pipeline::load(files, &opts).unwrap()
}

/// Final latents of a short generation.
fn latents(p: &Pipeline, seed: u64) -> Vec<f32> {
    let mut r = GenerateRequest::new("warm ambient pad", 0.5);
    r.steps = 4;
    r.duration_padding_sec = 0.1;
    let opts = RunOptions {
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let out = p.run(&r, &mut TorchNoise::new(seed), opts).unwrap();
    out.latents.to_vec_f32().unwrap()
}

/// `‖a − b‖ / ‖b‖`; infinite on a length mismatch or a non-finite value.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || !a.iter().chain(b).all(|v| v.is_finite()) {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += f64::from(x - y).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aria-quant-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn q8_packs_every_linear_but_cross_kv_and_stays_under_the_seed_floor() {
    let Some(files) = files() else { return };
    let f32p = load(&files, None, false);
    let q8 = load(&files, Some(WeightPrecision::Q8), false);
    for l in q8.dit().linears() {
        let kv = l.name().contains("cross_attn.to_kv");
        match l.weight() {
            Weight::Packed(p) => {
                assert!(!kv, "{} packed", l.name());
                assert_eq!(p.format(), "q8_0/v1", "{}", l.name());
            }
            Weight::Dense(t) => assert!(kv && t.is_mapped(), "{} stays dense", l.name()),
        }
    }
    let rep = q8.quant_report();
    assert!(rep.held_bytes * 3 < rep.stored_bytes, "{}", rep.summary());
    assert!(rep.released_bytes > 0, "{}", rep.summary());

    let (a0, a1) = (latents(&f32p, 1), latents(&f32p, 2));
    let (b0, b1) = (latents(&q8, 1), latents(&q8, 2));
    let floor = rel_rms(&a1, &a0).min(rel_rms(&a0, &a1));
    let err = rel_rms(&b0, &a0).max(rel_rms(&b1, &a1));
    eprintln!(
        "q8 final-latent rel-RMS {err:.2e}, f32 seed-to-seed {floor:.3}, ratio {:.2e}",
        err / floor
    );
    assert!(err > 0.0, "q8 changed nothing");
    assert!(err < 0.01 * floor, "q8 error {err} vs floor {floor}");

    // W8A8 on the q8_0 layers: close to weight-only q8.
    let w8 = load(&files, Some(WeightPrecision::Q8), true);
    assert!(w8
        .dit()
        .linears()
        .iter()
        .any(|l| l.weight().kind().contains("+w8a8")));
    let c0 = latents(&w8, 1);
    assert!(rel_rms(&c0, &a0) < 0.1 * floor);
    // The decoder's matrices take the same mode, and decode the same latents close to the f32
    // decoder (the dense decoder of the f32 and weight-only q8 pipelines).
    let rep = w8.quant_report();
    assert!(
        rep.decoder_kinds
            .keys()
            .all(|k| k.contains("q8_0") && k.contains("+w8a8"))
            && !rep.decoder_kinds.is_empty(),
        "{}",
        rep.summary()
    );
    assert!(
        q8.quant_report()
            .decoder_kinds
            .keys()
            .all(|k| k.contains("dense")),
        "{}",
        q8.quant_report().summary()
    );
    let mut r = GenerateRequest::new("warm ambient pad", 0.5);
    r.steps = 4;
    r.duration_padding_sec = 0.1;
    let skip = RunOptions {
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let lat = f32p.run(&r, &mut TorchNoise::new(1), skip).unwrap().latents;
    let dec = |p: &Pipeline| {
        p.decode_latents(&lat, &mut TorchNoise::new(3))
            .unwrap()
            .to_vec_f32()
            .unwrap()
    };
    let (fd, wd) = (dec(&f32p), dec(&w8));
    let derr = rel_rms(&wd, &fd);
    eprintln!("W8A8 decoder audio rel-RMS {derr:.2e}");
    assert!(derr > 0.0 && derr < 0.05, "W8A8 decode {derr}");

    // 16-bit conversion also frees the mapped f32 pages.
    let h = load(&files, Some(WeightPrecision::Bf16), false);
    assert!(h.quant_report().released_bytes > 0);
    assert!(rel_rms(&latents(&h, 1), &a0) < 0.05 * floor);

    // W8A8 without packed weights is refused.
    let opts = LoadOptions {
        w8a8: true,
        ..Default::default()
    };
    let e = Pipeline::load(&files, &opts).unwrap_err().to_string();
    assert!(e.contains("W8A8"), "{e}");
}

/// bf16-dot: every DiT linear in the `bf16_panels` format (half the f32 bytes, the mapped f32
/// pages released), the final latents well under the f32 seed-to-seed spread, the same bits for
/// 1 and 2 threads; W8A8 is refused with it.
#[test]
fn bf16_dot_packs_every_linear_and_stays_under_the_seed_floor() {
    let Some(files) = files() else { return };
    let f32p = load(&files, None, false);
    let b = load(&files, Some(WeightPrecision::Bf16Dot), false);
    for l in b.dit().linears() {
        match l.weight() {
            Weight::Packed(p) => assert_eq!(p.format(), "bf16_panels/v1", "{}", l.name()),
            Weight::Dense(_) => panic!("{} stays dense", l.name()),
        }
    }
    let rep = b.quant_report();
    assert!(
        rep.held_bytes * 2 <= rep.stored_bytes + rep.stored_bytes / 8,
        "{}",
        rep.summary()
    );
    // The decoder's matrices take the same mode.
    assert!(
        rep.decoder_kinds.keys().all(|k| k.contains("bf16_panels"))
            && !rep.decoder_kinds.is_empty(),
        "{}",
        rep.summary()
    );
    assert!(rep.released_bytes > 0, "{}", rep.summary());
    let (a0, a1) = (latents(&f32p, 1), latents(&f32p, 2));
    let floor = rel_rms(&a1, &a0);
    let b0 = latents(&b, 1);
    let err = rel_rms(&b0, &a0);
    eprintln!(
        "bf16-dot final-latent rel-RMS {err:.2e}, f32 seed-to-seed {floor:.3}, ratio {:.2e}",
        err / floor
    );
    assert!(err > 0.0, "bf16-dot changed nothing");
    assert!(err < 0.05 * floor, "bf16-dot error {err} vs floor {floor}");
    let on = |n: usize| {
        aria_core::threads::with_threads(n, || latents(&b, 1))
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(on(1), on(2), "thread counts");
    let au = |p: &Pipeline| audio(p, 1).1;
    let (fa, ba) = (au(&f32p), au(&b));
    let aerr = rel_rms(&ba, &fa);
    eprintln!("bf16-dot audio rel-RMS {aerr:.2e}");
    assert!(aerr > 0.0 && aerr < 0.05, "audio {aerr}");
    // The encoder's matrices too (audio inputs, the cache's stretched references): an encode
    // of the f32 run's audio in bf16 products stays close to the f32 encode of it.
    assert!(
        rep.encoder_kinds.keys().all(|k| k.contains("bf16_panels"))
            && !rep.encoder_kinds.is_empty(),
        "{}",
        rep.summary()
    );
    assert!(
        f32p.quant_report()
            .encoder_kinds
            .keys()
            .all(|k| k.contains("dense")),
        "{}",
        f32p.quant_report().summary()
    );
    let ch = 2;
    let clip = aria::AudioClip {
        data: aria_core::Tensor::from_vec(fa.clone(), &[ch, fa.len() / ch]).unwrap(),
        sample_rate: f32p.sample_rate(),
    };
    let enc = |p: &Pipeline| {
        p.encode_audio(&clip, &mut TorchNoise::new(5))
            .unwrap()
            .to_vec_f32()
            .unwrap()
    };
    let (fe, be) = (enc(&f32p), enc(&b));
    assert_eq!(fe.len(), be.len());
    let eerr = rel_rms(&be, &fe);
    eprintln!("bf16-dot encode rel-RMS {eerr:.2e}");
    assert!(eerr > 0.0 && eerr < 0.05, "encode {eerr}");
    // W8A8 needs q8_0 blocks.
    let opts = LoadOptions {
        precision: Some(WeightPrecision::Bf16Dot),
        w8a8: true,
        ..Default::default()
    };
    let e = Pipeline::load(&files, &opts).unwrap_err().to_string();
    assert!(e.contains("W8A8"), "{e}");
}

/// `fast` runs the concrete mode the machine is fastest in, and the report names it.
#[test]
fn fast_names_the_mode_it_runs() {
    let Some(files) = files() else { return };
    let want = WeightPrecision::Fast.resolve(aria::pipeline::DeviceKind::Cpu);
    let fast_is_bf16 = aria_core::backend::faster_than_f32(
        &aria_core::Device::Cpu,
        aria_core::nn::WeightFormat::Bf16Panels,
    );
    assert_eq!(
        want,
        if fast_is_bf16 {
            WeightPrecision::Bf16Dot
        } else {
            WeightPrecision::F32
        }
    );
    assert_eq!(
        WeightPrecision::Q8.resolve(aria::pipeline::DeviceKind::Cpu),
        WeightPrecision::Q8
    );
    assert_eq!(
        WeightPrecision::Fast.resolve(aria::pipeline::DeviceKind::Wgpu),
        WeightPrecision::F32
    );
    let p = load(&files, Some(WeightPrecision::Fast), false);
    assert_eq!(
        p.quant_report().precision,
        want,
        "{}",
        p.quant_report().summary()
    );
    assert_eq!(
        WeightPrecision::parse("fast").unwrap(),
        WeightPrecision::Fast
    );
    let same = load(&files, Some(want), false);
    assert_eq!(latents(&p, 3), latents(&same, 3));
}

fn packed_bits(p: &Pipeline) -> Vec<(String, String)> {
    p.dit()
        .linears()
        .iter()
        .map(|l| (l.name().to_string(), l.weight().kind()))
        .collect()
}

#[test]
fn quantized_folder_loads_packed_and_refuses_bad_files() {
    let Some(files) = files() else { return };
    let out = tmp("folder");
    let s = aria::quant::quantize_model(&files, WeightPrecision::Q4Mixed, &out, &mut |_, _| {})
        .unwrap();
    assert!(!s.formats.is_empty());
    assert!(aria::discover::missing_files(&out).is_empty());
    // Writing again over it is refused.
    assert!(
        aria::quant::quantize_model(&files, WeightPrecision::Q8, &out, &mut |_, _| {}).is_err()
    );

    let qf = resolve_model(&out.display().to_string(), &SearchPaths::default()).unwrap();
    let pre = load(&qf, None, false);
    let at_load = load(&files, Some(WeightPrecision::Q4Mixed), false);
    assert!(pre.quant_report().prequantized);
    assert_eq!(pre.quant_report().precision, WeightPrecision::Q4Mixed);
    assert_eq!(packed_bits(&pre), packed_bits(&at_load));
    // The packed layers' bytes come from the packed file (U8 blocks), never from a dense one.
    for l in pre.dit().linears() {
        if let Weight::Packed(_) = l.weight() {
            let (_, info) = aria_core::WeightLoader::open(&[&qf.weights])
                .unwrap()
                .info(&format!("{}.weight", l.name()))
                .map(|(p, i)| (p.to_path_buf(), i.clone()))
                .unwrap();
            assert_eq!(info.dtype, aria_core::DType::U8, "{}", l.name());
        }
    }
    assert_eq!(latents(&pre, 3), latents(&at_load, 3), "same packed bits");

    // Another precision than the folder's is refused.
    let opts = LoadOptions {
        precision: Some(WeightPrecision::Q8),
        ..Default::default()
    };
    let e = Pipeline::load(&qf, &opts).unwrap_err().to_string();
    assert!(e.contains("pre-quantized at q4-mixed"), "{e}");

    corrupt_and_truncate(&out, &qf);
    let _ = std::fs::remove_dir_all(&out);
}

/// A flipped byte inside a packed tensor fails its checksum; a truncated file fails to parse.
fn corrupt_and_truncate(dir: &Path, qf: &ModelFiles) {
    let weights = dir.join("model.safetensors");
    let w = aria_core::WeightLoader::open(&[&weights]).unwrap();
    let name = "model.model.transformer.layers.0.self_attn.to_qkv.weight";
    let (_, info) = w.info(name).unwrap();
    let at = info.start + (info.end - info.start) / 2;
    drop(w);
    let good = std::fs::read(&weights).unwrap();
    let mut bad = good.clone();
    bad[at] ^= 0x5a;
    std::fs::remove_file(&weights).unwrap();
    std::fs::write(&weights, &bad).unwrap();
    let e = Pipeline::load(qf, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("corrupt") && e.contains(name), "{e}");

    std::fs::remove_file(&weights).unwrap();
    std::fs::write(&weights, &good[..good.len() - 1000]).unwrap();
    let e = Pipeline::load(qf, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn lora_on_a_packed_base_is_a_run_time_delta() {
    let Some(files) = files() else { return };
    let lora = files.dir.join("lora_std.safetensors");
    let with = |precision: Option<WeightPrecision>, s: f32| {
        let opts = LoadOptions {
            precision,
            loras: vec![(lora.clone(), s)],
            ..Default::default()
        };
        Pipeline::load(&files, &opts).unwrap()
    };
    let mut q = with(Some(WeightPrecision::Q8), 0.7);
    let adapted: Vec<_> = q
        .dit()
        .linears()
        .into_iter()
        .filter(|l| l.is_adapted())
        .collect();
    assert!(!adapted.is_empty());
    // The base stays packed (not re-quantized) under its adapters.
    assert!(adapted
        .iter()
        .all(|l| matches!(l.weight(), Weight::Packed(_)) || l.name().contains("to_kv")));
    let base_q8 = latents(&load(&files, Some(WeightPrecision::Q8), false), 5);
    let f32_lora = latents(&with(None, 0.7), 5);
    let f32_base = latents(&load(&files, None, false), 5);
    let q8_lora = latents(&q, 5);
    let effect = rel_rms(&f32_lora, &f32_base);
    let err = rel_rms(&q8_lora, &f32_lora);
    eprintln!("LoRA effect {effect:.3}, q8+LoRA vs f32+LoRA {err:.2e}");
    assert!(effect > 0.0 && err < 0.1 * effect, "{err} vs {effect}");
    // Strength 0: the packed base's output, bit for bit.
    q.set_lora_strength(0, 0.0).unwrap();
    assert_eq!(latents(&q, 5), base_q8);
}

/// Latents and audio of a short generation.
fn audio(p: &Pipeline, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut r = GenerateRequest::new("warm ambient pad", 0.5);
    r.steps = 4;
    r.duration_padding_sec = 0.1;
    let out = p
        .run(&r, &mut TorchNoise::new(seed), RunOptions::default())
        .unwrap();
    (
        out.latents.to_vec_f32().unwrap(),
        out.audio.to_vec_f32().unwrap(),
    )
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn released_pages_read_back_across_requests_and_the_decoder_packs() {
    let Some(files) = files() else { return };
    // Pages released between stages (the default) change nothing, request after request.
    let kept = Pipeline::load(
        &files,
        &LoadOptions {
            keep_resident: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (l0, a0) = audio(&kept, 3);
    for pre in [None, Some(WeightPrecision::Q8)] {
        let released = load(&files, pre, false);
        let want = if pre.is_none() {
            (l0.clone(), a0.clone())
        } else {
            let k = Pipeline::load(
                &files,
                &LoadOptions {
                    precision: pre,
                    keep_resident: true,
                    ..Default::default()
                },
            )
            .unwrap();
            audio(&k, 3)
        };
        for _ in 0..2 {
            let (l, a) = audio(&released, 3);
            assert_eq!(bits(&l), bits(&want.0), "latents ({pre:?})");
            assert_eq!(bits(&a), bits(&want.1), "audio ({pre:?})");
        }
    }

    // The decoder packed as q8_0: same latents, audio close to the dense decoder's.
    let dq = Pipeline::load(
        &files,
        &LoadOptions {
            quantize_decoder: true,
            ..Default::default()
        },
    )
    .unwrap();
    let (l, a) = audio(&dq, 3);
    assert_eq!(bits(&l), bits(&l0));
    let err = rel_rms(&a, &a0);
    eprintln!("q8 decoder audio rel-RMS {err:.2e}");
    assert!(err > 0.0 && err < 0.05, "q8 decoder audio error {err}");
}
