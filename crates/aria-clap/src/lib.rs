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
