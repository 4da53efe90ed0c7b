//! The reference `generate()` flow: validation, conditioning, audio inputs, sampling (cold,
//! audio-to-audio or warm start) and decoding.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use aria_core::hooks::ActivationHook;
use aria_core::{DType, Tensor};
use aria_dit::conditioner::Conditioning;
use aria_dit::dit::DitConditioning;
use aria_dit::sampler::{
    self, Guidance, GuidedDit, GuidedOptions, NegativeConditioning, SampleOptions, SamplerKind,
    Schedule, StepControl,
};

use super::decode::{AudioOutput, Finish, Gather};
use super::request::{BatchGenerated, Event, GenerateRequest, Generated, Timings};
use super::Pipeline;
use crate::noise::NoiseSource;
use crate::{Error, Result};

/// A flag that stops a generation from another thread (or from a callback): the run returns
/// [`Error::Cancelled`] at the next step or decode window. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Ask every run holding this token (or a clone) to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`Self::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Everything about a run besides the request and the noise; all optional
/// (`RunOptions::default()` is a plain generation returning the audio as a tensor).
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Activation hook at the DiT sites (residual stream after each block, text conditioning)
    /// and the sampler state after each step (see [`aria_core::hooks`]).
    pub hook: Option<&'a dyn ActivationHook>,
    /// Cancellation, checked after every stage, step and decode window.
    pub cancel: Option<CancelToken>,
    /// Told about every stage and step.
    pub progress: Option<&'a mut dyn FnMut(&Event)>,
    /// What to do with the audio: gather it (default), stream it to a sink, or skip decoding.
    pub audio: AudioOutput<'a>,
}

impl std::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("hook", &self.hook.is_some())
            .field("cancel", &self.cancel)
            .field("progress", &self.progress.is_some())
            .field("audio", &self.audio)
            .finish()
    }
}

impl Pipeline {
    /// Release the mapped weight pages `f` names (bytes released), unless the pipeline keeps
    /// its weights resident ([`super::LoadOptions::keep_resident`]).
    fn release(&self, f: impl FnOnce(&Pipeline) -> Result<usize>) -> Result<usize> {
        if self.keep_resident {
            return Ok(0);
        }
        f(self)
    }
}

/// Concatenate conditionings along the batch.
fn concat_conditioning(cs: &[Conditioning]) -> Result<Conditioning> {
    let cat = |f: fn(&Conditioning) -> &Tensor| -> Result<Tensor> {
        let parts: Vec<&Tensor> = cs.iter().map(f).collect();
        Ok(Tensor::cat(&parts, 0)?)
    };
    Ok(Conditioning {
        cross_attn_cond: cat(|c| &c.cross_attn_cond)?,
        cross_attn_mask: cat(|c| &c.cross_attn_mask)?,
        global_cond: cat(|c| &c.global_cond)?,
    })
}

/// Check that `x` is `[1, c, t]` with finite values; `what` names it in the error.
fn check_latents(x: &Tensor, c: usize, t: usize, what: &str) -> Result<Vec<f32>> {
    if x.shape() != [1, c, t] {
        return Err(Error::Input(format!(
            "{what} have shape {:?}, this request needs [1, {c}, {t}] \
             (see Pipeline::lengths)",
            x.shape()
        )));
    }
    let v = x.to_dtype(DType::F32)?.contiguous()?.to_vec_f32()?;
    if v.iter().any(|x| !x.is_finite()) {
        return Err(Error::Input(format!("{what} hold non-finite values")));
    }
    Ok(v)
}

impl Pipeline {
    fn validate(&self, req: &GenerateRequest) -> Result<()> {
        let max = self.max_seconds();
        if !(req.seconds.is_finite() && req.seconds > 0.0) {
            return Err(Error::Input(format!(
                "duration must be a positive number of seconds, got {}",
                req.seconds
            )));
        }
        if req.seconds > max {
            return Err(Error::Input(format!(
                "duration {} s exceeds this model's maximum of {max:.1} s",
                req.seconds
            )));
        }
        if req.steps == 0 || req.steps > 1000 {
            return Err(Error::Input(format!(
                "steps must be between 1 and 1000, got {}",
                req.steps
            )));
        }
        if !req.cfg_scale.is_finite() || !req.apg_scale.is_finite() {
            return Err(Error::Input("cfg and apg scales must be finite".into()));
        }
        let (lo, hi) = req.cfg_interval;
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(Error::Input(format!(
                "cfg interval must be finite with lo <= hi, got ({lo}, {hi})"
            )));
        }
        let threshold_ok = req.cfg_norm_threshold.is_finite() && req.cfg_norm_threshold >= 0.0;
        if !req.cfg_rescale.is_finite() || !threshold_ok {
            return Err(Error::Input(format!(
                "cfg rescale must be finite and the cfg norm threshold >= 0, got {} and {}",
                req.cfg_rescale, req.cfg_norm_threshold
            )));
        }
        let starts = usize::from(req.init_audio.is_some())
            + usize::from(req.init_latents.is_some())
            + usize::from(req.warm_start.is_some());
        if starts > 1 {
            return Err(Error::Input(
                "init audio, init latents and a warm start exclude each other".into(),
            ));
        }
        let levels = [
            req.init_audio.as_ref().map(|i| i.noise_level),
            req.init_latents.as_ref().map(|i| i.noise_level),
        ];
        for l in levels.into_iter().flatten() {
            if !(l > 0.0 && l <= 1.0) {
                return Err(Error::Input(format!(
                    "init noise level must be in (0, 1], got {l}"
                )));
            }
        }
        if let Some(w) = &req.warm_start {
            if w.start_step > req.steps {
                return Err(Error::Input(format!(
                    "warm-start step {} is past the last of {} steps",
                    w.start_step, req.steps
                )));
            }
        }
        if req.inpaint_latents.is_some() && req.inpaint.is_none() {
            return Err(Error::Input(
                "inpainting latents were given without an inpainting request (its ranges)".into(),
            ));
        }
        if let Some(inp) = &req.inpaint {
            if inp.ranges.is_empty() {
                return Err(Error::Input(
                    "inpainting needs at least one range START,END".into(),
                ));
            }
            for &(s, e) in &inp.ranges {
                if !(s >= 0.0 && s < e && e <= req.seconds) {
                    return Err(Error::Input(format!(
                        "inpaint range {s},{e} must satisfy 0 <= start < end <= duration ({} s)",
                        req.seconds
                    )));
                }
            }
        }
        Ok(())
    }

    /// Check that batched requests agree on everything the reference shares across a batch
    /// (steps, guidance, sampler, headroom, precomputed conditioning or not, negative prompts
    /// or not, warm start and its step) and carry no audio or latent inputs to encode or mix.
    fn validate_batch(&self, reqs: &[GenerateRequest]) -> Result<()> {
        let first = reqs
            .first()
            .ok_or_else(|| Error::Input("a batch needs at least one request".into()))?;
        for r in reqs {
            self.validate(r)?;
        }
        if reqs.len() == 1 {
            return Ok(());
        }
        for (i, r) in reqs.iter().enumerate().skip(1) {
            let differs = |what: &str| {
                Error::Input(format!(
                    "batched request {i} differs from request 0 in {what}, which a batch shares"
                ))
            };
            if r.steps != first.steps {
                return Err(differs("steps"));
            }
            if r.cfg_scale != first.cfg_scale || r.apg_scale != first.apg_scale {
                return Err(differs("the guidance scales"));
            }
            if r.sampler != first.sampler || r.shift != first.shift {
                return Err(differs("the sampler or schedule shift"));
            }
            if r.cfg_interval != first.cfg_interval
                || r.cfg_rescale != first.cfg_rescale
                || r.cfg_norm_threshold != first.cfg_norm_threshold
            {
                return Err(differs("the guidance options"));
            }
            if r.duration_padding_sec != first.duration_padding_sec {
                return Err(differs("the duration padding"));
            }
            if r.conditioning.is_some() != first.conditioning.is_some() {
                return Err(differs("having precomputed conditioning"));
            }
            if r.negative_prompt.is_some() != first.negative_prompt.is_some() {
                return Err(differs("having a negative prompt"));
            }
            if r.warm_start.as_ref().map(|w| w.start_step)
                != first.warm_start.as_ref().map(|w| w.start_step)
            {
                return Err(differs("the warm start (or its step)"));
            }
        }
        if reqs
            .iter()
            .any(|r| r.init_audio.is_some() || r.init_latents.is_some() || r.inpaint.is_some())
        {
            return Err(Error::Input(
                "audio-to-audio and inpainting run one request at a time, not in a batch".into(),
            ));
        }
        Ok(())
    }

    /// The conditioning of a batch: precomputed (concatenated) or from the prompts.
    fn batch_conditioning(
        &self,
        reqs: &[GenerateRequest],
        use_cfg: bool,
    ) -> Result<(Conditioning, Option<Conditioning>)> {
        if reqs[0].conditioning.is_some() {
            let mut pos = Vec::with_capacity(reqs.len());
            let mut neg = Vec::with_capacity(reqs.len());
            for r in reqs {
                if let Some((c, n)) = &r.conditioning {
                    pos.push(c.clone());
                    neg.push(n.clone());
                }
            }
            let neg = if neg.iter().all(Option::is_some) {
                Some(concat_conditioning(
                    &neg.into_iter().flatten().collect::<Vec<_>>(),
                )?)
            } else if neg.iter().all(Option::is_none) {
                None
            } else {
                return Err(Error::Input(
                    "batched precomputed conditioning: some items have a negative branch, \
                     some do not"
                        .into(),
                ));
            };
            return Ok((concat_conditioning(&pos)?, neg));
        }
        let secs: Vec<f32> = reqs.iter().map(|r| r.seconds as f32).collect();
        let prompts: Vec<&str> = reqs.iter().map(|r| r.prompt.as_str()).collect();
        let c = self.text.conditioning(&prompts, &secs)?;
        let negs: Vec<&str> = reqs
            .iter()
            .filter_map(|r| r.negative_prompt.as_deref())
            .collect();
        let n = if use_cfg && negs.len() == reqs.len() {
            Some(self.text.negative(&negs, &secs)?)
        } else {
            None
        };
        Ok((c, n))
    }

    /// Run the reference `generate()` for one request. Draws come from `noise` in the
    /// reference order (initial noise, encoder noise, one per step, decoder noise); `on_event`
    /// is told about every stage and step and may stop the run by returning
    /// [`ControlFlow::Break`] (the call then returns [`Error::Cancelled`]). See [`Self::run`]
    /// for hooks, streaming and the other options.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        noise: &mut dyn NoiseSource,
        on_event: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<Generated> {
        let b = self.generate_batch(std::slice::from_ref(req), noise, on_event)?;
        one(b)
    }

    /// Run the reference `generate()` on a batch: lists of prompts, negative prompts and
    /// durations, everything else shared (see [`GenerateRequest`]; audio inputs need a batch
    /// of one). The latent length follows the longest duration; each item gets its own
    /// padding mask, schedule and duration conditioning, and the draws have the batch as
    /// their first dimension, as in the reference. With a [`crate::noise::BatchNoise`] every
    /// item draws from its own source; an item whose request has the batch's latent length
    /// then gets the bits it gets alone (see `tests/batch_items.rs`).
    pub fn generate_batch(
        &self,
        reqs: &[GenerateRequest],
        noise: &mut dyn NoiseSource,
        on_event: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<BatchGenerated> {
        let cancel = CancelToken::new();
        let mut progress = |e: &Event| {
            if on_event(e).is_break() {
                cancel.cancel();
            }
        };
        self.run_batch(
            reqs,
            noise,
            RunOptions {
                cancel: Some(cancel.clone()),
                progress: Some(&mut progress),
                ..Default::default()
            },
        )
    }

    /// [`Self::generate`] with [`RunOptions`]: hooks, cancellation, an optional progress
    /// callback, streamed or skipped audio.
    pub fn run(
        &self,
        req: &GenerateRequest,
        noise: &mut dyn NoiseSource,
        opts: RunOptions<'_>,
    ) -> Result<Generated> {
        one(self.run_batch(std::slice::from_ref(req), noise, opts)?)
    }

    /// [`Self::generate_batch`] with [`RunOptions`]. With [`AudioOutput::Stream`] the audio
    /// `[B, channels, n]` reaches the sink in order as it is decoded (bounded memory), with
    /// the same bytes as the gathered tensor.
    pub fn run_batch(
        &self,
        reqs: &[GenerateRequest],
        noise: &mut dyn NoiseSource,
        opts: RunOptions<'_>,
    ) -> Result<BatchGenerated> {
        self.on_pool(|| self.run_batch_here(reqs, noise, opts))
    }

    fn run_batch_here(
        &self,
        reqs: &[GenerateRequest],
        noise: &mut dyn NoiseSource,
        opts: RunOptions<'_>,
    ) -> Result<BatchGenerated> {
        let t_start = Instant::now();
        self.validate_batch(reqs)?;
        let RunOptions {
            hook,
            cancel,
            mut progress,
            audio: audio_out,
        } = opts;
        let req = &reqs[0];
        let nb = reqs.len();
        let mut timings = Timings::default();
        let mut emit = |e: Event| -> Result<()> {
            if let Some(p) = progress.as_mut() {
                p(&e);
            }
            match &cancel {
                Some(c) if c.is_cancelled() => Err(Error::Cancelled),
                _ => Ok(()),
            }
        };
        let g = self.geometry;
        let seconds: Vec<f64> = reqs.iter().map(|r| r.seconds).collect();
        let all_lengths = g.batch_lengths(&seconds, req.duration_padding_sec);
        let lengths = all_lengths[0];
        let (c, t) = (self.config.model.io_channels, lengths.latents);

        // Inputs given as latents, checked before anything runs.
        let given_init = req
            .init_latents
            .as_ref()
            .map(|i| check_latents(&i.latents, c, t, "init latents"))
            .transpose()?;
        let warm: Option<Vec<f32>> = if req.warm_start.is_some() {
            let mut v = Vec::with_capacity(nb * c * t);
            for r in reqs {
                if let Some(w) = &r.warm_start {
                    v.extend(check_latents(&w.latents, c, t, "warm-start latents")?);
                }
            }
            Some(v)
        } else {
            None
        };

        // Inpainting mask in the sample domain (1 = keep).
        let mask_samples = req
            .inpaint
            .as_ref()
            .map(|inp| g.inpaint_mask_samples(&lengths, &inp.ranges));

        // Initial noise, drawn right after seeding.
        let x_noise = noise.draw(&[nb, c, t], "initial noise")?;

        // Conditioning.
        let t0 = Instant::now();
        let use_cfg = req.cfg_scale != 1.0;
        let (cond, neg) = self.batch_conditioning(reqs, use_cfg)?;
        if cond.batch() != nb {
            return Err(Error::Input(format!(
                "precomputed conditioning has batch {} for {nb} requests",
                cond.batch()
            )));
        }
        timings.text = t0.elapsed();
        self.release(|p| Ok(p.text.release_pages()?))?;
        emit(Event::TextDone)?;

        // Audio inputs.
        let t0 = Instant::now();
        let prepare = |clip| {
            aria_codec::audio::prepare_audio(clip, self.sample_rate(), Some(lengths.samples), 2)
        };
        let init_latents = match (&req.init_audio, given_init) {
            (Some(init), _) => Some(
                self.encode_prepared(&prepare(&init.clip)?, noise)?
                    .to_vec_f32()?,
            ),
            (None, g) => g,
        };
        let inpaint_latents = match (&req.inpaint, &req.inpaint_latents) {
            (Some(_), Some(l)) => Some(Tensor::from_vec(
                check_latents(l, c, t, "inpainting latents")?,
                &[1, c, t],
            )?),
            (Some(inp), None) => Some(self.encode_prepared(&prepare(&inp.clip)?, noise)?),
            (None, _) => None,
        };
        if req.init_audio.is_some() || (req.inpaint.is_some() && req.inpaint_latents.is_none()) {
            self.release(|p| Ok(p.ae.release_pages()?))?;
            timings.encode = t0.elapsed();
            emit(Event::AudioEncoded)?;
        }

        // Local-add condition: [mask ; inpaint latents · mask].
        let mask_lat = match &mask_samples {
            Some(m) => g.mask_to_latents(m, t),
            None => vec![0f32; t],
        };
        let mut local = vec![0f32; (c + 1) * t];
        local[..t].copy_from_slice(&mask_lat);
        if let Some(il) = &inpaint_latents {
            let v = il.to_vec_f32()?;
            for ch in 0..c {
                for i in 0..t {
                    local[(ch + 1) * t + i] = v[ch * t + i] * mask_lat[i];
                }
            }
        }
        // The same local condition for every item (zeros without inpainting).
        let local: Vec<f32> = (0..nb).flat_map(|_| local.iter().copied()).collect();
        let local = Tensor::from_vec(local, &[nb, c + 1, t])?;
        let pm: Vec<Vec<f32>> = all_lengths
            .iter()
            .map(|l| crate::plan::padding_mask(t, l.valid))
            .collect();
        let padding_mask = Tensor::from_vec(pm.concat(), &[nb, t])?;

        // Schedule and starting state.
        let sigma_max = req
            .init_audio
            .as_ref()
            .map(|i| i.noise_level)
            .or(req.init_latents.as_ref().map(|i| i.noise_level))
            .unwrap_or(1.0);
        let kind = match req.sampler {
            Some(k) => k,
            None => SamplerKind::default_for(self.config.model.diffusion.diffusion_objective),
        };
        let shift = req
            .shift
            .unwrap_or(self.config.model.diffusion.sampling_shift);
        let eff: Vec<f32> = all_lengths
            .iter()
            .map(|l| l.effective.max(1) as f32)
            .collect();
        let schedule = Schedule::build(req.steps, sigma_max, &shift, &eff)?;
        let start_step = req.warm_start.as_ref().map_or(0, |w| w.start_step);
        let x0 = match (&init_latents, &warm) {
            (Some(a), _) => {
                let b = x_noise.to_vec_f32()?;
                let v = a
                    .iter()
                    .zip(&b)
                    .map(|(x, n)| x * (1.0 - sigma_max) + n * sigma_max)
                    .collect();
                Tensor::from_vec(v, &[1, c, t])?
            }
            (None, Some(x_hat)) => {
                // Rectified-flow forward process to the level of `start_step`, per item.
                let sig = schedule.at(start_step, nb)?;
                let e = x_noise.to_vec_f32()?;
                let per = c * t;
                let v = x_hat
                    .iter()
                    .zip(&e)
                    .enumerate()
                    .map(|(k, (&x, &n))| {
                        let s = sig[k / per];
                        if s == 1.0 {
                            n
                        } else {
                            (1.0 - s) * x + s * n
                        }
                    })
                    .collect();
                Tensor::from_vec(v, &[nb, c, t])?
            }
            (None, None) => x_noise,
        };

        // Sampling. On a device backend the state stays there through the whole loop.
        let x0 = self.on_device(&x0)?;
        let local = self.on_device(&local)?;
        let padding_mask = self.on_device(&padding_mask)?;
        let on_cond = |c: &Conditioning| -> Result<Conditioning> {
            Ok(Conditioning {
                cross_attn_cond: self.on_device(&c.cross_attn_cond)?,
                cross_attn_mask: self.on_device(&c.cross_attn_mask)?,
                global_cond: self.on_device(&c.global_cond)?,
            })
        };
        let cond = on_cond(&cond)?;
        let neg = neg.as_ref().map(on_cond).transpose()?;
        let dcond = DitConditioning {
            cross_attn_cond: &cond.cross_attn_cond,
            global_cond: &cond.global_cond,
            local_add_cond: Some(&local),
        };
        let negative = neg.as_ref().map(|n| NegativeConditioning {
            cross_attn_cond: &n.cross_attn_cond,
            cross_attn_mask: Some(&n.cross_attn_mask),
        });
        let guidance = Guidance {
            cfg_scale: req.cfg_scale,
            apg_scale: req.apg_scale,
            cfg_interval: req.cfg_interval,
            cfg_rescale: req.cfg_rescale,
            cfg_norm_threshold: req.cfg_norm_threshold,
        };
        let model = GuidedDit::new(
            &self.dit,
            &dcond,
            negative,
            Some(&padding_mask),
            GuidedOptions {
                guidance,
                hook,
                ..Default::default()
            },
        )?;
        // The context layers are done until the next request.
        self.release(|p| Ok(p.dit.release_prepare_pages()?))?;
        let mut step_times = Vec::with_capacity(req.steps);
        let mut cancelled = false;
        let latents = {
            let mut last = Instant::now();
            let mut cb = |info: &sampler::StepInfo<'_>| {
                step_times.push(last.elapsed());
                last = Instant::now();
                let t = info.sigma.first().copied().unwrap_or(0.0);
                match emit(Event::Step {
                    index: info.step,
                    total: info.steps,
                    t,
                }) {
                    Ok(()) => StepControl::Continue,
                    Err(_) => {
                        cancelled = true;
                        StepControl::Cancel
                    }
                }
            };
            let opts = SampleOptions {
                start_step,
                hook,
                callback: Some(&mut cb),
            };
            match sampler::sample(&model, kind, x0, &schedule, noise, opts).map_err(Error::from) {
                Err(Error::Dit(aria_dit::DitError::Cancelled { .. })) if cancelled => {
                    return Err(Error::Cancelled)
                }
                r => r?,
            }
        };
        timings.steps = step_times;
        drop(model);
        if !matches!(audio_out, AudioOutput::Skip) {
            // Decoding does not need the DiT: its mapped pages leave before the decoder's come.
            self.release(|p| Ok(p.dit.release_pages()?))?;
        }

        // Decode, zero the padded region, clamp, crop.
        let ch = self.ae.config().audio_channels;
        let len = self.decoded_samples(t);
        // Cropped to the duration when all items share one, as the reference does.
        let same = all_lengths
            .iter()
            .all(|l| l.output_samples == lengths.output_samples);
        let out_len = if same {
            lengths.output_samples.min(len)
        } else {
            len
        };
        let finish = Finish {
            mask: Some(pm),
            ratio: g.downsampling_ratio,
            out_len,
        };
        let t0 = Instant::now();
        let empty = || Tensor::zeros(&[nb, ch, 0], DType::F32);
        let audio = match audio_out {
            AudioOutput::Skip => empty(),
            out => {
                emit(Event::Decoding)?;
                let audio = {
                    // Cancellation is checked by the decoder after every window.
                    let mut prog = |done, total| {
                        let _ = emit(Event::DecodeProgress { done, total });
                    };
                    let cancel = cancel.as_ref();
                    match out {
                        AudioOutput::Stream(sink) => {
                            self.decode_into(&latents, noise, &finish, sink, cancel, &mut prog)?;
                            empty()
                        }
                        _ => {
                            let mut gather = Gather::new(nb * ch, out_len);
                            self.decode_into(
                                &latents,
                                noise,
                                &finish,
                                &mut gather,
                                cancel,
                                &mut prog,
                            )?;
                            gather.into_tensor(nb, ch)?
                        }
                    }
                };
                timings.decode = t0.elapsed();
                self.release(|p| Ok(p.ae.release_pages()?))?;
                emit(Event::Decoded)?;
                audio
            }
        };
        timings.total = t_start.elapsed();
        Ok(BatchGenerated {
            audio,
            latents: latents.to_cpu()?,
            lengths: all_lengths,
            timings,
        })
    }
}

/// The single item of a batch of one.
fn one(b: BatchGenerated) -> Result<Generated> {
    let lengths = b
        .lengths
        .into_iter()
        .next()
        .ok_or_else(|| Error::Input("a generation of one request returned no item".into()))?;
    Ok(Generated {
        audio: b.audio.squeeze(0)?,
        latents: b.latents,
        lengths,
        timings: b.timings,
    })
}
