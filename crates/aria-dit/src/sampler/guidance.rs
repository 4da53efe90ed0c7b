//! Classifier-free guidance and APG (spec §6.4), as a function of the two velocity estimates:
//! ops of the set ([`ops::apg_guidance`], then [`ops::cfg_rescale`] when `φ > 0`), computed in
//! f32 with f64 reductions on the CPU; on a device they run there.

use aria_core::{ops, Tensor};

use crate::{DitError, Result};

/// Guidance settings (the reference's `cfg_scale`, `apg_scale`, `cfg_norm_threshold`,
/// `cfg_interval`, and `scale_phi`, the CFG rescale).
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
    /// CFG rescale `φ` (0: off): the guided velocity `v` becomes
    /// `φ·v·(std_c(v_c)/std_c(v)) + (1 − φ)·v`, the standard deviations over channels (unbiased)
    /// per item and position.
    pub cfg_rescale: f32,
}

impl Default for Guidance {
    fn default() -> Self {
        Guidance {
            cfg_scale: 1.0,
            apg_scale: 1.0,
            cfg_norm_threshold: 0.0,
            cfg_interval: (0.0, 1.0),
            cfg_rescale: 0.0,
        }
    }
}

impl Guidance {
    /// Whether guidance runs at noise level `sigma`.
    pub fn active_at(&self, sigma: f32) -> bool {
        self.cfg_scale != 1.0 && self.cfg_interval.0 <= sigma && sigma <= self.cfg_interval.1
    }
}

/// Guided velocity from `x`, the conditional and unconditional velocities (all `[B, C, T]`),
/// per-item `sigma`, and an optional `[B, T]` validity mask (non-zero = valid):
/// `d_c = x − σ v_c`, `d_u = x − σ v_u`, `Δ = d_c − d_u` (optionally norm-clamped), APG
/// projection of `Δ` orthogonal to `d_c` (masked form when a mask is given), `d = d_c +
/// (cfg − 1)·Δ_used`, returned as `v = (x − d)/σ`. The result lives on `x`'s device.
pub fn guided_velocity(
    x: &Tensor,
    v_c: &Tensor,
    v_u: &Tensor,
    sigma: &[f32],
    mask: Option<&Tensor>,
    g: &Guidance,
) -> Result<Tensor> {
    let s = x.shape();
    let ok = s.len() == 3
        && v_c.shape() == s
        && v_u.shape() == s
        && sigma.len() == s[0]
        && mask.is_none_or(|m| m.shape() == [s[0], s[2]]);
    if !ok {
        return Err(DitError::Input {
            what: "guided_velocity".into(),
            reason: format!(
                "x {s:?}, v_c {:?}, v_u {:?}, {} sigmas, mask {:?}: expected [B, C, T] ×3, B \
                 sigmas, mask [B, T]",
                v_c.shape(),
                v_u.shape(),
                sigma.len(),
                mask.map(|m| m.shape().to_vec())
            ),
        });
    }
    let v = ops::apg_guidance(
        x,
        v_c,
        v_u,
        sigma,
        mask,
        g.cfg_scale,
        g.apg_scale,
        g.cfg_norm_threshold,
    )?;
    if g.cfg_rescale == 0.0 {
        return Ok(v);
    }
    Ok(ops::cfg_rescale(&v, v_c, g.cfg_rescale)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(v: &[f32]) -> Tensor {
        Tensor::from_slice(v, &[1, 1, v.len()]).unwrap()
    }

    #[test]
    fn vanilla_cfg_formula() {
        let g = Guidance {
            cfg_scale: 3.0,
            apg_scale: 0.0,
            ..Default::default()
        };
        let v = guided_velocity(
            &t(&[1.0, 2.0]),
            &t(&[0.5, 0.5]),
            &t(&[0.1, 0.9]),
            &[0.5],
            None,
            &g,
        )
        .unwrap()
        .to_vec_f32()
        .unwrap();
        // v = v_u + cfg (v_c − v_u).
        assert!((v[0] - (0.1 + 3.0 * 0.4)).abs() < 1e-6);
        assert!((v[1] - (0.9 + 3.0 * -0.4)).abs() < 1e-6);
    }

    /// Rescale φ = 1 gives the guided velocity the conditional one's channel spread; φ = 0.5
    /// is the midpoint.
    #[test]
    fn cfg_rescale_matches_the_channel_spread() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, -1.0, 0.5], &[1, 2, 2]).unwrap();
        let vc = Tensor::from_slice(&[0.5f32, 0.1, -0.2, 0.3], &[1, 2, 2]).unwrap();
        let vu = Tensor::from_slice(&[0.1f32, 0.2, 0.3, -0.4], &[1, 2, 2]).unwrap();
        let base = Guidance {
            cfg_scale: 3.0,
            apg_scale: 0.0,
            ..Default::default()
        };
        let plain = guided_velocity(&x, &vc, &vu, &[0.5], None, &base)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let full = Guidance {
            cfg_rescale: 1.0,
            ..base
        };
        let v = guided_velocity(&x, &vc, &vu, &[0.5], None, &full)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let c = vc.to_vec_f32().unwrap();
        for p in 0..2 {
            let sd = |w: &[f32]| ((w[p] - w[2 + p]).abs() / std::f32::consts::SQRT_2) as f64;
            assert!((sd(&v) - sd(&c)).abs() < 1e-6, "{v:?}");
        }
        let half = Guidance {
            cfg_rescale: 0.5,
            ..base
        };
        let h = guided_velocity(&x, &vc, &vu, &[0.5], None, &half)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        for i in 0..4 {
            assert!((h[i] - 0.5 * (v[i] + plain[i])).abs() < 1e-6);
        }
    }

    #[test]
    fn apg_removes_parallel_component_and_shapes_are_checked() {
        // Δ parallel to d_c → no guidance beyond d_c.
        let (x, vc) = (t(&[1.0, 1.0]), t(&[0.0, 0.0]));
        let g = Guidance {
            cfg_scale: 5.0,
            ..Default::default()
        };
        let v = guided_velocity(&x, &vc, &t(&[1.0, 1.0]), &[0.5], None, &g)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!(v.iter().all(|v| v.abs() < 1e-6), "{v:?}");
        // Masked form zeroes padded positions of the guidance term.
        let m = Tensor::from_vec(vec![1u8, 0], &[1, 2]).unwrap();
        let v = guided_velocity(&x, &vc, &t(&[1.0, 0.0]), &[0.5], Some(&m), &g)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!(v[1].abs() < 1e-6);
        assert!(guided_velocity(&x, &vc, &t(&[1.0]), &[0.5], None, &g).is_err());
        assert!(guided_velocity(&x, &vc, &vc, &[0.5, 0.5], None, &g).is_err());
    }
}
