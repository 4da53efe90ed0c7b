//! The fixture groups replayed on the wgpu backend against the recorded reference, 1e-4
//! relative (max |Δ| / max |ref|, f32): the DiT forward (small and medium structure, padding
//! masks, batch of two), the 8-step ping-pong sample, the SAME-S and SAME-L decoders, the
//! T5Gemma encoder computing in f32, and `e2e.safetensors` through [`Pipeline`] with
//! `DeviceKind::Wgpu`. Weights are put on the device once; every input goes there before the
//! run and only the result comes back.
//!
//! Skips (with a message) without an adapter or without the fixtures, except under `CI=true`
//! where a missing adapter fails.
#![cfg(feature = "wgpu")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{DeviceKind, GenerateRequest, LoadOptions, Pipeline};
use aria::ReplayNoise as PipelineNoise;
use aria_codec::{Autoencoder, AutoencoderConfig, NoiseSource, ReplayNoise as CodecNoise};
use aria_core::{DType, Device, Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;
use aria_dit::t5gemma::{Precision, T5GemmaEncoder};
use aria_testing::fixtures::{fixture, fixture_tensors, rel_err};
use aria_testing::sampler::SamplerReplay;
use aria_wgpu::WgpuBackend;

const TOL: f32 = 1e-4;

fn backend() -> Option<Device> {
    wgpu_backend().map(|b| b.device())
}

fn wgpu_backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(b) => {
            eprintln!("wgpu adapter: {}", b.adapter_name());
            Some(b)
        }
        Err(e) => {
            let ci = std::env::var("CI").map(|v| v == "true").unwrap_or(false);
            assert!(!ci, "no wgpu adapter under CI=true: {e}");
            aria_testing::skip(format!("no wgpu adapter ({e})"));
            None
        }
    }
}

fn tensors(rel: &str) -> Option<WeightLoader> {
    fixture_tensors(rel).map(|r| r.unwrap())
}

fn get(w: &WeightLoader, name: &str) -> Tensor {
    w.get_any(name).unwrap().to_dtype(DType::F32).unwrap()
}

fn try_get(w: &WeightLoader, name: &str) -> Option<Tensor> {
    w.contains(name).then(|| get(w, name))
}

/// The reference: `out64.<key>` when recorded, else `out.<key>`.
fn reference(w: &WeightLoader, key: &str) -> Tensor {
    try_get(w, &format!("out64.{key}")).unwrap_or_else(|| get(w, &format!("out.{key}")))
}

/// Compare a device result with the reference; returns the error.
fn check(what: &str, got: &Tensor, want: &Tensor) -> f32 {
    assert!(
        !got.device().is_cpu(),
        "{what}: the result must come from the device"
    );
    let got = got.to_cpu().unwrap();
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let e = rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap());
    eprintln!("{what}: relative error {e:.2e}");
    assert!(e <= TOL, "{what}: relative error {e:.3e} > {TOL:.0e}");
    e
}

fn load_dit(folder: &str, dev: &Device) -> Option<Dit> {
    let cfg = ModelConfig::from_file(fixture(&format!("{folder}/model_config.json"))?).unwrap();
    let loader =
        WeightLoader::open_checkpoint(fixture(&format!("{folder}/model.safetensors"))?).unwrap();
    let mut dit = Dit::load(&cfg.model.diffusion.config, &loader.pp("model.model")).unwrap();
    dit.to_device(dev).unwrap();
    Some(dit)
}

#[test]
fn dit_forward_on_wgpu() {
    let Some(dev) = backend() else { return };
    let put = |t: Tensor| dev.put(&t).unwrap();
    for (folder, file, groups) in [
        ("sa3-tiny", "dit_forward.safetensors", ["dit_a", "dit_b"]),
        (
            "sa3-tiny-medium",
            "dit_forward.safetensors",
            ["dit_a", "dit_b"],
        ),
        (
            "sa3-tiny-extra",
            "dit_extra.safetensors",
            ["dit_pad", "dit_b2"],
        ),
        (
            "sa3-tiny-medium",
            "dit_extra.safetensors",
            ["dit_pad", "dit_b2"],
        ),
    ] {
        let (Some(dit), Some(w)) = (load_dit(folder, &dev), tensors(&format!("{folder}/{file}")))
        else {
            aria_testing::skip("fixtures absent");
            return;
        };
        for g in groups {
            let i = |n: &str| format!("in.{g}.{n}");
            let v = dit
                .forward(
                    &put(get(&w, &i("x"))),
                    &put(get(&w, &i("t"))),
                    &put(get(&w, &i("cross_attn_cond"))),
                    &put(get(&w, &i("global_cond"))),
                    try_get(&w, &i("local_add_cond")).map(put).as_ref(),
                    try_get(&w, &i("padding_mask")).map(put).as_ref(),
                )
                .unwrap();
            check(
                &format!("{folder} {g}.v"),
                &v,
                &reference(&w, &format!("{g}.v")),
            );
        }
    }
}

/// The 8-step ping-pong sample of `folder`'s fixture with every input on `dev`: the final
/// latents (still on `dev`) and the sampler's wall time (the uploads before it not counted).
fn run_sample(dit: &Dit, w: &WeightLoader, dev: &Device) -> (Tensor, std::time::Duration) {
    let replay = SamplerReplay::load(w, dev);
    let t0 = std::time::Instant::now();
    let fin = replay.ping_pong(dit, 1.0);
    (fin, t0.elapsed())
}

#[test]
fn eight_step_sample_on_wgpu() {
    let Some(be) = wgpu_backend() else { return };
    let dev = be.device();
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(dit), Some(w)) = (
            load_dit(folder, &dev),
            tensors(&format!("{folder}/sampler.safetensors")),
        ) else {
            aria_testing::skip("fixtures absent");
            return;
        };
        let (up0, down0) = be.transfers();
        let (fin, gpu_time) = run_sample(&dit, &w, &dev);
        // The whole denoising loop stays on the device: no download at all (the result is
        // read only below); the uploads are the inputs put there before the loop.
        let (up1, down1) = be.transfers();
        eprintln!(
            "{folder}: 8 steps on wgpu with {} uploads and {} downloads",
            up1 - up0,
            down1 - down0
        );
        assert_eq!(down1, down0, "{folder}: the sampler read device data back");
        check(
            &format!("{folder} sampler final"),
            &fin,
            &reference(&w, "sampler.final"),
        );
        // A sanity ratio only: lavapipe runs the shaders on the CPU.
        if let Some(cpu_dit) = load_dit(folder, &Device::Cpu) {
            let (_, cpu_time) = run_sample(&cpu_dit, &w, &Device::Cpu);
            eprintln!(
                "{folder}: 8 steps {:.1} ms on {} vs {:.1} ms on the CPU backend (ratio {:.1}; \
                 not a GPU timing)",
                gpu_time.as_secs_f64() * 1e3,
                be.adapter_name(),
                cpu_time.as_secs_f64() * 1e3,
                gpu_time.as_secs_f64() / cpu_time.as_secs_f64().max(1e-9)
            );
        }
    }
}

fn load_ae(folder: &str, dev: &Device) -> Option<Autoencoder> {
    let cfg =
        AutoencoderConfig::from_model_config(fixture(&format!("{folder}/model_config.json"))?)
            .unwrap();
    let loader = WeightLoader::open(&[fixture(&format!("{folder}/model.safetensors"))?]).unwrap();
    let mut ae = Autoencoder::load(&cfg, &loader).unwrap();
    ae.to_device(dev).unwrap();
    Some(ae)
}

#[test]
fn same_decoders_on_wgpu() {
    let Some(dev) = backend() else { return };
    // sa3-tiny: SAME-S (chunked attention, midpoint shift); sa3-tiny-medium: SAME-L (±17 band).
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(ae), Some(w)) = (
            load_ae(folder, &dev),
            tensors(&format!("{folder}/same_decode.safetensors")),
        ) else {
            aria_testing::skip("fixtures absent");
            return;
        };
        for g in ["dec_even", "dec_odd"] {
            let z = dev.put(&get(&w, &format!("in.{g}.latents"))).unwrap();
            let audio = ae.decode(&z, None).unwrap();
            check(
                &format!("{folder} {g} audio"),
                &audio,
                &reference(&w, &format!("{g}.audio")),
            );
        }
        // With the stochastic terms on, their recorded draws injected.
        let z = dev.put(&get(&w, "in.dec_even.latents")).unwrap();
        let mut noise = CodecNoise::new(vec![
            dev.put(&get(&w, "in.dec_noise.draw_0")).unwrap(),
            dev.put(&get(&w, "in.dec_noise.draw_1")).unwrap(),
        ]);
        let audio = ae
            .decode(&z, Some(&mut noise as &mut dyn NoiseSource))
            .unwrap();
        check(
            &format!("{folder} dec_noise audio"),
            &audio,
            &reference(&w, "dec_noise.audio"),
        );
    }
}

#[test]
fn t5gemma_f32_on_wgpu() {
    let Some(dev) = backend() else { return };
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(dir), Some(w)) = (
            fixture(&format!("{folder}/t5gemma-b-b-ul2")),
            tensors(&format!("{folder}/text.safetensors")),
        ) else {
            aria_testing::skip("fixtures absent");
            return;
        };
        let mut enc = T5GemmaEncoder::load(dir).unwrap();
        enc.set_precision(Precision::F32);
        enc.to_device(&dev).unwrap();
        let ids = w.get_any("input_ids").unwrap();
        let mask = w.get_any("attention_mask").unwrap();
        let h = enc.forward(&ids, &mask).unwrap();
        check(
            &format!("{folder} t5_last_hidden (f32)"),
            &h,
            &get(&w, "t5_last_hidden.fp32_sdpa"),
        );
    }
}

#[test]
fn e2e_pipeline_on_wgpu() {
    if backend().is_none() {
        return;
    }
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(dir), Some(file)) = (
            fixture(folder),
            fixture(&format!("{folder}/e2e.safetensors")),
        ) else {
            aria_testing::skip("fixtures absent");
            return;
        };
        let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
        let opts = LoadOptions {
            device: DeviceKind::Wgpu,
            // The reference's bf16 text encoder, replayed (on the CPU; the default is f32).
            text_precision: Some(Precision::Bf16),
            ..Default::default()
        };
        let pipe = Pipeline::load(&files, &opts).unwrap();
        assert!(!pipe.device().is_cpu());
        let mut req = GenerateRequest::new("warm ambient pad", 0.1);
        req.duration_padding_sec = 0.1;
        let mut noise = PipelineNoise::open(&file, "").unwrap();
        let out = pipe
            .generate(&req, &mut noise, &mut |_| {
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(noise.remaining(), 0, "every recorded draw is consumed");
        let w = WeightLoader::open(&[&file]).unwrap();
        for (what, got, want) in [
            ("latents", out.latents.clone(), get(&w, "latents")),
            ("audio", out.audio.unsqueeze(0).unwrap(), get(&w, "audio")),
        ] {
            assert_eq!(got.shape(), want.shape(), "{folder} e2e {what}");
            let e = rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap());
            eprintln!("{folder} e2e {what}: relative error {e:.2e}");
            assert!(e <= TOL, "{folder} e2e {what}: relative error {e:.3e}");
        }
    }
}

/// sa3-tiny's model files and its `e2e` recording, with wgpu present (`None`: skipped, saying
/// why).
#[cfg(feature = "quant")]
fn e2e_fixture() -> Option<(&'static str, aria::discover::ModelFiles, std::path::PathBuf)> {
    backend()?;
    let folder = "sa3-tiny";
    let (Some(dir), Some(file)) = (
        fixture(folder),
        fixture(&format!("{folder}/e2e.safetensors")),
    ) else {
        aria_testing::skip("fixtures absent");
        return None;
    };
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    Some((folder, files, file))
}

/// The fixture generation's latents (`warm ambient pad`, 0.1 s, the recorded draws of `e2e`)
/// with `files` loaded under `opts`, with the pipeline (all finite).
#[cfg(feature = "quant")]
fn e2e_latents(
    files: &aria::discover::ModelFiles,
    e2e: &std::path::Path,
    opts: &LoadOptions,
) -> (Pipeline, Vec<f32>) {
    let pipe = Pipeline::load(files, opts).unwrap();
    assert_eq!(pipe.device().is_cpu(), opts.device == DeviceKind::Cpu);
    let mut req = GenerateRequest::new("warm ambient pad", 0.1);
    req.duration_padding_sec = 0.1;
    let mut noise = PipelineNoise::open(e2e, "").unwrap();
    let out = pipe
        .generate(&req, &mut noise, &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let v = out.latents.to_vec_f32().unwrap();
    assert!(v.iter().all(|x| x.is_finite()), "{opts:?}");
    (pipe, v)
}

/// `--precision q8` (weight-only and `--w8a8`) on wgpu against the same runs on the CPU: the
/// DiT's `q8_0` weights are packed at upload into the backend's layout and run by its kernels.
///
/// - Weight-only, the CPU kernels and the device sum each block's products in another order,
///   so the 8 steps drift apart by rounding only: [`Q8_TOL`] (measured 1.4e-7 on lavapipe).
/// - W8A8 rounds every activation to int8 per row, a step function: a one-ulp difference
///   upstream (the dense ops of two backends) flips one rounding, the next layers see a
///   perturbation of a quantization step and flip many more, and within a few layers the two
///   runs carry independent rounding noise (measured: wgpu vs CPU 4.5e-3, each 2.5–2.8e-3 from
///   the weight-only result; a 1.3e-4 upstream difference lands at the same level, 3.2e-3). So
///   the device's W8A8 is held to the CPU's own quantization error: its distance to the
///   weight-only result at most [`W8A8_RATIO`] × the CPU W8A8's. The kernel itself matches the
///   CPU's on the same quantized inputs (the op harness, `linear_packed` in `q8_0+w8a8`).
///
/// Needs the `quant` feature (on in the workspace's test run, through the `aria` program).
#[cfg(feature = "quant")]
#[test]
fn e2e_q8_on_wgpu_matches_the_cpu_q8() {
    const Q8_TOL: f32 = 1e-5;
    const W8A8_RATIO: f32 = 1.5;
    let Some((folder, files, file)) = e2e_fixture() else {
        return;
    };
    // [weight-only, W8A8] × [CPU, wgpu]
    let mut latents = Vec::new();
    for w8a8 in [false, true] {
        let mut per_device = Vec::new();
        for device in [DeviceKind::Cpu, DeviceKind::Wgpu] {
            let opts = LoadOptions {
                device,
                precision: Some(aria::quant::WeightPrecision::Q8),
                w8a8,
                // The same text arithmetic on both (the CPU's default may be bf16 products).
                text_precision: Some(Precision::F32),
                ..Default::default()
            };
            per_device.push(e2e_latents(&files, &file, &opts).1);
        }
        latents.push(per_device);
    }
    let weight_only = rel_err(&latents[0][1], &latents[0][0]);
    let cpu_w8a8 = rel_err(&latents[1][0], &latents[0][0]);
    let wgpu_w8a8 = rel_err(&latents[1][1], &latents[0][0]);
    eprintln!(
        "{folder} q8 wgpu vs cpu: weight-only {weight_only:.2e}; W8A8 vs the CPU weight-only: \
         cpu {cpu_w8a8:.2e}, wgpu {wgpu_w8a8:.2e}; wgpu vs cpu W8A8 {:.2e}",
        rel_err(&latents[1][1], &latents[1][0])
    );
    assert!(weight_only <= Q8_TOL, "weight-only: {weight_only:.3e}");
    assert!(cpu_w8a8 > 0.0, "W8A8 changed nothing: the mode did not run");
    assert!(
        wgpu_w8a8 <= W8A8_RATIO * cpu_w8a8,
        "W8A8 on wgpu {wgpu_w8a8:.3e} vs the CPU's own {cpu_w8a8:.3e}"
    );
}

/// `--precision q4` and `q4-mixed` on wgpu against the same runs on the CPU: the DiT's `q4_k`
/// and `q6_k` weights go to the device in their own block layout and run by its k-quant kernel
/// (`q8_0` where a width does not fit a 256-wide block). Weight-only: the two sides sum the
/// same dequantized products in another order, so the 8 steps drift apart by rounding only.
#[cfg(feature = "quant")]
#[test]
fn e2e_q4_on_wgpu_matches_the_cpu_q4() {
    const KQ_TOL: f32 = 1e-5;
    let Some((folder, files, file)) = e2e_fixture() else {
        return;
    };
    use aria::quant::WeightPrecision;
    for (precision, format) in [
        (WeightPrecision::Q4, "q4_k"),
        (WeightPrecision::Q4Mixed, "q6_k"),
    ] {
        let mut latents = Vec::new();
        for device in [DeviceKind::Cpu, DeviceKind::Wgpu] {
            let opts = LoadOptions {
                device,
                precision: Some(precision),
                text_precision: Some(Precision::F32),
                ..Default::default()
            };
            let (pipe, v) = e2e_latents(&files, &file, &opts);
            let kinds: Vec<String> = pipe
                .dit()
                .linears()
                .iter()
                .map(|l| l.weight().kind())
                .collect();
            assert!(
                kinds.iter().any(|k| k.contains(format)),
                "{precision:?} on {device:?}: no {format} layer in {kinds:?}"
            );
            latents.push(v);
        }
        let e = rel_err(&latents[1], &latents[0]);
        eprintln!("{folder} {precision:?} wgpu vs cpu: {e:.2e}");
        assert!(e <= KQ_TOL, "{precision:?} wgpu vs cpu: {e:.3e}");
    }
}
