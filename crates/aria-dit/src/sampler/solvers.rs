//! The reference's other rectified-flow solvers, one step each, in its f32 operation order
//! with one set of scalars per batch item (`σ = t`, `x̂₀ = x − t·v`, `dt = t' − t < 0`):
//!
//! ```text
//! rk4:    k1 = v(x, t)   k2 = v(x + dt/2·k1, t + dt/2)   k3 = v(x + dt/2·k2, t + dt/2)
//!         k4 = v(x + dt·k3, max(t', 1e−5))               x' = x + dt/6·(k1 + 2k2 + 2k3 + k4)
//! dpmpp:  c = dt / (max(1 − t', 1e−10)·max(t, 1e−10)),  ρ = t' / max(t, 1e−10)
//!         first step run, or t' = 0 for every item:      x' = ρ·x − (1 − t')·c·x̂₀
//!         else, λ(s) = ln(max(1 − s, 1e−10) / max(s, 1e−10)), r = (λ(t) − λ(t_prev)) / (λ(t') − λ(t)):
//!         D = (1 + 1/(2r))·x̂₀ − 1/(2r)·x̂₀_prev,           x' = ρ·x − (1 − t')·c·D
//! ```
//!
//! The reference's RK4 loop walks the schedule's first axis, which is the batch when
//! `generate()` builds per-item schedules (any sequence-length shift): there it runs no step
//! and returns the initial noise. aria integrates over the per-item values instead, which is
//! what the reference computes for a shared (unshifted) schedule.

use aria_core::{ops, Tensor};

use super::VelocityModel;
use crate::{DitError, Result};

fn checked(v: Tensor, shape: &[usize]) -> Result<Tensor> {
    if v.shape() != shape {
        return Err(DitError::Input {
            what: "velocity".into(),
            reason: format!("shape {:?}, expected {shape:?}", v.shape()),
        });
    }
    Ok(v)
}

/// One RK4 step from `x` at `t` to `tn` given `k1 = v(x, t)` (already evaluated); three more
/// model evaluations, all reported as step `step`.
pub fn rk4_step(
    model: &dyn VelocityModel,
    x: &Tensor,
    k1: &Tensor,
    t: &[f32],
    tn: &[f32],
    step: usize,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let ones = vec![1.0f32; t.len()];
    let dt: Vec<f32> = tn.iter().zip(t).map(|(a, b)| a - b).collect();
    let half: Vec<f32> = dt.iter().map(|d| d / 2.0).collect();
    let t_mid: Vec<f32> = t.iter().zip(&half).map(|(a, h)| a + h).collect();
    let t_end: Vec<f32> = tn.iter().map(|s| s.max(1e-5)).collect();
    let k2 = checked(
        model.velocity(&ops::axpby(&ones, x, &half, k1)?, &t_mid, step)?,
        &shape,
    )?;
    let k3 = checked(
        model.velocity(&ops::axpby(&ones, x, &half, &k2)?, &t_mid, step)?,
        &shape,
    )?;
    let k4 = checked(
        model.velocity(&ops::axpby(&ones, x, &dt, &k3)?, &t_end, step)?,
        &shape,
    )?;
    let twos = vec![2.0f32; t.len()];
    // ((k1 + 2·k2) + 2·k3) + k4
    let s = ops::axpby(&ones, k1, &twos, &k2)?;
    let s = ops::axpby(&ones, &s, &twos, &k3)?;
    let s = ops::axpby(&ones, &s, &ones, &k4)?;
    let sixth: Vec<f32> = dt.iter().map(|d| d / 6.0).collect();
    Ok(ops::axpby(&ones, x, &sixth, &s)?)
}

fn log_snr(s: f32) -> f32 {
    ((1.0 - s).max(1e-10) / s.max(1e-10)).ln()
}

/// One DPM++ step from `x` at `t` to `tn` with this step's clean estimate `denoised`;
/// `previous` is the last step's `(x̂₀, t)` (none at the first step run: first order).
pub fn dpmpp_step(
    x: &Tensor,
    denoised: &Tensor,
    t: &[f32],
    tn: &[f32],
    previous: Option<(&Tensor, &[f32])>,
) -> Result<Tensor> {
    let rho: Vec<f32> = tn.iter().zip(t).map(|(n, c)| n / c.max(1e-10)).collect();
    // (1 − t')·c, the coefficient of the clean estimate (subtracted).
    let neg_coef: Vec<f32> = tn
        .iter()
        .zip(t)
        .map(|(&n, &c)| {
            let coeff = (n - c) / ((1.0 - n).max(1e-10) * c.max(1e-10));
            -((1.0 - n) * coeff)
        })
        .collect();
    let last = tn.iter().all(|&n| n == 0.0);
    let d = match previous {
        Some((old, tp)) if !last => {
            let mut a = Vec::with_capacity(t.len());
            let mut b = Vec::with_capacity(t.len());
            for ((&c, &n), &p) in t.iter().zip(tn).zip(tp) {
                let h = log_snr(n) - log_snr(c);
                let h_last = log_snr(c) - log_snr(p);
                let r = h_last / h;
                let w = 1.0 / (2.0 * r);
                a.push(1.0 + w);
                b.push(-w);
            }
            ops::axpby(&a, denoised, &b, old)?
        }
        _ => denoised.clone(),
    };
    Ok(ops::axpby(&rho, x, &neg_coef, &d)?)
}
