//! The DiT and its sampler resident on a device backend: the counting test backend computes with
//! the CPU kernels behind a device boundary and counts every upload, download and op. A whole
//! DiT forward (standard and differential attention, memory tokens, local conditioning, padding
//! masks in both semantics, a residual hook) and a whole 8-step ping-pong sample (with and
//! without CFG, noise draws on the device) must download nothing before the final output, pass
//! no host tensor to a device op, and give bit-identical results to the CPU path.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use aria_core::hooks::{FnHook, HookContext, HookSite};
use aria_core::ops::KeyMaskMode;
use aria_core::{ops, Device, Result as CoreResult, Tensor};
use aria_dit::dit::{Dit, DitConditioning, ForwardOptions};
use aria_testing::counting::{CountingBackend, Counts};
use aria_testing::sampler::ping_pong_replay;
use common::{get, load_dit, tensors, try_get};

/// Inputs of one DiT evaluation (on whatever device they were put).
struct Inputs {
    x: Tensor,
    t: Vec<f32>,
    cross: Tensor,
    global: Tensor,
    local: Option<Tensor>,
    mask: Option<Tensor>,
}

impl Inputs {
    fn put(&self, d: &Device) -> Inputs {
        let p = |t: &Tensor| d.put(t).unwrap();
        Inputs {
            x: p(&self.x),
            t: self.t.clone(),
            cross: p(&self.cross),
            global: p(&self.global),
            local: self.local.as_ref().map(p),
            mask: self.mask.as_ref().map(p),
        }
    }
}

/// The velocity and every hidden state, with a hook that adds a constant after block 0.
fn forward(dit: &Dit, i: &Inputs, mode: KeyMaskMode) -> (Tensor, Vec<Tensor>) {
    let cond = DitConditioning {
        cross_attn_cond: &i.cross,
        global_cond: &i.global,
        local_add_cond: i.local.as_ref(),
    };
    let ctx = dit.prepare(&cond, None).unwrap();
    let hook = FnHook::new(
        Some(vec![HookSite::Residual(0)]),
        |_c: &HookContext<'_>, x: &Tensor| -> CoreResult<Option<Tensor>> {
            Ok(Some(ops::add_scalar(x, 0.01)?))
        },
    );
    let opts = ForwardOptions {
        mask_mode: mode,
        hook: Some(&hook),
        collect_hidden: true,
        ..Default::default()
    };
    let out = dit
        .forward_ctx(&i.x, &i.t, &ctx, i.mask.as_ref(), &opts)
        .unwrap();
    (out.v, out.hidden)
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn print_counts(what: &str, c: &Counts) {
    println!(
        "{what}: {} ops, {} uploads, {} downloads, {} implicit uploads; {:?}",
        c.total_ops(),
        c.uploads,
        c.downloads,
        c.implicit_uploads,
        c.ops
    );
}

/// Nothing came back to the host and no host tensor was handed to a device op.
fn assert_resident(what: &str, c: &Counts) {
    print_counts(what, c);
    assert_eq!(c.downloads, 0, "{what}: downloads before the final output");
    assert_eq!(
        c.implicit_uploads, 0,
        "{what}: host operands in {:?}",
        c.mixed_ops
    );
}

fn forward_case(folder: &str, file: &str, group: &str) {
    let Some((_, mut dit)) = load_dit(folder) else {
        return;
    };
    let Some(w) = tensors(&format!("{folder}/{file}")) else {
        return;
    };
    let g = |n: &str| format!("in.{group}.{n}");
    let host = Inputs {
        x: get(&w, &g("x")),
        t: get(&w, &g("t")).to_vec_f32().unwrap(),
        cross: get(&w, &g("cross_attn_cond")),
        global: get(&w, &g("global_cond")),
        local: try_get(&w, &g("local_add_cond")),
        mask: try_get(&w, &g("padding_mask")),
    };
    let modes = [KeyMaskMode::ZeroValues, KeyMaskMode::Exclude];
    let cpu: Vec<_> = modes.iter().map(|&m| forward(&dit, &host, m)).collect();

    let be = CountingBackend::new();
    let dev = be.device();
    dit.to_device(&dev).unwrap();
    let on_dev = host.put(&dev);
    for (mode, (v_cpu, h_cpu)) in modes.iter().zip(&cpu) {
        be.reset();
        let (v, hidden) = forward(&dit, &on_dev, *mode);
        let what = format!("{folder} {group} {mode:?} forward");
        assert_resident(&what, &be.counts());
        assert_eq!(bits(&v.to_cpu().unwrap()), bits(v_cpu), "{what}: v differs");
        assert_eq!(be.counts().downloads, 1);
        for (i, (a, b)) in hidden.iter().zip(h_cpu).enumerate() {
            assert_eq!(bits(&a.to_cpu().unwrap()), bits(b), "{what}: hidden {i}");
        }
    }
}

#[test]
fn dit_forward_small_on_counting_backend() {
    forward_case("sa3-tiny", "dit_forward.safetensors", "dit_a");
}

#[test]
fn dit_forward_medium_differential_on_counting_backend() {
    forward_case("sa3-tiny-medium", "dit_forward.safetensors", "dit_a");
}

#[test]
fn dit_forward_batch_of_two_on_counting_backend() {
    forward_case("sa3-tiny-extra", "dit_extra.safetensors", "dit_b2");
}

#[test]
fn sampler_on_counting_backend() {
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let Some((_, mut dit)) = load_dit(folder) else {
            return;
        };
        let Some(w) = tensors(&format!("{folder}/sampler.safetensors")) else {
            return;
        };
        let cpu: Vec<Tensor> = [1.0, 3.0]
            .iter()
            .map(|&cfg| ping_pong_replay(&dit, &w, &Device::Cpu, cfg))
            .collect();
        let be = CountingBackend::new();
        let dev = be.device();
        dit.to_device(&dev).unwrap();
        for (cfg, want) in [1.0, 3.0].iter().zip(&cpu) {
            be.reset();
            let fin = ping_pong_replay(&dit, &w, &dev, *cfg);
            let c = be.counts();
            let what = format!("{folder} 8-step sample, cfg {cfg}");
            assert_resident(&what, &c);
            assert_eq!(bits(&fin.to_cpu().unwrap()), bits(want), "{what}");
        }
    }
}

/// A LoRA applied (and its strength changed) while the model lives on the device: the adapted
/// weights go there too, and the forward stays resident and equal to the CPU one.
#[test]
fn lora_on_counting_backend() {
    let Some((_, mut dit)) = load_dit("sa3-tiny-extra") else {
        return;
    };
    let (Some(w), Some(path)) = (
        tensors("sa3-tiny-extra/dit_extra.safetensors"),
        aria_testing::fixtures::fixture("sa3-tiny-extra/lora_std.safetensors"),
    ) else {
        return;
    };
    let g = |n: &str| format!("in.dit_b2.{n}");
    let host = Inputs {
        x: get(&w, &g("x")),
        t: get(&w, &g("t")).to_vec_f32().unwrap(),
        cross: get(&w, &g("cross_attn_cond")),
        global: get(&w, &g("global_cond")),
        local: try_get(&w, &g("local_add_cond")),
        mask: try_get(&w, &g("padding_mask")),
    };
    let mut stack = aria_dit::lora::LoraStack::new();
    stack.push(
        std::sync::Arc::new(aria_dit::lora::LoraFile::open(path).unwrap()),
        0.7,
    );
    stack.apply(&mut dit).unwrap();
    let (want, _) = forward(&dit, &host, KeyMaskMode::ZeroValues);
    stack.set_strength(0, 0.2).unwrap();
    stack.apply(&mut dit).unwrap();

    let be = CountingBackend::new();
    let dev = be.device();
    dit.to_device(&dev).unwrap();
    stack.set_strength(0, 0.7).unwrap();
    stack.apply(&mut dit).unwrap();
    let on_dev = host.put(&dev);
    be.reset();
    let (v, _) = forward(&dit, &on_dev, KeyMaskMode::ZeroValues);
    assert_resident("sa3-tiny-extra dit_b2 forward with a LoRA", &be.counts());
    assert_eq!(bits(&v.to_cpu().unwrap()), bits(&want));
}
