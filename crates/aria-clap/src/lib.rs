//! CLAP (contrastive language–audio pretraining) in Rust, on `aria-core` ops.
//!
//! The measuring instrument of text-to-audio work: it maps audio and text into one space, so a
//! clip can be scored against its prompt (CLAP score), two sets of clips compared as
//! distributions (Fréchet audio distance over CLAP embeddings), and paired clips compared one
//! by one (drift).
//!
//! It loads the released `transformers` checkpoints unchanged (`config.json`, `model.safetensors`,
//! `preprocessor_config.json`, the RoBERTa tokenizer files): HTSAT audio tower (Swin stages with
//! shifted windows, patch merging, the fused and unfused input paths), RoBERTa text tower, both
//! projections and the logit scales, and the feature extractor (48 kHz, 64-bin log-mel,
//! `repeatpad`, `rand_trunc` and `fusion`).
//!
//! ```
//! use aria_clap::{measure, synth, Clap};
//!
//! # fn main() -> aria_clap::Result<()> {
//! // A random-weight checkpoint in the released layout (use a release's folder for real
//! // numbers: `Clap::load("…/clap-htsat-unfused")`).
//! let dir = std::env::temp_dir().join(format!("aria-clap-doc-{}", std::process::id()));
//! synth::write_random(&dir, &synth::Preset::Tiny.config(), 0, None)?;
//! let clap = Clap::load(&dir)?;
//!
//! let text = clap.embed_texts(&["rain on a tin roof"])?;
//! let tone: Vec<f32> = (0..44_100).map(|i| (i as f32 * 0.06).sin() * 0.3).collect();
//! let audio = clap.embed_audio(&tone, 1, 44_100)?; // any rate and channel count
//! let score = measure::clap_score(&text[0], &audio)?; // cosine in [-1, 1]
//! assert!(score.abs() <= 1.0);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```

pub mod audio;
pub mod config;
pub mod discover;
mod error;
pub mod eval;
pub mod features;
pub mod layers;
pub mod measure;
mod model;
pub mod precision;
pub mod projection;
pub mod synth;
pub mod text;
pub mod tokenizer;

pub use config::{AudioConfig, ClapConfig, TextConfig};
pub use error::{ClapError, Result};
pub use model::Clap;
pub use precision::Precision;
