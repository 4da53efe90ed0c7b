//! The steering hook: directions added to, or projected out of, the residual stream, the
//! latent or the text conditioning, as an [`ActivationHook`].
//!
//! Per site the activation `h` is a set of vectors along the site's feature axis: the last
//! axis of the residual `[B, P+T, E]` (every token, memory tokens included) and of the text
//! conditioning `[B, Nc, Dc]`; the channel axis of the latent `[B, C, T]` (every frame). Every
//! batch row is steered, the unconditional rows of a classifier-free-guidance batch included
//! (as forward hooks on the reference model do).
//!
//! * add: `h += α·s·d`, `s` the stored baseline mean norm `n̄` ([`Scale::MeanNorm`]) or 1
//!   ([`Scale::Raw`]);
//! * project: `h −= β·(h·d)·d`.
//!
//! **Composition.** Several [`Steering`]s at once are applied in the order they were given
//! (the order of `--steer` flags): at a site each one acts on the output of the previous one.
//! Adds commute with each other; an add and a project at the same site do not (an add after a
//! project keeps its full component along the projected direction).
//!
//! A steering with strength 0, or at a step outside its span, leaves the tensor alone (the hook
//! returns `None`): the run is bit-identical to one without it. Steps are the sampler's 0-based
//! step indices, span inclusive; a call without a step (a DiT forward outside a sampler) counts
//! as outside any span. The text conditioning is computed once per generation, so a text
//! steering takes no span.
//!
//! The arithmetic is [`aria_core::ops`] tensor code, so it runs where the activation lives; the
//! direction is copied to a device once and cached ([`ActivationHook::prepare`] does it before
//! a sampler records its step there). On a backend that records the DiT evaluation (CUDA
//! graphs), steps are recorded once per [step class](ActivationHook::step_class): which
//! residual steerings' spans hold the step. The strengths are constants of the hook, recorded
//! with it.

use std::sync::Mutex;

use aria_core::hooks::{ActivationHook, HookContext, HookSite};
use aria_core::{ops, Device, Tensor};

use crate::direction::{DirectionEntry, Site};
use crate::{Result, SteerError};

/// The operation of a steering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerOp {
    /// `h += α·s·d`.
    Add,
    /// `h −= β·(h·d)·d`.
    Project,
}

/// The scale of an `add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The stored baseline mean norm.
    MeanNorm,
    /// 1: strength in the activation's units.
    Raw,
}

/// An inclusive range of 0-based sampler steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSpan {
    /// First step.
    pub lo: usize,
    /// Last step (inclusive).
    pub hi: usize,
}

impl StepSpan {
    /// Whether `step` lies in the span.
    pub fn contains(self, step: usize) -> bool {
        self.lo <= step && step <= self.hi
    }
}

/// One direction applied at one site.
#[derive(Debug)]
pub struct Steering {
    site: Site,
    op: SteerOp,
    strength: f32,
    scale: Scale,
    steps: Option<StepSpan>,
    direction: Vec<f32>,
    mean_norm: f32,
    /// The direction `[D]` on the host and, once used there, on a device.
    host: Tensor,
    device: Mutex<Option<(String, Tensor)>>,
}

impl Clone for Steering {
    fn clone(&self) -> Self {
        Steering {
            site: self.site,
            op: self.op,
            strength: self.strength,
            scale: self.scale,
            steps: self.steps,
            direction: self.direction.clone(),
            mean_norm: self.mean_norm,
            host: self.host.clone(),
            device: Mutex::new(None),
        }
    }
}

impl Steering {
    /// A steering from a unit `direction` and its baseline `mean_norm`. Errors: an empty or
    /// non-finite direction, a non-finite strength, a span with `lo > hi`, a span on the text
    /// site.
    pub fn new(
        site: Site,
        op: SteerOp,
        strength: f32,
        direction: Vec<f32>,
        mean_norm: f32,
    ) -> Result<Self> {
        if direction.is_empty() || direction.iter().any(|x| !x.is_finite()) {
            return Err(SteerError::Invalid(format!(
                "{site} steering: the direction is empty or non-finite"
            )));
        }
        if !strength.is_finite() {
            return Err(SteerError::Invalid(format!(
                "{site} steering: strength {strength} is not finite"
            )));
        }
        if !mean_norm.is_finite() {
            return Err(SteerError::Invalid(format!(
                "{site} steering: mean norm {mean_norm} is not finite"
            )));
        }
        let host = Tensor::from_vec(direction.clone(), &[direction.len()])?;
        Ok(Steering {
            site,
            op,
            strength,
            scale: Scale::MeanNorm,
            steps: None,
            direction,
            mean_norm,
            host,
            device: Mutex::new(None),
        })
    }

    /// A steering from a file entry.
    pub fn from_entry(entry: &DirectionEntry, op: SteerOp, strength: f32) -> Result<Self> {
        Self::new(
            entry.site,
            op,
            strength,
            entry.direction.clone(),
            entry.mean_norm,
        )
    }

    /// The same steering at `strength` (e.g. a strength ramped across the chunks of a
    /// stream). Errors on a non-finite strength.
    pub fn with_strength(mut self, strength: f32) -> Result<Self> {
        if !strength.is_finite() {
            return Err(SteerError::Invalid(format!(
                "{} steering: strength {strength} is not finite",
                self.site
            )));
        }
        self.strength = strength;
        Ok(self)
    }

    /// Use `scale` for an add.
    pub fn with_scale(mut self, scale: Scale) -> Self {
        self.scale = scale;
        self
    }

    /// Limit to the steps of `span` (`None`: every step).
    pub fn with_steps(mut self, span: Option<StepSpan>) -> Result<Self> {
        if let Some(s) = span {
            if s.lo > s.hi {
                return Err(SteerError::Invalid(format!(
                    "{} steering: step span {}-{} is empty (lo > hi)",
                    self.site, s.lo, s.hi
                )));
            }
            if self.site == Site::Text {
                return Err(SteerError::Invalid(
                    "text steering takes no step span: the conditioning is computed once per \
                     generation"
                        .into(),
                ));
            }
        }
        self.steps = span;
        Ok(self)
    }

    /// The site.
    pub fn site(&self) -> Site {
        self.site
    }

    /// The operation.
    pub fn op(&self) -> SteerOp {
        self.op
    }

    /// The strength (α or β).
    pub fn strength(&self) -> f32 {
        self.strength
    }

    /// The step span.
    pub fn steps(&self) -> Option<StepSpan> {
        self.steps
    }

    /// The unit direction.
    pub fn direction(&self) -> &[f32] {
        &self.direction
    }

    /// Whether the steering changes anything at this call.
    pub fn active(&self, ctx: &HookContext<'_>) -> bool {
        if self.strength == 0.0 || ctx.site != self.site.hook_site() {
            return false;
        }
        match (self.steps, ctx.step) {
            (None, _) => true,
            (Some(s), Some(step)) => s.contains(step),
            (Some(_), None) => false,
        }
    }

    fn direction_on(&self, device: &Device) -> aria_core::Result<Tensor> {
        match device {
            Device::Cpu => Ok(self.host.clone()),
            Device::Backend(b) => {
                let mut cache = self
                    .device
                    .lock()
                    .map_err(|_| aria_core::CoreError::Invalid("steering cache poisoned".into()))?;
                if let Some((name, t)) = cache.as_ref() {
                    if name == b.name() {
                        return Ok(t.clone());
                    }
                }
                let t = device.put(&self.host)?;
                *cache = Some((b.name().to_string(), t.clone()));
                Ok(t)
            }
        }
    }

    /// Apply to `x` (the site's tensor), unconditionally.
    pub fn apply(&self, x: &Tensor) -> aria_core::Result<Tensor> {
        let s = x.shape();
        let width = self.direction.len();
        let (feature_axis_last, d_axis) = match self.site {
            Site::Latent => (false, 1),
            _ => (true, s.len().saturating_sub(1)),
        };
        if s.len() != 3 || s[d_axis] != width {
            return Err(aria_core::CoreError::shape(
                "steering",
                format!(
                    "{} direction has {width} dimensions; the activation's feature axis does not",
                    self.site
                ),
                &[s],
            ));
        }
        // Work on [B, N, D].
        let h = if feature_axis_last {
            x.clone()
        } else {
            x.transpose(1, 2)?
        };
        let d = self.direction_on(&x.device())?;
        let y = match self.op {
            SteerOp::Add => {
                let k = match self.scale {
                    Scale::MeanNorm => self.strength * self.mean_norm,
                    Scale::Raw => self.strength,
                };
                ops::add(&h, &ops::mul_scalar(&d, k)?)?
            }
            SteerOp::Project => {
                let coeff = ops::linear(&h, &d.reshape(&[1, width])?, None)?; // [B, N, 1]
                let coeff = ops::mul_scalar(&coeff, self.strength)?;
                ops::sub(&h, &ops::mul(&coeff, &d)?)?
            }
        };
        if feature_axis_last {
            Ok(y)
        } else {
            y.transpose(1, 2)?.contiguous()
        }
    }
}

/// Several steerings applied in order (see the module docs for the composition rule).
#[derive(Debug, Clone, Default)]
pub struct SteeringHook {
    items: Vec<Steering>,
}

impl SteeringHook {
    /// An empty hook.
    pub fn new() -> Self {
        SteeringHook::default()
    }

    /// A hook applying `items` in order.
    pub fn from_steerings(items: Vec<Steering>) -> Self {
        SteeringHook { items }
    }

    /// Append a steering (applied after those already present).
    pub fn push(&mut self, s: Steering) {
        self.items.push(s);
    }

    /// The steerings, in application order.
    pub fn steerings(&self) -> &[Steering] {
        &self.items
    }

    /// Whether there is no steering.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The same steerings with every strength multiplied by `factor` (a ramp: 0 leaves every
    /// activation untouched, bit for bit; 1 is this hook). Errors on a non-finite product.
    pub fn scaled(&self, factor: f32) -> Result<SteeringHook> {
        let items = self
            .items
            .iter()
            .map(|s| s.clone().with_strength(s.strength * factor))
            .collect::<Result<Vec<_>>>()?;
        Ok(SteeringHook { items })
    }
}

impl ActivationHook for SteeringHook {
    fn wants(&self, site: HookSite) -> bool {
        self.items
            .iter()
            .any(|s| s.strength != 0.0 && s.site.hook_site() == site)
    }

    /// One bit per residual steering: whether it acts at `step` (its step span holds it).
    /// Strengths, directions and sites are fixed for the hook's life, so steps with the same
    /// bits do the same work inside the DiT; latent and text steerings act outside it.
    fn step_class(&self, step: usize) -> Option<Vec<u64>> {
        let mut bits = vec![0u64; self.items.len().div_ceil(64)];
        for (i, s) in self.items.iter().enumerate() {
            let inside = matches!(s.site, Site::Residual(_)) && s.strength != 0.0;
            if inside && s.steps.is_none_or(|span| span.contains(step)) {
                bits[i / 64] |= 1 << (i % 64);
            }
        }
        Some(bits)
    }

    /// Puts every direction on `device` (each is copied there once and cached).
    fn prepare(&self, device: &Device) -> aria_core::Result<()> {
        for s in self.items.iter().filter(|s| s.strength != 0.0) {
            s.direction_on(device)?;
        }
        Ok(())
    }

    fn on_activation(
        &self,
        ctx: &HookContext<'_>,
        x: &Tensor,
    ) -> aria_core::Result<Option<Tensor>> {
        let mut cur: Option<Tensor> = None;
        for s in self.items.iter().filter(|s| s.active(ctx)) {
            let y = s.apply(cur.as_ref().unwrap_or(x))?;
            cur = Some(y);
        }
        Ok(cur)
    }
}
