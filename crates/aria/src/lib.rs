//! # aria
//!
//! Stable Audio 3 text-to-audio in Rust: this crate wires the text conditioning and diffusion
//! model of `aria-dit` and the SAME autoencoder of `aria-codec` into the reference
//! `generate()` flow ([`Pipeline`]), and holds what an application needs around it: locating a
//! model folder ([`discover`]), reproducible noise ([`noise`]), the length bookkeeping
//! ([`plan`]), audio files and input preparation ([`audio`]), and random checkpoints with the
//! real layout ([`synth`]) for demos and tests.
//!
//! ```no_run
//! use aria::{discover, GenerateRequest, LoadOptions, Pipeline, SeededNoise};
//!
//! # fn main() -> aria::Result<()> {
//! let files = discover::resolve_model("small-music", &discover::SearchPaths::from_env())?;
//! let pipe = Pipeline::load(&files, &LoadOptions::default())?;
//! let req = GenerateRequest::new("warm ambient pad, slow evolving", 10.0);
//! let out = pipe.run(&req, &mut SeededNoise::new(42), Default::default())?;
//! let samples: Vec<f32> = out.audio.to_vec_f32()?; // [2, n] at 44.1 kHz, channel-major
//! # let _ = samples; Ok(()) }
//! ```
//!
//! [`Pipeline::run`] takes [`RunOptions`]: an activation hook ([`aria_core::hooks`]), a
//! [`CancelToken`], an optional progress callback, and where the audio goes — gathered into a
//! tensor, streamed chunk by chunk to an [`AudioSink`] while it is decoded (memory bounded by one
//! decode window, same bytes), or not decoded at all (latents only). Requests can start from
//! given latents ([`pipeline::InitLatents`], [`pipeline::WarmStart`]).
//!
//! ```no_run
//! use aria::pipeline::{AudioChunk, AudioOutput, RunOptions};
//! use aria::{GenerateRequest, Pipeline, SeededNoise};
//!
//! # fn f(pipe: &Pipeline) -> aria::Result<()> {
//! let mut peak = 0f32;
//! let mut sink = |c: &AudioChunk<'_>| -> aria::Result<()> {
//!     peak = c.audio.to_vec_f32()?.iter().fold(peak, |m, v| m.max(v.abs()));
//!     Ok(())
//! };
//! let opts = RunOptions { audio: AudioOutput::Stream(&mut sink), ..Default::default() };
//! let out = pipe.run(&GenerateRequest::new("rain", 60.0), &mut SeededNoise::new(1), opts)?;
//! # let _ = out; Ok(()) }
//! ```
//!
//! ## Cargo features
//!
//! * `wgpu`: builds the wgpu backend (`aria-wgpu`, [`pipeline::DeviceKind::Wgpu`]).
//! * `quant`: quantized DiT weights ([`quant`], [`LoadOptions::precision`]) through
//!   `aria-quant`.
//! * `cache`: the warm-start cache of `aria-cache` drives the pipeline through the `cache`
//!   module (`aria_cache::Generator`).
//! * `cuda`: builds the CUDA backend (`aria-cuda`, [`pipeline::DeviceKind::Cuda`]); it needs no
//!   CUDA toolkit to build (the driver and libraries are opened at run time).
//! * `steer`: reserved for activation steering; it enables nothing yet.

pub mod backends;
#[cfg(feature = "cache")]
pub mod cache;
pub mod discover;
mod error;
pub mod info;
pub mod noise;
pub mod pipeline;
pub mod plan;
pub mod quant;
pub mod rng;
pub mod stream;
pub mod synth;

pub use aria_codec::audio;
pub use aria_codec::audio::AudioClip;
/// Keep freed activation memory for reuse (a process-wide allocator setting the library never
/// changes by itself; programs that generate should call it once at start): see
/// [`aria_core::alloc`].
pub use aria_core::alloc::retain_freed_memory;
pub use aria_dit::sampler::SamplerKind;
pub use error::{Error, Result};
pub use noise::{NoiseSource, ReplayNoise, SeedGenerator, SeededNoise, TorchNoise};
pub use pipeline::{
    AudioChunk, AudioOutput, AudioSink, BatchGenerated, CancelToken, DeviceKind, Event,
    GenerateRequest, Generated, LoadOptions, Pipeline, RunOptions, Timings,
};
pub use stream::{ContextFrom, StreamChunk, StreamConfig, StreamGenerator};
