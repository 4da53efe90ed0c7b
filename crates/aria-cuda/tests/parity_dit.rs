//! The DiT forward and the 8-step ping-pong sample on the CUDA backend against the CPU path, on
//! the random-weight fixture models: ≤ 1e-5 relative in f32. Needs a CUDA device (skips with a
//! message without one, unless `ARIA_REQUIRE_CUDA=1`) and the fixtures.
#![allow(clippy::unwrap_used)]

mod common;

use aria_core::ops::KeyMaskMode;
use aria_core::{DType, Device, Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};
use aria_testing::fixtures::{assert_close, fixture, fixture_tensors};
use aria_testing::sampler::ping_pong_replay;
use common::backend;

const TOL: f32 = 1e-5;

fn load_dit(folder: &str) -> Option<Dit> {
    let cfg = ModelConfig::from_file(fixture(&format!("{folder}/model_config.json"))?).unwrap();
    let loader =
        WeightLoader::open_checkpoint(fixture(&format!("{folder}/model.safetensors"))?).unwrap();
    Some(Dit::load(&cfg.model.diffusion.config, &loader.pp("model.model")).unwrap())
}

fn get(w: &WeightLoader, name: &str) -> Tensor {
    w.get_any(name).unwrap().to_dtype(DType::F32).unwrap()
}

fn try_get(w: &WeightLoader, name: &str) -> Option<Tensor> {
    w.contains(name).then(|| get(w, name))
}

fn forward(dit: &Dit, w: &WeightLoader, group: &str, dev: &Device, mode: KeyMaskMode) -> Tensor {
    let g = |n: &str| format!("in.{group}.{n}");
    let p = |t: Tensor| dev.put(&t).unwrap();
    let x = p(get(w, &g("x")));
    let t = get(w, &g("t")).to_vec_f32().unwrap();
    let cross = p(get(w, &g("cross_attn_cond")));
    let global = p(get(w, &g("global_cond")));
    let local = try_get(w, &g("local_add_cond")).map(p);
    let mask = try_get(w, &g("padding_mask")).map(p);
    let cond = DitConditioning {
        cross_attn_cond: &cross,
        global_cond: &global,
        local_add_cond: local.as_ref(),
    };
    let ctx = dit.prepare(&cond, None).unwrap();
    let opts = ForwardOptions {
        mask_mode: mode,
        ..Default::default()
    };
    dit.forward_ctx(&x, &t, &ctx, mask.as_ref(), &opts)
        .unwrap()
        .v
}

#[test]
fn dit_forward_matches_cpu() {
    let Some(be) = backend("dit_forward_matches_cpu") else {
        return;
    };
    for (folder, file, group) in [
        ("sa3-tiny", "dit_forward.safetensors", "dit_a"),
        ("sa3-tiny-medium", "dit_forward.safetensors", "dit_a"),
        ("sa3-tiny-extra", "dit_extra.safetensors", "dit_b2"),
    ] {
        let (Some(mut dit), Some(w)) = (
            load_dit(folder),
            fixture_tensors(&format!("{folder}/{file}")),
        ) else {
            return;
        };
        let w = w.unwrap();
        for mode in [KeyMaskMode::ZeroValues, KeyMaskMode::Exclude] {
            dit.to_device(&Device::Cpu).unwrap();
            let cpu = forward(&dit, &w, group, &Device::Cpu, mode);
            dit.to_device(&be.device()).unwrap();
            let dev = forward(&dit, &w, group, &be.device(), mode);
            assert_close(
                &format!("{folder} {group} {mode:?}"),
                &dev.to_cpu().unwrap(),
                &cpu,
                TOL,
            );
        }
    }
}

#[test]
fn eight_step_sample_matches_cpu() {
    let Some(be) = backend("eight_step_sample_matches_cpu") else {
        return;
    };
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(mut dit), Some(w)) = (
            load_dit(folder),
            fixture_tensors(&format!("{folder}/sampler.safetensors")),
        ) else {
            return;
        };
        let w = w.unwrap();
        for cfg in [1.0, 3.0] {
            dit.to_device(&Device::Cpu).unwrap();
            let cpu = ping_pong_replay(&dit, &w, &Device::Cpu, cfg);
            dit.to_device(&be.device()).unwrap();
            let dev = ping_pong_replay(&dit, &w, &be.device(), cfg);
            assert_close(
                &format!("{folder} 8 steps cfg {cfg}"),
                &dev.to_cpu().unwrap(),
                &cpu,
                TOL,
            );
        }
    }
}

/// The sampler's DiT evaluation recorded as a CUDA graph and replayed (the default on CUDA)
/// against the same sample evaluated op by op on CUDA (`GuidedOptions::op_by_op`), and both
/// against the CPU; with guidance over part of the schedule (two recordings) too.
#[test]
fn recorded_sample_matches_op_by_op() {
    use aria_dit::sampler::{Guidance, GuidedOptions};
    use aria_testing::sampler::SamplerReplay;
    let Some(be) = backend("recorded_sample_matches_op_by_op") else {
        return;
    };
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let (Some(mut dit), Some(w)) = (
            load_dit(folder),
            fixture_tensors(&format!("{folder}/sampler.safetensors")),
        ) else {
            return;
        };
        let w = w.unwrap();
        let sigmas = SamplerReplay::load(&w, &Device::Cpu).sigmas().to_vec();
        for interval in [(0.0, 1.0), (0.0, sigmas[4])] {
            let opts = |op_by_op| GuidedOptions {
                guidance: Guidance {
                    cfg_scale: 3.0,
                    cfg_interval: interval,
                    ..Default::default()
                },
                op_by_op,
                ..Default::default()
            };
            dit.to_device(&Device::Cpu).unwrap();
            let cpu = SamplerReplay::load(&w, &Device::Cpu).ping_pong_with(&dit, opts(true));
            dit.to_device(&be.device()).unwrap();
            let run = |op_by_op| {
                SamplerReplay::load(&w, &be.device())
                    .ping_pong_with(&dit, opts(op_by_op))
                    .to_cpu()
                    .unwrap()
            };
            let (direct, recorded) = (run(true), run(false));
            let what = format!("{folder} 8 steps, cfg 3 over {interval:?}");
            assert_close(
                &format!("{what}: recorded vs op by op"),
                &recorded,
                &direct,
                TOL,
            );
            assert_close(&format!("{what}: recorded vs CPU"), &recorded, &cpu, TOL);
        }
    }
}
