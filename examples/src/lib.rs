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
//! use aria::discover::{resolve_model, SearchPaths};
//! # fn main() -> aria::Result<()> {
//! // A folder laid out like the official release, or a name found in the Hugging Face cache.
//! let files = resolve_model("small-music", &SearchPaths::from_env())?;
//! println!("weights: {}", files.weights.display());
//! # Ok(()) }
//! ```

pub mod audio;
pub mod discover;
mod error;
pub mod info;
pub mod noise;
pub mod pipeline;
pub mod plan;
pub mod rng;
pub mod synth;

pub use aria_codec::audio::AudioClip;
pub use error::{Error, Result};
pub use noise::{NoiseSource, ReplayNoise, SeededNoise};
pub use aria_dit::sampler::SamplerKind;
pub use pipeline::{Event, GenerateRequest, Generated, LoadOptions, Pipeline, Timings};
