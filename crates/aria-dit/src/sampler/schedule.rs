//! Timestep schedules (`build_schedule`, spec §6.1): `linspace(σ_max, 0, steps+1)` warped by a
//! distribution shift, with the first value re-anchored to `σ_max`.
//!
//! Computed in f32 in the order of the reference's tensor path (per-item sequence lengths, as
//! `generate()` uses them). With `σ_max < 1` the warp is applied to `linspace(σ_max, 0)` and the
//! first value reset, so the schedule is not monotonic — reference behaviour, kept.

use crate::dit::linspace_f32_fma;
use crate::{DitError, Result};

/// A distribution shift (`sampling_distribution_shift_options`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shift {
    /// Identity (`type: "none"`).
    None,
    /// `LogSNRShift`: `λ_start = anchor_logsnr − rate·log₂(L/anchor_length)`,
    /// `t' = sigmoid(−(λ_end − t·(λ_end − λ_start)))` with exact endpoints.
    LogSnr {
        /// `anchor_length` (2000).
        anchor_length: f32,
        /// `anchor_logsnr` (−6.2).
        anchor_logsnr: f32,
        /// `rate` (1.0; 0 in the inference default).
        rate: f32,
        /// `logsnr_end` (2.0).
        logsnr_end: f32,
    },
    /// `DistributionShift` (`type: "full"`).
    Full {
        /// `base_shift` (0.5).
        base_shift: f32,
        /// `max_shift` (1.15).
        max_shift: f32,
        /// `max_length` (4096).
        max_length: f32,
        /// `min_length` (256).
        min_length: f32,
        /// `use_sine` (false).
        use_sine: bool,
    },
    /// `FluxDistributionShift` (`type: "flux"`).
    Flux {
        /// `min_length` (256).
        min_length: f32,
        /// `max_length` (4096).
        max_length: f32,
        /// `alpha_min` (1.0).
        alpha_min: f32,
        /// `alpha_max` (1.0).
        alpha_max: f32,
    },
}

impl Shift {
    /// The reference's inference default when the config has no
    /// `sampling_distribution_shift_options`: LogSNR, rate 0, −6.2 → 2.0 (`sigmoid(8.2·t − 2)`).
    pub fn inference_default() -> Self {
        Shift::LogSnr {
            anchor_length: 2000.0,
            anchor_logsnr: -6.2,
            rate: 0.0,
            logsnr_end: 2.0,
        }
    }

    /// The values of `type` in `sampling_distribution_shift_options`.
    pub const TYPES: &'static [&'static str] = &["none", "logsnr", "full", "flux"];

    /// From `sampling_distribution_shift_options` (`None`: [`Shift::inference_default`]).
    /// `type` defaults to `"full"`; unknown types or keys are errors naming the key. A model's
    /// configuration holds the parsed value ([`crate::config::DiffusionConfig::sampling_shift`]).
    pub fn from_options(opts: Option<&serde_json::Value>) -> Result<Self> {
        Self::parse(opts).map_err(|reason| DitError::Input {
            what: "sampling_distribution_shift_options".into(),
            reason,
        })
    }

    /// [`Shift::from_options`] with the reason of a failure as text (naming the key inside the
    /// options and the allowed values).
    pub fn parse(opts: Option<&serde_json::Value>) -> std::result::Result<Self, String> {
        let Some(v) = opts else {
            return Ok(Self::inference_default());
        };
        if v.is_null() {
            return Ok(Self::inference_default());
        }
        let obj = v
            .as_object()
            .ok_or_else(|| "not a JSON object".to_string())?;
        let ty = match obj.get("type") {
            None => "full",
            Some(t) => t.as_str().ok_or_else(|| {
                format!(
                    "`type` is not a string (allowed: {})",
                    Self::TYPES.join(", ")
                )
            })?,
        };
        let num = |k: &str, d: f32| -> std::result::Result<f32, String> {
            match obj.get(k) {
                None => Ok(d),
                Some(x) => x
                    .as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| format!("`{k}` is not a number")),
            }
        };
        let allowed: &[&str] = match ty {
            "none" => &[],
            "logsnr" => &["anchor_length", "anchor_logsnr", "rate", "logsnr_end"],
            "full" => &[
                "base_shift",
                "max_shift",
                "max_length",
                "min_length",
                "use_sine",
            ],
            "flux" => &["min_length", "max_length", "alpha_min", "alpha_max"],
            other => {
                return Err(format!(
                    "unknown `type` `{other}` (allowed: {})",
                    Self::TYPES.join(", ")
                ))
            }
        };
        if let Some(k) = obj
            .keys()
            .find(|k| *k != "type" && !allowed.contains(&k.as_str()))
        {
            return Err(format!(
                "unknown key `{k}` for type `{ty}` (allowed: type, {})",
                allowed.join(", ")
            ));
        }
        Ok(match ty {
            "none" => Shift::None,
            "logsnr" => Shift::LogSnr {
                anchor_length: num("anchor_length", 2000.0)?,
                anchor_logsnr: num("anchor_logsnr", -6.2)?,
                rate: num("rate", 1.0)?,
                logsnr_end: num("logsnr_end", 2.0)?,
            },
            "full" => Shift::Full {
                base_shift: num("base_shift", 0.5)?,
                max_shift: num("max_shift", 1.15)?,
                max_length: num("max_length", 4096.0)?,
                min_length: num("min_length", 256.0)?,
                use_sine: match obj.get("use_sine") {
                    None => false,
                    Some(x) => x
                        .as_bool()
                        .ok_or_else(|| "`use_sine` is not a boolean".to_string())?,
                },
            },
            _ => Shift::Flux {
                min_length: num("min_length", 256.0)?,
                max_length: num("max_length", 4096.0)?,
                alpha_min: num("alpha_min", 1.0)?,
                alpha_max: num("alpha_max", 1.0)?,
            },
        })
    }

    /// Warp `t` for sequence length `seq_len` (f32, as the reference's tensor path).
    pub fn apply(&self, t: &[f32], seq_len: f32) -> Vec<f32> {
        match *self {
            Shift::None => t.to_vec(),
            Shift::LogSnr {
                anchor_length,
                anchor_logsnr,
                rate,
                logsnr_end,
            } => {
                let start = anchor_logsnr - rate * (seq_len / anchor_length).log2();
                let span = logsnr_end - start;
                t.iter()
                    .map(|&x| {
                        if x <= 0.0 {
                            0.0
                        } else if x >= 1.0 {
                            1.0
                        } else {
                            let l = logsnr_end - x * span;
                            1.0 / (1.0 + l.exp())
                        }
                    })
                    .collect()
            }
            Shift::Full {
                base_shift,
                max_shift,
                max_length,
                min_length,
                use_sine,
            } => {
                let l = seq_len.clamp(min_length, max_length);
                let mu = -(base_shift
                    + (max_shift - base_shift) * (l - min_length) / (max_length - min_length));
                let em = mu.exp();
                t.iter()
                    .map(|&x| {
                        let y = 1.0 - em / (em + (1.0 / (1.0 - x) - 1.0));
                        if use_sine {
                            (y * std::f32::consts::PI / 2.0).sin()
                        } else {
                            y
                        }
                    })
                    .collect()
            }
            Shift::Flux {
                min_length,
                max_length,
                alpha_min,
                alpha_max,
            } => {
                let (lmin, mut lmax) = ((min_length as f64).ln(), (max_length as f64).ln());
                if lmax == lmin {
                    lmax += 1e-8;
                }
                let (la_min, la_max) = (
                    (alpha_min.max(1e-8) as f64).ln(),
                    (alpha_max.max(1e-8) as f64).ln(),
                );
                let l = seq_len.clamp(min_length, max_length);
                let frac = (l.ln() - lmin as f32) / (lmax as f32 - lmin as f32);
                let alpha = (la_min as f32 + frac * (la_max as f32 - la_min as f32)).exp();
                t.iter()
                    .map(|&x| alpha * x / (1.0 + (alpha - 1.0) * x))
                    .collect()
            }
        }
    }
}

impl Default for Shift {
    /// [`Shift::inference_default`].
    fn default() -> Self {
        Shift::inference_default()
    }
}

/// A schedule: `steps + 1` values per batch item (one shared row, or one row per item).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    rows: Vec<Vec<f32>>,
}

impl Schedule {
    /// `build_schedule(steps, σ_max, shift, seq_lens)`: one row per entry of `seq_lens` (per-item
    /// effective lengths, already clamped to ≥ 1 by the caller or here).
    pub fn build(steps: usize, sigma_max: f32, shift: &Shift, seq_lens: &[f32]) -> Result<Self> {
        if steps == 0 || seq_lens.is_empty() {
            return Err(DitError::Input {
                what: "schedule".into(),
                reason: format!("{steps} steps for {} items", seq_lens.len()),
            });
        }
        let lin = linspace_f32_fma(sigma_max, 0.0, steps + 1);
        let rows = seq_lens
            .iter()
            .map(|&l| {
                let mut r = shift.apply(&lin, l.max(1.0));
                r[0] = sigma_max;
                r
            })
            .collect();
        Ok(Schedule { rows })
    }

    /// A schedule from explicit values (shared by every item).
    pub fn from_values(values: Vec<f32>) -> Result<Self> {
        if values.len() < 2 {
            return Err(DitError::Input {
                what: "schedule".into(),
                reason: "needs at least 2 values".into(),
            });
        }
        Ok(Schedule { rows: vec![values] })
    }

    /// Number of steps (values − 1).
    pub fn steps(&self) -> usize {
        self.rows[0].len() - 1
    }

    /// The rows (one shared, or one per item).
    pub fn rows(&self) -> &[Vec<f32>] {
        &self.rows
    }

    /// Values at index `i` for a batch of `b` items.
    pub fn at(&self, i: usize, b: usize) -> Result<Vec<f32>> {
        if self.rows.len() != 1 && self.rows.len() != b {
            return Err(DitError::Input {
                what: "schedule".into(),
                reason: format!("{} rows for a batch of {b}", self.rows.len()),
            });
        }
        Ok((0..b)
            .map(|k| self.rows[if self.rows.len() == 1 { 0 } else { k }][i])
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_logsnr_values() {
        let s = Schedule::build(8, 1.0, &Shift::inference_default(), &[35.0]).unwrap();
        let want = [
            1.0, 0.994376, 0.984480, 0.957912, 0.890903, 0.745547, 0.512497, 0.273885, 0.0,
        ];
        for (a, b) in s.rows()[0].iter().zip(want) {
            assert!((a - b).abs() < 2e-6, "{a} vs {b}");
        }
        let s = Schedule::build(8, 0.8, &Shift::inference_default(), &[35.0]).unwrap();
        let want = [
            0.8, 0.9768, 0.9488, 0.8909, 0.7824, 0.6130, 0.4110, 0.2351, 0.0,
        ];
        for (a, b) in s.rows()[0].iter().zip(want) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn full_and_flux_shapes() {
        let full = Shift::from_options(Some(&serde_json::json!({"type": "full"}))).unwrap();
        // alpha = e^{0.5} at L = 256: t' = αt/(1+(α−1)t).
        let a = 0.5f32.exp();
        let r = full.apply(&[0.5], 100.0)[0];
        assert!((r - a * 0.5 / (1.0 + (a - 1.0) * 0.5)).abs() < 1e-6);
        let flux = Shift::from_options(Some(
            &serde_json::json!({"type": "flux", "alpha_min": 2.0, "alpha_max": 2.0}),
        ))
        .unwrap();
        assert!((flux.apply(&[0.5], 1000.0)[0] - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(
            Shift::from_options(Some(&serde_json::json!({"type": "none"})))
                .unwrap()
                .apply(&[0.3], 5.0),
            vec![0.3]
        );
        assert!(Shift::from_options(Some(&serde_json::json!({"type": "cosine"}))).is_err());
        assert!(
            Shift::from_options(Some(&serde_json::json!({"type": "full", "bogus": 1}))).is_err()
        );
        // Per-item rows with a length-dependent shift differ.
        let lsnr = Shift::LogSnr {
            anchor_length: 2000.0,
            anchor_logsnr: -6.2,
            rate: 1.0,
            logsnr_end: 2.0,
        };
        let s = Schedule::build(4, 1.0, &lsnr, &[100.0, 4000.0]).unwrap();
        assert_ne!(s.rows()[0], s.rows()[1]);
        assert_eq!(s.at(0, 2).unwrap(), vec![1.0, 1.0]);
        assert_eq!(s.at(4, 2).unwrap(), vec![0.0, 0.0]);
    }
}
