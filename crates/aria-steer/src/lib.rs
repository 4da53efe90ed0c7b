//! # aria-steer
//!
//! Activation steering for the SA3 DiT, built on the activation-hook trait of `aria-core` (it
//! never reaches into model internals):
//!
//! - [`direction`]: direction files — per site and block a unit direction and the baseline mean
//!   norm, with metadata (format version, model identity, method, contrast sets, strength
//!   convention), checked against the model at load ([`identity`]);
//! - [`hook`]: the steering hook — `add` (`h += α·n̄·d`) or `project` (`h −= β·(h·d)·d`) at the
//!   residual stream after block *k*, the latent after each step, or the text conditioning; an
//!   optional step span; several directions composed in order; strength 0 or a step outside the
//!   span bit-identical to no steering;
//! - [`spec`]: the `FILE[:site=…][:block=K][:strength=A][:steps=LO-HI][:op=…]` form;
//! - [`extract`]: residual capture, difference in means, the logistic-probe separability report;
//! - [`sweep`]: dose-response measurements, their CSV and their plot ([`plot`]: a PNG line chart
//!   with an embedded bitmap font).
//!
//! ```
//! use aria_core::hooks::{run_hook, HookContext, HookSite};
//! use aria_core::Tensor;
//! use aria_steer::{Site, SteerOp, Steering, SteeringHook, StepSpan};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Add 0.5 mean norms (n̄ = 4) of direction e₁ after block 0, in steps 2..=5 only.
//! let add = Steering::new(Site::Residual(0), SteerOp::Add, 0.5, vec![0.0, 1.0], 4.0)?
//!     .with_steps(Some(StepSpan { lo: 2, hi: 5 }))?;
//! let hook = SteeringHook::from_steerings(vec![add]);
//! let h = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 2, 2])?; // [B, N, E]
//! let at = |step| HookContext { step: Some(step), ..HookContext::new(HookSite::Residual(0)) };
//! assert_eq!(run_hook(Some(&hook), &at(3), h.clone())?.to_vec::<f32>()?, [1.0, 4.0, 3.0, 6.0]);
//! // Outside the span the very same tensor comes back.
//! let same = run_hook(Some(&hook), &at(6), h.clone())?;
//! assert!(std::sync::Arc::ptr_eq(same.storage(), h.storage()));
//! # Ok(()) }
//! ```

pub mod direction;
mod error;
pub mod extract;
pub mod hook;
pub mod identity;
pub mod plot;
pub mod spec;
pub mod sweep;

pub use direction::{
    DirectionEntry, DirectionFile, DirectionMeta, ExtractSettings, NormScope, Site,
    StrengthConvention,
};
pub use error::{Result, SteerError};
pub use extract::ResidualCapture;
pub use hook::{Scale, SteerOp, Steering, SteeringHook, StepSpan};
pub use identity::{ModelDims, ModelIdentity};
pub use spec::SteerSpec;
