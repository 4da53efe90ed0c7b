//! The measures text-to-audio papers report on CLAP embeddings, independent of the model: they
//! take embeddings and audio as plain slices.
//!
//! - [`clap_score`] / [`clap_scores`]: cosine similarity of a text and an audio embedding, per
//!   pair and summarised over a set of pairs.
//! - [`frechet_distance`]: the Fréchet distance between two sets of embeddings (FAD when they
//!   are CLAP audio embeddings), in `f64` with a symmetric eigendecomposition.
//! - [`drift`]: `1 − cos` between paired embeddings (the same prompts and seeds through two
//!   model variants).
//! - [`integrated_loudness`] / [`normalize_loudness`]: ITU-R BS.1770-4 loudness, used to bring
//!   clips to a LUFS target before embedding them. The K-weighting filters are designed for any
//!   rate from the standard's analog prototype ([`KWeighting::Bs1770`], pyloudnorm's `"DeMan"`);
//!   [`KWeighting::Cookbook`] reproduces `pyloudnorm.Meter(rate)`'s default instead.
//! - [`Summary`]: mean, spread, percentiles and a 95 % interval of per-item values.
//! - [`Report`]: named measures against a baseline (the re-seed spread), as JSON or CSV, and
//!   [`svg_histogram`] / [`svg_bars`] plots.
//!
//! ```
//! use aria_clap::measure::{clap_score, drift, frechet_distance};
//!
//! # fn main() -> aria_clap::Result<()> {
//! let score = clap_score(&[1.0, 0.0], &[1.0, 1.0])?;
//! assert!((score - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
//!
//! let a = vec![vec![0.0f32, 1.0], vec![1.0, 0.0], vec![1.0, 1.0]];
//! let b = vec![vec![0.5f32, 1.0], vec![1.0, 0.5], vec![1.0, 1.5]];
//! assert!(frechet_distance(&a, &a)? < 1e-12);
//! assert!(frechet_distance(&a, &b)? > 0.0);
//! assert_eq!(drift(&a, &a)?.max, 0.0);
//! # Ok(())
//! # }
//! ```

mod fad;
mod linalg;
mod loudness;
mod plot;
mod report;
mod similarity;
mod stats;

pub use fad::frechet_distance;
pub use loudness::{integrated_loudness, integrated_loudness_with, normalize_loudness, KWeighting};
pub use plot::{svg_bars, svg_histogram};
pub use report::{Baseline, Measure, Report};
pub use similarity::{clap_score, clap_score_each, clap_scores, drift, drift_each};
pub use stats::Summary;
