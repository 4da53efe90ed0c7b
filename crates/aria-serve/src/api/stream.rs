//! `POST|GET /v1/stream`: open-ended generation ([`aria::StreamGenerator`]) sent chunk by
//! chunk as it is generated, with HTTP chunked transfer; `POST /v1/stream/{id}/prompt`
//! changes the prompt of a running stream from its next chunk on; `GET /v1/stream/{id}` tells
//! how far a stream is.
//!
//! The body is a 16-bit PCM WAV whose header says "unknown length" (RIFF and data sizes
//! `0xFFFFFFFF`, as streaming players expect), or with `format=pcm` raw 16-bit big-endian PCM
//! (`audio/L16; rate=…; channels=…`). A stream runs on a thread of its own beside the job
//! worker, on the same resident model, and stays at most one chunk ahead of its client: when
//! the client goes away the chunk being generated is cancelled at its next sampler step. Each
//! stream is bounded in length ([`MAX_STREAM_SECONDS`], limit `stream_seconds`) and at most
//! [`MAX_STREAMS`] run at once (limit `streams`, `429`).
//!
//! The stream holds the model's read lock while it runs, so a job that changes the loaded
//! LoRA set waits until running streams end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::ApiError;
use crate::state::Shared;
use aria::{CancelToken, GenerateRequest, Pipeline, RunOptions, StreamConfig, StreamGenerator};

/// Longest stream a request may ask for, in seconds (limit `stream_seconds`).
pub const MAX_STREAM_SECONDS: f64 = 3600.0;
/// Most streams running at once (limit `streams`).
pub const MAX_STREAMS: usize = 2;

/// What `/v1/stream` takes, as JSON (`POST`) or as query parameters (`GET`, for a browser's
/// `<audio src>`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// The prompt (changeable while it runs).
    pub prompt: String,
    /// Negative prompt (with guidance above 1).
    pub negative_prompt: Option<String>,
    /// Total length in seconds (default 30; at most [`MAX_STREAM_SECONDS`]).
    pub seconds: Option<f64>,
    /// New audio per chunk, in seconds (default 4).
    pub chunk: Option<f64>,
    /// Audio of the previous window each window continues, in seconds (default 2).
    pub context: Option<f64>,
    /// Sampler steps (default: the model's preset).
    pub steps: Option<usize>,
    /// Guidance scale (default: the model's preset).
    pub cfg: Option<f32>,
    /// Seed (default 0).
    pub seed: Option<u64>,
    /// `wav` (default) or `pcm`.
    pub format: Option<String>,
    /// The bearer token as a query parameter (checked by the auth layer; ignored here).
    pub token: Option<String>,
}

/// What `POST /v1/stream/{id}/prompt` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptChange {
    /// The new prompt.
    pub prompt: String,
}

/// One running stream, as the HTTP side and its generator thread share it.
#[derive(Debug, Default)]
struct Session {
    /// A prompt change waiting for the next chunk.
    pending: Mutex<Option<String>>,
    /// `(chunk, prompt)` of the first prompt and every change applied.
    prompts: Mutex<Vec<(usize, String)>>,
    /// Chunks sent so far.
    chunks: AtomicUsize,
    /// Chunks the stream has in all.
    total: AtomicUsize,
}

/// The running streams and the model they run on.
pub struct StreamHub {
    pipe: Arc<RwLock<Pipeline>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl std::fmt::Debug for StreamHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.sessions.lock().map_or(0, |s| s.len());
        f.debug_struct("StreamHub")
            .field("streams", &n)
            .finish_non_exhaustive()
    }
}

impl StreamHub {
    /// A hub over the resident model.
    pub fn new(pipe: Arc<RwLock<Pipeline>>) -> StreamHub {
        StreamHub {
            pipe,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().ok()?.get(id).cloned()
    }
}

/// Removes a stream from the hub when its thread ends, however it ends.
struct Registration {
    hub: Arc<StreamHub>,
    id: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut s) = self.hub.sessions.lock() {
            s.remove(&self.id);
        }
    }
}

/// Sample format of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Wav,
    Pcm,
}

/// A checked stream request.
struct Plan {
    req: GenerateRequest,
    cfg: StreamConfig,
    total_sec: f64,
    seed: u64,
    format: Format,
}

fn plan(s: &Shared, p: StreamParams) -> Result<Plan, ApiError> {
    let l = &s.cfg.limits;
    let m = &s.model;
    if p.prompt.trim().is_empty() {
        return Err(ApiError::invalid("prompt", "prompt: must not be empty"));
    }
    for (name, text) in [
        ("prompt", Some(&p.prompt)),
        ("negative_prompt", p.negative_prompt.as_ref()),
    ] {
        if let Some(t) = text {
            let n = t.chars().count();
            if n > l.prompt_chars {
                return Err(ApiError::limit(
                    "prompt_chars",
                    format!(
                        "{name}: {n} characters, limit prompt_chars = {}",
                        l.prompt_chars
                    ),
                ));
            }
        }
    }
    let secs = |name: &str, v: Option<f64>, default: f64| -> Result<f64, ApiError> {
        let v = v.unwrap_or(default);
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(ApiError::invalid(
                name,
                format!("{name}: must be a positive number of seconds, got {v}"),
            ))
        }
    };
    let total_sec = secs("seconds", p.seconds, 30.0)?;
    if total_sec > MAX_STREAM_SECONDS {
        return Err(ApiError::limit(
            "stream_seconds",
            format!("seconds: {total_sec} s, limit stream_seconds = {MAX_STREAM_SECONDS} s"),
        ));
    }
    let chunk = secs("chunk", p.chunk, 4.0)?;
    let context = secs("context", p.context, 2.0)?;
    // Every window generates context + chunk seconds (plus a few samples of alignment).
    let window_max = l.max_seconds.unwrap_or(m.max_seconds).min(m.max_seconds) - 0.05;
    if chunk + context > window_max {
        return Err(ApiError::limit(
            "seconds",
            format!(
                "chunk + context: {} s, more than one window may hold (limit seconds = {:.2} s)",
                chunk + context,
                window_max
            ),
        ));
    }
    let steps = p.steps.unwrap_or(m.default_steps);
    if steps == 0 || steps > l.max_steps {
        return Err(ApiError::limit(
            "steps",
            format!("steps: {steps}, must be 1..={} (limit steps)", l.max_steps),
        ));
    }
    let cfg_scale = p.cfg.unwrap_or(m.default_cfg);
    if !(cfg_scale.is_finite() && (0.0..=50.0).contains(&cfg_scale)) {
        return Err(ApiError::invalid(
            "cfg",
            format!("cfg: must be in 0..=50, got {cfg_scale}"),
        ));
    }
    let format = match p.format.as_deref() {
        None | Some("wav") => Format::Wav,
        Some("pcm") => Format::Pcm,
        Some(f) => {
            return Err(ApiError::invalid(
                "format",
                format!("format: `{f}` is not one of wav, pcm"),
            ))
        }
    };
    let sampler = aria::SamplerKind::parse(&m.default_sampler)
        .map_err(|e| ApiError::internal(format!("the model's sampler: {e}")))?;
    let mut req = GenerateRequest::new(p.prompt, 0.0);
    req.negative_prompt = p.negative_prompt.filter(|n| !n.trim().is_empty());
    req.steps = steps;
    req.cfg_scale = cfg_scale;
    req.sampler = Some(sampler);
    let cfg = StreamConfig {
        chunk_sec: chunk,
        context_sec: context,
        ..StreamConfig::default()
    };
    Ok(Plan {
        req,
        cfg,
        total_sec,
        seed: p.seed.unwrap_or(0),
        format,
    })
}

/// The header of a 16-bit PCM WAV of unknown length.
fn wav_header(sample_rate: u32, channels: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(44);
    let block = channels * 2;
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&sample_rate.to_le_bytes());
    h.extend_from_slice(&(sample_rate * u32::from(block)).to_le_bytes());
    h.extend_from_slice(&block.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h
}

/// The first `n` frames of channel-major `v` (`ch` rows of `stride`) as interleaved 16-bit
/// samples, little endian (WAV) or big endian (`audio/L16`).
fn pcm16(v: &[f32], ch: usize, stride: usize, n: usize, format: Format) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * ch * 2);
    for i in 0..n {
        for c in 0..ch {
            let x = (v[c * stride + i].clamp(-1.0, 1.0) * 32767.0).round() as i16;
            out.extend_from_slice(&match format {
                Format::Wav => x.to_le_bytes(),
                Format::Pcm => x.to_be_bytes(),
            });
        }
    }
    out
}

fn new_stream_id() -> String {
    format!("s{}", &crate::jobs::new_job_id()[..20])
}

/// `POST /v1/stream` (JSON body).
pub(crate) async fn post_stream(
    State(s): State<Arc<Shared>>,
    Extension(hub): Extension<Arc<StreamHub>>,
    body: Result<Json<StreamParams>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(p) = body.map_err(|e| ApiError::invalid("body", format!("JSON body: {e}")))?;
    start(s, hub, p).await
}

/// `GET /v1/stream?prompt=…` (query parameters).
pub(crate) async fn get_stream(
    State(s): State<Arc<Shared>>,
    Extension(hub): Extension<Arc<StreamHub>>,
    q: Result<Query<StreamParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = q.map_err(|e| ApiError::invalid("query", format!("query: {e}")))?;
    start(s, hub, p).await
}

/// What the generator thread reports once it has built its generator.
struct Ready {
    chunk_samples: usize,
    chunks: usize,
}

async fn start(s: Arc<Shared>, hub: Arc<StreamHub>, p: StreamParams) -> Result<Response, ApiError> {
    if s.stop.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let plan = plan(&s, p)?;
    let id = new_stream_id();
    let session = Arc::new(Session::default());
    {
        let mut all = hub
            .sessions
            .lock()
            .map_err(|_| ApiError::internal("the stream table is poisoned"))?;
        if all.len() >= MAX_STREAMS {
            return Err(ApiError {
                retry_after: Some(5),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "limit_exceeded",
                    format!(
                        "{} streams running, limit streams = {MAX_STREAMS}",
                        all.len()
                    ),
                )
            }
            .with_limit("streams"));
        }
        all.insert(id.clone(), session.clone());
    }
    let reg = Registration {
        hub: hub.clone(),
        id: id.clone(),
    };
    let (sr, ch) = (s.model.sample_rate, s.model.channels);
    let format = plan.format;
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(1);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<Ready, ApiError>>();
    let s2 = s.clone();
    std::thread::Builder::new()
        .name("aria-serve-stream".into())
        .spawn(move || {
            let _reg = reg;
            generate(&s2, &hub.pipe, &session, plan, tx, ready_tx);
        })
        .map_err(|e| ApiError::internal(format!("starting the stream thread: {e}")))?;
    let ready = ready_rx
        .await
        .map_err(|_| ApiError::internal("the stream thread stopped while starting"))??;
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    });
    let content_type = match format {
        Format::Wav => "audio/wav".to_string(),
        Format::Pcm => format!("audio/L16; rate={sr}; channels={ch}"),
    };
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    let mut set = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    set("content-type", content_type);
    set("cache-control", "no-store".into());
    set("x-aria-stream-id", id.clone());
    set("x-aria-sample-rate", sr.to_string());
    set("x-aria-channels", ch.to_string());
    set("x-aria-chunk-samples", ready.chunk_samples.to_string());
    set("x-aria-chunks", ready.chunks.to_string());
    set("link", format!("</v1/stream/{id}/prompt>; rel=\"prompt\""));
    Ok(r)
}

impl ApiError {
    fn with_limit(mut self, limit: &'static str) -> ApiError {
        self.limit = Some(limit);
        self
    }
}

/// The generator thread: build the generator (reporting errors before the response starts),
/// then generate and send chunk by chunk until the total, the client leaving, or shutdown.
fn generate(
    s: &Shared,
    pipe: &RwLock<Pipeline>,
    session: &Session,
    plan: Plan,
    tx: tokio::sync::mpsc::Sender<bytes::Bytes>,
    ready: tokio::sync::oneshot::Sender<Result<Ready, ApiError>>,
) {
    let Ok(pipe) = pipe.read() else {
        let _ = ready.send(Err(ApiError::internal("the model lock is poisoned")));
        return;
    };
    let first_prompt = plan.req.prompt.clone();
    let mut gen = match StreamGenerator::new(&pipe, plan.req, plan.cfg) {
        Ok(g) => g,
        Err(e) => {
            let _ = ready.send(Err(ApiError::invalid("chunk", e.to_string())));
            return;
        }
    };
    let sr = pipe.sample_rate();
    let (ch, c) = (gen.channels(), gen.chunk_samples());
    let total = ((plan.total_sec * f64::from(sr)).round() as usize).max(1);
    let n_chunks = total.div_ceil(c);
    session.total.store(n_chunks, Ordering::SeqCst);
    if let Ok(mut p) = session.prompts.lock() {
        p.push((0, first_prompt));
    }
    if ready
        .send(Ok(Ready {
            chunk_samples: c,
            chunks: n_chunks,
        }))
        .is_err()
    {
        return;
    }
    if plan.format == Format::Wav {
        let Ok(channels) = u16::try_from(ch) else {
            return;
        };
        if tx
            .blocking_send(bytes::Bytes::from(wav_header(sr, channels)))
            .is_err()
        {
            return;
        }
    }
    let mut noise = aria::SeedGenerator::Torch.source(plan.seed);
    for k in 0..n_chunks {
        if s.stop.load(Ordering::SeqCst) || s.abort.is_cancelled() || tx.is_closed() {
            return;
        }
        if let Some(p) = session.pending.lock().ok().and_then(|mut p| p.take()) {
            gen.set_prompt(p.clone());
            if let Ok(mut ps) = session.prompts.lock() {
                ps.push((k, p));
            }
        }
        let cancel = CancelToken::new();
        let mut watch = |_: &aria::pipeline::Event| {
            if tx.is_closed() || s.stop.load(Ordering::SeqCst) || s.abort.is_cancelled() {
                cancel.cancel();
            }
        };
        let opts = RunOptions {
            cancel: Some(cancel.clone()),
            progress: Some(&mut watch),
            ..Default::default()
        };
        let chunk = match gen.next_chunk_with(noise.as_mut(), opts) {
            Ok(c) => c,
            // Cancelled (client gone, shutdown) or failed: end the body early, which the
            // client sees as a truncated stream.
            Err(_) => return,
        };
        let Ok(v) = chunk.audio.to_vec_f32() else {
            return;
        };
        let n = if k + 1 == n_chunks { total - k * c } else { c };
        if tx
            .blocking_send(bytes::Bytes::from(pcm16(&v, ch, c, n, plan.format)))
            .is_err()
        {
            return;
        }
        session.chunks.store(k + 1, Ordering::SeqCst);
    }
}

fn session_json(id: &str, sess: &Session) -> serde_json::Value {
    let prompts: Vec<serde_json::Value> = sess
        .prompts
        .lock()
        .map(|p| {
            p.iter()
                .map(|(k, p)| json!({ "from_chunk": k, "prompt": p }))
                .collect()
        })
        .unwrap_or_default();
    let pending = sess.pending.lock().ok().and_then(|p| p.clone());
    json!({
        "id": id,
        "chunks_sent": sess.chunks.load(Ordering::SeqCst),
        "chunks": sess.total.load(Ordering::SeqCst),
        "prompts": prompts,
        "pending_prompt": pending,
        "links": {
            "self": format!("/v1/stream/{id}"),
            "prompt": format!("/v1/stream/{id}/prompt"),
        },
    })
}

/// `GET /v1/stream/{id}`: how far a running stream is (404 once it has ended).
pub(crate) async fn get_status(
    Extension(hub): Extension<Arc<StreamHub>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let sess = hub
        .get(&id)
        .ok_or_else(|| ApiError::not_found(format!("no running stream `{id}`")))?;
    Ok(Json(session_json(&id, &sess)).into_response())
}

/// `POST /v1/stream/{id}/prompt`: the prompt from the stream's next chunk on.
pub(crate) async fn set_prompt(
    State(s): State<Arc<Shared>>,
    Extension(hub): Extension<Arc<StreamHub>>,
    Path(id): Path<String>,
    body: Result<Json<PromptChange>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(p) = body.map_err(|e| ApiError::invalid("body", format!("JSON body: {e}")))?;
    if p.prompt.trim().is_empty() {
        return Err(ApiError::invalid("prompt", "prompt: must not be empty"));
    }
    let n = p.prompt.chars().count();
    let max = s.cfg.limits.prompt_chars;
    if n > max {
        return Err(ApiError::limit(
            "prompt_chars",
            format!("prompt: {n} characters, limit prompt_chars = {max}"),
        ));
    }
    let sess = hub
        .get(&id)
        .ok_or_else(|| ApiError::not_found(format!("no running stream `{id}`")))?;
    if let Ok(mut pending) = sess.pending.lock() {
        *pending = Some(p.prompt);
    }
    let mut r = Json(session_json(&id, &sess)).into_response();
    *r.status_mut() = StatusCode::ACCEPTED;
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::{pcm16, wav_header, Format};

    #[test]
    fn the_streaming_header_is_a_wav_of_unknown_length() {
        let h = wav_header(44_100, 2);
        assert_eq!(h.len(), 44);
        assert_eq!(&h[0..4], b"RIFF");
        assert_eq!(&h[4..8], &[0xff; 4]);
        assert_eq!(&h[8..16], b"WAVEfmt ");
        assert_eq!(u16::from_le_bytes([h[22], h[23]]), 2);
        assert_eq!(u32::from_le_bytes([h[24], h[25], h[26], h[27]]), 44_100);
        assert_eq!(u32::from_le_bytes([h[28], h[29], h[30], h[31]]), 44_100 * 4);
        assert_eq!(&h[36..40], b"data");
        assert_eq!(&h[40..44], &[0xff; 4]);
    }

    #[test]
    fn samples_are_interleaved_and_clamped() {
        // Two channels of stride 3, the first 2 frames.
        let v = [0.5f32, -2.0, 9.0, 1.0, 0.0, 9.0];
        let le = pcm16(&v, 2, 3, 2, Format::Wav);
        let got: Vec<i16> = le
            .chunks(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, [16384, 32767, -32767, 0]);
        let be = pcm16(&v, 2, 3, 2, Format::Pcm);
        assert_eq!(i16::from_be_bytes([be[0], be[1]]), 16384);
    }
}
