//! Strength 0, and a step span the run never reaches, leave generation bit-identical to a run
//! without steering: latents compared bit for bit, audio compared as WAV bytes.
#![allow(clippy::unwrap_used)]

mod common;

use aria_codec::audio::{write_wav, WavFormat};
use aria_core::hooks::ActivationHook;
use aria_core::Tensor;
use aria_steer::{Scale, Site, SteerOp, Steering, SteeringHook, StepSpan};
use aria_testing::TempDir;

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn wav(audio: &Tensor, rate: u32, name: &str) -> Vec<u8> {
    let dir = TempDir::new("steer-bits");
    let p = dir.join(name);
    write_wav(&p, audio, rate, WavFormat::F32).unwrap();
    std::fs::read(&p).unwrap()
}

fn unit(n: usize, seed: u32) -> Vec<f32> {
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f32 + 1.0) * (seed as f32 + 0.37)).sin())
        .collect();
    aria_steer::direction::normalize(&v, "test").unwrap().0
}

#[test]
fn strength_zero_and_out_of_span_are_bit_identical() {
    let Some((pipe, steer)) = common::pipeline("sa3-tiny") else {
        return;
    };
    let cfg = pipe.dit().config();
    let (e, c, dc) = (cfg.embed_dim, cfg.io_channels, cfg.cond_token_dim);
    let rate = pipe.sample_rate();
    let (base_lat, base_audio) = common::run(&pipe, &steer, None, true);
    let base_wav = wav(&base_audio, rate, "base.wav");

    let s =
        |site: Site, op: SteerOp, a: f32, d: Vec<f32>| Steering::new(site, op, a, d, 6.0).unwrap();
    let far = Some(StepSpan { lo: 100, hi: 200 });
    let cases: Vec<(&str, Vec<Steering>)> = vec![
        (
            "residual add, strength 0",
            vec![s(Site::Residual(0), SteerOp::Add, 0.0, unit(e, 1))],
        ),
        (
            "residual project, strength 0",
            vec![s(Site::Residual(1), SteerOp::Project, 0.0, unit(e, 2))],
        ),
        (
            "latent add, strength 0",
            vec![s(Site::Latent, SteerOp::Add, 0.0, unit(c, 3))],
        ),
        (
            "text add, strength 0 (raw)",
            vec![s(Site::Text, SteerOp::Add, 0.0, unit(dc, 4)).with_scale(Scale::Raw)],
        ),
        (
            "residual add, out of span",
            vec![s(Site::Residual(0), SteerOp::Add, 0.5, unit(e, 5))
                .with_steps(far)
                .unwrap()],
        ),
        (
            "latent project, out of span",
            vec![s(Site::Latent, SteerOp::Project, 1.0, unit(c, 6))
                .with_steps(far)
                .unwrap()],
        ),
        (
            "several at once, all inactive",
            vec![
                s(Site::Residual(0), SteerOp::Add, 0.0, unit(e, 7)),
                s(Site::Residual(1), SteerOp::Project, 1.0, unit(e, 8))
                    .with_steps(far)
                    .unwrap(),
                s(Site::Latent, SteerOp::Add, 0.0, unit(c, 9)),
            ],
        ),
    ];
    for (name, items) in cases {
        let hook = SteeringHook::from_steerings(items);
        let (lat, audio) = common::run(&pipe, &steer, Some(&hook as &dyn ActivationHook), true);
        assert_eq!(bits(&lat), bits(&base_lat), "{name}: latents differ");
        assert_eq!(
            wav(&audio, rate, "s.wav"),
            base_wav,
            "{name}: WAV bytes differ"
        );
        eprintln!("{name}: latents and WAV bytes identical");
    }

    // Control: the same hooks do change the output when active (in span, non-zero strength).
    let controls = vec![
        (
            "residual add at step 7",
            s(Site::Residual(0), SteerOp::Add, 0.05, unit(e, 5))
                .with_steps(Some(StepSpan { lo: 7, hi: 7 }))
                .unwrap(),
        ),
        (
            "latent add",
            s(Site::Latent, SteerOp::Add, 0.01, unit(c, 3)),
        ),
    ];
    for (name, st) in controls {
        let hook = SteeringHook::from_steerings(vec![st]);
        let (lat, audio) = common::run(&pipe, &steer, Some(&hook as &dyn ActivationHook), true);
        assert_ne!(bits(&lat), bits(&base_lat), "{name}: latents unchanged");
        assert_ne!(
            wav(&audio, rate, "c.wav"),
            base_wav,
            "{name}: WAV bytes unchanged"
        );
    }
}
