//! The HTTP API: routes, the JSON error shape, and the bearer-token check.
//!
//! Every error is `{"code": …, "error": "message", "limit": "name"?, "field": "name"?}` with
//! a 4xx/5xx status; a refusal over a limit names the limit (a [`crate::Limits`] field name or
//! `queue_max`).

mod audio;
mod generate;
mod jobs;
mod meta;
pub mod owner;
mod stream;

pub use meta::OPENAPI;
pub use stream::{StreamHub, StreamParams, MAX_STREAMS, MAX_STREAM_SECONDS};

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use crate::state::Shared;

/// An error answered to a client.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable kind (`invalid_request`, `limit_exceeded`, `queue_full`, `not_found`,
    /// `unauthorized`, `conflict`, `timeout`, `internal`).
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
    /// The limit exceeded.
    pub limit: Option<&'static str>,
    /// The request field at fault.
    pub field: Option<String>,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            limit: None,
            field: None,
            retry_after: None,
        }
    }

    /// 400 naming the field at fault.
    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
        }
    }

    /// 400 (or 413 for sizes) naming the limit exceeded.
    pub fn limit(limit: &'static str, message: impl Into<String>) -> ApiError {
        let status = match limit {
            "body_bytes" | "upload_bytes" => StatusCode::PAYLOAD_TOO_LARGE,
            "body_timeout" | "header_timeout" => StatusCode::REQUEST_TIMEOUT,
            "max_connections" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError {
            limit: Some(limit),
            ..ApiError::new(status, "limit_exceeded", message)
        }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl From<crate::ServeError> for ApiError {
    fn from(e: crate::ServeError) -> ApiError {
        match e {
            crate::ServeError::QueueFull { .. } => ApiError {
                limit: Some("queue_max"),
                retry_after: Some(2),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", e.to_string())
            },
            e => ApiError::internal(e.to_string()),
        }
    }
}

impl ApiError {
    /// The JSON body: `{"code", "error", "limit"?, "field"?}`.
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({ "code": self.code, "error": self.message });
        if let Some(l) = self.limit {
            body["limit"] = json!(l);
        }
        if let Some(f) = &self.field {
            body["field"] = json!(f);
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"aria\""),
            );
        }
        r
    }
}

/// Run blocking store work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("a store task failed: {e}")))?
}

/// Equal in time independent of where they differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token check: `Authorization: Bearer …` or `?token=…` (percent-decoded) with the
/// `token` or the `admin_token`; the page, its files and `/health` are open. Then the caller
/// ([`owner::Caller`]) goes with the request.
async fn auth(State(s): State<Arc<Shared>>, mut req: Request, next: Next) -> Response {
    let caller = owner::caller(&req, s.cfg.admin_token.as_deref());
    req.extensions_mut().insert(caller.clone());
    let Some(token) = s.cfg.token.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if matches!(path, "/" | "/app.js" | "/style.css" | "/health") {
        return next.run(req).await;
    }
    if caller.admin || owner::presents(&req, token) {
        return next.run(req).await;
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server requires a bearer token (Authorization: Bearer TOKEN)",
    )
    .into_response()
}

/// The configured folders and files, longest first, with the names errors use for them.
fn known_paths(s: &Shared) -> Vec<(String, &'static str)> {
    let c = &s.cfg;
    let mut dirs: Vec<(std::path::PathBuf, &'static str)> =
        vec![(c.results_dir.clone(), "results")];
    if let Some(d) = &c.lora_dir {
        dirs.push((d.clone(), "loras"));
    }
    if let Some(d) = &c.steer_dir {
        dirs.push((d.clone(), "directions"));
    }
    if let crate::config::ModelSource::DemoTiny(d) = &c.model {
        dirs.push((d.clone(), "model"));
    }
    if let crate::config::ModelSource::Spec(m) = &c.model {
        if std::path::Path::new(m).is_absolute() {
            dirs.push((m.into(), "model"));
        }
    }
    if let crate::config::StoreSpec::Sqlite(p) = &c.store {
        dirs.push((p.clone(), "job store"));
    }
    let mut out = Vec::new();
    for (d, name) in dirs {
        if let Ok(canon) = d.canonicalize() {
            out.push((canon.display().to_string(), name));
        }
        out.push((d.display().to_string(), name));
    }
    out.retain(|(p, _)| p.len() > 1);
    out.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    out
}

/// `text` with the server's folders replaced by their names.
pub(crate) fn scrub_paths(s: &Shared, text: &str) -> String {
    let mut t = text.to_string();
    for (p, name) in known_paths(s) {
        if t.contains(&p) {
            t = t.replace(&p, name);
        }
    }
    t
}

/// The `code` of an error status that no handler shaped.
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::PAYLOAD_TOO_LARGE => "limit_exceeded",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::CONFLICT => "conflict",
        StatusCode::TOO_MANY_REQUESTS => "queue_full",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "invalid_request",
    }
}

/// Every error in the JSON shape: an error no handler shaped (an extractor's rejection, a
/// wrong method) becomes `{"code", "error"}`, and no error carries a server folder.
async fn json_errors(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return ApiError::internal("an error answer could not be read").into_response();
    };
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let text = scrub_paths(&s, &String::from_utf8_lossy(&bytes));
    let body = if is_json {
        text
    } else {
        let message = match text.trim() {
            "" => status.canonical_reason().unwrap_or("error").to_string(),
            t => t.to_string(),
        };
        let mut e = ApiError::new(status, code_for(status), message);
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            e.limit = Some("body_bytes");
        } else if e.message.starts_with("Failed to deserialize query string") {
            e.field = Some("query".into());
        }
        e.body().to_string()
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such endpoint (see /openapi.json)")
}

/// The router of the whole API.
pub(crate) fn router(s: Arc<Shared>, hub: Arc<StreamHub>) -> Router {
    Router::new()
        .route("/", get(meta::index))
        .route("/app.js", get(meta::app_js))
        .route("/style.css", get(meta::style_css))
        .route("/health", get(meta::health))
        .route("/info", get(meta::info))
        .route("/metrics", get(meta::metrics))
        .route("/openapi.json", get(meta::openapi))
        .route("/v1/generate", axum::routing::post(generate::generate))
        .route("/v1/audio/generate", axum::routing::post(audio::generate))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{id}", get(jobs::get_job).delete(jobs::cancel))
        .route("/v1/jobs/{id}/audio", get(jobs::audio))
        .route("/v1/jobs/{id}/waveform.png", get(jobs::waveform))
        .route("/v1/jobs/{id}/spectrogram.png", get(jobs::spectrogram))
        .route(
            "/v1/stream",
            get(stream::get_stream).post(stream::post_stream),
        )
        .route("/v1/stream/{id}", get(stream::get_status))
        .route(
            "/v1/stream/{id}/prompt",
            axum::routing::post(stream::set_prompt),
        )
        .fallback(fallback)
        .layer(axum::Extension(hub))
        .layer(axum::extract::DefaultBodyLimit::max(
            s.cfg.limits.body_bytes.saturating_add(64 << 10),
        ))
        .layer(axum::middleware::from_fn_with_state(s.clone(), auth))
        .layer(axum::middleware::from_fn_with_state(s.clone(), json_errors))
        .with_state(s)
}
