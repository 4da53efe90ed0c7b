//! `POST /v1/audio/generate`: the audio-generation route of OpenAI-style servers (vllm-omni's
//! fields and behaviour). The request is translated into a native one and queued as the
//! caller's job (the same limits, queue, auth and owner as `/v1/generate`); the answer is the
//! audio itself: the whole file once the job is done, or, with `stream_format=audio`, a WAV
//! streamed while it decodes. The job's id is in the `X-Aria-Job` header, so the native routes
//! can follow or cancel it.
//!
//! Fields: `input` (the prompt, required), `model` (accepted, ignored: the server runs one
//! model), `audio_length` (seconds; default the native default), `audio_start` (0 only: SA3
//! conditions on the total length), `negative_prompt`, `guidance_scale`, `num_inference_steps`,
//! `seed`, `response_format` (`wav`, the default, or `flac`; `mp3` has no encoder here),
//! `speed` (1.0 only), `stream_format` (`audio`). Other fields are ignored. A field outside
//! these rules is answered 422, as the reference server answers a request it cannot validate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::generate::{counted, declared_length, read_body, submit_body};
use super::jobs::{self, AudioQuery};
use super::owner::Caller;
use super::ApiError;
use crate::request::GenerateBody;
use crate::state::Shared;

/// How long the route waits for its job to finish.
const WAIT: Duration = Duration::from_secs(600);

/// The request body.
#[derive(Debug, Deserialize)]
struct AudioGenerateBody {
    input: String,
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<String>,
    #[serde(default)]
    response_format: Option<String>,
    #[serde(default)]
    speed: Option<f64>,
    #[serde(default)]
    audio_length: Option<f64>,
    #[serde(default)]
    audio_start: Option<f64>,
    #[serde(default)]
    negative_prompt: Option<String>,
    #[serde(default)]
    guidance_scale: Option<f32>,
    #[serde(default)]
    num_inference_steps: Option<usize>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    stream_format: Option<String>,
}

/// 422 naming the field, as the reference server answers a request it cannot validate.
fn unprocessable(field: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        ..ApiError::invalid(field, message)
    }
}

/// The native request, the response format (`true`: FLAC) and whether to stream.
fn translate(b: AudioGenerateBody) -> Result<(GenerateBody, bool, bool), ApiError> {
    let flac = match b.response_format.as_deref() {
        None | Some("wav") => false,
        Some("flac") => true,
        Some(f @ ("mp3" | "pcm" | "aac" | "opus")) => {
            return Err(unprocessable(
                "response_format",
                format!("response_format: `{f}` is not available here (wav, flac)"),
            ))
        }
        Some(f) => {
            return Err(unprocessable(
                "response_format",
                format!("response_format: `{f}` is not one of wav, flac"),
            ))
        }
    };
    let stream = match b.stream_format.as_deref() {
        None => false,
        Some("audio") => true,
        Some(f) => {
            return Err(unprocessable(
                "stream_format",
                format!("stream_format: `{f}` is not `audio`"),
            ))
        }
    };
    if let Some(v) = b.speed {
        if !(0.25..=4.0).contains(&v) {
            return Err(unprocessable(
                "speed",
                format!("speed: {v} is not in 0.25..=4.0"),
            ));
        }
        if v != 1.0 {
            return Err(unprocessable(
                "speed",
                format!("speed: {v} is not supported (only 1.0: the clip is not time-stretched)"),
            ));
        }
    }
    if let Some(v) = b.audio_start.filter(|&v| v != 0.0) {
        return Err(unprocessable(
            "audio_start",
            format!(
                "audio_start: {v} is not supported (the model conditions on the total length \
                 only; use 0)"
            ),
        ));
    }
    let seed = match b.seed {
        Some(v) if v < 0 => return Err(unprocessable("seed", format!("seed: {v} is negative"))),
        v => v.map(|v| v as u64),
    };
    let body = GenerateBody {
        prompt: b.input,
        negative_prompt: b.negative_prompt,
        seconds: b.audio_length,
        steps: b.num_inference_steps,
        cfg: b.guidance_scale,
        seed,
        sampler: None,
        init_audio: None,
        inpaint: None,
        loras: Vec::new(),
        steer: Vec::new(),
        warm_start: false,
    };
    Ok((body, flac, stream))
}

pub(super) async fn generate(
    State(s): State<Arc<Shared>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Response {
    match run(&s, &caller, req).await {
        Ok(r) => r,
        Err(e) => counted(&s, e).into_response(),
    }
}

async fn run(s: &Arc<Shared>, caller: &Caller, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = read_body(s, body, declared_length(&parts.headers)).await?;
    let b: AudioGenerateBody = serde_json::from_slice(&bytes)
        .map_err(|e| unprocessable("body", format!("request body is not a valid request: {e}")))?;
    let (body, flac, stream) = translate(b)?;
    // The native checks answer 400; this route answers what it cannot take with 422.
    let (id, _) = submit_body(s, caller, body, Vec::new())
        .await
        .map_err(|e| match e.status {
            StatusCode::BAD_REQUEST if e.code == "invalid_request" => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                ..e
            },
            _ => e,
        })?;
    let mut r = if stream {
        let format = if flac { "flac" } else { "wav" };
        jobs::audio(
            State(s.clone()),
            Extension(caller.clone()),
            Path(id.clone()),
            Query(AudioQuery::new(format)),
        )
        .await?
    } else {
        whole(s, caller, &id, flac).await?
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        r.headers_mut().insert("x-aria-job", v);
    }
    Ok(r)
}

/// The finished job's audio as one body.
async fn whole(
    s: &Arc<Shared>,
    caller: &Caller,
    id: &str,
    flac: bool,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    loop {
        if let Some(wav) = jobs::finished_wav(s, caller, id).await? {
            return jobs::audio_response(wav, flac).await;
        }
        if t0.elapsed() > WAIT {
            return Err(ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                code: "timeout",
                ..ApiError::conflict(format!(
                    "job `{id}` did not finish within {} s (follow it at /v1/jobs/{id})",
                    WAIT.as_secs()
                ))
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> AudioGenerateBody {
        serde_json::from_str(json).expect("body")
    }

    /// vllm-omni's fields map onto the native request; what cannot be honoured is 422.
    #[test]
    fn fields_translate_or_are_refused() {
        let (g, flac, stream) = translate(body(
            r#"{"input": "rain sounds", "model": "stable-audio", "response_format": "flac",
                "audio_length": 10.0, "audio_start": 0.0, "negative_prompt": "noise",
                "guidance_scale": 7.5, "num_inference_steps": 100, "seed": 42, "speed": 1.0}"#,
        ))
        .expect("ok");
        assert!(flac && !stream);
        assert_eq!(g.prompt, "rain sounds");
        assert_eq!(g.seconds, Some(10.0));
        assert_eq!(g.negative_prompt.as_deref(), Some("noise"));
        assert_eq!(g.cfg, Some(7.5));
        assert_eq!(g.steps, Some(100));
        assert_eq!(g.seed, Some(42));
        let (_, flac, stream) =
            translate(body(r#"{"input": "x", "stream_format": "audio"}"#)).expect("ok");
        assert!(!flac && stream);
        for (json, field) in [
            (
                r#"{"input": "x", "response_format": "banana"}"#,
                "response_format",
            ),
            (
                r#"{"input": "x", "response_format": "mp3"}"#,
                "response_format",
            ),
            (r#"{"input": "x", "stream_format": "sse"}"#, "stream_format"),
            (r#"{"input": "x", "speed": 0.1}"#, "speed"),
            (r#"{"input": "x", "speed": 2.0}"#, "speed"),
            (r#"{"input": "x", "audio_start": 2.0}"#, "audio_start"),
            (r#"{"input": "x", "seed": -1}"#, "seed"),
        ] {
            let e = translate(body(json)).expect_err(json);
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY, "{json}");
            assert_eq!(e.field.as_deref(), Some(field), "{json}");
        }
    }
}
