//! Summary statistics of a list of per-item values.

use serde::Serialize;

use crate::{ClapError, Result};

/// The two-sided 95 % quantile of the standard normal distribution.
const Z95: f64 = 1.959_963_984_540_054;

/// Summary statistics of a list of per-item values (CLAP scores, drifts, loudness values…).
///
/// The confidence interval is the **normal approximation** of a 95 % interval of the mean,
/// `mean ± 1.96 · std / √n`: deterministic (no resampling), and close to the Student-t interval
/// from a few dozen items on; for small `n` it is somewhat too narrow (at `n = 10` the t interval
/// is 15 % wider). With `n = 1` it collapses to the mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor `n − 1`; 0 when `n = 1`).
    pub std: f64,
    /// Median (the 50th percentile, as below).
    pub median: f64,
    /// 5th percentile, linear interpolation between order statistics (numpy's default method).
    pub p5: f64,
    /// 95th percentile, linear interpolation between order statistics.
    pub p95: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Lower end of the normal-approximation 95 % confidence interval of the mean.
    pub ci95_low: f64,
    /// Upper end of the normal-approximation 95 % confidence interval of the mean.
    pub ci95_high: f64,
}

impl Summary {
    /// Summarise `values` (at least one, all finite; else [`ClapError::Invalid`] naming `what`).
    pub fn of(what: &str, values: &[f64]) -> Result<Summary> {
        if values.is_empty() {
            return Err(ClapError::invalid(what, "no values to summarise"));
        }
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(ClapError::invalid(
                what,
                format!("value {i} is not finite ({})", values[i]),
            ));
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = if n > 1 {
            let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
            (ss / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let half = Z95 * std / (n as f64).sqrt();
        Ok(Summary {
            n,
            mean,
            std,
            median: percentile_sorted(&sorted, 50.0),
            p5: percentile_sorted(&sorted, 5.0),
            p95: percentile_sorted(&sorted, 95.0),
            min: sorted[0],
            max: sorted[n - 1],
            ci95_low: mean - half,
            ci95_high: mean + half,
        })
    }

    /// [`Summary::of`] for `f32` values.
    pub fn of_f32(what: &str, values: &[f32]) -> Result<Summary> {
        let v: Vec<f64> = values.iter().map(|&x| f64::from(x)).collect();
        Summary::of(what, &v)
    }

    /// The statistics as `(name, value)` pairs, in the order of the fields (used by the CSV
    /// report).
    pub fn fields(&self) -> [(&'static str, f64); 10] {
        [
            ("n", self.n as f64),
            ("mean", self.mean),
            ("std", self.std),
            ("median", self.median),
            ("p5", self.p5),
            ("p95", self.p95),
            ("min", self.min),
            ("max", self.max),
            ("ci95_low", self.ci95_low),
            ("ci95_high", self.ci95_high),
        ]
    }
}

/// The `q`-th percentile (0 ≤ q ≤ 100) of ascending, non-empty `sorted`, interpolating linearly
/// between the order statistics at `q/100 · (n − 1)`.
pub(crate) fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let pos = (q / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = pos - lo as f64;
    sorted[lo] + frac * (sorted[hi] - sorted[lo])
}
