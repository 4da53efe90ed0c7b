//! `GET /v1/jobs`, `GET|DELETE /v1/jobs/{id}`, the audio and the pictures of a job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::owner::Caller;
use super::{blocking, ApiError};
use crate::jobs::{is_valid_job_id, CancelOutcome, JobRecord, JobState, ListFilter};
use crate::live::{LiveEnd, LiveJob};
use crate::state::Shared;

/// How long `GET …/audio` waits for a queued job to start or for a job elsewhere to finish.
const AUDIO_WAIT: Duration = Duration::from_secs(600);

/// The links of a job.
pub(crate) fn links(id: &str) -> Value {
    json!({
        "self": format!("/v1/jobs/{id}"),
        "audio": format!("/v1/jobs/{id}/audio"),
        "flac": format!("/v1/jobs/{id}/audio?format=flac"),
        "waveform": format!("/v1/jobs/{id}/waveform.png"),
        "spectrogram": format!("/v1/jobs/{id}/spectrogram.png"),
        "cancel": format!("/v1/jobs/{id}"),
    })
}

fn job_json(r: &JobRecord, position: Option<usize>) -> Value {
    let spec: Value = serde_json::from_str(&r.spec).unwrap_or(Value::Null);
    let timings: Value = r
        .timings
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null);
    let wait = r
        .started_ms
        .map(|s| (s - r.created_ms).max(0) as f64 / 1000.0);
    let run = match (r.started_ms, r.finished_ms) {
        (Some(s), Some(f)) => Some((f - s).max(0) as f64 / 1000.0),
        _ => None,
    };
    json!({
        "id": r.id,
        "state": r.state,
        "progress": r.progress,
        "step": r.step,
        "steps": r.steps,
        "position": position,
        "error": r.error,
        "attempts": r.attempts,
        "worker": r.worker,
        "created_ms": r.created_ms,
        "started_ms": r.started_ms,
        "finished_ms": r.finished_ms,
        "timings": {
            "queue_s": wait,
            "run_s": run,
            "stages": timings,
        },
        "request": {
            "prompt": spec.get("prompt"),
            "negative_prompt": spec.get("negative_prompt"),
            "seconds": spec.get("seconds"),
            "steps": spec.get("steps"),
            "cfg": spec.get("cfg"),
            "seed": spec.get("seed"),
            "warm_start": spec.get("warm_start"),
        },
        "links": links(&r.id),
    })
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if is_valid_job_id(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no job `{id}`")))
    }
}

/// The owner a job's spec names (`None`: none).
fn owner_of(r: &JobRecord) -> Option<String> {
    let spec: Value = serde_json::from_str(&r.spec).ok()?;
    spec.get("owner")?.as_str().map(str::to_string)
}

/// The job `id` if it exists and `caller` may see it (else 404, whether or not it exists).
async fn record(
    s: &Arc<Shared>,
    caller: &Caller,
    id: &str,
) -> Result<(JobRecord, Option<usize>), ApiError> {
    check_id(id)?;
    let (s, id, caller) = (s.clone(), id.to_string(), caller.clone());
    blocking(move || {
        let r = s
            .store
            .get(&id)?
            .filter(|r| caller.sees(owner_of(r).as_deref()))
            .ok_or_else(|| ApiError::not_found(format!("no job `{id}`")))?;
        let pos = match r.state {
            JobState::Queued => s.store.position(&id)?,
            _ => None,
        };
        Ok((r, pos))
    })
    .await
}

pub(super) async fn get_job(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (r, pos) = record(&s, &caller, &id).await?;
    Ok(axum::Json(job_json(&r, pos)).into_response())
}

/// `GET /v1/jobs` query.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    state: Option<String>,
    limit: Option<usize>,
    before: Option<i64>,
}

pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let state = match q.state.as_deref() {
        Some(n) => Some(JobState::parse(n).ok_or_else(|| {
            ApiError::invalid(
                "state",
                format!("state: `{n}` is not queued, running, done, failed or cancelled"),
            )
        })?),
        None => None,
    };
    let limit = q.limit.unwrap_or(50).min(500);
    let mut filter = ListFilter {
        state,
        limit,
        before_seq: q.before,
    };
    let jobs = blocking(move || {
        // Pages of the store until `limit` jobs the caller may see (or the end).
        let mut rows = Vec::new();
        let mut next = None;
        loop {
            let page = s.store.list(&filter)?;
            let full = page.len() == filter.limit;
            for r in page {
                next = Some(r.seq);
                if caller.sees(owner_of(&r).as_deref()) {
                    rows.push(r);
                    if rows.len() == limit {
                        break;
                    }
                }
            }
            if rows.len() == limit || !full || limit == 0 {
                break;
            }
            filter.before_seq = next;
            filter.limit = 500;
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let pos = match r.state {
                JobState::Queued => s.store.position(&r.id)?,
                _ => None,
            };
            out.push(job_json(r, pos));
        }
        Ok(json!({ "jobs": out, "next_before": next }))
    })
    .await?;
    Ok(axum::Json(jobs).into_response())
}

pub(super) async fn cancel(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    record(&s, &caller, &id).await?;
    let s2 = s.clone();
    let id2 = id.clone();
    let outcome = blocking(move || Ok(s2.store.cancel(&id2)?)).await?;
    let (status, state) = match outcome {
        CancelOutcome::NotFound => return Err(ApiError::not_found(format!("no job `{id}`"))),
        CancelOutcome::Removed => {
            let dir = s.cfg.results_dir.clone();
            let id3 = id.clone();
            tokio::task::spawn_blocking(move || crate::worker::remove_inputs(&dir, &id3));
            (StatusCode::OK, "cancelled")
        }
        CancelOutcome::Requested => {
            if let Some(l) = s.live.get(&id) {
                l.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            (StatusCode::ACCEPTED, "cancelling")
        }
        CancelOutcome::AlreadyFinished(st) => {
            return Err(ApiError::conflict(format!(
                "job `{id}` already finished: {}",
                st.name()
            )))
        }
    };
    Ok((status, axum::Json(json!({ "id": id, "state": state }))).into_response())
}

/// `410 Gone`: the result of a done job was removed after the result retention.
fn expired(id: &str) -> ApiError {
    ApiError {
        status: StatusCode::GONE,
        code: "expired",
        ..ApiError::not_found(format!(
            "the result of job `{id}` was removed after the result retention"
        ))
    }
}

/// `?format=wav|flac`.
#[derive(Debug, Deserialize)]
pub(super) struct AudioQuery {
    format: Option<String>,
}

impl AudioQuery {
    /// `?format=` (`wav` or `flac`).
    pub(super) fn new(format: &str) -> AudioQuery {
        AudioQuery {
            format: Some(format.to_string()),
        }
    }
}

fn wav_response(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "audio/wav"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The bytes of a live job as a chunked body, from the header on, as they are decoded.
fn live_body(live: Arc<LiveJob>) -> Body {
    let rx = live.subscribe();
    let stream = futures_util::stream::unfold(
        (live, rx, 0usize, false),
        |(live, mut rx, off, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let (bytes, end) = live.read_from(off);
                if !bytes.is_empty() {
                    let n = bytes.len();
                    let item = Ok::<_, std::io::Error>(bytes::Bytes::from(bytes));
                    return Some((item, (live, rx, off + n, false)));
                }
                match end {
                    LiveEnd::Complete => return None,
                    LiveEnd::Aborted => {
                        let e =
                            std::io::Error::other("the job stopped before its audio was complete");
                        return Some((Err(e), (live, rx, off, true)));
                    }
                    LiveEnd::Open => {
                        if rx.changed().await.is_err() {
                            // The job was dropped: a last look, then stop.
                            let (bytes, end) = live.read_from(off);
                            if bytes.is_empty() && end != LiveEnd::Complete {
                                let e = std::io::Error::other("the job's audio stream closed");
                                return Some((Err(e), (live, rx, off, true)));
                            }
                            if bytes.is_empty() {
                                return None;
                            }
                        }
                    }
                }
            }
        },
    );
    Body::from_stream(stream)
}

fn flac_bytes(wav: &[u8]) -> Result<Vec<u8>, String> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let reader = hound::WavReader::new(std::io::Cursor::new(wav)).map_err(|e| e.to_string())?;
    let spec = reader.spec();
    let samples: Vec<i32> = reader
        .into_samples::<i16>()
        .map(|s| s.map(i32::from))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|e| format!("{e:?}"))?;
    let src = flacenc::source::MemSource::from_samples(
        &samples,
        usize::from(spec.channels),
        16,
        spec.sample_rate as usize,
    );
    let stream =
        flacenc::encode_with_fixed_block_size(&config, src, 4096).map_err(|e| format!("{e:?}"))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream.write(&mut sink).map_err(|e| format!("{e:?}"))?;
    Ok(sink.into_inner())
}

pub(super) async fn audio(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<AudioQuery>,
) -> Result<Response, ApiError> {
    let flac = match q.format.as_deref() {
        None | Some("wav") => false,
        Some("flac") => true,
        Some(f) => {
            return Err(ApiError::invalid(
                "format",
                format!("format: `{f}` is not wav or flac"),
            ))
        }
    };
    record(&s, &caller, &id).await?;
    let t0 = Instant::now();
    loop {
        if !flac {
            // A cancelled job's live stream has ended (or is about to): answer from its
            // record instead, which says so.
            if let Some(live) = s.live.get(&id).filter(|l| !l.cancelled()) {
                return Ok(wav_response(live_body(live)));
            }
        }
        if let Some(wav) = finished_wav(&s, &caller, &id).await? {
            return audio_response(wav, flac).await;
        }
        if t0.elapsed() > AUDIO_WAIT {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("job `{id}` did not start within {} s", AUDIO_WAIT.as_secs()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A finished job's WAV (`None` while it is queued or running); an error for a failed or
/// cancelled job, or a result past its retention.
pub(super) async fn finished_wav(
    s: &Arc<Shared>,
    caller: &Caller,
    id: &str,
) -> Result<Option<Vec<u8>>, ApiError> {
    let (r, _) = record(s, caller, id).await?;
    match r.state {
        JobState::Done => {
            let name = r.result.ok_or_else(|| expired(id))?;
            let wav = tokio::fs::read(s.cfg.results_dir.join(&name))
                .await
                .map_err(|e| {
                    ApiError::internal(format!(
                        "the result of job `{id}` is unreadable: {}",
                        e.kind()
                    ))
                })?;
            Ok(Some(wav))
        }
        JobState::Failed | JobState::Cancelled => Err(ApiError::conflict(format!(
            "job `{id}` is {}: {}",
            r.state.name(),
            r.error.unwrap_or_default()
        ))),
        JobState::Queued | JobState::Running => Ok(None),
    }
}

/// A whole result as WAV, or converted to FLAC.
pub(super) async fn audio_response(wav: Vec<u8>, flac: bool) -> Result<Response, ApiError> {
    if !flac {
        return Ok(wav_response(Body::from(wav)));
    }
    let bytes = tokio::task::spawn_blocking(move || flac_bytes(&wav))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("FLAC encoding: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "audio/flac")], bytes).into_response())
}

/// `?width=&height=` of a picture.
#[derive(Debug, Deserialize)]
pub(super) struct PictureQuery {
    width: Option<u32>,
    height: Option<u32>,
}

async fn picture(
    s: Arc<Shared>,
    caller: Caller,
    id: String,
    q: PictureQuery,
    spectrogram: bool,
) -> Result<Response, ApiError> {
    let (r, _) = record(&s, &caller, &id).await?;
    if r.state != JobState::Done {
        return Err(ApiError::conflict(format!(
            "job `{id}` is {}; its pictures exist once it is done",
            r.state.name()
        )));
    }
    let (w, h) = (
        q.width.unwrap_or(800).clamp(16, 4096),
        q.height
            .unwrap_or(if spectrogram { 256 } else { 160 })
            .clamp(16, 2048),
    );
    let path = s
        .cfg
        .results_dir
        .join(r.result.ok_or_else(|| expired(&id))?);
    let png = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let reader = hound::WavReader::open(&path).map_err(|e| e.to_string())?;
        let spec = reader.spec();
        let samples: Vec<f32> = reader
            .into_samples::<i16>()
            .map(|v| v.map(|x| f32::from(x) / 32768.0))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let ch = usize::from(spec.channels);
        Ok(if spectrogram {
            crate::picture::spectrogram_png(&samples, ch, spec.sample_rate, w, h)
        } else {
            crate::picture::waveform_png(&samples, ch, w, h)
        })
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("reading the result of `{id}`: {e}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        png,
    )
        .into_response())
}

pub(super) async fn waveform(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PictureQuery>,
) -> Result<Response, ApiError> {
    picture(s, caller, id, q, false).await
}

pub(super) async fn spectrogram(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PictureQuery>,
) -> Result<Response, ApiError> {
    picture(s, caller, id, q, true).await
}
