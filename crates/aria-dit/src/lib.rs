//! # aria-dit
//!
//! Stable Audio 3 text conditioning and diffusion: the Gemma tokenizer wrapper, the T5Gemma
//! encoder, the SA3 conditioners, the diffusion transformer (standard and differential
//! attention), the samplers, LoRA, and the typed `model_config.json`.

pub mod conditioner;
pub mod config;
pub mod dit;
mod error;
pub mod lora;
pub mod sampler;
pub mod t5gemma;
pub mod tokenizer;

pub use error::{DitError, Result};
