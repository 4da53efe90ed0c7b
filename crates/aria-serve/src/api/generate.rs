//! `POST /v1/generate`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, FromRequest, Multipart, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;

use super::owner::Caller;
use super::{blocking, ApiError};
use crate::jobs::{new_job_id, NewJob};
use crate::request::{validate, Checks, GenerateBody, SavedInputs, Upload};
use crate::state::Shared;

/// The `Content-Length` a request declares, if any.
pub(super) fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Read the whole body within the `body_bytes` and `body_timeout` limits.
pub(super) async fn read_body(
    s: &Shared,
    body: Body,
    declared: Option<u64>,
) -> Result<Vec<u8>, ApiError> {
    let max = s.cfg.limits.body_bytes;
    if let Some(n) = declared.filter(|&n| n > max.saturating_mul(4) as u64) {
        return Err(ApiError::limit(
            "body_bytes",
            format!("request body of {n} bytes exceeds body_bytes = {max}"),
        ));
    }
    let read = async {
        let mut out = Vec::new();
        let mut stream = body.into_data_stream();
        let mut over = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::invalid("body", format!("reading the body: {e}")))?;
            if over > 0 || out.len() + chunk.len() > max {
                // Read on (up to 4× the limit) so the client sees the answer instead of a
                // reset connection, then refuse.
                over += chunk.len();
                if out.len() + over > max.saturating_mul(4) {
                    break;
                }
                continue;
            }
            out.extend_from_slice(&chunk);
        }
        if over > 0 {
            return Err(ApiError::limit(
                "body_bytes",
                format!("request body exceeds body_bytes = {max}"),
            ));
        }
        Ok(out)
    };
    let t = s.cfg.limits.body_timeout;
    match tokio::time::timeout(t, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::limit(
            "body_timeout",
            format!(
                "the body did not arrive within body_timeout = {:.1} s",
                t.as_secs_f64()
            ),
        )),
    }
}

fn parse_json(bytes: &[u8]) -> Result<GenerateBody, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let field = match e.classify() {
            serde_json::error::Category::Data => "body",
            _ => "json",
        };
        ApiError::invalid(field, format!("request body is not a valid request: {e}"))
    })
}

/// The `request` part and the file parts of a multipart body.
async fn parse_multipart(
    s: &Arc<Shared>,
    parts: axum::http::request::Parts,
    bytes: Vec<u8>,
) -> Result<(GenerateBody, Vec<Upload>), ApiError> {
    let req = Request::from_parts(parts, Body::from(bytes));
    let mut mp = Multipart::from_request(req, s)
        .await
        .map_err(|e| ApiError::invalid("body", format!("multipart body: {e}")))?;
    let mut body = None;
    let mut uploads = Vec::new();
    while let Some(field) = mp
        .next_field()
        .await
        .map_err(|e| ApiError::invalid("body", format!("multipart body: {e}")))?
    {
        let name = field.name().unwrap_or("").to_string();
        let data = field
            .bytes()
            .await
            .map_err(|e| ApiError::invalid(&name, format!("multipart part `{name}`: {e}")))?;
        if name == "request" {
            body = Some(parse_json(&data)?);
        } else {
            if data.len() > s.cfg.limits.upload_bytes {
                return Err(ApiError::limit(
                    "upload_bytes",
                    format!(
                        "{name}: {} bytes exceed upload_bytes = {}",
                        data.len(),
                        s.cfg.limits.upload_bytes
                    ),
                ));
            }
            uploads.push(Upload {
                field: name,
                bytes: data.to_vec(),
            });
        }
    }
    let body = body.ok_or_else(|| {
        ApiError::invalid(
            "request",
            "multipart body needs a `request` part holding the JSON",
        )
    })?;
    Ok((body, uploads))
}

/// Sample rates an uploaded clip may have (Hz): those aria reads at all.
pub(crate) const UPLOAD_RATES: std::ops::RangeInclusive<u32> = aria::audio::SAMPLE_RATES;

/// The request field of a saved upload (`inputs/<id>.<part>[.safetensors]`).
fn field_of(name: &str) -> String {
    let part = name.split('.').nth(1).unwrap_or("upload");
    match part.strip_prefix("steer") {
        Some(i) if !i.is_empty() => format!("steer[{i}]"),
        _ if part == "init_audio" => "init_audio".into(),
        _ => "inpaint".into(),
    }
}

/// Write the uploads and check them: direction files load, audio clips have a usable sample
/// rate and stay within `upload_seconds`. Messages name the request field, never a path.
fn save_inputs(s: &Shared, saved: &SavedInputs) -> Result<(), ApiError> {
    let dir = &s.cfg.results_dir;
    for (name, bytes) in &saved.files {
        let path = dir.join(name);
        let field = field_of(name);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| {
                ApiError::internal(format!("creating the uploads folder: {}", e.kind()))
            })?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| ApiError::internal(format!("writing an upload: {}", e.kind())))?;
        if name.ends_with(".safetensors") {
            aria_steer::DirectionFile::load(&path).map_err(|e| {
                let why = e
                    .to_string()
                    .replace(&path.display().to_string(), &field)
                    .replace(&dir.display().to_string(), "results");
                ApiError::invalid(
                    &field,
                    format!("{field}: the uploaded direction file is not usable: {why}"),
                )
            })?;
            continue;
        }
        let clip = aria::audio::read_audio(&path).map_err(|e| {
            // The reason without the server's path (the path is a field of the error).
            let why = match e {
                aria_codec::CodecError::Audio { reason, .. } => format!(": {reason}"),
                _ => String::new(),
            };
            ApiError::invalid(&field, format!("{field}: not a readable audio file{why}"))
        })?;
        if !UPLOAD_RATES.contains(&clip.sample_rate) {
            return Err(ApiError::invalid(
                &field,
                format!(
                    "{field}: sample rate {} Hz is not in {}..={} Hz",
                    clip.sample_rate,
                    UPLOAD_RATES.start(),
                    UPLOAD_RATES.end()
                ),
            ));
        }
        let secs = clip.frames() as f64 / f64::from(clip.sample_rate);
        if secs > s.cfg.limits.upload_seconds {
            return Err(ApiError::limit(
                "upload_seconds",
                format!(
                    "{field}: {secs:.1} s of audio exceeds upload_seconds = {}",
                    s.cfg.limits.upload_seconds
                ),
            ));
        }
    }
    Ok(())
}

fn remove_saved(s: &Shared, saved: &SavedInputs) {
    for (name, _) in &saved.files {
        let _ = std::fs::remove_file(s.cfg.results_dir.join(name));
    }
}

/// Count a refusal.
pub(super) fn counted(s: &Shared, e: ApiError) -> ApiError {
    let m = &s.metrics;
    if e.status == StatusCode::TOO_MANY_REQUESTS {
        m.rejected_full.fetch_add(1, Ordering::Relaxed);
    } else if e.status.is_client_error() {
        m.rejected_invalid.fetch_add(1, Ordering::Relaxed);
    }
    e
}

pub(super) async fn generate(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Response {
    match submit(&s, &caller, req).await {
        Ok(r) => r,
        Err(e) => counted(&s, e).into_response(),
    }
}

async fn submit(s: &Arc<Shared>, caller: &Caller, req: Request) -> Result<Response, ApiError> {
    if s.stop.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let (parts, body) = req.into_parts();
    let declared = declared_length(&parts.headers);
    let ctype = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = read_body(s, body, declared).await?;
    let (body, uploads) = if ctype.starts_with("multipart/form-data") {
        parse_multipart(s, parts, bytes).await?
    } else {
        (parse_json(&bytes)?, Vec::new())
    };
    let (id, pos) = submit_body(s, caller, body, uploads).await?;
    let links = super::jobs::links(&id);
    let body = json!({ "id": id, "state": "queued", "position": pos, "links": links });
    let mut r = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!("/v1/jobs/{id}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// Validate a request, save its uploads and queue it as the caller's job (the one path every
/// route that generates takes: the same limits, queue and owner). Returns the job id and its
/// queue position.
pub(super) async fn submit_body(
    s: &Arc<Shared>,
    caller: &Caller,
    body: GenerateBody,
    uploads: Vec<Upload>,
) -> Result<(String, usize), ApiError> {
    if s.stop.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let id = new_job_id();
    let shared = s.clone();
    let id2 = id.clone();
    let owner = caller.owner.clone();
    let pos = blocking(move || {
        let s = &shared;
        let mut saved = SavedInputs::default();
        let model = s.model.limits();
        let checks = Checks {
            limits: &s.cfg.limits,
            model: &model,
            lora_dir: s.cfg.lora_dir.as_deref(),
            steer_dir: s.cfg.steer_dir.as_deref(),
            steer_uploads: s.cfg.steer_uploads,
            warm_available: s.cfg.cache.is_some(),
        };
        let mut spec = validate(body, uploads, &id2, &checks, &mut saved)?;
        spec.owner = Some(owner);
        let r = save_inputs(s, &saved).and_then(|()| {
            let job = NewJob {
                id: id2.clone(),
                batch_key: spec.batch_key(),
                steps: spec.steps as u32,
                spec: serde_json::to_string(&spec)
                    .map_err(|e| ApiError::internal(format!("encoding the request: {e}")))?,
            };
            s.store
                .submit(&job, s.cfg.queue_max)
                .map_err(ApiError::from)
        });
        if r.is_err() {
            remove_saved(s, &saved);
        }
        r
    })
    .await?;
    s.metrics.submitted.fetch_add(1, Ordering::Relaxed);
    s.wake.notify();
    Ok((id, pos))
}
