//! Replaying the recorded 8-step ping-pong sample of a fixture model (the `dit` feature).
//!
//! Every fixture model folder (`sa3-tiny`, `sa3-tiny-medium`) has a `sampler.safetensors` that
//! recorded the official sampler: its inputs under `in.sampler.*` (conditioning, padding mask,
//! initial noise, the σ schedule and the noise drawn at each of the 8 steps) and its output.
//! [`SamplerReplay`] puts those inputs on a device and runs the same sample there, so that the
//! device backends' tests (CUDA, wgpu, the counting backend) all replay one procedure.
//!
//! Panics with a description on malformed fixtures (tests only).

use aria_core::{DType, Device, Tensor, WeightLoader};
use aria_dit::dit::{Dit, DitConditioning};
use aria_dit::sampler::{
    sample, Guidance, GuidedDit, GuidedOptions, ReplayNoise, SampleOptions, SamplerKind, Schedule,
};

/// Number of steps (and recorded noise draws) of the fixture sample.
pub const STEPS: usize = 8;

/// The recorded inputs of a fixture sample, put on one device.
#[derive(Debug)]
pub struct SamplerReplay {
    cross: Tensor,
    global: Tensor,
    local: Tensor,
    mask: Tensor,
    init_noise: Tensor,
    draws: Vec<Tensor>,
    sigmas: Vec<f32>,
}

impl SamplerReplay {
    /// Reads the `in.sampler.*` tensors of `w` (a fixture's `sampler.safetensors`) as f32 and
    /// puts every one on `dev`.
    pub fn load(w: &WeightLoader, dev: &Device) -> SamplerReplay {
        let host = |n: &str| -> Tensor {
            let name = format!("in.sampler.{n}");
            w.get_any(&name)
                .and_then(|t| t.to_dtype(DType::F32))
                .unwrap_or_else(|e| panic!("fixture tensor `{name}`: {e}"))
        };
        let put = |n: &str| -> Tensor {
            dev.put(&host(n))
                .unwrap_or_else(|e| panic!("putting `in.sampler.{n}` on the device: {e}"))
        };
        let sigmas = host("sigmas")
            .to_vec_f32()
            .unwrap_or_else(|e| panic!("fixture tensor `in.sampler.sigmas`: {e}"));
        SamplerReplay {
            cross: put("cond.cross_attn_cond"),
            global: put("cond.global_cond"),
            local: put("cond.local_add_cond"),
            mask: put("padding_mask"),
            init_noise: put("init_noise"),
            draws: (0..STEPS)
                .map(|i| put(&format!("step_noise_{i}")))
                .collect(),
            sigmas,
        }
    }

    /// Runs the ping-pong sample with `dit` (which must live on the same device) at CFG scale
    /// `cfg_scale` (the other guidance settings at their defaults), consuming the recorded
    /// draws; returns the final latents, still on the device.
    pub fn ping_pong(self, dit: &Dit, cfg_scale: f32) -> Tensor {
        let opts = GuidedOptions {
            guidance: Guidance {
                cfg_scale,
                ..Default::default()
            },
            ..Default::default()
        };
        self.ping_pong_with(dit, opts)
    }

    /// The recorded σ schedule (one more value than steps).
    pub fn sigmas(&self) -> &[f32] {
        &self.sigmas
    }

    /// [`SamplerReplay::ping_pong`] with any guidance options and hook.
    pub fn ping_pong_with(self, dit: &Dit, opts: GuidedOptions<'_>) -> Tensor {
        let cond = DitConditioning {
            cross_attn_cond: &self.cross,
            global_cond: &self.global,
            local_add_cond: Some(&self.local),
        };
        let model = GuidedDit::new(dit, &cond, None, Some(&self.mask), opts)
            .unwrap_or_else(|e| panic!("guided DiT of the fixture sample: {e}"));
        let schedule = Schedule::from_values(self.sigmas)
            .unwrap_or_else(|e| panic!("σ schedule of the fixture sample: {e}"));
        let mut noise = ReplayNoise::new(self.draws);
        sample(
            &model,
            SamplerKind::PingPong,
            self.init_noise,
            &schedule,
            &mut noise,
            SampleOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{STEPS}-step ping-pong sample: {e}"))
    }
}

/// [`SamplerReplay::load`] then [`SamplerReplay::ping_pong`]: the fixture sample of `w` with
/// every input on `dev`, `dit` on `dev` too.
pub fn ping_pong_replay(dit: &Dit, w: &WeightLoader, dev: &Device, cfg_scale: f32) -> Tensor {
    SamplerReplay::load(w, dev).ping_pong(dit, cfg_scale)
}
