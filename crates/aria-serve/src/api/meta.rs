//! The page, `/health`, `/info`, `/metrics` and `/openapi.json`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{blocking, ApiError};
use crate::state::Shared;

/// The OpenAPI 3 document of this API.
pub const OPENAPI: &str = include_str!("../../openapi.json");

pub(super) async fn index() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("../../web/index.html"),
    )
        .into_response()
}

pub(super) async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../web/app.js"),
    )
        .into_response()
}

pub(super) async fn style_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../web/style.css"),
    )
        .into_response()
}

pub(super) async fn health(State(s): State<Arc<Shared>>) -> Response {
    let stopping = s.stop.load(std::sync::atomic::Ordering::SeqCst);
    let store = blocking(move || Ok(s.store.counts()?)).await;
    match (store, stopping) {
        (Ok(c), false) => {
            axum::Json(json!({ "status": "ok", "queued": c.queued, "running": c.running }))
                .into_response()
        }
        (Ok(_), true) => ApiError::unavailable("the server is shutting down").into_response(),
        (Err(e), _) => ApiError::unavailable(format!("job store: {}", e.message)).into_response(),
    }
}

pub(super) async fn info(State(s): State<Arc<Shared>>) -> Response {
    let l = &s.cfg.limits;
    let max_seconds = l
        .max_seconds
        .map_or(s.model.max_seconds, |m| m.min(s.model.max_seconds));
    axum::Json(json!({
        "name": "aria-serve",
        "version": env!("CARGO_PKG_VERSION"),
        "model": s.model,
        "worker": s.cfg.worker_id,
        "auth": s.cfg.token.is_some(),
        "queue_max": s.cfg.queue_max,
        "max_batch": s.cfg.max_batch,
        "warm_start": s.cfg.cache.is_some(),
        "loras": s.allow_listed.0,
        "steer": s.allow_listed.1,
        "steer_uploads": s.cfg.steer_uploads,
        "limits": {
            "body_bytes": l.body_bytes,
            "seconds": max_seconds,
            "prompt_chars": l.prompt_chars,
            "steps": l.max_steps,
            "upload_bytes": l.upload_bytes,
            "upload_seconds": l.upload_seconds,
            "loras": l.max_loras,
            "steer": l.max_steer,
            "header_timeout_s": l.header_timeout.as_secs_f64(),
            "body_timeout_s": l.body_timeout.as_secs_f64(),
        },
    }))
    .into_response()
}

pub(super) async fn metrics(State(s): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let s2 = s.clone();
    let counts = blocking(move || Ok(s2.store.counts()?)).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(&counts),
    )
        .into_response())
}

pub(super) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
