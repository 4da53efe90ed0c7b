//! The pipeline as the warm-start cache of `aria-cache` drives it (cargo feature `cache`).
//!
//! [`CacheGenerator`] implements [`aria_cache::Generator`] for a [`Pipeline`] with a request
//! template (guidance, sampler, headroom) and a seeded noise generator; `Pipeline` implements it
//! too, with the reference defaults and [`TorchNoise`](crate::TorchNoise). A warm start goes
//! through [`WarmStart`]: the pipeline noises the clean latents to the schedule's σ at the start
//! step with its initial-noise draw, so step 0 is a cold generation bit for bit.
//!
//! ```no_run
//! # fn f(pipe: &aria::Pipeline, emb: std::sync::Arc<dyn aria_cache::Embedder>) -> Result<(), aria_cache::CacheError> {
//! use aria_cache::{store, Cache, CacheConfig, Request};
//! let gen = aria::cache::CacheGenerator::new(pipe);
//! let mut cache = Cache::open(store::open("./warm-cache")?, emb, CacheConfig::default())?;
//! let out = cache.generate(&gen, &Request::new("rain on a tin roof", 10.0, 8, 7))?;
//! # let _ = out; Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Instant;

use aria_cache::embed::T5GemmaMeanPool;
use aria_cache::{Audio, CacheError, Generation, Generator, Request, WarmLatents};
use aria_core::{DType, Tensor};
use aria_dit::sampler::Schedule;

use crate::noise::SeedGenerator;
use crate::pipeline::{RunOptions, WarmStart};
use crate::{AudioClip, GenerateRequest, Pipeline};

/// Draws of the encoder come from this offset of the request's seed, apart from the
/// generation's own.
const ENCODE_SEED_OFFSET: u64 = 0x5EED_E1C0;

fn gen_err(e: crate::Error) -> CacheError {
    CacheError::Generator(e.to_string())
}

/// A [`Pipeline`] with a request template and a noise generator, as an
/// [`aria_cache::Generator`].
#[derive(Debug, Clone)]
pub struct CacheGenerator<'a> {
    pipe: &'a Pipeline,
    template: GenerateRequest,
    noise: SeedGenerator,
    id: String,
}

impl<'a> CacheGenerator<'a> {
    /// The reference defaults ([`GenerateRequest::new`]) and [`SeedGenerator::Torch`].
    pub fn new(pipe: &'a Pipeline) -> Self {
        Self::with_template(pipe, GenerateRequest::new("", 1.0), SeedGenerator::Torch)
    }

    /// Requests are `template` with the cache's prompt, negative prompt, duration and steps
    /// (its audio inputs and precomputed conditioning are dropped); `noise` draws from the
    /// request's seed.
    pub fn with_template(
        pipe: &'a Pipeline,
        template: GenerateRequest,
        noise: SeedGenerator,
    ) -> Self {
        CacheGenerator {
            id: model_id(pipe),
            pipe,
            template,
            noise,
        }
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        self.pipe
    }

    /// The pipeline request for a cache request.
    pub fn request(&self, r: &Request) -> GenerateRequest {
        GenerateRequest {
            prompt: r.prompt.clone(),
            negative_prompt: r.negative_prompt.clone(),
            seconds: r.seconds,
            steps: r.steps,
            init_audio: None,
            init_latents: None,
            warm_start: None,
            inpaint: None,
            inpaint_latents: None,
            conditioning: None,
            ..self.template.clone()
        }
    }
}

/// A stable id of the loaded model: FNV-1a of `model_config.json` and the weights' size.
fn model_id(pipe: &Pipeline) -> String {
    let files = pipe.files();
    let mut bytes = std::fs::read(&files.config).unwrap_or_default();
    let len = std::fs::metadata(&files.weights).map_or(0, |m| m.len());
    bytes.extend(len.to_le_bytes());
    for (path, s) in pipe.loras() {
        bytes.extend(path.path().to_string_lossy().as_bytes());
        bytes.extend(s.to_le_bytes());
    }
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("aria-sa3-{h:016x}")
}

fn to_audio(t: &Tensor, sample_rate: u32) -> Result<Audio, CacheError> {
    let ch = t.shape().first().copied().unwrap_or(0);
    Audio::new(t.contiguous()?.to_vec_f32()?, ch, sample_rate)
}

impl Generator for CacheGenerator<'_> {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn sample_rate(&self) -> u32 {
        self.pipe.sample_rate()
    }

    fn latent_shape(&self, req: &Request) -> Result<Vec<usize>, CacheError> {
        let l = self
            .pipe
            .lengths(req.seconds, self.template.duration_padding_sec);
        Ok(vec![1, self.pipe.latent_channels(), l.latents])
    }

    fn sigmas(&self, req: &Request) -> Result<Vec<f32>, CacheError> {
        let l = self
            .pipe
            .lengths(req.seconds, self.template.duration_padding_sec);
        let shift = &self.pipe.config().model.diffusion.sampling_shift;
        let s = Schedule::build(req.steps, 1.0, shift, &[l.effective.max(1) as f32])
            .map_err(|e| CacheError::Generator(e.to_string()))?;
        Ok(s.rows()[0].clone())
    }

    fn encode(&self, audio: &Audio, req: &Request) -> Result<Tensor, CacheError> {
        let l = self
            .pipe
            .lengths(req.seconds, self.template.duration_padding_sec);
        // Zero-pad (or cut) to the request's whole latent span, so the latents have its shape.
        let (ch, n) = (audio.channels, audio.frames());
        let mut x = vec![0f32; ch * l.samples];
        for c in 0..ch {
            let k = n.min(l.samples);
            x[c * l.samples..c * l.samples + k].copy_from_slice(&audio.samples[c * n..c * n + k]);
        }
        let clip = AudioClip {
            data: Tensor::from_vec(x, &[ch, l.samples])?,
            sample_rate: audio.sample_rate,
        };
        let mut noise = self.noise.source(req.seed.wrapping_add(ENCODE_SEED_OFFSET));
        self.pipe
            .encode_audio(&clip, noise.as_mut())
            .map_err(gen_err)
    }

    fn generate(
        &self,
        req: &Request,
        warm: Option<&WarmLatents>,
    ) -> Result<Generation, CacheError> {
        let t0 = Instant::now();
        let mut r = self.request(req);
        r.warm_start = warm.map(|w| WarmStart {
            latents: w.latents.clone(),
            start_step: w.start_step,
        });
        let mut noise = self.noise.source(req.seed);
        let out = self
            .pipe
            .run(&r, noise.as_mut(), RunOptions::default())
            .map_err(gen_err)?;
        Ok(Generation {
            audio: to_audio(&out.audio, self.pipe.sample_rate())?,
            latents: out.latents,
            step_times: out.timings.steps,
            total: t0.elapsed(),
        })
    }

    /// The latents the duration covers (the schedule's length, before the padding).
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        Some(
            self.pipe
                .lengths(seconds, self.template.duration_padding_sec)
                .effective,
        )
    }

    fn decode(&self, latents: &Tensor, req: &Request) -> Result<Audio, CacheError> {
        let mut noise = self.noise.source(req.seed);
        let a = self
            .pipe
            .decode_latents(latents, noise.as_mut())
            .map_err(gen_err)?;
        let sr = self.pipe.sample_rate();
        let n = ((req.seconds * f64::from(sr)) as usize).min(a.shape()[1]);
        to_audio(&a.narrow(1, 0, n)?, sr)
    }
}

impl Generator for Pipeline {
    fn id(&self) -> String {
        model_id(self)
    }
    fn sample_rate(&self) -> u32 {
        Pipeline::sample_rate(self)
    }
    fn latent_shape(&self, req: &Request) -> Result<Vec<usize>, CacheError> {
        CacheGenerator::new(self).latent_shape(req)
    }
    fn sigmas(&self, req: &Request) -> Result<Vec<f32>, CacheError> {
        CacheGenerator::new(self).sigmas(req)
    }
    fn encode(&self, audio: &Audio, req: &Request) -> Result<Tensor, CacheError> {
        CacheGenerator::new(self).encode(audio, req)
    }
    fn generate(
        &self,
        req: &Request,
        warm: Option<&WarmLatents>,
    ) -> Result<Generation, CacheError> {
        CacheGenerator::new(self).generate(req, warm)
    }
    fn decode(&self, latents: &Tensor, req: &Request) -> Result<Audio, CacheError> {
        CacheGenerator::new(self).decode(latents, req)
    }
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        CacheGenerator::new(self).latent_frames(seconds)
    }
}

/// The T5Gemma mean-pool embedder over the pipeline's own prompt encoder (the conditioning the
/// pipeline computes for a request, averaged over the valid tokens; no extra model).
pub fn t5gemma_embedder(pipe: Arc<Pipeline>) -> T5GemmaMeanPool {
    let dim = pipe.text().cond_dim();
    T5GemmaMeanPool::new(dim, move |t: &str| {
        let (states, mask) = pipe
            .text()
            .encode_prompts(&[t])
            .map_err(|e| CacheError::Generator(e.to_string()))?;
        Ok((states, mask.to_dtype(DType::F32)?))
    })
}
