//! Classifier-free guidance and APG (spec §6.4), as a pure function of the two velocity
//! estimates. Computed in f32 with f64 reductions.

use crate::{DitError, Result};

/// Guidance settings (the reference's `cfg_scale`, `apg_scale`, `cfg_norm_threshold`,
/// `cfg_interval`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guidance {
    /// CFG scale (1: off, single unbatched pass).
    pub cfg_scale: f32,
    /// APG blend: 1 = orthogonal component only (default), 0 = vanilla CFG.
    pub apg_scale: f32,
    /// Clamp of the guidance difference norm (0: off).
    pub cfg_norm_threshold: f32,
    /// Guidance applies when `lo ≤ σ ≤ hi` (σ of the first batch item).
    pub cfg_interval: (f32, f32),
}

impl Default for Guidance {
    fn default() -> Self {
        Guidance {
            cfg_scale: 1.0,
            apg_scale: 1.0,
            cfg_norm_threshold: 0.0,
            cfg_interval: (0.0, 1.0),
        }
    }
}

impl Guidance {
    /// Whether guidance runs at noise level `sigma`.
    pub fn active_at(&self, sigma: f32) -> bool {
        self.cfg_scale != 1.0 && self.cfg_interval.0 <= sigma && sigma <= self.cfg_interval.1
    }
}

/// Guided velocity from `x`, the conditional and unconditional velocities (all `[B, C, T]`
/// row-major), per-item `sigma`, and an optional `[B, T]` validity mask:
/// `d_c = x − σ v_c`, `d_u = x − σ v_u`, `Δ = d_c − d_u` (optionally norm-clamped), APG
/// projection of `Δ` orthogonal to `d_c` (masked form when a mask is given), `d = d_c +
/// (cfg − 1)·Δ_used`, returned as `v = (x − d)/σ`.
#[allow(clippy::too_many_arguments)]
pub fn guided_velocity(
    x: &[f32],
    v_c: &[f32],
    v_u: &[f32],
    sigma: &[f32],
    shape: [usize; 3],
    mask: Option<&[bool]>,
    g: &Guidance,
) -> Result<Vec<f32>> {
    let [b, c, t] = shape;
    let n = b * c * t;
    if x.len() != n
        || v_c.len() != n
        || v_u.len() != n
        || sigma.len() != b
        || mask.is_some_and(|m| m.len() != b * t)
    {
        return Err(DitError::Input {
            what: "guided_velocity".into(),
            reason: format!("inputs do not match [B, C, T] = {shape:?}"),
        });
    }
    let mut out = vec![0f32; n];
    let per = c * t;
    for bi in 0..b {
        let s = sigma[bi];
        let r = bi * per..(bi + 1) * per;
        let xs = &x[r.clone()];
        let dc: Vec<f32> = xs
            .iter()
            .zip(&v_c[r.clone()])
            .map(|(x, v)| x - v * s)
            .collect();
        let du: Vec<f32> = xs
            .iter()
            .zip(&v_u[r.clone()])
            .map(|(x, v)| x - v * s)
            .collect();
        let mut diff: Vec<f32> = dc.iter().zip(&du).map(|(a, b)| a - b).collect();
        let m: Vec<f32> = match mask {
            Some(m) => (0..per)
                .map(|i| if m[bi * t + i % t] { 1.0 } else { 0.0 })
                .collect(),
            None => vec![1.0; per],
        };
        if g.cfg_norm_threshold > 0.0 {
            let norm = diff
                .iter()
                .zip(&m)
                .map(|(d, m)| ((d * m) as f64).powi(2))
                .sum::<f64>()
                .sqrt() as f32;
            let f = (g.cfg_norm_threshold / norm).min(1.0);
            diff.iter_mut().for_each(|d| *d *= f);
        }
        let cfg_diff: Vec<f32> = if g.apg_scale == 0.0 {
            diff
        } else {
            let orth: Vec<f32> = if mask.is_some() {
                let v1m: Vec<f32> = dc.iter().zip(&m).map(|(a, m)| a * m).collect();
                let norm =
                    (v1m.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt() as f32).max(1e-8);
                let v1n: Vec<f32> = v1m.iter().map(|v| v / norm).collect();
                let dot = diff
                    .iter()
                    .zip(&v1n)
                    .map(|(a, b)| (a * b) as f64)
                    .sum::<f64>() as f32;
                diff.iter()
                    .zip(&v1n)
                    .zip(&m)
                    .map(|((d, u), m)| (d - dot * u) * m)
                    .collect()
            } else {
                let norm =
                    (dc.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt() as f32).max(1e-12);
                let v1n: Vec<f32> = dc.iter().map(|v| v / norm).collect();
                let dot = diff
                    .iter()
                    .zip(&v1n)
                    .map(|(a, b)| (a * b) as f64)
                    .sum::<f64>() as f32;
                diff.iter().zip(&v1n).map(|(d, u)| d - dot * u).collect()
            };
            if g.apg_scale == 1.0 {
                orth
            } else {
                orth.iter()
                    .zip(&diff)
                    .map(|(o, d)| g.apg_scale * o + (1.0 - g.apg_scale) * d)
                    .collect()
            }
        };
        let o = &mut out[r];
        for i in 0..per {
            let d = dc[i] + (g.cfg_scale - 1.0) * cfg_diff[i];
            o[i] = (xs[i] - d) / s;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vanilla_cfg_formula() {
        let g = Guidance {
            cfg_scale: 3.0,
            apg_scale: 0.0,
            ..Default::default()
        };
        let v = guided_velocity(
            &[1.0, 2.0],
            &[0.5, 0.5],
            &[0.1, 0.9],
            &[0.5],
            [1, 1, 2],
            None,
            &g,
        )
        .unwrap();
        // v = v_u + cfg (v_c − v_u).
        assert!((v[0] - (0.1 + 3.0 * 0.4)).abs() < 1e-6);
        assert!((v[1] - (0.9 + 3.0 * -0.4)).abs() < 1e-6);
    }

    #[test]
    fn apg_removes_parallel_component() {
        // Δ parallel to d_c → no guidance beyond d_c.
        let x = [1.0f32, 1.0];
        let vc = [0.0f32, 0.0]; // d_c = x
        let vu = [1.0f32, 1.0]; // d_u = x − σ = 0.5·x at σ 0.5 → Δ ∥ d_c
        let g = Guidance {
            cfg_scale: 5.0,
            ..Default::default()
        };
        let v = guided_velocity(&x, &vc, &vu, &[0.5], [1, 1, 2], None, &g).unwrap();
        assert!(v.iter().all(|v| v.abs() < 1e-6), "{v:?}");
        // Masked form zeroes padded positions of the guidance term.
        let v = guided_velocity(
            &x,
            &vc,
            &[1.0, 0.0],
            &[0.5],
            [1, 1, 2],
            Some(&[true, false]),
            &g,
        )
        .unwrap();
        assert!(v[1].abs() < 1e-6);
    }
}
