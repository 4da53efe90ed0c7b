//! Activation hooks, conditioning computed once per generation, padding semantics, sampler
//! control (cancellation, starting from an intermediate step), on the tiny fixture model.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use std::sync::Mutex;

use aria_core::hooks::{ActivationHook, FnHook, HookContext, HookSite, NoopHook};
use aria_core::ops::KeyMaskMode;
use aria_core::{ops, Result as CoreResult, Tensor};
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};
use aria_dit::sampler::{
    sample, Guidance, GuidedDit, GuidedOptions, ReplayNoise, SampleOptions, SamplerKind, Schedule,
    StepControl,
};
use aria_dit::DitError;
use common::{get, load_dit, tensors};

/// One recorded hook call: site, step, sigma, guidance rows.
type Call = (HookSite, Option<usize>, Option<Vec<f32>>, Option<usize>);

struct Inputs {
    x0: Tensor,
    draws: Vec<Tensor>,
    cross: Tensor,
    global: Tensor,
    local: Tensor,
    mask: Tensor,
    sigmas: Vec<f32>,
}

fn inputs() -> Option<(Dit, Inputs)> {
    let (_, dit) = load_dit("sa3-tiny")?;
    let w = tensors("sa3-tiny/sampler.safetensors")?;
    let i = Inputs {
        x0: get(&w, "in.sampler.init_noise"),
        draws: (0..8)
            .map(|i| get(&w, &format!("in.sampler.step_noise_{i}")))
            .collect(),
        cross: get(&w, "in.sampler.cond.cross_attn_cond"),
        global: get(&w, "in.sampler.cond.global_cond"),
        local: get(&w, "in.sampler.cond.local_add_cond"),
        mask: get(&w, "in.sampler.padding_mask"),
        sigmas: get(&w, "in.sampler.sigmas").to_vec_f32().unwrap(),
    };
    Some((dit, i))
}

fn run(dit: &Dit, i: &Inputs, hook: Option<&dyn ActivationHook>, cfg: f32) -> Tensor {
    let cond = DitConditioning {
        cross_attn_cond: &i.cross,
        global_cond: &i.global,
        local_add_cond: Some(&i.local),
    };
    let guidance = Guidance {
        cfg_scale: cfg,
        ..Default::default()
    };
    let model = GuidedDit::new(
        dit,
        &cond,
        None,
        Some(&i.mask),
        GuidedOptions {
            guidance,
            hook,
            ..Default::default()
        },
    )
    .unwrap();
    let schedule = Schedule::from_values(i.sigmas.clone()).unwrap();
    let mut noise = ReplayNoise::new(i.draws.clone());
    sample(
        &model,
        SamplerKind::PingPong,
        i.x0.clone(),
        &schedule,
        &mut noise,
        SampleOptions {
            hook,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn noop_hook_is_bit_identical_and_sites_are_called() {
    let Some((dit, i)) = inputs() else { return };
    for cfg in [1.0, 3.0] {
        let plain = run(&dit, &i, None, cfg).to_vec_f32().unwrap();
        let noop = run(&dit, &i, Some(&NoopHook), cfg).to_vec_f32().unwrap();
        assert_eq!(plain, noop);
    }
    // Record every call.
    let calls: Mutex<Vec<Call>> = Mutex::new(Vec::new());
    let rec = FnHook::new(
        None,
        |c: &HookContext<'_>, _x: &Tensor| -> CoreResult<Option<Tensor>> {
            calls.lock().unwrap().push((
                c.site,
                c.step,
                c.sigma.map(<[f32]>::to_vec),
                c.guidance_rows,
            ));
            Ok(None)
        },
    );
    let with_rec = run(&dit, &i, Some(&rec), 3.0).to_vec_f32().unwrap();
    assert_eq!(with_rec, run(&dit, &i, None, 3.0).to_vec_f32().unwrap());
    let calls = calls.into_inner().unwrap();
    let depth = dit.config().depth;
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.0 == HookSite::TextConditioning)
            .count(),
        1
    );
    assert_eq!(calls.iter().filter(|c| c.0 == HookSite::Latent).count(), 8);
    assert_eq!(
        calls
            .iter()
            .filter(|c| matches!(c.0, HookSite::Residual(_)))
            .count(),
        8 * depth
    );
    let r = calls
        .iter()
        .find(|c| c.0 == HookSite::Residual(1) && c.1 == Some(2))
        .unwrap();
    assert_eq!(r.2.as_deref(), Some(&[i.sigmas[2], i.sigmas[2]][..]));
    assert_eq!(r.3, Some(1));
}

#[test]
fn modifying_hook_changes_the_result() {
    let Some((dit, i)) = inputs() else { return };
    let base = run(&dit, &i, None, 1.0).to_vec_f32().unwrap();
    let seen = Mutex::new(0usize);
    let steer = FnHook::new(
        Some(vec![HookSite::Residual(0)]),
        |c: &HookContext<'_>, x: &Tensor| -> CoreResult<Option<Tensor>> {
            *seen.lock().unwrap() += 1;
            let norms = aria_core::hooks::mean_token_norm(x, c)?;
            assert!(norms.iter().all(|n| *n > 0.0));
            Ok(Some(ops::add_scalar(x, 0.1 * norms[0])?))
        },
    );
    let steered = run(&dit, &i, Some(&steer), 1.0).to_vec_f32().unwrap();
    assert_eq!(*seen.lock().unwrap(), 8);
    assert_ne!(base, steered);
}

/// Reusing a prepared context (cross-attention K/V and local embeddings computed once) gives the
/// same bits as recomputing everything for each call.
#[test]
fn prepared_context_matches_recomputation() {
    let Some((dit, i)) = inputs() else { return };
    let cond = DitConditioning {
        cross_attn_cond: &i.cross,
        global_cond: &i.global,
        local_add_cond: Some(&i.local),
    };
    let ctx = dit.prepare(&cond, None).unwrap();
    for t in [1.0f32, 0.5, 0.27] {
        let a = dit
            .forward_ctx(&i.x0, &[t], &ctx, Some(&i.mask), &ForwardOptions::default())
            .unwrap()
            .v;
        let tt = Tensor::from_vec(vec![t], &[1]).unwrap();
        let b = dit
            .forward(
                &i.x0,
                &tt,
                &i.cross,
                &i.global,
                Some(&i.local),
                Some(&i.mask),
            )
            .unwrap();
        assert_eq!(a.to_vec_f32().unwrap(), b.to_vec_f32().unwrap());
    }
}

#[test]
fn cancellation_and_start_step() {
    let Some((dit, i)) = inputs() else { return };
    let cond = DitConditioning {
        cross_attn_cond: &i.cross,
        global_cond: &i.global,
        local_add_cond: Some(&i.local),
    };
    let model = GuidedDit::new(&dit, &cond, None, Some(&i.mask), GuidedOptions::default()).unwrap();
    let schedule = Schedule::from_values(i.sigmas.clone()).unwrap();
    let mut cb = |s: &aria_dit::sampler::StepInfo<'_>| {
        if s.step == 3 {
            StepControl::Cancel
        } else {
            StepControl::Continue
        }
    };
    let mut noise = ReplayNoise::new(i.draws.clone());
    let r = sample(
        &model,
        SamplerKind::PingPong,
        i.x0.clone(),
        &schedule,
        &mut noise,
        SampleOptions {
            callback: Some(&mut cb),
            ..Default::default()
        },
    );
    assert!(matches!(r, Err(DitError::Cancelled { step: 3 })));

    // Full run, recording the state at step 5; then resume from it.
    let mut x5 = None;
    let mut rec = |s: &aria_dit::sampler::StepInfo<'_>| {
        if s.step == 5 {
            x5 = Some(s.x.clone());
        }
        StepControl::Continue
    };
    let mut noise = ReplayNoise::new(i.draws.clone());
    let full = sample(
        &model,
        SamplerKind::PingPong,
        i.x0.clone(),
        &schedule,
        &mut noise,
        SampleOptions {
            callback: Some(&mut rec),
            ..Default::default()
        },
    )
    .unwrap();
    let mut noise = ReplayNoise::new(i.draws[5..].to_vec());
    let resumed = sample(
        &model,
        SamplerKind::PingPong,
        x5.unwrap(),
        &schedule,
        &mut noise,
        SampleOptions {
            start_step: 5,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(full.to_vec_f32().unwrap(), resumed.to_vec_f32().unwrap());
}

/// True masking: padded positions cannot influence valid ones (and the CPU semantics can).
#[test]
fn exclude_mode_isolates_padding() {
    let Some((dit, i)) = inputs() else { return };
    let cond = DitConditioning {
        cross_attn_cond: &i.cross,
        global_cond: &i.global,
        local_add_cond: Some(&i.local),
    };
    let ctx = dit.prepare(&cond, None).unwrap();
    let t = i.x0.shape()[2];
    let mut mask = vec![1u8; t];
    mask[t - 10..].iter_mut().for_each(|m| *m = 0);
    let mask = Tensor::from_vec(mask, &[1, t]).unwrap();
    let mut x2 = i.x0.to_vec_f32().unwrap();
    for c in 0..i.x0.shape()[1] {
        x2[c * t + t - 1] += 3.0;
    }
    let x2 = Tensor::from_vec(x2, i.x0.shape()).unwrap();
    let valid = |v: &Tensor| -> Vec<f32> {
        let d = v.to_vec_f32().unwrap();
        d.chunks(t).flat_map(|r| r[..t - 10].to_vec()).collect()
    };
    for (mode, isolated) in [
        (KeyMaskMode::Exclude, true),
        (KeyMaskMode::ZeroValues, false),
    ] {
        let o = ForwardOptions {
            mask_mode: mode,
            ..Default::default()
        };
        let a = dit
            .forward_ctx(&i.x0, &[0.7], &ctx, Some(&mask), &o)
            .unwrap()
            .v;
        let b = dit
            .forward_ctx(&x2, &[0.7], &ctx, Some(&mask), &o)
            .unwrap()
            .v;
        assert_eq!(valid(&a) == valid(&b), isolated, "{mode:?}");
    }
}
