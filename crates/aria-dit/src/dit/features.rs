//! Exponential Fourier features of the timestep.
//!
//! The DiT embeds `t` with the same expo Fourier features as the duration conditioner, so both
//! share one implementation ([`crate::conditioner::expo_fourier_features`]), which reproduces the
//! reference's f32 rounding (FMA-contracted `linspace`, the exponential as the reference rounds
//! it, `((t·f)·2)·π` in f32, `[cos, sin]`).

use aria_core::Tensor;

use crate::Result;

/// PyTorch CPU `linspace(start, end, steps)` in f32 (FMA-contracted symmetric form); the
/// sampler schedules start from it.
pub fn linspace_f32_fma(start: f32, end: f32, steps: usize) -> Vec<f32> {
    crate::conditioner::linspace_f32(start, end, steps)
}

/// Expo Fourier features `[len, dim]` of the timesteps `values`: `[cos(a_k), sin(a_k)]`,
/// `a_k = ((t·f_k)·2)·π`, `f_k = 0.5 · 20000^(k/(dim/2 − 1))`.
pub fn timestep_features(values: &[f32], dim: usize) -> Result<Tensor> {
    crate::conditioner::expo_fourier_features(values, dim)
}
