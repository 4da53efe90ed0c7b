//! Weighted Bayesian linear regression with two heads over one design: the reward head
//! `Q̂(x) = θᵀx` and the uncertainty head `û(x) = νᵀx`, with the inverse of
//! `A = λI + Σ w·x·xᵀ` kept up to date by Sherman–Morrison (O(d²) per update).

/// One arm's model (or, with the heads unused, the pooled design of every context seen).
#[derive(Debug, Clone, PartialEq)]
pub struct Ridge {
    pub(crate) d: usize,
    /// `A⁻¹`, `d × d` row-major (symmetric).
    pub(crate) a_inv: Vec<f64>,
    /// `Σ w·r·x`.
    pub(crate) b: Vec<f64>,
    /// `Σ w·|δ|·x`.
    pub(crate) b_u: Vec<f64>,
    /// Total weight of the updates.
    pub(crate) weight: f64,
    theta: Vec<f64>,
    nu: Vec<f64>,
}

fn matvec(m: &[f64], x: &[f64], out: &mut [f64]) {
    let d = x.len();
    for (i, o) in out.iter_mut().enumerate() {
        *o = m[i * d..(i + 1) * d]
            .iter()
            .zip(x)
            .map(|(a, b)| a * b)
            .sum();
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Ridge {
    /// The prior `A = λI`, `b = 0`.
    pub fn new(d: usize, lambda: f64) -> Ridge {
        let mut a_inv = vec![0.0; d * d];
        for i in 0..d {
            a_inv[i * d + i] = 1.0 / lambda;
        }
        Ridge {
            d,
            a_inv,
            b: vec![0.0; d],
            b_u: vec![0.0; d],
            weight: 0.0,
            theta: vec![0.0; d],
            nu: vec![0.0; d],
        }
    }

    /// Rebuilds from saved parts (lengths checked by the caller).
    pub(crate) fn from_parts(
        d: usize,
        a_inv: Vec<f64>,
        b: Vec<f64>,
        b_u: Vec<f64>,
        weight: f64,
    ) -> Ridge {
        let mut r = Ridge {
            d,
            a_inv,
            b,
            b_u,
            weight,
            theta: vec![0.0; d],
            nu: vec![0.0; d],
        };
        r.refresh();
        r
    }

    fn refresh(&mut self) {
        matvec(&self.a_inv, &self.b, &mut self.theta);
        matvec(&self.a_inv, &self.b_u, &mut self.nu);
    }

    /// The predicted reward `θᵀx`.
    pub fn mean(&self, x: &[f64]) -> f64 {
        dot(&self.theta, x)
    }

    /// The learned uncertainty `max(0, νᵀx)` (the regression of `|δ|`).
    pub fn head(&self, x: &[f64]) -> f64 {
        dot(&self.nu, x).max(0.0)
    }

    /// The posterior width `√(xᵀA⁻¹x)`.
    pub fn width(&self, x: &[f64]) -> f64 {
        let mut ax = vec![0.0; self.d];
        matvec(&self.a_inv, x, &mut ax);
        dot(x, &ax).max(0.0).sqrt()
    }

    /// Adds `(x, r)` with weight `w` to the design and the reward head, and `|δ|` to the
    /// uncertainty head.
    pub fn update(&mut self, x: &[f64], r: f64, abs_delta: f64, w: f64) {
        if !(w > 0.0 && w.is_finite() && r.is_finite() && abs_delta.is_finite()) {
            return;
        }
        let d = self.d;
        let mut ax = vec![0.0; d];
        matvec(&self.a_inv, x, &mut ax);
        let c = w / (1.0 + w * dot(x, &ax));
        // Upper triangle, mirrored: `A⁻¹` stays exactly symmetric (saved as one triangle).
        for i in 0..d {
            for j in i..d {
                let v = self.a_inv[i * d + j] - c * (ax[i] * ax[j]);
                self.a_inv[i * d + j] = v;
                self.a_inv[j * d + i] = v;
            }
        }
        for ((b, bu), xi) in self.b.iter_mut().zip(&mut self.b_u).zip(x) {
            *b += w * r * xi;
            *bu += w * abs_delta * xi;
        }
        self.weight += w;
        self.refresh();
    }

    /// Whether no update has touched it (it is still the prior of ridge `lambda`).
    pub(crate) fn is_prior(&self, lambda: f64) -> bool {
        self.weight == 0.0 && *self == Ridge::new(self.d, lambda)
    }

    /// Adds `|δ|` with weight `w` to the uncertainty head only (the design already holds `x`:
    /// the second pass of offline training).
    pub fn update_head(&mut self, x: &[f64], abs_delta: f64, w: f64) {
        if !(w > 0.0 && w.is_finite() && abs_delta.is_finite()) {
            return;
        }
        for (bu, xi) in self.b_u.iter_mut().zip(x) {
            *bu += w * abs_delta * xi;
        }
        matvec(&self.a_inv, &self.b_u, &mut self.nu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sherman_morrison_matches_the_closed_form() {
        // y = 2·x0 − x1 exactly; with a tiny ridge the fit recovers it.
        let mut r = Ridge::new(2, 1e-9);
        let xs = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]];
        for x in xs {
            r.update(&x, 2.0 * x[0] - x[1], 0.0, 1.0);
        }
        assert!((r.mean(&[3.0, 2.0]) - 4.0).abs() < 1e-6);
        assert!(r.width(&[1.0, 1.0]) < 1.0);
        // A weight of 2 is the same as the update twice.
        let mut a = Ridge::new(2, 1.0);
        let mut b = Ridge::new(2, 1.0);
        a.update(&[1.0, 0.5], 0.3, 0.1, 2.0);
        b.update(&[1.0, 0.5], 0.3, 0.1, 1.0);
        b.update(&[1.0, 0.5], 0.3, 0.1, 1.0);
        for (x, y) in a.a_inv.iter().zip(&b.a_inv) {
            assert!((x - y).abs() < 1e-12);
        }
    }
}
