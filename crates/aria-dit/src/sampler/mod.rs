//! Samplers over the DiT (spec §6): schedules ([`Schedule`], [`Shift`]), the ping-pong sampler
//! (`rf_denoiser`, post-trained models) and Euler (`rectified_flow`, base models), CFG with an
//! optional negative prompt and APG ([`GuidedDit`]), injectable noise ([`NoiseSource`]),
//! starting from an intermediate step, a per-step callback with cancellation, and the
//! length/padding-mask bookkeeping of `generate()` ([`LengthParams`]).
//!
//! ```text
//! ping-pong, i = start..S−1:  v = model(x, t_i);  x̂₀ = x − t_i·v;  ε ~ noise;
//!                             x ← (1 − t_{i+1})·x̂₀ + t_{i+1}·ε      (ε drawn every step)
//! euler:                      x ← x + (t_{i+1} − t_i)·v
//! ```

mod guidance;
mod lengths;
mod noise;
mod schedule;

pub use guidance::{guided_velocity, Guidance};
pub use lengths::{padding_mask_from_lengths, LengthParams};
pub use noise::{GaussianNoise, NoiseSource, ReplayNoise};
pub use schedule::{Schedule, Shift};

use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::ops::KeyMaskMode;
use aria_core::Tensor;

use crate::dit::{Dit, DitConditioning, DitContext, ForwardOptions};
use crate::{DitError, Result};

/// The sampler algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    /// Ping-pong (default for `rf_denoiser`).
    PingPong,
    /// Euler (default for `rectified_flow`).
    Euler,
}

impl SamplerKind {
    /// The reference's default for a `diffusion_objective`.
    pub fn default_for(objective: &str) -> Result<Self> {
        match objective {
            "rf_denoiser" => Ok(SamplerKind::PingPong),
            "rectified_flow" => Ok(SamplerKind::Euler),
            o => Err(DitError::Input {
                what: "diffusion_objective".into(),
                reason: format!("`{o}` is not supported"),
            }),
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

fn axpby(a: &[f32], x: &[f32], b: &[f32], y: &[f32], per: usize) -> Vec<f32> {
    // out = a[item]·x + b[item]·y
    x.iter()
        .zip(y)
        .enumerate()
        .map(|(i, (x, y))| a[i / per] * x + b[i / per] * y)
        .collect()
}

/// Run `kind` over `schedule` from `x` (initial noise, the init-audio mix, or the state at
/// `opts.start_step`). Draws one noise tensor per ping-pong step from `noise`.
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
    let (b, per) = (shape[0], shape[1] * shape[2]);
    let steps = schedule.steps();
    if start_step > steps {
        return Err(DitError::Input {
            what: "start_step".into(),
            reason: format!("{start_step} > {steps} steps"),
        });
    }
    let mut x = x.contiguous()?;
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
        let xv = x.to_vec_f32()?;
        let vv = v.to_vec_f32()?;
        // x̂₀ = x − t·v
        let den: Vec<f32> = xv
            .iter()
            .zip(&vv)
            .enumerate()
            .map(|(k, (x, v))| x - t[k / per] * v)
            .collect();
        let denoised = Tensor::from_vec(den, &shape)?;
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
        let next = match kind {
            SamplerKind::PingPong => {
                let eps = noise.next(&shape)?.to_vec_f32()?;
                let one_minus: Vec<f32> = tn.iter().map(|s| 1.0 - s).collect();
                axpby(&one_minus, denoised.as_slice::<f32>()?, &tn, &eps, per)
            }
            SamplerKind::Euler => {
                let dt: Vec<f32> = tn.iter().zip(&t).map(|(a, b)| a - b).collect();
                xv.iter()
                    .zip(&vv)
                    .enumerate()
                    .map(|(k, (x, v))| x + dt[k / per] * v)
                    .collect()
            }
        };
        x = Tensor::from_vec(next, &shape)?;
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
}

/// The DiT as a [`VelocityModel`] for one generation: conditioning prepared once (cross
/// K/V, local embeddings), CFG batched as `[cond; uncond]` when enabled.
pub struct GuidedDit<'a> {
    dit: &'a Dit,
    single: Option<DitContext>,
    guided: Option<DitContext>,
    padding_mask: Option<Tensor>,
    mask_bool: Option<Vec<bool>>,
    opts: GuidedOptions<'a>,
}

fn cat0(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(Tensor::cat(
        &[
            &a.to_dtype(aria_core::DType::F32)?,
            &b.to_dtype(aria_core::DType::F32)?,
        ],
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
            let c = cond.cross_attn_cond.to_dtype(aria_core::DType::F32)?;
            let uncond = match negative {
                Some(n) => {
                    let nc = n.cross_attn_cond.to_dtype(aria_core::DType::F32)?;
                    if nc.shape() != c.shape() {
                        return Err(DitError::Input {
                            what: "negative cross_attn_cond".into(),
                            reason: format!("shape {:?}, expected {:?}", nc.shape(), c.shape()),
                        });
                    }
                    match n.cross_attn_mask {
                        Some(m) => {
                            let (bb, nn, dd) = (c.shape()[0], c.shape()[1], c.shape()[2]);
                            if m.shape() != [bb, nn] {
                                return Err(DitError::Input {
                                    what: "negative cross_attn_mask".into(),
                                    reason: format!("shape {:?}, expected [{bb}, {nn}]", m.shape()),
                                });
                            }
                            let mv = m.to_vec_f32()?;
                            let mut v = nc.to_vec_f32()?;
                            for (row, keep) in v.chunks_mut(dd.max(1)).zip(&mv) {
                                if *keep == 0.0 {
                                    row.iter_mut().for_each(|x| *x = 0.0);
                                }
                            }
                            Tensor::from_vec(v, c.shape())?
                        }
                        None => nc,
                    }
                }
                None => Tensor::zeros(c.shape(), aria_core::DType::F32),
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
        let mask_bool = padding_mask
            .map(|m| {
                m.to_vec_f32()
                    .map(|v| v.iter().map(|x| *x != 0.0).collect())
            })
            .transpose()?;
        Ok(GuidedDit {
            dit,
            single,
            guided,
            padding_mask: padding_mask.cloned(),
            mask_bool,
            opts,
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
                let x2 = cat0(x, x)?;
                let t2: Vec<f32> = sigma.iter().chain(sigma).copied().collect();
                let pm2 = self.padding_mask.as_ref().map(|m| cat0(m, m)).transpose()?;
                let fo = ForwardOptions {
                    guidance_rows: Some(b),
                    ..fo
                };
                let v = self.dit.forward_ctx(&x2, &t2, ctx, pm2.as_ref(), &fo)?.v;
                let vv = v.as_slice::<f32>()?;
                let half = vv.len() / 2;
                let s = x.shape();
                let out = guided_velocity(
                    &x.to_vec_f32()?,
                    &vv[..half],
                    &vv[half..],
                    sigma,
                    [s[0], s[1], s[2]],
                    self.mask_bool.as_deref(),
                    &g,
                )?;
                Ok(Tensor::from_vec(out, s)?)
            }
            _ => {
                let ctx = self.single.as_ref().ok_or_else(|| DitError::Input {
                    what: "GuidedDit".into(),
                    reason: "no unguided context".into(),
                })?;
                Ok(self
                    .dit
                    .forward_ctx(x, sigma, ctx, self.padding_mask.as_ref(), &fo)?
                    .v)
            }
        }
    }
}
