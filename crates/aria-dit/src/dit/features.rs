//! Exponential Fourier features of the timestep, reproducing the reference's f32 rounding.
//!
//! The reference evaluates `linspace(0, 1, dim/2)` with PyTorch's CPU kernel, whose
//! `start + step·i` / `end − step·(n−1−i)` expressions are compiled with FMA contraction (one
//! rounding), then `exp(ramp·(ln max − ln min) + ln min)` as two f32 tensor ops and `exp`, then
//! `((t·f)·2)·π` in f32 and `[cos, sin]`. Frequencies up to 10⁴ make the features sensitive to
//! single-ulp differences in `f`, so each step is reproduced exactly.

use aria_core::Tensor;

use crate::{DitError, Result};

/// PyTorch CPU `linspace(start, end, steps)` in f32 (FMA-contracted symmetric form).
pub fn linspace_f32_fma(start: f32, end: f32, steps: usize) -> Vec<f32> {
    match steps {
        0 => Vec::new(),
        1 => vec![start],
        _ => {
            let step = (end - start) / (steps - 1) as f32;
            let half = steps / 2;
            (0..steps)
                .map(|i| {
                    if i < half {
                        step.mul_add(i as f32, start)
                    } else {
                        (-step).mul_add((steps - 1 - i) as f32, end)
                    }
                })
                .collect()
        }
    }
}

/// Expo Fourier features `[len, dim]`: `[cos(a_k), sin(a_k)]`, `a_k = ((t·f_k)·2)·π`,
/// `f_k = exp(linspace(0,1,dim/2)_k · (ln 10⁴ − ln 0.5) + ln 0.5)`.
pub fn timestep_features(values: &[f32], dim: usize) -> Result<Tensor> {
    if dim == 0 || dim % 2 != 0 {
        return Err(DitError::Input {
            what: "timestep features".into(),
            reason: format!("dimension {dim} must be even and non-zero"),
        });
    }
    let half = dim / 2;
    let (lmin, lmax) = (0.5f64.ln(), 10000f64.ln());
    let span = (lmax - lmin) as f32;
    let lmin = lmin as f32;
    let freqs: Vec<f32> = linspace_f32_fma(0.0, 1.0, half)
        .into_iter()
        .map(|r| (r * span + lmin).exp())
        .collect();
    let pi = std::f64::consts::PI as f32;
    let mut out = vec![0f32; values.len() * dim];
    for (row, &v) in out.chunks_exact_mut(dim).zip(values) {
        let (c, s) = row.split_at_mut(half);
        for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(&freqs) {
            let a = (((v * f) * 2.0) * pi) as f64;
            *c = a.cos() as f32;
            *s = a.sin() as f32;
        }
    }
    Ok(Tensor::from_vec(out, &[values.len(), dim])?)
}
