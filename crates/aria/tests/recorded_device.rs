//! A whole generation on a device that records the sampler's DiT evaluation and replays it
//! (as CUDA records a graph): the counting test backend in its recording mode, registered in
//! this test process under the name `cuda`, so that `LoadOptions::device = Cuda` takes the
//! pipeline's device path (text encoder, DiT loop, decoder on the device) with no GPU. With
//! CFG and a steering whose span covers part of the schedule, the latents and the audio must be
//! the CPU's bits, each kind of step recorded once and replayed at every step, and nothing
//! moved between host and device inside a replay.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, OnceLock};

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{Precision, RunOptions};
use aria::synth::{self, Preset};
use aria::{DeviceKind, GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::backend::registry;
use aria_core::{DType, Tensor};
use aria_steer::{Site, SteerOp, Steering, SteeringHook, StepSpan};
use aria_testing::counting::CountingBackend;
use aria_testing::{SharedTempDir, TempDir};

fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("recorded-device-model");
    DIR.get(|d| {
        synth::write_model(d, Preset::Tiny, DType::F32, 5, &mut |_, _| {}).unwrap();
    })
}

/// The one recording backend of this process.
fn stand_in() -> &'static CountingBackend {
    static BE: OnceLock<CountingBackend> = OnceLock::new();
    BE.get_or_init(CountingBackend::recording)
}

fn load(device: DeviceKind) -> (Pipeline, Arc<TempDir>) {
    let model = model_dir();
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).unwrap();
    let opts = LoadOptions {
        device,
        text_precision: Some(Precision::F32),
        ..Default::default()
    };
    (Pipeline::load(&files, &opts).unwrap(), model)
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_cpu()
        .unwrap()
        .to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn unit(n: usize, seed: u32) -> Vec<f32> {
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f32 + 1.0) * (seed as f32 + 0.37)).sin())
        .collect();
    aria_steer::direction::normalize(&v, "test").unwrap().0
}

#[test]
fn a_recording_device_generates_the_cpu_bits() {
    aria::backends::register_builtin();
    registry::register(
        "cuda",
        "the counting test backend in its recording mode, standing in for CUDA",
        |_| Ok(stand_in().device()),
    );
    let (cpu, _m) = load(DeviceKind::Cpu);
    let (dev, _m2) = load(DeviceKind::Cuda);
    let e = cpu.dit().config().embed_dim;
    let hook = SteeringHook::from_steerings(vec![
        Steering::new(Site::Residual(0), SteerOp::Add, 0.5, unit(e, 1), 6.0)
            .unwrap()
            .with_steps(Some(StepSpan { lo: 2, hi: 4 }))
            .unwrap(),
        Steering::new(Site::Residual(1), SteerOp::Project, 0.8, unit(e, 2), 6.0).unwrap(),
    ]);
    let mut req = GenerateRequest::new("rain on a tin roof", 1.0);
    req.steps = 8;
    req.cfg_scale = 3.0;
    let run = |p: &Pipeline, hook: Option<&SteeringHook>| {
        let opts = RunOptions {
            hook: hook.map(|h| h as &dyn aria_core::hooks::ActivationHook),
            ..Default::default()
        };
        let out = p.run(&req, &mut TorchNoise::new(7), opts).unwrap();
        (bits(&out.latents), bits(&out.audio))
    };
    for (what, h, recordings) in [("plain", None, 1), ("steered", Some(&hook), 2)] {
        let want = run(&cpu, h);
        stand_in().reset();
        let got = run(&dev, h);
        let c = stand_in().counts();
        println!("{what}: {c:?}");
        assert_eq!(c.recordings, recordings, "{what}: recordings");
        assert_eq!(c.replays, 8, "{what}: one replay per step");
        assert_eq!(
            c.transfers_in_replays, 0,
            "{what}: transfers inside a replay"
        );
        assert_eq!(
            c.implicit_uploads, 0,
            "{what}: host operands in {:?}",
            c.mixed_ops
        );
        assert!(!want.0.is_empty() && !want.1.is_empty());
        assert_eq!(got.0, want.0, "{what}: latents differ from the CPU's");
        assert_eq!(got.1, want.1, "{what}: audio differs from the CPU's");
    }
}
