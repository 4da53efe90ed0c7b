//! # aria-dit
//!
//! Stable Audio 3 text conditioning and diffusion: the Gemma tokenizer wrapper, the T5Gemma
//! encoder, the SA3 conditioners, the diffusion transformer (standard and differential
//! attention), the samplers, LoRA, and the typed `model_config.json`.
//!
//! From a prompt to latents `[1, C, T]` (the crate `aria` wraps this, with the length
//! bookkeeping and the autoencoder, into `Pipeline`):
//!
//! ```no_run
//! use aria_core::noise::TorchNoise;
//! use aria_core::{Tensor, WeightLoader};
//! use aria_dit::conditioner::TextConditioner;
//! use aria_dit::config::ModelConfig;
//! use aria_dit::dit::{Dit, DitConditioning};
//! use aria_dit::sampler::{self, GuidedDit, SampleOptions, SamplerKind, Schedule, Shift};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = ModelConfig::from_file("small-music/model_config.json")?;
//! let weights = WeightLoader::open_checkpoint("small-music/model.safetensors")?;
//! let text = TextConditioner::load(&cfg, &weights)?;
//! let dit = Dit::load(&cfg.model.diffusion.config, &weights.pp("model.model"))?;
//!
//! let t = 174; // latents of a 10 s clip with 6 s headroom
//! let cond = text.conditioning(&["warm ambient pad"], &[10.0])?;
//! let c = cfg.model.io_channels;
//! let local = Tensor::zeros(&[1, c + 1, t], aria_core::DType::F32); // no inpainting
//! let dc = DitConditioning {
//!     cross_attn_cond: &cond.cross_attn_cond,
//!     global_cond: &cond.global_cond,
//!     local_add_cond: Some(&local),
//! };
//! let model = GuidedDit::new(&dit, &dc, None, None, Default::default())?;
//! let schedule = Schedule::build(8, 1.0, &Shift::inference_default(), &[t as f32])?;
//! let mut noise = TorchNoise::new(42);
//! let x = aria_core::noise::NoiseSource::draw(&mut noise, &[1, c, t], "initial noise")?;
//! let opts = SampleOptions::default();
//! let latents = sampler::sample(&model, SamplerKind::PingPong, x, &schedule, &mut noise, opts)?;
//! assert_eq!(latents.shape(), &[1, c, t]);
//! # Ok(()) }
//! ```

pub mod conditioner;
pub mod config;
pub mod dit;
mod error;
pub mod lora;
pub mod sampler;
pub mod t5gemma;
pub mod tokenizer;

pub use error::{DitError, Result};
