//! The sampler's DiT evaluation recorded once per kind of step and replayed, on the counting
//! backend in its recording mode (which records the way CUDA records a graph: nothing runs at
//! recording time, every replay runs the recorded work again). Each 8-step ping-pong sample
//! must give the CPU's bits, record exactly one evaluation per kind of step (guided or not; the
//! hook's step class), replay one per step, and move nothing between host and device inside a
//! replay (a CUDA graph cannot capture a transfer).
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use aria_core::hooks::{ActivationHook, FnHook, HookContext, HookSite};
use aria_core::{ops, Device, Result as CoreResult, Tensor};
use aria_dit::dit::Dit;
use aria_dit::sampler::{Guidance, GuidedOptions};
use aria_testing::counting::CountingBackend;
use aria_testing::sampler::SamplerReplay;
use common::{load_dit, tensors};

/// Adds 0.01 to the residual after block 0 at steps 2–4: a hook with a step class.
struct SpanHook;

impl ActivationHook for SpanHook {
    fn wants(&self, site: HookSite) -> bool {
        site == HookSite::Residual(0)
    }
    fn on_activation(&self, ctx: &HookContext<'_>, x: &Tensor) -> CoreResult<Option<Tensor>> {
        match ctx.step {
            Some(2..=4) => Ok(Some(ops::add_scalar(x, 0.01)?)),
            _ => Ok(None),
        }
    }
    fn step_class(&self, step: usize) -> Option<Vec<u64>> {
        Some(vec![u64::from((2..=4).contains(&step))])
    }
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

/// One case: its name, guidance, hook, and the recordings it must make.
struct Case<'h> {
    name: &'static str,
    guidance: Guidance,
    hook: Option<&'h dyn ActivationHook>,
    recordings: usize,
}

fn run(dit: &Dit, w: &aria_core::WeightLoader, dev: &Device, case: &Case<'_>) -> Tensor {
    let opts = GuidedOptions {
        guidance: case.guidance,
        hook: case.hook,
        ..Default::default()
    };
    SamplerReplay::load(w, dev).ping_pong_with(dit, opts)
}

#[test]
fn recorded_steps_give_the_cpu_bits_and_transfer_nothing() {
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let Some((_, mut dit)) = load_dit(folder) else {
            return;
        };
        let Some(w) = tensors(&format!("{folder}/sampler.safetensors")) else {
            return;
        };
        let sigmas = SamplerReplay::load(&w, &Device::Cpu).sigmas().to_vec();
        let no_class = FnHook::new(
            Some(vec![HookSite::Residual(0)]),
            |_c: &HookContext<'_>, x: &Tensor| -> CoreResult<Option<Tensor>> {
                Ok(Some(ops::add_scalar(x, 0.01)?))
            },
        );
        let cfg = |s: f32| Guidance {
            cfg_scale: s,
            ..Default::default()
        };
        // Guidance only over the lower half of the schedule: both kinds of step occur.
        let interval = Guidance {
            cfg_interval: (0.0, sigmas[4]),
            ..cfg(3.0)
        };
        assert!(interval.active_at(sigmas[7]) && !interval.active_at(sigmas[0]));
        let cases = [
            Case {
                name: "cfg 1",
                guidance: cfg(1.0),
                hook: None,
                recordings: 1,
            },
            Case {
                name: "cfg 3",
                guidance: cfg(3.0),
                hook: None,
                recordings: 1,
            },
            Case {
                name: "cfg 3 in an interval",
                guidance: interval,
                hook: None,
                recordings: 2,
            },
            Case {
                name: "a hook at steps 2-4",
                guidance: cfg(3.0),
                hook: Some(&SpanHook),
                recordings: 2,
            },
            Case {
                name: "a hook without a step class",
                guidance: cfg(1.0),
                hook: Some(&no_class),
                recordings: 0,
            },
        ];
        let cpu: Vec<Vec<u32>> = cases
            .iter()
            .map(|c| bits(&run(&dit, &w, &Device::Cpu, c)))
            .collect();
        let be = CountingBackend::recording();
        let dev = be.device();
        dit.to_device(&dev).unwrap();
        for (case, want) in cases.iter().zip(&cpu) {
            be.reset();
            let fin = run(&dit, &w, &dev, case);
            let c = be.counts();
            let what = format!("{folder} 8-step sample, {}", case.name);
            println!("{what}: {c:?}");
            assert_eq!(c.recordings, case.recordings, "{what}: recordings");
            let replays = if case.recordings == 0 { 0 } else { 8 };
            assert_eq!(c.replays, replays, "{what}: replays");
            assert_eq!(
                c.transfers_in_replays, 0,
                "{what}: transfers inside a replay"
            );
            assert_eq!(c.downloads, 0, "{what}: downloads before the final output");
            assert_eq!(
                c.implicit_uploads, 0,
                "{what}: host operands in {:?}",
                c.mixed_ops
            );
            assert_eq!(&bits(&fin), want, "{what}: differs from the CPU");
        }
        // The hooked cases differ from the plain ones: the hook did act inside the replays.
        assert_ne!(cpu[3], cpu[1], "{folder}: the span hook changed nothing");
    }
}

/// A backend that does not record (the plain counting backend, like wgpu) evaluates op by op
/// and makes no recording.
#[test]
fn a_backend_that_does_not_record_runs_op_by_op() {
    let Some((_, mut dit)) = load_dit("sa3-tiny") else {
        return;
    };
    let Some(w) = tensors("sa3-tiny/sampler.safetensors") else {
        return;
    };
    let be = CountingBackend::new();
    dit.to_device(&be.device()).unwrap();
    let case = Case {
        name: "cfg 3",
        guidance: Guidance {
            cfg_scale: 3.0,
            ..Default::default()
        },
        hook: None,
        recordings: 0,
    };
    let _ = run(&dit, &w, &be.device(), &case);
    let c = be.counts();
    assert_eq!((c.recordings, c.replays, c.writes), (0, 0, 0));
    assert!(c.total_ops() > 0);
}
