//! # aria-codec
//!
//! The SAME autoencoder of Stable Audio 3 (SAME-S for the small models, SAME-L for medium) and
//! audio file I/O.
//!
//! * [`AutoencoderConfig`] — typed configuration from `model_config.json`
//!   (`model.pretransform`).
//! * [`Autoencoder`] — weights (every matrix an [`aria_core::nn::Linear`] or
//!   [`aria_core::nn::Conv1d`], weight norm folded at load), [`Autoencoder::encode`],
//!   [`Autoencoder::decode`], the official chunked decode [`Autoencoder::decode_chunked`];
//!   [`Autoencoder::to_device`] moves it to a device backend (the forward passes are tensor
//!   code on the ops of [`aria_core::ops`], so they run wherever the weights live).
//! * [`WindowedDecoder`] / [`StreamingDecoder`] — bounded-memory decoding, bit-identical to a
//!   whole decode (noise off, or position-keyed noise matching [`Autoencoder::decode_keyed`]).
//! * [`NoiseSource`] — where the reference's stochastic terms draw from (the trait of
//!   [`aria_core::noise`]: [`ReplayNoise`] to replay recorded draws, [`TorchNoise`] for torch's
//!   stream of a seed, [`SeededNoise`] for aria's own); pass `None` to switch them off.
//! * [`audio`] — WAV writing / reading, other formats through symphonia, resampling to 44.1 kHz
//!   and the official channel / length fixing.
//!
//! ```no_run
//! use aria_codec::{audio, Autoencoder, AutoencoderConfig, TorchNoise, WindowedDecoder};
//! use aria_core::WeightLoader;
//! # fn main() -> aria_codec::Result<()> {
//! let cfg = AutoencoderConfig::from_model_config("model/model_config.json")?;
//! let ae = Autoencoder::load(&cfg, &WeightLoader::open(&["model/model.safetensors"])?)?;
//! // Audio to latents and back.
//! let clip = audio::read_audio("in.flac")?;
//! let x = audio::prepare_audio(&clip, cfg.sample_rate, Some(10 * 44100), 2)?;
//! let latents = ae.encode(&x, None)?;
//! let mut noise = TorchNoise::new(42);
//! let y = ae.decode_chunked(&latents, Some(&mut noise))?; // the official default path
//! let z = WindowedDecoder::new(&ae, 0).decode(&latents)?; // flat memory, noise off
//! audio::write_wav("out.wav", &y, cfg.sample_rate, audio::WavFormat::Pcm16)?;
//! # let _ = z; Ok(()) }
//! ```

pub mod audio;
mod block;
mod config;
mod error;
mod model;
mod noise;
mod stage;
mod window;

pub use config::{AutoencoderConfig, BottleneckConfig, SameAttention, SameConfig};
pub use error::{CodecError, Result};
pub use model::{
    chunk_starts, chunk_windows, Autoencoder, DecodeTrace, EncodeTrace, CHUNK_LATENTS,
    CHUNK_OVERLAP,
};
pub use noise::{NoiseSource, ReplayNoise, SeededNoise, TorchNoise};
pub use window::{StreamingDecoder, WindowedDecoder};
