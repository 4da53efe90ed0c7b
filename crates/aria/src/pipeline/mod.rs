//! [`Pipeline`]: a loaded SA3 model and the reference `generate()` flow (spec §1) on top of the
//! component crates: prompt and duration conditioning and the DiT from `aria-dit`, the SAME
//! autoencoder from `aria-codec`, and the bookkeeping of [`crate::plan`].
//!
//! * [`Pipeline::generate`] / [`Pipeline::generate_batch`]: the reference call, with a progress
//!   closure that may cancel.
//! * [`Pipeline::run`] / [`Pipeline::run_batch`]: the same with [`RunOptions`] for research and
//!   serving code: activation hooks, a [`CancelToken`], an optional progress callback, audio
//!   streamed to an [`AudioSink`] as it is decoded, or latents only.
//! * Requests may start from given latents: [`InitLatents`] (audio-to-audio without encoding)
//!   and [`WarmStart`] (noise clean latents to a step's σ and run only the remaining steps).
//! * LoRA strengths change between requests without reloading
//!   ([`Pipeline::set_lora_strength`]).

mod decode;
mod request;
mod run;

use std::path::PathBuf;
use std::sync::Arc;

use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::{Tensor, WeightLoader};
use aria_dit::conditioner::TextConditioner;
use aria_dit::config::ModelConfig;
pub use aria_dit::config::Objective;
use aria_dit::dit::Dit;
use aria_dit::lora::{LoraFile, LoraStack};
pub use aria_dit::sampler::Shift;
pub use aria_dit::t5gemma::Precision;

pub use decode::{AudioChunk, AudioOutput, AudioSink};
pub use request::{
    BatchGenerated, Event, GenerateRequest, Generated, InitAudio, InitLatents, Inpaint,
    SamplingDefaults, Timings, WarmStart,
};
pub use run::{CancelToken, RunOptions};

use crate::discover::ModelFiles;
use crate::plan::Geometry;
use crate::{Error, Result};

/// The `sample_size` default of the reference `generate()` (1292 latents, about 120 s).
pub const GENERATE_SAMPLE_SIZE: usize = 5_292_032;

/// Overrides of the autoencoder's stochastic terms (config values when not overridden).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SameNoise {
    /// Standard deviation of the encoder's new-token noise.
    pub encoder_mask_noise: f32,
    /// Standard deviation of the decoder's new-token noise.
    pub decoder_mask_noise: f32,
    /// Whether the bottleneck adds `1e-3·running_std` noise at decode.
    pub bottleneck_noise_regularize: bool,
}

impl SameNoise {
    /// Every stochastic term off (deterministic decode).
    pub const OFF: SameNoise = SameNoise {
        encoder_mask_noise: 0.0,
        decoder_mask_noise: 0.0,
        bottleneck_noise_regularize: false,
    };
}

/// Where the models run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The CPU (SIMD kernels, the library's thread pool).
    #[default]
    Cpu,
    /// A GPU through wgpu (cargo feature `wgpu`).
    Wgpu,
    /// An NVIDIA GPU through CUDA (cargo feature `cuda`).
    Cuda,
}

/// The text encoder's arithmetic when [`LoadOptions::text_precision`] is `None`:
/// [`Precision::Bf16Dot`] where the device runs `bf16_panels` products faster than f32
/// ([`backend::faster_than_f32`](aria_core::backend::faster_than_f32): on the CPU, an AMX-BF16
/// tile unit, or AVX-512 BF16 on AMD cores, twice the f32 rate on Zen 5), else
/// [`Precision::F32`] (Intel cores without AMX run `vdpbf16ps` at half the f32 rate; elsewhere
/// bf16 products would only be emulated); on a GPU, f32.
pub fn default_text_precision(device: DeviceKind) -> Precision {
    if device == DeviceKind::Cpu
        && aria_core::backend::faster_than_f32(
            &aria_core::Device::Cpu,
            aria_core::nn::WeightFormat::Bf16Panels,
        )
    {
        Precision::Bf16Dot
    } else {
        Precision::F32
    }
}

impl DeviceKind {
    /// The name used on the command line (`cpu`, `wgpu`, `cuda`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        }
    }

    /// Whether this build of the program includes the backend (it is in aria-core's
    /// [backend registry](aria_core::backend::registry); see [`crate::backends`]).
    pub fn is_built_in(self) -> bool {
        crate::backends::register_builtin();
        aria_core::backend::registry::is_registered(self.name())
    }

    /// `Ok` when this build can open the device; otherwise an [`Error::Unavailable`] that
    /// says what to do. (Whether the machine has one is known when it is opened.)
    pub fn check(self) -> Result<()> {
        if self.is_built_in() {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "the {0} backend is not built into this aria; rebuild with `--features {0}` \
             (or use --device cpu)",
            self.name()
        )))
    }
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// LoRA files with their strengths, applied in order.
    pub loras: Vec<(PathBuf, f32)>,
    /// Override of the autoencoder's stochastic terms.
    pub same_noise: Option<SameNoise>,
    /// Decode in the official 128-latent chunks (`None`: as `model.pretransform.chunked` says).
    pub chunked_decode: Option<bool>,
    /// Arithmetic of the text encoder (`None`: [`default_text_precision`], the fastest: bf16
    /// products with f32 accumulation on the AMX unit or where `vdpbf16ps` outruns f32 FMA,
    /// f32 elsewhere; `Some(F32)` the closest to exact; `Some(Bf16)` replays the reference's
    /// bf16 arithmetic, which reproduces the official conditioning of the released bf16 T5Gemma
    /// bit for bit on AVX2-class CPUs).
    pub text_precision: Option<Precision>,
    /// Where the models run (see [`DeviceKind::check`]).
    pub device: DeviceKind,
    /// CPU threads this pipeline's work runs on (`None`: the process-wide setting,
    /// [`aria_core::threads::set_num_threads`], else one per CPU). Each pipeline carries its
    /// own pool, so two pipelines in one process can use different counts; results are
    /// bit-identical whatever the count.
    pub threads: Option<usize>,
    /// Settings for the device's backend (kernel cache folder, tuning values), filled by the
    /// program from its flags or environment; the library reads no environment variable.
    pub backend: aria_core::backend::registry::BackendOptions,
    /// Precision of the DiT's linear weights (`None`: as stored; a pre-quantized folder loads
    /// at its own precision). Packed precisions need the `quant` feature; see [`crate::quant`].
    pub precision: Option<crate::quant::WeightPrecision>,
    /// Run the `q8_0` layers W8A8 (int8 activations; needs a packed precision). The
    /// autoencoder decoder's matrices are packed `q8_0` and run W8A8 too (as with
    /// [`Self::quantize_decoder`]).
    pub w8a8: bool,
    /// Keep every weight page resident between the stages of a request. By default a run
    /// releases the memory-mapped pages of the weights a stage no longer needs (the text
    /// encoder once the prompts are encoded, the DiT's context layers once it is prepared, the
    /// DiT before decoding, the autoencoder after it; [`aria_core::Tensor::release_pages`]),
    /// so their stages do not add up in the peak; the next request reads them back from the
    /// page cache, at the cost of page faults.
    pub keep_resident: bool,
    /// Pack the autoencoder decoder's matrices as `q8_0` at load (W8A8 with
    /// [`Self::w8a8`]); its dense pages are released. Decoding then runs on packed kernels:
    /// less memory; faster with W8A8, not with weight-only `q8_0` (measure). [`Self::w8a8`]
    /// packs them whether or not this is set.
    pub quantize_decoder: bool,
    /// Pack the T5Gemma encoder's matrices as `q8_0` at load (W8A8 with [`Self::w8a8`]); its
    /// dense pages are released. Needs f32 text arithmetic (the bf16 replay needs the dense
    /// weights). Needs the `quant` feature (`quant::pack_text`).
    pub quantize_text: bool,
}

/// The LoRA adapters of a pipeline: the stack (files and strengths) and, when an adapter
/// targets it, the checkpoint weight of the duration embedder's Linear to merge from.
#[derive(Default)]
struct Loras {
    stack: LoraStack,
    /// `(number conditioner id, LoRA module name, checkpoint weight)`.
    seconds_base: Option<(String, String, Tensor)>,
}

/// A loaded SA3 model.
pub struct Pipeline {
    files: ModelFiles,
    config: ModelConfig,
    geometry: Geometry,
    text: TextConditioner,
    dit: Dit,
    ae: Autoencoder,
    chunked_decode: bool,
    loras: Loras,
    quant: crate::quant::PackReport,
    keep_resident: bool,
    /// The CPU threads of [`LoadOptions::threads`] (`None`: the process-wide pool).
    pool: Option<aria_core::threads::Pool>,
    /// Where the models run (their weights were put there once, at load).
    device: aria_core::Device,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("dir", &self.files.dir)
            .finish_non_exhaustive()
    }
}

/// The backend of `kind` from the registry (`None`: the CPU).
fn open_device(
    kind: DeviceKind,
    opts: &aria_core::backend::registry::BackendOptions,
) -> Result<Option<aria_core::Device>> {
    kind.check()?;
    let device = aria_core::backend::registry::open(kind.name(), opts)?;
    Ok((!device.is_cpu()).then_some(device))
}

fn lora_err(path: PathBuf) -> impl Fn(aria_dit::DitError) -> Error {
    move |e| Error::Lora {
        path: path.clone(),
        reason: e.to_string(),
    }
}

impl Pipeline {
    /// Load a model folder (see [`crate::discover`]): configuration, text encoder, DiT and
    /// autoencoder. Weights stay memory-mapped where their dtype allows.
    pub fn load(files: &ModelFiles, opts: &LoadOptions) -> Result<Pipeline> {
        let pool = match opts.threads {
            Some(0) => {
                return Err(Error::Input(
                    "LoadOptions::threads must be at least 1".into(),
                ))
            }
            Some(n) => Some(aria_core::threads::Pool::new(n)?),
            None => None,
        };
        match &pool {
            Some(p) => p.enter(|| Self::load_on(files, opts, pool.clone())),
            None => Self::load_on(files, opts, None),
        }
    }

    /// Run `f` on this pipeline's threads ([`LoadOptions::threads`]).
    pub(crate) fn on_pool<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.pool {
            Some(p) => p.enter(f),
            None => f(),
        }
    }

    /// The number of CPU threads this pipeline's work runs on.
    pub fn threads(&self) -> usize {
        self.on_pool(aria_core::threads::num_threads)
    }

    fn load_on(
        files: &ModelFiles,
        opts: &LoadOptions,
        pool: Option<aria_core::threads::Pool>,
    ) -> Result<Pipeline> {
        opts.device.check()?;
        let config = ModelConfig::from_file(&files.config)?;
        if config.model_type != "diffusion_cond" {
            return Err(Error::Config(format!(
                "{}: model_type `{}` is not a text-to-audio model (diffusion_cond)",
                files.config.display(),
                config.model_type
            )));
        }
        let mut ae_cfg = AutoencoderConfig::from_model_config(&files.config)?;
        if let Some(n) = opts.same_noise {
            ae_cfg.encoder.mask_noise = n.encoder_mask_noise;
            ae_cfg.decoder.mask_noise = n.decoder_mask_noise;
            ae_cfg.bottleneck.noise_regularize = n.bottleneck_noise_regularize;
        }
        let weights = WeightLoader::open_checkpoint(&files.weights)?;
        let (dit_vb, prequantized) =
            crate::quant::dit_loader(&weights, &files.weights, opts.precision, opts.w8a8)?;
        // `fast` names the concrete mode for this device here; the report says which.
        let precision = opts.precision.map(|p| p.resolve(opts.device));
        let mut dit = Dit::load(&config.model.diffusion.config, &dit_vb.pp("model.model"))?;
        let mut quant =
            crate::quant::prepare_dit(&mut dit, &weights, precision, prequantized, opts.w8a8)?;
        if !opts.keep_resident {
            // Loading read them (checksums of packed weights): they come back when sampling.
            dit.release_pages()?;
        }
        // Through the packed loader: a pre-quantized folder's decoder matrices come packed.
        let mut ae = Autoencoder::load(&ae_cfg, &dit_vb)?;
        if prequantized.is_some() {
            crate::quant::attach_decoder(&mut ae, &dit_vb)?;
        }
        // W8A8 is a mode of the whole generation: the decoder's matrices run it too (on the
        // small-music shapes its decode takes 1.0 s against the f32 decoder's 1.8 s).
        if opts.quantize_decoder || opts.w8a8 {
            crate::quant::pack_decoder(&mut ae, opts.w8a8)?;
        }
        if precision == Some(crate::quant::WeightPrecision::Bf16Dot) {
            // bf16 products for the whole generation: the autoencoder's matrices too (the
            // encoder's for audio inputs and the cache's stretched references; a decoder
            // packed as q8_0 above keeps that format).
            crate::quant::pack_autoencoder_bf16(&mut ae)?;
        }
        if !opts.keep_resident {
            // Loading read the packed decoder's blocks (checksums): they come back to decode.
            ae.release_pages()?;
        }
        quant.decoder_kinds = crate::quant::decoder_kinds(&mut ae);
        quant.encoder_kinds = crate::quant::encoder_kinds(&mut ae);
        let mut text = TextConditioner::load(&config, &weights)?;
        let text_precision = opts
            .text_precision
            .unwrap_or_else(|| default_text_precision(opts.device));
        text.prompt_mut()
            .encoder_mut()
            .set_precision(text_precision);
        if opts.quantize_text {
            crate::quant::pack_text(&mut text, opts.w8a8)?;
        }
        text.prompt().encoder().prepare()?;
        let geometry = Geometry {
            sample_rate: config.sample_rate,
            downsampling_ratio: ae_cfg.downsampling_ratio,
            latent_align: ae_cfg.latent_align,
            max_samples: GENERATE_SAMPLE_SIZE.max(config.sample_size),
        };
        let mut p = Pipeline {
            files: files.clone(),
            chunked_decode: opts.chunked_decode.unwrap_or(ae_cfg.chunked),
            config,
            geometry,
            text,
            dit,
            ae,
            loras: Loras::default(),
            quant,
            keep_resident: opts.keep_resident,
            pool,
            device: aria_core::Device::Cpu,
        };
        for (path, strength) in &opts.loras {
            p.push_lora(path, *strength)?;
        }
        p.apply_loras().map_err(lora_err(
            opts.loras.last().map(|l| l.0.clone()).unwrap_or_default(),
        ))?;
        p.place_on(opts.device, &opts.backend)?;
        Ok(p)
    }

    /// Open `kind`'s backend and put the DiT, the autoencoder and (when it computes in f32)
    /// the text encoder there, once. The text encoder's bf16 replay stays on the CPU: it
    /// reproduces the CPU arithmetic of the reference, and its conditioning is uploaded.
    fn place_on(
        &mut self,
        kind: DeviceKind,
        backend: &aria_core::backend::registry::BackendOptions,
    ) -> Result<()> {
        let Some(device) = open_device(kind, backend)? else {
            return Ok(());
        };
        self.dit.to_device(&device)?;
        self.ae.to_device(&device)?;
        if self.text.prompt().encoder().precision() == Precision::F32 {
            self.text.to_device(&device)?;
        }
        self.device = device;
        Ok(())
    }

    /// Where the models run ([`LoadOptions::device`]).
    pub fn device(&self) -> &aria_core::Device {
        &self.device
    }

    /// `t` on the pipeline's device (unchanged when it is there already or on the CPU path).
    pub(crate) fn on_device(&self, t: &Tensor) -> Result<Tensor> {
        if self.device.is_cpu() || !t.device().is_cpu() {
            return Ok(t.clone());
        }
        Ok(self.device.put(t)?)
    }

    /// Open a LoRA file and append it to the stack (not applied yet).
    fn push_lora(&mut self, path: &std::path::Path, strength: f32) -> Result<()> {
        let f = LoraFile::open(path).map_err(lora_err(path.to_path_buf()))?;
        self.loras.stack.push(Arc::new(f), strength);
        Ok(())
    }

    /// Merge the stack into every layer it targets, from the checkpoint weights (the DiT's
    /// memory-mapped base weights and the duration embedder's Linear); an empty stack restores
    /// the checkpoint weights.
    fn apply_loras(&mut self) -> aria_dit::Result<()> {
        if self.loras.stack.is_empty() && self.loras.seconds_base.is_none() {
            return Ok(());
        }
        self.loras.stack.apply(&mut self.dit)?;
        // The conditioner side: the duration embedder's Linear (the only conditioner layer).
        if self.loras.seconds_base.is_none() {
            let id = self.text.number_ids().next().map(str::to_string);
            if let Some(id) = id {
                let nc = self
                    .text
                    .number(&id)
                    .ok_or_else(|| aria_dit::DitError::Input {
                        what: "number conditioner".into(),
                        reason: format!("`{id}` vanished"),
                    })?;
                let module = format!("conditioners.{id}.embedder.embedding.1");
                let base = nc.linear().weight().dense().cloned().ok_or_else(|| {
                    aria_dit::DitError::Input {
                        what: "number conditioner".into(),
                        reason: format!("`{id}` has a packed weight; LoRA needs a dense one"),
                    }
                })?;
                self.loras.seconds_base = Some((id, module, base));
            }
        }
        if let Some((id, module, base)) = &self.loras.seconds_base {
            let w = self
                .loras
                .stack
                .merged_weight(module, base)?
                .unwrap_or_else(|| base.clone());
            if let Some(nc) = self.text.number_mut(id) {
                nc.linear_mut()
                    .set_weight(aria_core::nn::Weight::Dense(w))?;
            }
        }
        if !self.device.is_cpu() {
            // Merged weights are made on the host: put them where the models run.
            let d = self.device.clone();
            self.dit.to_device(&d)?;
            if self.text.prompt().encoder().precision() == Precision::F32 {
                self.text.to_device(&d)?;
            }
        }
        Ok(())
    }

    /// The LoRA adapters in application order, with their strengths.
    pub fn loras(&self) -> &[(Arc<LoraFile>, f32)] {
        self.loras.stack.entries()
    }

    /// Change the strength of LoRA `index` (0-based, in load order) and re-merge every layer it
    /// touches from the checkpoint weights; the next request uses the new strength. Strength 0
    /// gives the base model's output.
    pub fn set_lora_strength(&mut self, index: usize, strength: f32) -> Result<()> {
        if !strength.is_finite() {
            return Err(Error::Input(format!(
                "LoRA strength must be finite, got {strength}"
            )));
        }
        let path = self
            .loras
            .stack
            .entries()
            .get(index)
            .map(|e| e.0.path().to_path_buf())
            .ok_or_else(|| {
                Error::Input(format!(
                    "no LoRA {index}: {} loaded",
                    self.loras.stack.entries().len()
                ))
            })?;
        self.loras
            .stack
            .set_strength(index, strength)
            .map_err(lora_err(path.clone()))?;
        self.apply_loras().map_err(lora_err(path))
    }

    /// Load another LoRA file on top of the current ones (applied last).
    pub fn add_lora(&mut self, path: &std::path::Path, strength: f32) -> Result<()> {
        self.push_lora(path, strength)?;
        let r = self.apply_loras();
        if r.is_err() {
            // Leave the pipeline as it was.
            let last = self.loras.stack.entries().len() - 1;
            let _ = self.loras.stack.remove(last);
            let _ = self.apply_loras();
        }
        r.map_err(lora_err(path.to_path_buf()))
    }

    /// Remove LoRA `index`; the remaining ones are re-merged from the checkpoint weights.
    pub fn remove_lora(&mut self, index: usize) -> Result<()> {
        let f = self
            .loras
            .stack
            .remove(index)
            .map_err(|e| Error::Input(e.to_string()))?;
        self.apply_loras().map_err(lora_err(f.path().to_path_buf()))
    }

    /// The duration embeddings `[B, cond_dim]` of `seconds` as the conditioning uses them
    /// (with the LoRA-merged duration-embedder weight when an adapter targets it).
    pub fn seconds_embedding(&self, seconds: &[f32]) -> Result<Tensor> {
        let e = self.text.seconds_embedding(seconds)?;
        let b = seconds.len();
        let d = e.elem_count() / b.max(1);
        Ok(e.reshape(&[b, d])?)
    }

    /// The model files.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The parsed `model_config.json`.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The official sampling preset of this model (by its diffusion objective): 50 Euler steps
    /// with CFG 7 for the `-base` models, 8 ping-pong steps without guidance otherwise.
    pub fn sampling_defaults(&self) -> SamplingDefaults {
        SamplingDefaults::for_objective(self.config.model.diffusion.diffusion_objective)
    }

    /// The text conditioner (tokenizer, T5Gemma encoder, duration embedder).
    pub fn text(&self) -> &TextConditioner {
        &self.text
    }

    /// The DiT.
    pub fn dit(&self) -> &Dit {
        &self.dit
    }

    /// What loading did to the DiT's linear weights (precision, kinds, bytes released).
    pub fn quant_report(&self) -> &crate::quant::PackReport {
        &self.quant
    }

    /// The autoencoder.
    pub fn autoencoder(&self) -> &Autoencoder {
        &self.ae
    }

    /// Whether decoding uses the official 128-latent chunks.
    pub fn chunked_decode(&self) -> bool {
        self.chunked_decode
    }

    /// Output sample rate (44100).
    pub fn sample_rate(&self) -> u32 {
        self.config.sample_rate
    }

    /// Latent channels `C` of the DiT's state `[B, C, T]`.
    pub fn latent_channels(&self) -> usize {
        self.config.model.io_channels
    }

    /// Length bookkeeping of this model.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The lengths a request for `seconds` (with `padding_sec` of headroom) generates; the
    /// latents of a [`WarmStart`] or [`InitLatents`] must have `lengths.latents` frames.
    pub fn lengths(&self, seconds: f64, padding_sec: f64) -> crate::plan::Lengths {
        self.geometry.lengths(seconds, padding_sec)
    }

    /// Longest duration a request may ask for, in seconds.
    pub fn max_seconds(&self) -> f64 {
        self.geometry
            .max_samples
            .min(self.config.sample_size.max(1)) as f64
            / f64::from(self.sample_rate())
    }
}
