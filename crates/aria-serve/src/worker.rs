//! The model worker: one thread owns the [`Pipeline`], claims jobs from the store (compatible
//! ones together, up to `max_batch`), runs them with progress and cancellation, streams their
//! audio to the live buffers and to `results/{id}.wav`, and reports how each ended. A second
//! thread renews the leases of what it runs and picks up cancels made in other processes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use aria::noise::{BatchNoise, SeedGenerator};
use aria::pipeline::{AudioChunk, AudioOutput, Event, InitAudio, Inpaint, RunOptions};
use aria::{CancelToken, GenerateRequest, Pipeline, SamplerKind};
use aria_steer::spec::{hook_from_specs, SiteKind};
use aria_steer::{ModelIdentity, SteerOp, SteerSpec, SteeringHook, StepSpan};

use crate::jobs::{now_ms, JobRecord, Outcome};
use crate::live::{pcm16, wav_header, LiveEnd, LiveJob};
use crate::request::{JobSpec, SteerSource};
use crate::state::Shared;

/// A job of the running batch.
struct Item {
    rec: JobRecord,
    spec: JobSpec,
    live: Arc<LiveJob>,
    /// Output frames (the requested duration).
    frames: usize,
    written: usize,
    file: Option<std::io::BufWriter<std::fs::File>>,
    part: PathBuf,
}

/// The pipeline and what the worker keeps beside it.
pub struct Worker {
    shared: Arc<Shared>,
    pipe: Arc<RwLock<Pipeline>>,
    identity: Option<ModelIdentity>,
    /// `(path, strength)` of the LoRAs loaded now.
    loras: Vec<(PathBuf, f32)>,
    cache: Option<aria_cache::Cache>,
    /// The cache's refinement worker (with a cache and `ServeConfig::cache_refine`).
    refiner: Option<aria_cache::manager::Refiner>,
    /// A test hook: the process aborts when it is about to run a job with this prompt (from
    /// the `ARIA_TEST_ABORT_ON_PROMPT` environment variable), as a job that crashes its
    /// worker would.
    abort_on_prompt: Option<String>,
}

fn err_text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Worker {
    /// A worker for `pipe`; opens the warm-start cache when configured.
    pub fn new(shared: Arc<Shared>, pipe: Pipeline) -> crate::Result<Worker> {
        let pipe = Arc::new(RwLock::new(pipe));
        let (cache, refiner) = match &shared.cfg.cache {
            Some(spec) => {
                let cache = open_cache(spec, &shared.cfg, &pipe)?;
                let refiner = match &shared.cfg.cache_refine {
                    Some(rc) => Some(spawn_refiner(spec, rc, &cache, &pipe)?),
                    None => None,
                };
                (Some(cache), refiner)
            }
            None => (None, None),
        };
        Ok(Worker {
            shared,
            pipe,
            identity: None,
            loras: Vec::new(),
            cache,
            refiner,
            abort_on_prompt: std::env::var("ARIA_TEST_ABORT_ON_PROMPT")
                .ok()
                .filter(|p| !p.is_empty()),
        })
    }

    /// The resident model this worker runs on (shared with the streaming endpoint).
    pub fn pipeline(&self) -> Arc<RwLock<Pipeline>> {
        self.pipe.clone()
    }

    /// Claim and run jobs until [`Shared::stop`] is set; then hand back what this worker
    /// holds.
    pub fn run(mut self) {
        let s = self.shared.clone();
        let lease = s.cfg.lease;
        let mut last_requeue = Instant::now()
            .checked_sub(lease)
            .unwrap_or_else(Instant::now);
        while !s.stop.load(Ordering::SeqCst) {
            if last_requeue.elapsed() >= lease / 3 {
                if let Ok(r) = s.store.requeue_expired(s.cfg.max_attempts) {
                    for id in r.failed.iter().chain(&r.cancelled) {
                        remove_inputs(&s.cfg.results_dir, id);
                    }
                }
                last_requeue = Instant::now();
            }
            let jobs = match s
                .store
                .claim(&s.cfg.worker_id, s.cfg.max_batch.max(1), lease)
            {
                Ok(j) => j,
                Err(_) => {
                    s.wake.wait(Duration::from_millis(500));
                    continue;
                }
            };
            if jobs.is_empty() {
                s.wake.wait(Duration::from_millis(250));
                continue;
            }
            self.run_batch(jobs);
        }
        let _ = s.store.release(&s.cfg.worker_id);
    }

    fn run_batch(&mut self, jobs: Vec<JobRecord>) {
        let s = self.shared.clone();
        let (sr, ch) = (s.model.sample_rate, s.model.channels);
        let mut items = Vec::with_capacity(jobs.len());
        for rec in jobs {
            let spec: JobSpec = match serde_json::from_str(&rec.spec) {
                Ok(sp) => sp,
                Err(e) => {
                    let msg = format!("stored request is unreadable: {e}");
                    let _ = s
                        .store
                        .finish(&rec.id, &s.cfg.worker_id, &Outcome::Failed(msg));
                    remove_inputs(&s.cfg.results_dir, &rec.id);
                    continue;
                }
            };
            if self.abort_on_prompt.as_deref() == Some(spec.prompt.as_str()) {
                std::process::abort();
            }
            let frames = (spec.seconds * f64::from(sr)).round() as usize;
            let frames = match self.pipe.read() {
                Ok(p) => p.lengths(spec.seconds, 6.0).output_samples,
                Err(_) => frames,
            };
            let header = wav_header(ch as u16, sr, frames as u64);
            let live = Arc::new(LiveJob::new(&header));
            let part = s.cfg.results_dir.join(format!("{}.wav.part", rec.id));
            let file = std::fs::File::create(&part).and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                w.write_all(&header)?;
                Ok(w)
            });
            s.live.insert(&rec.id, live.clone());
            items.push(Item {
                rec,
                spec,
                live,
                frames,
                written: 0,
                file: file.ok(),
                part,
            });
        }
        if items.is_empty() {
            return;
        }
        if items.iter().any(|it| it.file.is_none()) {
            let dir = s.cfg.results_dir.display().to_string();
            return self.end_all(
                items,
                Err(format!("cannot write to results directory {dir}")),
            );
        }
        let heart = Heartbeat::start(s.clone(), items.iter().map(|i| i.rec.id.clone()).collect());
        let t0 = Instant::now();
        // Requests first: the refinement worker starts no generation while a batch runs.
        let guard = self.refiner.as_ref().map(|r| r.request());
        let result = if items[0].spec.warm_start {
            self.run_cached(&mut items)
        } else {
            self.run_pipeline(&mut items)
        };
        drop(guard);
        heart.stop();
        s.metrics
            .observe_batch(items.len(), items[0].spec.steps, t0.elapsed().as_secs_f64());
        self.end_all(items, result);
    }

    /// Report the end of every item.
    fn end_all(&self, items: Vec<Item>, result: Result<String, String>) {
        let s = &self.shared;
        let worker = &s.cfg.worker_id;
        for mut it in items {
            let id = it.rec.id.clone();
            s.live.remove(&id);
            let flushed = it.file.take().map(|mut f| f.flush().is_ok());
            let aborted = s.abort.is_cancelled();
            let outcome = match &result {
                _ if it.live.cancelled() => Some(Outcome::Cancelled),
                Ok(timings) if flushed == Some(true) && it.written >= it.frames => {
                    let name = format!("{id}.wav");
                    match std::fs::rename(&it.part, s.cfg.results_dir.join(&name)) {
                        Ok(()) => Some(Outcome::Done {
                            result: name,
                            timings: timings.clone(),
                        }),
                        Err(e) => Some(Outcome::Failed(format!("writing {name}: {e}"))),
                    }
                }
                Ok(_) => Some(Outcome::Failed(format!(
                    "the audio was not written completely ({} of {} frames)",
                    it.written, it.frames
                ))),
                // Stopped by a shutdown: handed back to the queue by `release`.
                Err(_) if aborted => None,
                Err(msg) => Some(Outcome::Failed(msg.clone())),
            };
            let done = matches!(outcome, Some(Outcome::Done { .. }));
            it.live.end(if done {
                LiveEnd::Complete
            } else {
                LiveEnd::Aborted
            });
            let _ = std::fs::remove_file(&it.part);
            match outcome {
                Some(o) => {
                    let kept = s.store.finish(&id, worker, &o).unwrap_or(false);
                    // Once the job has ended its uploads go (not when it was requeued after a
                    // lost lease: its next attempt needs them).
                    let ended = kept
                        || s.store
                            .get(&id)
                            .ok()
                            .flatten()
                            .is_some_and(|j| j.state.is_terminal());
                    if ended {
                        remove_inputs(&s.cfg.results_dir, &id);
                    }
                    if !kept && done {
                        let _ = std::fs::remove_file(s.cfg.results_dir.join(format!("{id}.wav")));
                    }
                    if kept {
                        let secs = (now_ms() - it.rec.created_ms).max(0) as f64 / 1000.0;
                        s.metrics.observe_latency(secs);
                    }
                }
                None => {
                    let _ = s.store.release(worker);
                }
            }
        }
    }

    /// Bring the loaded LoRAs to `want` (file names in the LoRA folder, strengths).
    fn set_loras(&mut self, spec: &JobSpec) -> Result<(), String> {
        let dir = self.shared.cfg.lora_dir.clone();
        let mut want = Vec::with_capacity(spec.loras.len());
        for l in &spec.loras {
            let p = crate::request::allow_listed("loras", dir.as_deref(), &l.name)
                .map_err(|e| e.message)?;
            want.push((p, l.strength));
        }
        if want == self.loras {
            return Ok(());
        }
        let mut pipe = self
            .pipe
            .write()
            .map_err(|_| "the model lock is poisoned")?;
        let same_files =
            want.len() == self.loras.len() && want.iter().zip(&self.loras).all(|(a, b)| a.0 == b.0);
        if same_files {
            for (i, (w, have)) in want.iter().zip(&self.loras).enumerate() {
                if w.1 != have.1 {
                    pipe.set_lora_strength(i, w.1).map_err(err_text)?;
                }
            }
        } else {
            while !pipe.loras().is_empty() {
                let last = pipe.loras().len() - 1;
                pipe.remove_lora(last).map_err(err_text)?;
            }
            self.loras.clear();
            for (p, st) in &want {
                pipe.add_lora(p, *st).map_err(err_text)?;
            }
        }
        self.loras = want;
        Ok(())
    }

    fn steering(&mut self, spec: &JobSpec) -> Result<Option<SteeringHook>, String> {
        if spec.steer.is_empty() {
            return Ok(None);
        }
        if self.identity.is_none() {
            let pipe = self.pipe.read().map_err(|_| "the model lock is poisoned")?;
            let f = pipe.files();
            self.identity =
                Some(ModelIdentity::from_model_files(&f.config, &f.weights).map_err(err_text)?);
        }
        let cfg = &self.shared.cfg;
        let mut specs = Vec::with_capacity(spec.steer.len());
        for (i, st) in spec.steer.iter().enumerate() {
            let path = match &st.source {
                SteerSource::Name(n) => crate::request::allow_listed(
                    &format!("steer[{i}]"),
                    cfg.steer_dir.as_deref(),
                    n,
                )
                .map_err(|e| e.message)?,
                SteerSource::Upload(f) => cfg.results_dir.join(f),
            };
            specs.push(SteerSpec {
                path,
                site: st.site.as_deref().map(|s| match s {
                    "latent" => SiteKind::Latent,
                    "text" => SiteKind::Text,
                    _ => SiteKind::Residual,
                }),
                block: st.block,
                strength: st.strength,
                steps: st.steps.map(|[lo, hi]| StepSpan { lo, hi }),
                op: st.mode.as_deref().map(|m| {
                    if m == "project" {
                        SteerOp::Project
                    } else {
                        SteerOp::Add
                    }
                }),
                scale: None,
            });
        }
        let id = self.identity.as_ref().ok_or("no model identity")?;
        hook_from_specs(&specs, id, false)
            .map(Some)
            .map_err(|e| format!("steer: {e}"))
    }

    fn requests(&self, items: &[Item]) -> Result<Vec<GenerateRequest>, String> {
        let dir = &self.shared.cfg.results_dir;
        let read = |f: &str| aria::audio::read_audio(dir.join(f)).map_err(err_text);
        items
            .iter()
            .map(|it| {
                let sp = &it.spec;
                let mut r = GenerateRequest::new(sp.prompt.clone(), sp.seconds);
                r.negative_prompt = sp.negative_prompt.clone();
                r.steps = sp.steps;
                r.cfg_scale = sp.cfg;
                r.sampler = Some(SamplerKind::parse(&sp.sampler).map_err(err_text)?);
                if let Some(i) = &sp.init {
                    r.init_audio = Some(InitAudio {
                        clip: read(&i.file)?,
                        noise_level: i.noise_level,
                    });
                }
                if let Some(i) = &sp.inpaint {
                    r.inpaint = Some(Inpaint {
                        clip: read(&i.file)?,
                        ranges: i.ranges.clone(),
                    });
                }
                Ok(r)
            })
            .collect()
    }

    fn run_pipeline(&mut self, items: &mut [Item]) -> Result<String, String> {
        let s = self.shared.clone();
        self.set_loras(&items[0].spec)?;
        let hook = self.steering(&items[0].spec)?;
        let reqs = self.requests(items)?;
        // Every draw per item, from that item's seed: an item's audio is that of its request alone.
        let seeds: Vec<u64> = items.iter().map(|i| i.spec.seed).collect();
        let mut noise = BatchNoise::seeded(SeedGenerator::Torch, &seeds);
        let cancel = CancelToken::new();
        let pipe = self.pipe.read().map_err(|_| "the model lock is poisoned")?;
        let ch = s.model.channels;
        let mut sink_err = None;
        let ids: Vec<(String, Arc<LiveJob>, usize)> = items
            .iter()
            .map(|i| (i.rec.id.clone(), i.live.clone(), i.spec.steps))
            .collect();
        let result = {
            let items_ref = &mut *items;
            let mut sink = |c: &AudioChunk<'_>| -> aria::Result<()> {
                let a = c.audio.contiguous()?;
                let d = a.as_slice::<f32>()?;
                let n = a.shape()[2];
                let b = a.shape()[0];
                for (bi, it) in items_ref.iter_mut().enumerate().take(b) {
                    // A member cancelled mid-batch: its row is computed with the others (a
                    // batch keeps its rows to the end) but its audio goes nowhere.
                    if it.live.cancelled() {
                        continue;
                    }
                    let end = (c.start + n).min(it.frames);
                    if end <= c.start.max(it.written) {
                        continue;
                    }
                    let from = it.written.max(c.start);
                    let mut bytes = Vec::with_capacity((end - from) * ch * 2);
                    for k in from..end {
                        for chn in 0..ch {
                            let v = d[(bi * ch + chn) * n + (k - c.start)];
                            bytes.extend_from_slice(&pcm16(v).to_le_bytes());
                        }
                    }
                    if let Some(f) = it.file.as_mut() {
                        if let Err(e) = f.write_all(&bytes) {
                            sink_err = Some(format!("writing {}: {e}", it.part.display()));
                            return Err(aria::Error::Cancelled);
                        }
                    }
                    it.live.push(&bytes);
                    it.written = end;
                }
                Ok(())
            };
            let mut last_write = Instant::now()
                .checked_sub(Duration::from_secs(1))
                .unwrap_or_else(Instant::now);
            let mut reported = vec![false; ids.len()];
            let mut progress = |e: &Event| {
                let (step, steps, p) = match *e {
                    Event::TextDone => (0, 0, 0.05),
                    Event::AudioEncoded => (0, 0, 0.08),
                    Event::Step { index, total, .. } => (
                        index + 1,
                        total,
                        0.1 + 0.75 * (index + 1) as f32 / total.max(1) as f32,
                    ),
                    Event::Decoding => (usize::MAX, 0, 0.85),
                    Event::DecodeProgress { done, total } => (
                        usize::MAX,
                        0,
                        0.85 + 0.14 * done as f32 / total.max(1) as f32,
                    ),
                    Event::Decoded => (usize::MAX, 0, 0.99),
                };
                let is_step = matches!(e, Event::Step { .. });
                if let (true, Some(d)) = (is_step, s.cfg.throttle) {
                    std::thread::sleep(d);
                }
                let now = Instant::now();
                if is_step || now.duration_since(last_write) > Duration::from_millis(200) {
                    last_write = now;
                    for (id, live, job_steps) in &ids {
                        if live.cancelled() {
                            continue;
                        }
                        let total = if steps > 0 { steps } else { *job_steps };
                        let st = if step == usize::MAX { total } else { step };
                        if let Ok(true) =
                            s.store
                                .progress(id, &s.cfg.worker_id, st as u32, total as u32, p)
                        {
                            live.cancel.store(true, Ordering::Relaxed);
                        }
                    }
                }
                // A cancelled member is reported at once; the rest of the batch runs on.
                for (k, (id, live, _)) in ids.iter().enumerate() {
                    if live.cancelled() && !reported[k] {
                        reported[k] = true;
                        let _ = s.store.finish(id, &s.cfg.worker_id, &Outcome::Cancelled);
                        live.end(LiveEnd::Aborted);
                        // Its audio is asked of its record from now on (409: cancelled).
                        s.live.remove(id);
                    }
                }
                if ids.iter().all(|(_, l, _)| l.cancelled()) || s.abort.is_cancelled() {
                    cancel.cancel();
                }
            };
            let opts = RunOptions {
                hook: hook
                    .as_ref()
                    .map(|h| h as &dyn aria_core::hooks::ActivationHook),
                cancel: Some(cancel.clone()),
                progress: Some(&mut progress),
                audio: AudioOutput::Stream(&mut sink),
            };
            pipe.run_batch(&reqs, &mut noise, opts)
        };
        match result {
            Ok(out) => Ok(timings_json(&out.timings, items.len())),
            Err(e) => Err(sink_err.unwrap_or_else(|| match e {
                aria::Error::Cancelled => "cancelled".into(),
                e => e.to_string(),
            })),
        }
    }

    fn run_cached(&mut self, items: &mut [Item]) -> Result<String, String> {
        self.set_loras(&items[0].spec)?;
        let it = &mut items[0];
        let sp = &it.spec;
        let pipe = self.pipe.read().map_err(|_| "the model lock is poisoned")?;
        let cache = self.cache.as_mut().ok_or("no warm-start cache")?;
        if let Some(r) = &self.refiner {
            // Entries the refinement worker replaced since the last request.
            for id in r.take_refined() {
                cache
                    .reload(id)
                    .map_err(|e| format!("warm start: reloading refined entry {id}: {e}"))?;
            }
            self.shared.metrics.cache.observe_refiner(&r.stats());
        }
        let mut template = GenerateRequest::new("", sp.seconds);
        template.steps = sp.steps;
        template.cfg_scale = sp.cfg;
        template.sampler = Some(SamplerKind::parse(&sp.sampler).map_err(err_text)?);
        let gen =
            aria::cache::CacheGenerator::with_template(&pipe, template, aria::SeedGenerator::Torch);
        let req = aria_cache::Request {
            prompt: sp.prompt.clone(),
            negative_prompt: sp.negative_prompt.clone(),
            seconds: sp.seconds,
            steps: sp.steps,
            seed: sp.seed,
        };
        let _ = self.shared.store.progress(
            &it.rec.id,
            &self.shared.cfg.worker_id,
            0,
            sp.steps as u32,
            0.05,
        );
        let out = cache
            .generate(&gen, &req)
            .map_err(|e| format!("warm start: {e}"))?;
        self.shared.metrics.cache.observe(&out);
        let a = &out.generation.audio;
        let frames = a.samples.len() / a.channels.max(1);
        let n = frames.min(it.frames);
        let mut bytes = Vec::with_capacity(n * a.channels * 2);
        for k in 0..n {
            for c in 0..a.channels {
                bytes.extend_from_slice(&pcm16(a.samples[c * frames + k]).to_le_bytes());
            }
        }
        // Pad with silence when the clip is shorter than the header says.
        bytes.resize((it.frames * a.channels) * 2, 0);
        if let Some(f) = it.file.as_mut() {
            f.write_all(&bytes).map_err(err_text)?;
        }
        it.live.push(&bytes);
        it.written = it.frames;
        let steps: Duration = out.generation.step_times.iter().sum();
        Ok(serde_json::json!({
            "steps_s": steps.as_secs_f64(),
            "total_s": out.generation.total.as_secs_f64(),
            "warm_start": {
                "reference": out.reference,
                "start_step": out.start_step,
                "steps_run": out.steps_run,
                "start": match out.alignment {
                    Some(aria_cache::warm::Alignment::StoredLatents) => "stored_latents",
                    Some(aria_cache::warm::Alignment::FittedLatents { .. }) => "fitted_latents",
                    Some(aria_cache::warm::Alignment::Stretched { .. }) => "stretched_audio",
                    None => "cold",
                },
                "segment": out.segment.map(|s| serde_json::json!({
                    "start_s": s.start,
                    "seconds": s.seconds,
                })),
                "evicted": out.evicted.len(),
            },
            "batch": 1,
        })
        .to_string())
    }
}

fn timings_json(t: &aria::Timings, batch: usize) -> String {
    let steps: Duration = t.steps.iter().sum();
    serde_json::json!({
        "text_s": t.text.as_secs_f64(),
        "encode_s": t.encode.as_secs_f64(),
        "steps_s": steps.as_secs_f64(),
        "decode_s": t.decode.as_secs_f64(),
        "total_s": t.total.as_secs_f64(),
        "batch": batch,
    })
    .to_string()
}

fn open_cache(
    spec: &str,
    cfg: &crate::ServeConfig,
    pipe: &Arc<RwLock<Pipeline>>,
) -> crate::Result<aria_cache::Cache> {
    use aria_cache::embed::{ClapEmbedder, MiniLm, T5GemmaMeanPool};
    let cerr = |e: aria_cache::CacheError| crate::ServeError::Config(format!("cache {spec}: {e}"));
    let store = aria_cache::store::open(spec).map_err(cerr)?;
    // CLAP (entries indexed by their audio) when ARIA_CLAP names a checkpoint, else MiniLM
    // when fetched, else the model's own T5Gemma mean-pool.
    let clap = ClapEmbedder::from_env().map_err(cerr)?;
    let emb: Arc<dyn aria_cache::Embedder> = match (clap, MiniLm::locate()) {
        (Some(c), _) => Arc::new(c),
        (None, Some(_)) => Arc::new(MiniLm::load_default().map_err(cerr)?),
        (None, None) => {
            let dim = pipe
                .read()
                .map_err(|_| crate::ServeError::Config("the model lock is poisoned".into()))?
                .text()
                .cond_dim();
            let p = pipe.clone();
            Arc::new(T5GemmaMeanPool::new(dim, move |t: &str| {
                let pipe = p
                    .read()
                    .map_err(|_| aria_cache::CacheError::Generator("model lock poisoned".into()))?;
                let (states, mask) = pipe
                    .text()
                    .encode_prompts(&[t])
                    .map_err(|e| aria_cache::CacheError::Generator(e.to_string()))?;
                Ok((states, mask.to_dtype(aria_core::DType::F32)?))
            }))
        }
    };
    let cfg = aria_cache::CacheConfig {
        skip: cfg.cache_skip,
        manager: Some(aria_cache::manager::ManagerConfig {
            capacity: cfg.cache_capacity,
            ..Default::default()
        }),
        ..Default::default()
    };
    aria_cache::Cache::open(store, emb, cfg).map_err(cerr)
}

/// The worker's model as a [`aria_cache::Generator`] the refinement thread can own: each call
/// takes the model's read lock and runs as [`aria::cache::CacheGenerator`] with the reference
/// defaults.
struct SharedGenerator(Arc<RwLock<Pipeline>>);

impl SharedGenerator {
    fn with<T>(&self, f: impl FnOnce(&Pipeline) -> aria_cache::Result<T>) -> aria_cache::Result<T> {
        let p = self
            .0
            .read()
            .map_err(|_| aria_cache::CacheError::Generator("the model lock is poisoned".into()))?;
        f(&p)
    }
}

impl aria_cache::Generator for SharedGenerator {
    fn id(&self) -> String {
        self.with(|p| Ok(aria_cache::Generator::id(p)))
            .unwrap_or_default()
    }
    fn sample_rate(&self) -> u32 {
        self.with(|p| Ok(p.sample_rate())).unwrap_or(44_100)
    }
    fn latent_shape(&self, req: &aria_cache::Request) -> aria_cache::Result<Vec<usize>> {
        self.with(|p| p.latent_shape(req))
    }
    fn sigmas(&self, req: &aria_cache::Request) -> aria_cache::Result<Vec<f32>> {
        self.with(|p| p.sigmas(req))
    }
    fn encode(
        &self,
        audio: &aria_cache::Audio,
        req: &aria_cache::Request,
    ) -> aria_cache::Result<aria_core::Tensor> {
        self.with(|p| p.encode(audio, req))
    }
    fn generate(
        &self,
        req: &aria_cache::Request,
        warm: Option<&aria_cache::WarmLatents>,
    ) -> aria_cache::Result<aria_cache::Generation> {
        self.with(|p| aria_cache::Generator::generate(p, req, warm))
    }
    fn decode(
        &self,
        latents: &aria_core::Tensor,
        req: &aria_cache::Request,
    ) -> aria_cache::Result<aria_cache::Audio> {
        self.with(|p| p.decode(latents, req))
    }
    fn latent_frames(&self, seconds: f64) -> Option<usize> {
        self.with(|p| Ok(p.latent_frames(seconds))).ok().flatten()
    }
}

/// Starts the cache's refinement worker on its own connection to `spec`, scoring with the
/// cache's embedder.
fn spawn_refiner(
    spec: &str,
    cfg: &aria_cache::manager::RefineConfig,
    cache: &aria_cache::Cache,
    pipe: &Arc<RwLock<Pipeline>>,
) -> crate::Result<aria_cache::manager::Refiner> {
    let cerr = |e: aria_cache::CacheError| {
        crate::ServeError::Config(format!("cache {spec}: refinement worker: {e}"))
    };
    let store = aria_cache::store::open(spec).map_err(cerr)?;
    aria_cache::manager::Refiner::spawn(
        store,
        Arc::new(SharedGenerator(pipe.clone())),
        cache.embedder_arc(),
        cfg.clone(),
    )
    .map_err(cerr)
}

/// Renews the leases of a running batch and picks up cancels from the store.
struct Heartbeat {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start(s: Arc<Shared>, ids: Vec<String>) -> Heartbeat {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("aria-serve-lease".into())
            .spawn(move || {
                let every = (s.cfg.lease / 3).max(Duration::from_millis(50));
                let mut last = Instant::now();
                while !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50).min(every));
                    if last.elapsed() < every {
                        continue;
                    }
                    last = Instant::now();
                    if let Ok(c) = s.store.heartbeat(&s.cfg.worker_id, &ids, s.cfg.lease) {
                        for id in c {
                            if let Some(l) = s.live.get(&id) {
                                l.cancel.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                }
            })
            .ok();
        Heartbeat { stop, thread }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Remove a job's uploaded inputs (`inputs/{id}.…` in the results directory).
pub fn remove_inputs(results: &Path, id: &str) {
    crate::jobs::retention::remove_uploads(results, id);
}
