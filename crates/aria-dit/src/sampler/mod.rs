//! Samplers over the DiT (spec §6): schedules ([`Schedule`], [`Shift`]), the ping-pong sampler
//! (`rf_denoiser`, post-trained models), Euler (`rectified_flow`, base models) and the other
//! rectified-flow solvers of the reference, RK4 and DPM++ ([`solvers`]), CFG with an
//! optional negative prompt and APG ([`GuidedDit`]), injectable noise ([`NoiseSource`]),
//! starting from an intermediate step, a per-step callback with cancellation, and the
//! length/padding-mask bookkeeping of `generate()` ([`LengthParams`]).
//!
//! ```text
//! ping-pong, i = start..S−1:  v = model(x, t_i);  x̂₀ = x − t_i·v;  ε ~ noise;
//!                             x ← (1 − t_{i+1})·x̂₀ + t_{i+1}·ε      (ε drawn every step)
//! euler:                      x ← x + (t_{i+1} − t_i)·v
//! rk4:                        classic 4th-order Runge–Kutta, 4 model calls a step
//! dpmpp:                      DPM-Solver++(2M) in the rectified-flow form
//! ```

mod guidance;
mod lengths;
mod noise;
mod recorded;
mod schedule;
pub mod solvers;

pub use guidance::{guided_velocity, Guidance};
pub use lengths::{padding_mask_from_lengths, LengthParams};
pub use noise::{NoiseSource, ReplayNoise, SeededNoise, TorchNoise};
pub use schedule::{Schedule, Shift};

use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::ops::{self, KeyMaskMode};
use aria_core::{DType, Tensor};

use crate::config::Objective;
use crate::dit::{on_device, Dit, DitConditioning, DitContext, ForwardOptions};
use crate::{DitError, Result};

/// The sampler algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    /// Ping-pong (default for `rf_denoiser`).
    PingPong,
    /// Euler (default for `rectified_flow`).
    Euler,
    /// Classic 4th-order Runge–Kutta (4 model evaluations per step).
    Rk4,
    /// DPM-Solver++ (2M) for rectified flow (1 model evaluation per step).
    DpmPp,
}

impl SamplerKind {
    /// The names [`SamplerKind::parse`] accepts.
    pub const ALLOWED: &'static [&'static str] = &["pingpong", "euler", "rk4", "dpmpp"];

    /// The reference's default for a `diffusion_objective`.
    pub fn default_for(objective: Objective) -> Self {
        match objective {
            Objective::RfDenoiser => SamplerKind::PingPong,
            Objective::RectifiedFlow => SamplerKind::Euler,
        }
    }

    /// The sampler named `name` (`pingpong`, `euler`, `rk4`, `dpmpp`); the error names the
    /// allowed values.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "pingpong" => Ok(SamplerKind::PingPong),
            "euler" => Ok(SamplerKind::Euler),
            "rk4" => Ok(SamplerKind::Rk4),
            "dpmpp" => Ok(SamplerKind::DpmPp),
            other => Err(DitError::Input {
                what: "sampler".into(),
                reason: format!(
                    "`{other}` is not a sampler (allowed: {})",
                    Self::ALLOWED.join(", ")
                ),
            }),
        }
    }

    /// The name as [`SamplerKind::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::PingPong => "pingpong",
            SamplerKind::Euler => "euler",
            SamplerKind::Rk4 => "rk4",
            SamplerKind::DpmPp => "dpmpp",
        }
    }

    /// Model evaluations per step (4 for RK4, else 1).
    pub fn evals_per_step(self) -> usize {
        if self == SamplerKind::Rk4 {
            4
        } else {
            1
        }
    }
}

/// A velocity model `v(x, σ)` evaluated by the samplers (the guided DiT, or a stub in tests).
pub trait VelocityModel {
    /// Velocity for `x [B, C, T]` at per-item noise levels `sigma`, at sampler step `step`.
    fn velocity(&self, x: &Tensor, sigma: &[f32], step: usize) -> Result<Tensor>;
}

/// What the per-step callback sees (after the model call of step `step`).
#[derive(Debug, Clone, Copy)]
pub struct StepInfo<'a> {
    /// Step index.
    pub step: usize,
    /// Total number of steps of the schedule.
    pub steps: usize,
    /// Noise level per item at this step.
    pub sigma: &'a [f32],
    /// State before the step.
    pub x: &'a Tensor,
    /// Clean estimate `x − σ·v` of this step.
    pub denoised: &'a Tensor,
}

/// The callback's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepControl {
    /// Go on.
    Continue,
    /// Stop: the sampler returns [`DitError::Cancelled`].
    Cancel,
}

/// Sampling options other than the model, schedule and noise.
#[derive(Default)]
pub struct SampleOptions<'a> {
    /// First step to run (0: from `σ_max`); `x` must then be the state at `schedule[start_step]`.
    pub start_step: usize,
    /// Hook called on the state after every step ([`HookSite::Latent`]).
    pub hook: Option<&'a dyn ActivationHook>,
    /// Called after every model evaluation; may cancel.
    pub callback: Option<&'a mut dyn FnMut(&StepInfo<'_>) -> StepControl>,
}

/// Run `kind` over `schedule` from `x` (initial noise, the init-audio mix, or the state at
/// `opts.start_step`). Draws one noise tensor per ping-pong step from `noise`; the other
/// samplers draw nothing. RK4 calls the model four times per step (all with that step's
/// index); DPM++ starts first-order at the first step it runs.
///
/// The state stays a tensor on `x`'s device throughout (noise drawn on the host is copied
/// there; draws already on that device are used as they are). Per step, bit for bit as the
/// reference's f32 arithmetic: `x̂₀ = x − σ·v`, then `(1 − σ')·x̂₀ + σ'·ε` (ping-pong) or
/// `x + (σ' − σ)·v` (Euler), one pair of scalars per batch item ([`ops::axpby`]).
pub fn sample(
    model: &dyn VelocityModel,
    kind: SamplerKind,
    x: Tensor,
    schedule: &Schedule,
    noise: &mut dyn NoiseSource,
    opts: SampleOptions<'_>,
) -> Result<Tensor> {
    let SampleOptions {
        start_step,
        hook,
        mut callback,
    } = opts;
    let shape = x.shape().to_vec();
    if shape.len() != 3 {
        return Err(DitError::Input {
            what: "x".into(),
            reason: format!("shape {shape:?}, expected [B, C, T]"),
        });
    }
    let b = shape[0];
    let device = x.device();
    let ones = vec![1.0f32; b];
    let steps = schedule.steps();
    if start_step > steps {
        return Err(DitError::Input {
            what: "start_step".into(),
            reason: format!("{start_step} > {steps} steps"),
        });
    }
    let mut x = x.contiguous()?;
    // DPM++: the previous step's clean estimate and noise level.
    let mut previous: Option<(Tensor, Vec<f32>)> = None;
    for i in start_step..steps {
        let t = schedule.at(i, b)?;
        let tn = schedule.at(i + 1, b)?;
        let v = model.velocity(&x, &t, i)?;
        if v.shape() != shape.as_slice() {
            return Err(DitError::Input {
                what: "velocity".into(),
                reason: format!("shape {:?}, expected {shape:?}", v.shape()),
            });
        }
        // x̂₀ = x − t·v
        let neg_t: Vec<f32> = t.iter().map(|s| -s).collect();
        let denoised = ops::axpby(&ones, &x, &neg_t, &v)?;
        if let Some(cb) = callback.as_mut() {
            let info = StepInfo {
                step: i,
                steps,
                sigma: &t,
                x: &x,
                denoised: &denoised,
            };
            if cb(&info) == StepControl::Cancel {
                return Err(DitError::Cancelled { step: i });
            }
        }
        x = match kind {
            SamplerKind::PingPong => {
                let eps = noise.draw(&shape, "sampler step noise")?;
                let eps = on_device(&eps, &device)?;
                let one_minus: Vec<f32> = tn.iter().map(|s| 1.0 - s).collect();
                ops::axpby(&one_minus, &denoised, &tn, &eps)?
            }
            SamplerKind::Euler => {
                let dt: Vec<f32> = tn.iter().zip(&t).map(|(a, b)| a - b).collect();
                ops::axpby(&ones, &x, &dt, &v)?
            }
            SamplerKind::Rk4 => solvers::rk4_step(model, &x, &v, &t, &tn, i)?,
            SamplerKind::DpmPp => {
                let prev = previous.as_ref().map(|(d, tp)| (d, tp.as_slice()));
                let next = solvers::dpmpp_step(&x, &denoised, &t, &tn, prev)?;
                previous = Some((denoised, t.clone()));
                next
            }
        };
        if hook.is_some() {
            let ctx = HookContext {
                step: Some(i),
                sigma: Some(&tn),
                ..HookContext::new(HookSite::Latent)
            };
            x = run_hook(hook, &ctx, x)?;
        }
    }
    Ok(x)
}

/// Negative-prompt conditioning for CFG.
#[derive(Debug, Clone, Copy)]
pub struct NegativeConditioning<'a> {
    /// Negative cross-attention tokens `[B, Nc, Dc]` (as the conditioner returns them).
    pub cross_attn_cond: &'a Tensor,
    /// `[B, Nc]` validity; masked tokens are set to zero (not to the padding embedding).
    pub cross_attn_mask: Option<&'a Tensor>,
}

/// DiT-specific options of [`GuidedDit`].
#[derive(Clone, Copy, Default)]
pub struct GuidedOptions<'a> {
    /// Guidance settings.
    pub guidance: Guidance,
    /// Padding semantics of the attention mask.
    pub mask_mode: KeyMaskMode,
    /// Hook at the DiT sites (residual after each block, text conditioning).
    pub hook: Option<&'a dyn ActivationHook>,
    /// Evaluate the DiT op by op at every step even on a backend that records the step's
    /// evaluation once and replays it (CUDA graphs, see [`GuidedDit`]): for comparisons.
    pub op_by_op: bool,
}

/// The DiT as a [`VelocityModel`] for one generation: conditioning prepared once (cross
/// K/V, local embeddings), CFG batched as `[cond; uncond]` when enabled.
///
/// Inputs live on the model's device; so do the conditioning it prepares and the velocities.
///
/// On a backend that records work ([`aria_core::Backend::record`]: CUDA), each kind of step
/// (guided or not; the hook's [step class](ActivationHook::step_class)) is recorded at its
/// first occurrence, with `x` and `σ` read from device buffers, and replayed at every later
/// one; the velocities are those of the op-by-op evaluation. A hook without a step class, or
/// [`GuidedOptions::op_by_op`], keeps the op-by-op evaluation.
pub struct GuidedDit<'a> {
    dit: &'a Dit,
    single: Option<DitContext>,
    guided: Option<DitContext>,
    padding_mask: Option<Tensor>,
    /// `[mask; mask]` for the batched CFG pass.
    padding_mask2: Option<Tensor>,
    opts: GuidedOptions<'a>,
    recordings: recorded::Recordings<'a>,
}

fn cat0(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(Tensor::cat(
        &[&a.to_dtype(DType::F32)?, &b.to_dtype(DType::F32)?],
        0,
    )?)
}

impl<'a> GuidedDit<'a> {
    /// Prepare a generation: `cond` (positive), `negative` (CFG only; none = zero context),
    /// `padding_mask [B, T]`.
    pub fn new(
        dit: &'a Dit,
        cond: &DitConditioning<'_>,
        negative: Option<NegativeConditioning<'_>>,
        padding_mask: Option<&Tensor>,
        opts: GuidedOptions<'a>,
    ) -> Result<Self> {
        let g = opts.guidance;
        let needs_guided = g.cfg_scale != 1.0;
        let needs_single = !needs_guided || g.cfg_interval.0 > 0.0 || g.cfg_interval.1 < 1.0;
        let single = if needs_single {
            Some(dit.prepare(cond, opts.hook)?)
        } else {
            None
        };
        let guided = if needs_guided {
            let c = cond.cross_attn_cond.to_dtype(DType::F32)?;
            let uncond = match negative {
                Some(n) => {
                    let nc = n.cross_attn_cond.to_dtype(DType::F32)?;
                    if nc.shape() != c.shape() {
                        return Err(DitError::Input {
                            what: "negative cross_attn_cond".into(),
                            reason: format!("shape {:?}, expected {:?}", nc.shape(), c.shape()),
                        });
                    }
                    match n.cross_attn_mask {
                        Some(m) => {
                            let (bb, nn) = (c.shape()[0], c.shape()[1]);
                            if m.shape() != [bb, nn] {
                                return Err(DitError::Input {
                                    what: "negative cross_attn_mask".into(),
                                    reason: format!("shape {:?}, expected [{bb}, {nn}]", m.shape()),
                                });
                            }
                            // Masked tokens become zeros.
                            ops::fill_masked_rows(&nc, m, None)?
                        }
                        None => nc,
                    }
                }
                None => on_device(&Tensor::zeros(c.shape(), DType::F32), &c.device())?,
            };
            let cross = cat0(&c, &uncond)?;
            let global = cat0(cond.global_cond, cond.global_cond)?;
            let local = cond.local_add_cond.map(|l| cat0(l, l)).transpose()?;
            let dc = DitConditioning {
                cross_attn_cond: &cross,
                global_cond: &global,
                local_add_cond: local.as_ref(),
            };
            Some(dit.prepare(&dc, opts.hook)?)
        } else {
            None
        };
        let padding_mask2 = match (&guided, padding_mask) {
            (Some(_), Some(m)) => Some(cat0(m, m)?),
            _ => None,
        };
        Ok(GuidedDit {
            dit,
            single,
            guided,
            padding_mask: padding_mask.cloned(),
            padding_mask2,
            opts,
            recordings: recorded::Recordings::new(!opts.op_by_op),
        })
    }
}

impl VelocityModel for GuidedDit<'_> {
    fn velocity(&self, x: &Tensor, sigma: &[f32], step: usize) -> Result<Tensor> {
        let g = self.opts.guidance;
        let first = sigma.first().copied().unwrap_or(0.0);
        let fo = ForwardOptions {
            mask_mode: self.opts.mask_mode,
            hook: self.opts.hook,
            step: Some(step),
            ..Default::default()
        };
        match (&self.guided, g.active_at(first)) {
            (Some(ctx), true) => {
                let b = x.shape()[0];
                let src = recorded::Source {
                    dit: self.dit,
                    ctx,
                    padding_mask: self.padding_mask2.as_ref(),
                    mask_mode: self.opts.mask_mode,
                    hook: self.opts.hook,
                };
                if let Some(v) = self.recordings.velocity(&src, x, sigma, step, true)? {
                    return guided_velocity(
                        x,
                        &v.narrow(0, 0, b)?,
                        &v.narrow(0, b, b)?,
                        sigma,
                        self.padding_mask.as_ref(),
                        &g,
                    );
                }
                let x2 = cat0(x, x)?;
                let t2: Vec<f32> = sigma.iter().chain(sigma).copied().collect();
                let fo = ForwardOptions {
                    guidance_rows: Some(b),
                    ..fo
                };
                let v = self
                    .dit
                    .forward_ctx(&x2, &t2, ctx, self.padding_mask2.as_ref(), &fo)?
                    .v;
                guided_velocity(
                    x,
                    &v.narrow(0, 0, b)?,
                    &v.narrow(0, b, b)?,
                    sigma,
                    self.padding_mask.as_ref(),
                    &g,
                )
            }
            _ => {
                let ctx = self.single.as_ref().ok_or_else(|| DitError::Input {
                    what: "GuidedDit".into(),
                    reason: "no unguided context".into(),
                })?;
                let src = recorded::Source {
                    dit: self.dit,
                    ctx,
                    padding_mask: self.padding_mask.as_ref(),
                    mask_mode: self.opts.mask_mode,
                    hook: self.opts.hook,
                };
                if let Some(v) = self.recordings.velocity(&src, x, sigma, step, false)? {
                    // A copy: the next replay overwrites the buffer while a solver may keep
                    // this velocity (RK4's k1). `x·1` is `x`, bit for bit.
                    return Ok(ops::mul_scalar(&v, 1.0)?);
                }
                Ok(self
                    .dit
                    .forward_ctx(x, sigma, ctx, self.padding_mask.as_ref(), &fo)?
                    .v)
            }
        }
    }
}
