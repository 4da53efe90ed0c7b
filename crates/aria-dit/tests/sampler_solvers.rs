//! RK4 and DPM++ on velocity fields with known solutions (the reference's recorded
//! `generate()` RK4 case runs no step, see aria's sampler replay tests): RK4 converges with
//! order 4, DPM++ reproduces a constant clean estimate exactly and is second order, both
//! draw no noise and evaluate the model as often as they should.
#![allow(clippy::unwrap_used)]

use std::cell::Cell;

use aria_core::Tensor;
use aria_dit::sampler::{sample, ReplayNoise, SampleOptions, SamplerKind, Schedule, VelocityModel};
use aria_dit::Result;

/// `dx/dt = k·t·x`, solved by `x(t) = x(1)·exp(k·(t² − 1)/2)`; counts evaluations.
struct Growth {
    k: f32,
    calls: Cell<usize>,
}

impl VelocityModel for Growth {
    fn velocity(&self, x: &Tensor, sigma: &[f32], _step: usize) -> Result<Tensor> {
        self.calls.set(self.calls.get() + 1);
        assert!(sigma.iter().all(|&s| s > 0.0), "evaluated at t = 0");
        let v: Vec<f32> = x
            .to_vec_f32()?
            .iter()
            .map(|x| self.k * sigma[0] * x)
            .collect();
        Ok(Tensor::from_vec(v, x.shape())?)
    }
}

/// A model whose clean estimate is `x0(t) = a + b·t` (velocity `(x − x0(t))/t`).
struct Target {
    a: f32,
    b: f32,
}

impl VelocityModel for Target {
    fn velocity(&self, x: &Tensor, sigma: &[f32], _step: usize) -> Result<Tensor> {
        let t = sigma[0];
        let x0 = self.a + self.b * t;
        let v: Vec<f32> = x.to_vec_f32()?.iter().map(|x| (x - x0) / t).collect();
        Ok(Tensor::from_vec(v, x.shape())?)
    }
}

fn linear(steps: usize, until: f32) -> Schedule {
    Schedule::from_values(
        (0..=steps)
            .map(|i| 1.0 - (1.0 - until) * i as f32 / steps as f32)
            .collect(),
    )
    .unwrap()
}

fn run(model: &dyn VelocityModel, kind: SamplerKind, sched: &Schedule, x: f32) -> f32 {
    let x = Tensor::from_vec(vec![x; 4], &[1, 2, 2]).unwrap();
    let mut noise = ReplayNoise::new(Vec::new());
    let out = sample(model, kind, x, sched, &mut noise, SampleOptions::default()).unwrap();
    let v = out.to_vec_f32().unwrap();
    assert!(v.iter().all(|&y| y == v[0]));
    v[0]
}

#[test]
fn rk4_is_fourth_order() {
    // Integrate from t = 1 to t = 0.2 (the field is smooth there).
    let exact = (4.0 * (0.2f64.powi(2) - 1.0) / 2.0).exp();
    let err = |kind, steps| {
        let m = Growth {
            k: 4.0,
            calls: Cell::new(0),
        };
        let y = run(&m, kind, &linear(steps, 0.2), 1.0) as f64;
        assert_eq!(m.calls.get(), steps * kind.evals_per_step());
        (y - exact).abs()
    };
    let (e4, e8) = (err(SamplerKind::Rk4, 4), err(SamplerKind::Rk4, 8));
    let euler = err(SamplerKind::Euler, 8);
    eprintln!("errors: rk4 4 steps {e4:e}, 8 steps {e8:e}; euler 8 steps {euler:e}");
    assert!(
        e8 < 1e-4 && euler > 100.0 * e8,
        "rk4 {e8:e}, euler {euler:e}"
    );
    // Halving the step divides the error by about 2^4 (order 3 would give 8).
    assert!(e4 / e8 > 12.0, "rk4 errors {e4:e} -> {e8:e}");
}

#[test]
fn rk4_last_step_never_evaluates_at_zero() {
    let m = Growth {
        k: 1.0,
        calls: Cell::new(0),
    };
    let y = run(&m, SamplerKind::Rk4, &linear(3, 0.0), 1.0) as f64;
    let exact = (-0.5f64).exp();
    assert!((y - exact).abs() < 1e-3, "{y} vs {exact}");
    assert_eq!(m.calls.get(), 12);
}

#[test]
fn dpmpp_recovers_the_clean_estimate() {
    // Constant clean estimate: the first-order DPM++ update is exact, and the last step
    // (t' = 0) returns the estimate itself.
    let m = Target { a: 0.75, b: 0.0 };
    let y = run(&m, SamplerKind::DpmPp, &linear(5, 0.0), 2.0);
    assert!((y - 0.75).abs() < 1e-6, "{y}");
    // Between t = 1 and 0.3 with a moving estimate, the second-order steps beat Euler.
    let m = Target { a: 0.5, b: 1.0 };
    let sched = linear(6, 0.3);
    let exact = {
        // dx/dt = (x − a − b t)/t  ⇒  x(t) = a − b·t·ln t + C·t, C = x(1) − a.
        let (a, b, t) = (0.5f64, 1.0f64, 0.3f64);
        a - b * t * t.ln() + (2.0 - a) * t
    };
    let d = (run(&m, SamplerKind::DpmPp, &sched, 2.0) as f64 - exact).abs();
    let e = (run(&m, SamplerKind::Euler, &sched, 2.0) as f64 - exact).abs();
    assert!(d < e / 4.0, "dpmpp {d:e} vs euler {e:e}");
}
