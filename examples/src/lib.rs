//! # aria
//!
//! Stable Audio 3 text-to-audio in Rust: this crate wires the text conditioning and diffusion
//! model of `aria-dit` and the SAME autoencoder of `aria-codec` into the reference
//! `generate()` flow, and holds what an application needs around it: locating a model folder
//! ([`discover`]), reproducible noise ([`noise`]), the length bookkeeping ([`plan`]), audio
//! files and input preparation ([`audio`]), and random checkpoints with the real layout
//! ([`synth`]) for demos and benchmarks.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//!
//! use aria::discover::{resolve_model, SearchPaths};
//! use aria::{Event, GenerateRequest, LoadOptions, Pipeline, SeededNoise};
//!
//! # fn main() -> aria::Result<()> {
//! // A folder laid out like the official release, or a name found in the Hugging Face cache.
//! let files = resolve_model("small-music", &SearchPaths::from_env())?;
//! let pipe = Pipeline::load(&files, &LoadOptions::default())?;
//!
//! let mut req = GenerateRequest::new("warm ambient pad, slow evolving", 10.0);
//! req.steps = 8;
//! let mut noise = SeededNoise::new(42);
//! let out = pipe.generate(&req, &mut noise, &mut |e| {
//!     if let Event::Step { index, total, .. } = e {
//!         eprintln!("step {}/{total}", index + 1);
//!     }
//!     ControlFlow::Continue(()) // ControlFlow::Break(()) cancels
//! })?;
//! // `out.audio` is [2, samples] at 44.1 kHz; `out.latents` [1, 256, T].
//! aria_codec::audio::write_wav("out.wav", &out.audio, pipe.sample_rate(), aria_codec::audio::WavFormat::F32)?;
//! # Ok(()) }
//! ```

pub mod discover;
mod error;
pub mod info;
pub mod noise;
pub mod pipeline;
pub mod plan;
pub mod rng;
pub mod synth;

pub use aria_codec::audio;
pub use aria_codec::audio::AudioClip;
pub use aria_dit::sampler::SamplerKind;
pub use error::{Error, Result};
pub use noise::{NoiseSource, ReplayNoise, SeededNoise};
pub use pipeline::{Event, GenerateRequest, Generated, LoadOptions, Pipeline, Timings};
