//! The C API of aria: load a Stable Audio 3 model folder and generate audio into caller memory
//! or through a callback per decoded chunk, with progress and cancellation, LoRA and steering,
//! and batches. The header is `include/aria.h` (generated from this file by cbindgen; a test
//! keeps it current).
//!
//! ```c
//! #include "aria.h"
//! AriaModel *m = NULL;
//! if (aria_model_load("path/to/small-music", "{\"precision\": \"fast\"}", &m) != ARIA_OK) {
//!     fprintf(stderr, "%s\n", aria_last_error());
//!     return 1;
//! }
//! size_t frames = 0;
//! aria_model_frames(m, 10.0, &frames);
//! float *pcm = malloc(frames * aria_model_channels(m) * sizeof(float));
//! size_t written = 0;
//! int rc = aria_generate_into(m, "{\"prompt\": \"warm ambient pad\", \"seconds\": 10}",
//!                             pcm, frames * aria_model_channels(m), &written, NULL, NULL);
//! aria_model_free(m);
//! ```
//!
//! **Requests and options are JSON** (UTF-8, NUL-terminated), so the ABI stays the same as
//! fields are added. Options of [`aria_model_load`]: `precision` (`f32`, `bf16-dot`, `fast`,
//! `q8`, …), `w8a8`, `threads`, `device` (`cpu`, `wgpu`, `cuda` where built in), `text_precision`
//! (`f32`, `bf16`, `bf16-dot`). A request: `prompt`, `negative_prompt`, `seconds`, `steps`, `cfg`,
//! `seed` (default 0), `loras` (`[{"path": …, "strength": …}]`, applied before the run and kept
//! until another request names others), `steer` (the CLI's `FILE:block=10:strength=0.2`
//! strings), and `batch` (a list of `{prompt, negative_prompt, seconds}` run together, sharing
//! the rest).
//!
//! **Audio** is interleaved f32 at [`aria_model_sample_rate`], [`aria_model_channels`] per
//! frame. [`aria_generate_into`] writes the items of a batch one after the other.
//!
//! **Errors**: every function returns an [`AriaStatus`]; [`aria_last_error`] gives the message
//! of the last failure on the calling thread. No panic crosses the boundary: one becomes
//! [`AriaStatus::Panic`] with its message.
//!
//! **Threads**: a model may be used from any thread; calls on one model run one at a time (a
//! second waits for the first). Different models are independent. Callbacks run on the thread
//! that called [`aria_generate`]. The last error is per thread.
//!
//! **Memory**: [`aria_model_free`] frees a model (`NULL` is allowed); strings returned by this
//! library are owned by it and stay valid until the next call on the same thread.
//!
//! `unsafe` here is the FFI boundary: each block says which pointer contract the C caller
//! upholds.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioChunk, AudioOutput, CancelToken, DeviceKind, Event, RunOptions};
use aria::quant::WeightPrecision;
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use serde::Deserialize;

/// What a call returned.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AriaStatus {
    /// Success.
    Ok = 0,
    /// A bad argument: a null pointer, invalid UTF-8 or JSON, an unknown option, a request the
    /// model cannot run (the message says which).
    Invalid = 1,
    /// The model or the generation failed (a missing file, a corrupt checkpoint, …).
    Failed = 2,
    /// The progress callback asked to stop.
    Cancelled = 3,
    /// The caller's buffer is too small; `written` holds the samples needed.
    TooSmall = 4,
    /// A panic inside the library (a bug): the message says where.
    Panic = 5,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// The message of the last failure on this thread (an empty string if none). Owned by the
/// library; valid until the next call on this thread.
#[no_mangle]
pub extern "C" fn aria_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The library's version (`MAJOR.MINOR.PATCH`), a static string.
#[no_mangle]
pub extern "C" fn aria_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A loaded model (opaque).
pub struct AriaModel {
    pipe: Mutex<Pipeline>,
    sample_rate: u32,
    channels: u32,
}

/// Progress: `done` of `total` units of work (text, steps, decode windows); return non-zero
/// to cancel the generation.
pub type AriaProgress = Option<extern "C" fn(user: *mut c_void, done: u32, total: u32) -> i32>;

/// A decoded chunk of batch item `item`: `frames` interleaved frames of `channels` samples,
/// starting at frame `start` of `total`. Return non-zero to stop.
pub type AriaAudio = Option<
    extern "C" fn(
        user: *mut c_void,
        item: u32,
        samples: *const f32,
        frames: usize,
        channels: u32,
        start: usize,
        total: usize,
    ) -> i32,
>;

/// Run `f`, turning an error into its status and message and a panic into
/// [`AriaStatus::Panic`].
fn guard(f: impl FnOnce() -> Result<(), (AriaStatus, String)>) -> AriaStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_error("");
            AriaStatus::Ok
        }
        Ok(Err((st, msg))) => {
            set_error(&msg);
            st
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(&format!("panic inside aria: {msg}"));
            AriaStatus::Panic
        }
    }
}

fn invalid(msg: impl Into<String>) -> (AriaStatus, String) {
    (AriaStatus::Invalid, msg.into())
}

fn failed(e: impl std::fmt::Display) -> (AriaStatus, String) {
    (AriaStatus::Failed, e.to_string())
}

/// A C string argument as `&str` (`what` names it in errors).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the call.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, (AriaStatus, String)> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{what} is not UTF-8")))
}

/// Options of [`aria_model_load`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadJson {
    #[serde(default)]
    precision: Option<String>,
    #[serde(default)]
    w8a8: bool,
    #[serde(default)]
    threads: Option<usize>,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    text_precision: Option<String>,
}

fn load_options(json: Option<&str>) -> Result<LoadOptions, (AriaStatus, String)> {
    let o: LoadJson = match json.filter(|s| !s.trim().is_empty()) {
        Some(s) => serde_json::from_str(s).map_err(|e| invalid(format!("options: {e}")))?,
        None => LoadJson::default(),
    };
    let precision = o
        .precision
        .as_deref()
        .map(WeightPrecision::parse)
        .transpose()
        .map_err(|e| invalid(format!("options.precision: {e}")))?;
    let device = match o.device.as_deref() {
        None | Some("cpu") => DeviceKind::Cpu,
        Some("wgpu") => DeviceKind::Wgpu,
        Some("cuda") => DeviceKind::Cuda,
        Some(d) => {
            return Err(invalid(format!(
                "options.device: `{d}` is not cpu, wgpu or cuda"
            )))
        }
    };
    use aria::pipeline::Precision as P;
    let text_precision = match o.text_precision.as_deref() {
        None => None,
        Some("f32") => Some(P::F32),
        Some("bf16") => Some(P::Bf16),
        Some("bf16-dot" | "bf16-amx") => Some(P::Bf16Dot),
        Some(t) => {
            return Err(invalid(format!(
                "options.text_precision: `{t}` is not f32, bf16 or bf16-dot"
            )))
        }
    };
    if o.threads == Some(0) {
        return Err(invalid("options.threads: 0 (at least 1)"));
    }
    Ok(LoadOptions {
        precision,
        w8a8: o.w8a8,
        threads: o.threads,
        device,
        text_precision,
        ..Default::default()
    })
}

/// Load the model folder (or known model name) `model` with `options_json` (may be `NULL` or
/// empty: the defaults) into `*out`. On failure `*out` is left `NULL`.
///
/// # Safety
/// `model` and `options_json` (when not null) are NUL-terminated strings; `out` points to
/// writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn aria_model_load(
    model: *const c_char,
    options_json: *const c_char,
    out: *mut *mut AriaModel,
) -> AriaStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is NULL"));
        }
        // SAFETY: `out` is non-null and writable by the caller's contract.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: NUL-terminated strings by the caller's contract.
        let name = unsafe { text(model, "model") }?;
        let opts = if options_json.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { text(options_json, "options_json") }?)
        };
        let opts = load_options(opts)?;
        let files = resolve_model(name, &SearchPaths::from_env()).map_err(failed)?;
        let pipe = Pipeline::load(&files, &opts).map_err(failed)?;
        let m = Box::new(AriaModel {
            sample_rate: pipe.sample_rate(),
            channels: pipe.autoencoder().config().audio_channels as u32,
            pipe: Mutex::new(pipe),
        });
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(m) };
        Ok(())
    })
}

/// Free a model from [`aria_model_load`] (`NULL` is allowed).
///
/// # Safety
/// `m` is null or a model from [`aria_model_load`] not freed yet, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn aria_model_free(m: *mut AriaModel) {
    if !m.is_null() {
        // SAFETY: `m` came from `Box::into_raw` in `aria_model_load` and is freed once.
        drop(unsafe { Box::from_raw(m) });
    }
}

/// The model's sample rate in Hz (0 for `NULL`).
///
/// # Safety
/// `m` is null or a live model.
#[no_mangle]
pub unsafe extern "C" fn aria_model_sample_rate(m: *const AriaModel) -> u32 {
    // SAFETY: null or a live model by the caller's contract.
    unsafe { m.as_ref() }.map_or(0, |m| m.sample_rate)
}

/// Audio channels per frame (0 for `NULL`).
///
/// # Safety
/// `m` is null or a live model.
#[no_mangle]
pub unsafe extern "C" fn aria_model_channels(m: *const AriaModel) -> u32 {
    // SAFETY: null or a live model by the caller's contract.
    unsafe { m.as_ref() }.map_or(0, |m| m.channels)
}

/// Frames of a clip of `seconds` (what one batch item of that duration writes).
///
/// # Safety
/// `m` is a live model; `frames` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn aria_model_frames(
    m: *const AriaModel,
    seconds: f64,
    frames: *mut usize,
) -> AriaStatus {
    guard(|| {
        // SAFETY: null or a live model by the caller's contract.
        let m = unsafe { m.as_ref() }.ok_or_else(|| invalid("model is NULL"))?;
        if frames.is_null() {
            return Err(invalid("frames is NULL"));
        }
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(invalid(format!(
                "seconds: {seconds} is not a positive duration"
            )));
        }
        let n = (seconds * f64::from(m.sample_rate)).round() as usize;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *frames = n };
        Ok(())
    })
}

/// One item of a batch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemJson {
    prompt: String,
    #[serde(default)]
    negative_prompt: Option<String>,
    #[serde(default)]
    seconds: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoraJson {
    path: PathBuf,
    #[serde(default = "one")]
    strength: f32,
}

fn one() -> f32 {
    1.0
}

/// A request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestJson {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    negative_prompt: Option<String>,
    #[serde(default)]
    seconds: Option<f64>,
    #[serde(default)]
    steps: Option<usize>,
    #[serde(default)]
    cfg: Option<f32>,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    loras: Vec<LoraJson>,
    #[serde(default)]
    steer: Vec<String>,
    #[serde(default)]
    batch: Vec<ItemJson>,
}

impl RequestJson {
    fn parse(json: &str) -> Result<RequestJson, Failure> {
        serde_json::from_str(json).map_err(|e| invalid(format!("request: {e}")))
    }

    /// The batch items, each with its duration resolved (its own, the request's, else 10 s)
    /// and checked.
    fn items(&self) -> Result<Vec<(ItemJson, f64)>, Failure> {
        let items = match (&self.prompt, self.batch.is_empty()) {
            (Some(p), true) => vec![ItemJson {
                prompt: p.clone(),
                negative_prompt: self.negative_prompt.clone(),
                seconds: self.seconds,
            }],
            (None, false) => self.batch.clone(),
            (Some(_), false) => return Err(invalid("request: give `prompt` or `batch`, not both")),
            (None, true) => return Err(invalid("request: `prompt` (or `batch`) is missing")),
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, it)| {
                let seconds = it.seconds.or(self.seconds).unwrap_or(10.0);
                if !(seconds.is_finite() && seconds > 0.0) {
                    return Err(invalid(format!(
                        "request item {i}: seconds {seconds} is not positive"
                    )));
                }
                Ok((it, seconds))
            })
            .collect()
    }
}

/// The requests of `r` for `pipe`, with the LoRA stack set as they ask.
fn requests(pipe: &mut Pipeline, r: &RequestJson) -> Result<Vec<GenerateRequest>, Failure> {
    let defaults = pipe.sampling_defaults();
    let items = r.items()?;
    let mut out = Vec::with_capacity(items.len());
    for (it, seconds) in items {
        let mut q = GenerateRequest::new(it.prompt, seconds);
        q.steps = r.steps.unwrap_or(defaults.steps);
        q.cfg_scale = r.cfg.unwrap_or(defaults.cfg_scale);
        q.negative_prompt = it.negative_prompt.or_else(|| r.negative_prompt.clone());
        out.push(q);
    }
    // The LoRA stack: as asked, reusing what is already applied.
    let want: Vec<(PathBuf, f32)> = r
        .loras
        .iter()
        .map(|l| (l.path.clone(), l.strength))
        .collect();
    let have: Vec<(PathBuf, f32)> = pipe
        .loras()
        .iter()
        .map(|(f, s)| (f.path().to_path_buf(), *s))
        .collect();
    if want != have {
        while !pipe.loras().is_empty() {
            let last = pipe.loras().len() - 1;
            pipe.remove_lora(last).map_err(failed)?;
        }
        for (p, s) in &want {
            pipe.add_lora(p, *s)
                .map_err(|e| invalid(format!("loras: {e}")))?;
        }
    }
    Ok(out)
}

/// The steering hook of `specs` (`None` without any).
fn steering(
    pipe: &Pipeline,
    specs: &[String],
) -> Result<Option<aria_steer::SteeringHook>, (AriaStatus, String)> {
    if specs.is_empty() {
        return Ok(None);
    }
    let parsed = specs
        .iter()
        .map(|s| aria_steer::SteerSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("steer: {e}")))?;
    let f = pipe.files();
    let id = aria_steer::ModelIdentity::from_model_files(&f.config, &f.weights).map_err(failed)?;
    aria_steer::spec::hook_from_specs(&parsed, &id, false)
        .map(Some)
        .map_err(|e| invalid(format!("steer: {e}")))
}

/// The work units of a run (text, each step, each decode window) for the progress callback.
struct Progress {
    f: AriaProgress,
    user: *mut c_void,
    cancel: CancelToken,
    steps: u32,
}

impl Progress {
    fn event(&mut self, e: &Event) {
        let Some(f) = self.f else { return };
        // Text 1 unit, each step 1, decoding 1 (fractions of it as windows finish).
        let total = self.steps + 2;
        let done = match e {
            Event::TextDone | Event::AudioEncoded => 1,
            Event::Step { index, .. } => 2 + *index as u32,
            Event::Decoding => self.steps + 1,
            Event::DecodeProgress { .. } => self.steps + 1,
            Event::Decoded => total,
        };
        if f(self.user, done.min(total), total) != 0 {
            self.cancel.cancel();
        }
    }
}

/// An error with its status.
type Failure = (AriaStatus, String);

/// Where [`run`] hands each chunk: item, interleaved samples, frames, start frame, total frames.
type Sink<'a> = dyn FnMut(u32, &[f32], usize, usize, usize) -> Result<(), Failure> + 'a;

/// Run the requests with the callbacks; `sink` gets each chunk's item and interleaved frames.
fn run(
    m: &AriaModel,
    r: &RequestJson,
    progress: AriaProgress,
    user: *mut c_void,
    sink: &mut Sink<'_>,
) -> Result<(), (AriaStatus, String)> {
    let mut pipe = m
        .pipe
        .lock()
        .map_err(|_| failed("the model is unusable after a panic in an earlier call"))?;
    let reqs = requests(&mut pipe, r)?;
    let hook = steering(&pipe, &r.steer)?;
    let cancel = CancelToken::new();
    let mut prog = Progress {
        f: progress,
        user,
        cancel: cancel.clone(),
        steps: reqs.first().map_or(0, |q| q.steps as u32),
    };
    let mut on_event = |e: &Event| prog.event(e);
    let ch = m.channels as usize;
    let mut stop: Option<(AriaStatus, String)> = None;
    let mut on_chunk = |c: &AudioChunk<'_>| -> aria::Result<()> {
        let s = c.audio.shape();
        let (b, n) = (s[0], s[2]);
        let v = c.audio.to_vec_f32()?;
        let mut inter = vec![0f32; n * ch];
        for item in 0..b {
            for (f, frame) in inter.chunks_exact_mut(ch).enumerate() {
                for (k, o) in frame.iter_mut().enumerate() {
                    *o = v[(item * ch + k) * n + f];
                }
            }
            if let Err(e) = sink(item as u32, &inter, n, c.start, c.total) {
                stop = Some(e);
                return Err(aria::Error::Cancelled);
            }
        }
        Ok(())
    };
    let opts = RunOptions {
        hook: hook
            .as_ref()
            .map(|h| h as &dyn aria_core::hooks::ActivationHook),
        cancel: Some(cancel.clone()),
        progress: Some(&mut on_event),
        audio: AudioOutput::Stream(&mut on_chunk),
    };
    let res = pipe.run_batch(&reqs, &mut TorchNoise::new(r.seed), opts);
    if let Some(e) = stop {
        return Err(e);
    }
    match res {
        Ok(_) => Ok(()),
        Err(_) if cancel.is_cancelled() => Err((AriaStatus::Cancelled, "cancelled".into())),
        Err(e @ aria::Error::Input(_)) => Err(invalid(e.to_string())),
        Err(e) => Err(failed(e)),
    }
}

/// Generate as `request_json` asks, handing each decoded chunk to `audio` (may be `NULL`: the
/// audio is computed and dropped) and progress to `progress` (may be `NULL`); `user` is passed
/// to both.
///
/// # Safety
/// `m` is a live model; `request_json` a NUL-terminated string; the callbacks, when not null,
/// are callable with `user` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn aria_generate(
    m: *const AriaModel,
    request_json: *const c_char,
    progress: AriaProgress,
    audio: AriaAudio,
    user: *mut c_void,
) -> AriaStatus {
    guard(|| {
        // SAFETY: null or a live model by the caller's contract.
        let m = unsafe { m.as_ref() }.ok_or_else(|| invalid("model is NULL"))?;
        // SAFETY: NUL-terminated by the caller's contract.
        let json = unsafe { text(request_json, "request_json") }?;
        let ch = m.channels;
        let mut sink = |item: u32, s: &[f32], frames: usize, start: usize, total: usize| {
            if let Some(f) = audio {
                if f(user, item, s.as_ptr(), frames, ch, start, total) != 0 {
                    return Err((
                        AriaStatus::Cancelled,
                        "the audio callback asked to stop".into(),
                    ));
                }
            }
            Ok(())
        };
        run(m, &RequestJson::parse(json)?, progress, user, &mut sink)
    })
}

/// Generate into `out` (`capacity` floats): the interleaved frames of each batch item, one item
/// after the other. `*written` receives the floats written, or, with [`AriaStatus::TooSmall`],
/// the floats needed (nothing is generated then).
///
/// # Safety
/// `m` is a live model; `request_json` a NUL-terminated string; `out` points to `capacity`
/// writable floats; `written` to writable storage; `progress`, when not null, is callable with
/// `user` for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn aria_generate_into(
    m: *const AriaModel,
    request_json: *const c_char,
    out: *mut f32,
    capacity: usize,
    written: *mut usize,
    progress: AriaProgress,
    user: *mut c_void,
) -> AriaStatus {
    guard(|| {
        // SAFETY: null or a live model by the caller's contract.
        let m = unsafe { m.as_ref() }.ok_or_else(|| invalid("model is NULL"))?;
        // SAFETY: NUL-terminated by the caller's contract.
        let json = unsafe { text(request_json, "request_json") }?;
        if written.is_null() || (out.is_null() && capacity > 0) {
            return Err(invalid("out or written is NULL"));
        }
        // The size asked: every item's frames × channels.
        let r = RequestJson::parse(json)?;
        let ch = m.channels as usize;
        let per: Vec<usize> = r
            .items()?
            .iter()
            .map(|(_, s)| (s * f64::from(m.sample_rate)).round() as usize * ch)
            .collect();
        let need: usize = per.iter().sum();
        if need > capacity {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { *written = need };
            return Err((
                AriaStatus::TooSmall,
                format!("the buffer holds {capacity} floats, the request needs {need}"),
            ));
        }
        let offsets: Vec<usize> = per
            .iter()
            .scan(0, |acc, n| {
                let o = *acc;
                *acc += n;
                Some(o)
            })
            .collect();
        // SAFETY: `out` addresses `capacity` writable floats by the caller's contract, and
        // `need <= capacity`; nothing else writes it during the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(out, capacity) };
        let mut count = 0usize;
        let mut sink = |item: u32, s: &[f32], _frames: usize, start: usize, _total: usize| {
            let i = item as usize;
            let (base, len) = (
                offsets.get(i).copied().unwrap_or(0),
                per.get(i).copied().unwrap_or(0),
            );
            let at = start * ch;
            let n = s.len().min(len.saturating_sub(at));
            buf[base + at..base + at + n].copy_from_slice(&s[..n]);
            count += n;
            Ok(())
        };
        let res = run(m, &r, progress, user, &mut sink);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *written = count };
        res
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        assert!(load_options(None).is_ok());
        assert!(load_options(Some("")).is_ok());
        let o = load_options(Some(r#"{"precision": "fast", "threads": 2}"#)).expect("ok");
        assert_eq!(o.precision, Some(WeightPrecision::Fast));
        assert_eq!(o.threads, Some(2));
        for bad in [
            r#"{"precision": "q3"}"#,
            r#"{"device": "tpu"}"#,
            r#"{"threads": 0}"#,
            r#"{"colour": "red"}"#,
            "not json",
        ] {
            let e = load_options(Some(bad)).expect_err(bad);
            assert_eq!(e.0, AriaStatus::Invalid, "{bad}");
        }
    }

    #[test]
    fn panics_become_a_status() {
        let st = guard(|| panic!("boom"));
        assert_eq!(st, AriaStatus::Panic);
        // SAFETY: the library's own NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(aria_last_error()) }
            .to_str()
            .expect("utf-8");
        assert!(msg.contains("boom"), "{msg}");
        assert_eq!(guard(|| Ok(())), AriaStatus::Ok);
    }
}
