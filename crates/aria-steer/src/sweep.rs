//! Dose-response sweeps: the measurements of one seed-matched run per strength, their CSV and
//! their plot.
//!
//! Per strength α (all runs share prompt, seed and noise):
//! * `proj_site`: mean of `h·d` at the steered site, after the steering — over the valid latent
//!   tokens of the conditional rows and every step for a residual direction (the block's
//!   output), over the valid frames of the output latents for a latent direction, over the
//!   conditioning tokens of the conditional rows for a text direction;
//! * `proj_output`: the projection of the model's output on the direction: for a residual
//!   direction the residual stream after the last block (the DiT's output tokens, before its
//!   output projection), for a latent direction the output latents (as `proj_site`), none for
//!   a text direction;
//! * `drift`: `‖z − z₀‖ / ‖z₀‖` of the output latents (valid frames) against the unsteered run;
//! * `latent_rms`: RMS of the output latents (valid frames);
//! * `audio_rms_dbfs`: RMS level of the decoded audio in dB full scale, when decoded.

use std::fmt::Write as _;
use std::path::Path;

use aria_core::CoreError;

use crate::plot::{Chart, Panel};
use crate::{Result, SteerError};

/// The measurements at one strength.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    /// The strength α.
    pub strength: f32,
    /// Projection at the steered site (see the module docs).
    pub proj_site: f64,
    /// Projection of the model output on the direction (`None` for a text direction).
    pub proj_output: Option<f64>,
    /// Relative L2 distance of the output latents from the unsteered run.
    pub drift: f64,
    /// RMS of the output latents.
    pub latent_rms: f64,
    /// RMS level of the audio (dBFS), when decoded.
    pub audio_rms_dbfs: Option<f64>,
}

/// The output latents `[C, T]` (row-major, channel-major) restricted to the first `valid`
/// frames, as `(channel, frame)` access.
#[derive(Debug, Clone, Copy)]
pub struct Latents<'a> {
    /// The values, `[C, T]`.
    pub data: &'a [f32],
    /// Channels `C`.
    pub channels: usize,
    /// Frames `T`.
    pub frames: usize,
    /// Frames that count (the rest is padding).
    pub valid: usize,
}

impl Latents<'_> {
    fn check(&self) -> Result<()> {
        if self.data.len() != self.channels * self.frames || self.valid > self.frames {
            return Err(SteerError::Invalid(format!(
                "latents: {} values for [{}, {}] with {} valid frames",
                self.data.len(),
                self.channels,
                self.frames,
                self.valid
            )));
        }
        Ok(())
    }

    fn valid_values(&self) -> impl Iterator<Item = f32> + '_ {
        (0..self.channels).flat_map(move |c| {
            self.data[c * self.frames..c * self.frames + self.valid]
                .iter()
                .copied()
        })
    }

    /// Mean over the valid frames of the projection of each frame's channel vector on `d`.
    pub fn projection(&self, d: &[f32]) -> Result<f64> {
        self.check()?;
        if d.len() != self.channels {
            return Err(SteerError::Invalid(format!(
                "latent projection: direction has {} dimensions, the latents {} channels",
                d.len(),
                self.channels
            )));
        }
        if self.valid == 0 {
            return Err(SteerError::Invalid(
                "latent projection: no valid frame".into(),
            ));
        }
        let mut s = 0f64;
        for (c, &dc) in d.iter().enumerate() {
            let row = &self.data[c * self.frames..c * self.frames + self.valid];
            s += dc as f64 * row.iter().map(|v| *v as f64).sum::<f64>();
        }
        Ok(s / self.valid as f64)
    }

    /// RMS over the valid frames.
    pub fn rms(&self) -> Result<f64> {
        self.check()?;
        let n = (self.channels * self.valid).max(1) as f64;
        Ok((self
            .valid_values()
            .map(|v| (v as f64) * (v as f64))
            .sum::<f64>()
            / n)
            .sqrt())
    }

    /// `‖self − base‖ / ‖base‖` over the valid frames (0 when both are zero).
    pub fn drift(&self, base: &Latents<'_>) -> Result<f64> {
        self.check()?;
        base.check()?;
        if (self.channels, self.frames, self.valid) != (base.channels, base.frames, base.valid) {
            return Err(SteerError::Invalid(
                "latent drift: the runs have different latent shapes".into(),
            ));
        }
        let (mut num, mut den) = (0f64, 0f64);
        for (a, b) in self.valid_values().zip(base.valid_values()) {
            num += ((a - b) as f64).powi(2);
            den += (b as f64).powi(2);
        }
        Ok(if num == 0.0 {
            0.0
        } else {
            (num / den.max(f64::MIN_POSITIVE)).sqrt()
        })
    }
}

/// RMS level of audio samples in dB full scale (−inf for silence).
pub fn rms_dbfs(samples: &[f32]) -> f64 {
    let n = samples.len().max(1) as f64;
    let ms = samples.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / n;
    10.0 * ms.log10()
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.9e}"))
}

/// The CSV text of a sweep: a header line, then one line per point in the given order.
pub fn csv(points: &[SweepPoint]) -> String {
    let mut s = String::from("strength,proj_site,proj_output,drift,latent_rms,audio_rms_dbfs\n");
    for p in points {
        let _ = writeln!(
            s,
            "{},{:.9e},{},{:.9e},{:.9e},{}",
            p.strength,
            p.proj_site,
            opt(p.proj_output),
            p.drift,
            p.latent_rms,
            opt(p.audio_rms_dbfs)
        );
    }
    s
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| {
        SteerError::Core(CoreError::Io {
            path: path.to_path_buf(),
            source,
        })
    })
}

/// Write [`csv`] to `path`.
pub fn write_csv(path: impl AsRef<Path>, points: &[SweepPoint]) -> Result<()> {
    write(path.as_ref(), csv(points).as_bytes())
}

/// The dose-response chart: one panel per measurement, strength on the x axis (points sorted
/// by strength). `what` names the direction (`residual block 3, add`).
pub fn chart(points: &[SweepPoint], what: &str) -> Chart {
    let mut pts = points.to_vec();
    pts.sort_by(|a, b| a.strength.total_cmp(&b.strength));
    let col = |f: &dyn Fn(&SweepPoint) -> Option<f64>| -> Vec<f64> {
        pts.iter().map(|p| f(p).unwrap_or(f64::NAN)).collect()
    };
    let mut panels = vec![Panel {
        title: "projection on the direction at the steered site".into(),
        values: col(&|p| Some(p.proj_site)),
    }];
    if pts.iter().any(|p| p.proj_output.is_some()) {
        panels.push(Panel {
            title: "projection of the output on the direction".into(),
            values: col(&|p| p.proj_output),
        });
    }
    panels.push(Panel {
        title: "drift of the output latents from the baseline (relative L2)".into(),
        values: col(&|p| Some(p.drift)),
    });
    if pts.iter().any(|p| p.audio_rms_dbfs.is_some()) {
        panels.push(Panel {
            title: "audio RMS level (dBFS)".into(),
            values: col(&|p| p.audio_rms_dbfs.filter(|v| v.is_finite())),
        });
    } else {
        panels.push(Panel {
            title: "RMS of the output latents".into(),
            values: col(&|p| Some(p.latent_rms)),
        });
    }
    Chart {
        title: format!("dose-response: {what}"),
        x_label: "strength".into(),
        x: pts.iter().map(|p| p.strength as f64).collect(),
        panels,
    }
}

/// Write the chart of [`chart`] as a PNG file.
pub fn write_png(path: impl AsRef<Path>, points: &[SweepPoint], what: &str) -> Result<()> {
    chart(points, what).save_png(path)
}

/// Whether `values` (in strength order) rise strictly.
pub fn strictly_increasing(values: &[f64]) -> bool {
    values.windows(2).all(|w| w[1] > w[0])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn metrics_csv_and_plot() {
        let base = [1f32, 2.0, 3.0, 4.0, 0.0, 0.0]; // [C = 2, T = 3], 2 valid frames
        let z = [1f32, 2.0, 9.0, 4.0, 1.0, 9.0];
        let (b, l) = (
            Latents {
                data: &base,
                channels: 2,
                frames: 3,
                valid: 2,
            },
            Latents {
                data: &z,
                channels: 2,
                frames: 3,
                valid: 2,
            },
        );
        assert_eq!(b.projection(&[0.0, 1.0]).unwrap(), 2.0);
        assert!((l.drift(&b).unwrap() - (1.0f64 / 21.0).sqrt()).abs() < 1e-12);
        assert_eq!(b.drift(&b).unwrap(), 0.0);
        assert!((b.rms().unwrap() - 5.25f64.sqrt()).abs() < 1e-12);
        assert!(b.projection(&[1.0]).is_err());
        assert!((rms_dbfs(&[1.0, -1.0]) - 0.0).abs() < 1e-12);

        let points: Vec<SweepPoint> = [0.0f32, 0.05, 0.1, 0.2, 0.4]
            .iter()
            .map(|&a| SweepPoint {
                strength: a,
                proj_site: 0.3 + 6.0 * a as f64,
                proj_output: Some(1.2 + 2.0 * (a as f64).powi(2)),
                drift: 0.8 * a as f64,
                latent_rms: 0.7,
                audio_rms_dbfs: Some(-31.987_788 + 1e-7 * a as f64),
            })
            .collect();
        let text = csv(&points);
        assert_eq!(text.lines().count(), 6);
        assert!(
            text.starts_with("strength,proj_site,proj_output,drift,latent_rms,audio_rms_dbfs\n")
        );
        let dir = aria_testing::TempDir::new("steer-sweep");
        let path = dir.join("sweep.png");
        write_png(&path, &points, "residual block 10 add (every step)").unwrap();
        let png = std::fs::read(&path).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(strictly_increasing(&[0.0, 1.0, 2.0]) && !strictly_increasing(&[0.0, 0.0]));
    }
}
