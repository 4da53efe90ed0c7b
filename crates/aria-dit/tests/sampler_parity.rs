//! Sampler parity with injected noise: the 8-step ping-pong sampler exactly as `generate()` runs
//! it (`sampler`), CFG with a negative prompt and APG (`cfg_*`, incl. B = 2 with different
//! durations and Euler), inpainting and audio-to-audio (σ_max < 1) — every state `x_i`, guided
//! clean estimate `denoised_i` and the final latents within 1e-5.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use aria_core::{Tensor, WeightLoader};
use aria_dit::dit::{Dit, DitConditioning};
use aria_dit::sampler::{
    sample, Guidance, GuidedDit, GuidedOptions, LengthParams, NegativeConditioning, ReplayNoise,
    SampleOptions, SamplerKind, Schedule, Shift, StepControl, StepInfo,
};
use aria_testing::fixtures::assert_close;
use common::{get, load_dit, tensors, try_get};

const TOL: f32 = 1e-5;

struct Case<'a> {
    w: &'a WeightLoader,
    out: String,
    kind: SamplerKind,
    schedule: Schedule,
    x0: Tensor,
    draws: Vec<Tensor>,
    cross: Tensor,
    global: Tensor,
    local: Option<Tensor>,
    mask: Option<Tensor>,
    negative: Option<(Tensor, Tensor)>,
    guidance: Guidance,
}

fn out_ref(w: &WeightLoader, name: &str) -> Tensor {
    let n64 = name.replacen("out.", "out64.", 1);
    try_get(w, &n64).unwrap_or_else(|| get(w, name))
}

fn run(dit: &Dit, c: Case<'_>) {
    let cond = DitConditioning {
        cross_attn_cond: &c.cross,
        global_cond: &c.global,
        local_add_cond: c.local.as_ref(),
    };
    let neg = c.negative.as_ref().map(|(n, m)| NegativeConditioning {
        cross_attn_cond: n,
        cross_attn_mask: Some(m),
    });
    let opts = GuidedOptions {
        guidance: c.guidance,
        ..Default::default()
    };
    let model = GuidedDit::new(dit, &cond, neg, c.mask.as_ref(), opts).unwrap();
    let mut noise = ReplayNoise::new(c.draws);
    let mut states: Vec<(Tensor, Tensor)> = Vec::new();
    let mut cb = |s: &StepInfo<'_>| {
        states.push((s.x.clone(), s.denoised.clone()));
        StepControl::Continue
    };
    let opts = SampleOptions {
        callback: Some(&mut cb),
        ..Default::default()
    };
    let fin = sample(&model, c.kind, c.x0, &c.schedule, &mut noise, opts).unwrap();
    assert_eq!(noise.remaining(), 0, "{}: unused draws", c.out);
    for (i, (x, d)) in states.iter().enumerate() {
        assert_close(
            &format!("{}.x_{i}", c.out),
            x,
            &out_ref(c.w, &format!("{}.x_{i}", c.out)),
            TOL,
        );
        assert_close(
            &format!("{}.denoised_{i}", c.out),
            d,
            &out_ref(c.w, &format!("{}.denoised_{i}", c.out)),
            TOL,
        );
    }
    let fin_name = if c.w.contains(&format!("{}.final", c.out)) {
        "final"
    } else {
        "latents"
    };
    assert_close(
        &format!("{}.{fin_name}", c.out),
        &fin,
        &out_ref(c.w, &format!("{}.{fin_name}", c.out)),
        TOL,
    );
}

/// The stored schedule must equal the one we build for these durations.
fn check_schedule(stored: &Tensor, lens: &[f32], sigma_max: f32) -> Schedule {
    let s = Schedule::build(8, sigma_max, &Shift::inference_default(), lens).unwrap();
    let want = stored.to_vec_f32().unwrap();
    let got: Vec<f32> = if stored.rank() == 1 {
        s.rows()[0].clone()
    } else {
        s.rows().concat()
    };
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 2e-7, "schedule {got:?} vs {want:?}");
    }
    Schedule::from_values(want[..9].to_vec()).unwrap();
    s
}

/// Tiny models: 256-sample latents; generate() cases use 0.1 s headroom.
fn tiny_lengths(headroom: f64) -> LengthParams {
    LengthParams {
        downsampling_ratio: 256,
        headroom_seconds: headroom,
        duration_padding_sec: headroom,
        ..Default::default()
    }
}

fn sampler_group(folder: &str) {
    let Some((_, dit)) = load_dit(folder) else {
        return;
    };
    let Some(w) = tensors(&format!("{folder}/sampler.safetensors")) else {
        return;
    };
    let secs = get(&w, "in.sampler.seconds_total").to_scalar_f32().unwrap() as f64;
    let head = get(&w, "in.sampler.headroom_seconds")
        .to_scalar_f32()
        .unwrap() as f64;
    let lp = tiny_lengths(head);
    let x0 = get(&w, "in.sampler.init_noise");
    let t = x0.shape()[2];
    assert_eq!(lp.latent_len(&[secs]), t);
    let mask = get(&w, "in.sampler.padding_mask");
    assert_eq!(
        lp.padding_mask(&[secs], t).unwrap().to_vec_f32().unwrap(),
        mask.to_vec_f32().unwrap()
    );
    let schedule = check_schedule(
        &get(&w, "in.sampler.sigmas"),
        &lp.schedule_lens(&[secs]),
        1.0,
    );
    let draws = (0..8)
        .map(|i| get(&w, &format!("in.sampler.step_noise_{i}")))
        .collect();
    run(
        &dit,
        Case {
            w: &w,
            out: "out.sampler".into(),
            kind: SamplerKind::PingPong,
            schedule,
            x0,
            draws,
            cross: get(&w, "in.sampler.cond.cross_attn_cond"),
            global: get(&w, "in.sampler.cond.global_cond"),
            local: Some(get(&w, "in.sampler.cond.local_add_cond")),
            mask: Some(mask),
            negative: None,
            guidance: Guidance::default(),
        },
    );
}

#[test]
fn sampler_pingpong_small() {
    sampler_group("sa3-tiny");
}

#[test]
fn sampler_pingpong_medium() {
    sampler_group("sa3-tiny-medium");
}

/// A generate() case of `cfg.safetensors`, `inpaint.safetensors` or `a2a.safetensors`.
fn generate_case(folder: &str, file: &str, case: &str, kind: SamplerKind, cfg: Option<(f32, f32)>) {
    let Some((_, dit)) = load_dit(folder) else {
        return;
    };
    let Some(w) = tensors(&format!("{folder}/{file}")) else {
        return;
    };
    let o = format!("out.{case}");
    let d = |n: &str| get(&w, &format!("{o}.dit_in.{n}"));
    let sig = get(&w, &format!("{o}.sigmas"));
    let b = sig.shape()[0];
    let draw = |i: usize| get(&w, &format!("in.{case}.draw_{i:02}"));
    let (x0, sigma_max, first_step_draw) = if case == "a2a" {
        // x_init = encoded·(1 − σ_max) + noise·σ_max; draw 01 belongs to the encoder.
        let enc = get(&w, &format!("{o}.encoded_latents"))
            .to_vec_f32()
            .unwrap();
        let n = draw(0);
        let mixed: Vec<f32> = enc
            .iter()
            .zip(n.to_vec_f32().unwrap())
            .map(|(e, n)| e * (1.0 - 0.8f32) + n * 0.8)
            .collect();
        (Tensor::from_vec(mixed, n.shape()).unwrap(), 0.8, 2)
    } else {
        (draw(0), 1.0, 1)
    };
    let steps = if kind == SamplerKind::PingPong { 8 } else { 0 };
    let draws = (first_step_draw..first_step_draw + steps)
        .map(draw)
        .collect();
    // Per-item schedule lengths from the durations of the case (0.1 s, or [0.1, 0.03]).
    let secs: Vec<f64> = if b == 2 { vec![0.1, 0.03] } else { vec![0.1] };
    let lp = tiny_lengths(0.1);
    let mask = d("padding_mask");
    assert_eq!(
        lp.padding_mask(&secs, x0.shape()[2])
            .unwrap()
            .to_vec_f32()
            .unwrap(),
        mask.to_vec_f32().unwrap()
    );
    let schedule = check_schedule(&sig, &lp.schedule_lens(&secs), sigma_max);
    let guidance = match cfg {
        Some((c, a)) => Guidance {
            cfg_scale: c,
            apg_scale: a,
            ..Default::default()
        },
        None => Guidance::default(),
    };
    let negative = cfg.map(|_| (d("negative_cross_attn_cond"), d("negative_cross_attn_mask")));
    run(
        &dit,
        Case {
            w: &w,
            out: o.clone(),
            kind,
            schedule,
            x0,
            draws,
            cross: d("cross_attn_cond"),
            global: d("global_cond"),
            local: Some(d("local_add_cond")),
            mask: Some(mask),
            negative,
            guidance,
        },
    );
}

#[test]
fn cfg_apg_small() {
    generate_case(
        "sa3-tiny-extra",
        "cfg.safetensors",
        "cfg_apg",
        SamplerKind::PingPong,
        Some((3.0, 1.0)),
    );
}

#[test]
fn cfg_vanilla_small() {
    generate_case(
        "sa3-tiny-extra",
        "cfg.safetensors",
        "cfg_vanilla",
        SamplerKind::PingPong,
        Some((3.0, 0.0)),
    );
}

#[test]
fn cfg_euler_small() {
    generate_case(
        "sa3-tiny-extra",
        "cfg.safetensors",
        "cfg_euler",
        SamplerKind::Euler,
        Some((3.0, 1.0)),
    );
}

#[test]
fn cfg_b2_small() {
    generate_case(
        "sa3-tiny-extra",
        "cfg.safetensors",
        "cfg_b2",
        SamplerKind::PingPong,
        Some((3.0, 1.0)),
    );
}

#[test]
fn cfg_cases_medium() {
    generate_case(
        "sa3-tiny-medium",
        "cfg.safetensors",
        "cfg_apg",
        SamplerKind::PingPong,
        Some((3.0, 1.0)),
    );
    generate_case(
        "sa3-tiny-medium",
        "cfg.safetensors",
        "cfg_vanilla",
        SamplerKind::PingPong,
        Some((3.0, 0.0)),
    );
    generate_case(
        "sa3-tiny-medium",
        "cfg.safetensors",
        "cfg_euler",
        SamplerKind::Euler,
        Some((3.0, 1.0)),
    );
    generate_case(
        "sa3-tiny-medium",
        "cfg.safetensors",
        "cfg_b2",
        SamplerKind::PingPong,
        Some((3.0, 1.0)),
    );
}

#[test]
fn inpaint_and_a2a() {
    for folder in ["sa3-tiny-extra", "sa3-tiny-medium"] {
        generate_case(
            folder,
            "inpaint.safetensors",
            "inpaint",
            SamplerKind::PingPong,
            None,
        );
        generate_case(
            folder,
            "a2a.safetensors",
            "a2a",
            SamplerKind::PingPong,
            None,
        );
    }
}
