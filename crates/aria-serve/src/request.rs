//! `POST /v1/generate` bodies: parsing, limits, and the [`JobSpec`] a job stores.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::api::ApiError;
use crate::config::Limits;

/// The body of `POST /v1/generate` (JSON, or the `request` part of a multipart upload).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    /// The prompt.
    pub prompt: String,
    /// Negative prompt (used when `cfg != 1`).
    #[serde(default)]
    pub negative_prompt: Option<String>,
    /// Duration in seconds (default: 10, or the maximum when lower).
    #[serde(default, alias = "duration")]
    pub seconds: Option<f64>,
    /// Sampler steps (default: the model's preset).
    #[serde(default)]
    pub steps: Option<usize>,
    /// Guidance scale (default: the model's preset).
    #[serde(default)]
    pub cfg: Option<f32>,
    /// Seed (default: random).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Sampler name (`pingpong`, `euler`, `rk4`, `dpmpp`; default: the model's).
    #[serde(default)]
    pub sampler: Option<String>,
    /// Audio-to-audio start.
    #[serde(default)]
    pub init_audio: Option<InitBody>,
    /// Inpainting.
    #[serde(default)]
    pub inpaint: Option<InpaintBody>,
    /// LoRA adapters from the server's LoRA folder.
    #[serde(default)]
    pub loras: Vec<LoraBody>,
    /// Steering directions.
    #[serde(default)]
    pub steer: Vec<SteerBody>,
    /// Start from a close cached result (the server's warm-start cache).
    #[serde(default)]
    pub warm_start: bool,
}

/// `init_audio`: the clip as base64 (or the multipart part `init_audio`) and its noise level.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitBody {
    /// The audio file (WAV, FLAC, …) as base64.
    #[serde(default)]
    pub data: Option<String>,
    /// Noise level in (0, 1] (default 0.9).
    #[serde(default)]
    pub noise_level: Option<f32>,
}

/// `inpaint`: the clip as base64 (or the multipart part `inpaint_audio`) and the ranges.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InpaintBody {
    /// The audio file as base64.
    #[serde(default)]
    pub data: Option<String>,
    /// `[start, end]` seconds of each region to regenerate.
    pub ranges: Vec<[f64; 2]>,
}

/// A LoRA by name (a file of the LoRA folder, with or without `.safetensors`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoraBody {
    /// File name in the LoRA folder.
    pub name: String,
    /// Strength (default 1).
    #[serde(default = "one")]
    pub strength: f32,
}

fn one() -> f32 {
    1.0
}

/// A steering direction: a file of the direction folder (`name`), or uploaded (`data` as
/// base64, or the multipart part `steer{i}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteerBody {
    /// File name in the direction folder.
    #[serde(default)]
    pub name: Option<String>,
    /// The direction file as base64.
    #[serde(default)]
    pub data: Option<String>,
    /// `residual`, `latent` or `text` (default: the file's only site).
    #[serde(default)]
    pub site: Option<String>,
    /// Residual block.
    #[serde(default)]
    pub block: Option<usize>,
    /// Strength (default: the file's convention).
    #[serde(default)]
    pub strength: Option<f32>,
    /// `add` or `project`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `[lo, hi]` inclusive 0-based steps.
    #[serde(default)]
    pub steps: Option<[usize; 2]>,
}

/// Where a stored direction comes from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum SteerSource {
    /// A file name in the direction folder.
    Name(String),
    /// A file (relative to the results directory) holding an upload.
    Upload(String),
}

/// A steering as a job stores it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SteerChoice {
    /// The direction file.
    pub source: SteerSource,
    /// Site name.
    pub site: Option<String>,
    /// Residual block.
    pub block: Option<usize>,
    /// Strength.
    pub strength: Option<f32>,
    /// `add` or `project`.
    pub mode: Option<String>,
    /// Step span.
    pub steps: Option<[usize; 2]>,
}

/// An audio input as a job stores it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AudioInput {
    /// File relative to the results directory.
    pub file: String,
    /// Noise level (init audio).
    pub noise_level: f32,
    /// Ranges (inpainting).
    pub ranges: Vec<(f64, f64)>,
}

/// A validated request, as a job stores it (JSON in [`crate::jobs::NewJob::spec`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobSpec {
    /// The prompt.
    pub prompt: String,
    /// Negative prompt.
    pub negative_prompt: Option<String>,
    /// Duration in seconds.
    pub seconds: f64,
    /// Sampler steps.
    pub steps: usize,
    /// Guidance scale.
    pub cfg: f32,
    /// Seed.
    pub seed: u64,
    /// Sampler name.
    pub sampler: String,
    /// Audio-to-audio start.
    pub init: Option<AudioInput>,
    /// Inpainting.
    pub inpaint: Option<AudioInput>,
    /// LoRA adapters.
    pub loras: Vec<LoraBody>,
    /// Steering.
    pub steer: Vec<SteerChoice>,
    /// Warm start through the cache.
    pub warm_start: bool,
    /// The hashed client key of the submitter (`None`: submitted without one, or before
    /// jobs had owners); see [`crate::api::owner`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl JobSpec {
    /// The batching key: jobs with the same key can run as one batch. `None` (run alone) for
    /// audio inputs, uploaded directions and warm starts.
    pub fn batch_key(&self) -> Option<String> {
        let uploads = self
            .steer
            .iter()
            .any(|s| matches!(s.source, SteerSource::Upload(_)));
        if self.init.is_some() || self.inpaint.is_some() || self.warm_start || uploads {
            return None;
        }
        let key = serde_json::json!({
            "seconds": self.seconds,
            "steps": self.steps,
            "cfg": self.cfg,
            "sampler": self.sampler,
            "negative": self.negative_prompt.is_some(),
            "loras": self.loras,
            "steer": self.steer,
        });
        Some(key.to_string())
    }
}

/// What the HTTP side knows of the model to check a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLimits {
    /// The model's longest duration.
    pub max_seconds: f64,
    /// Preset steps.
    pub default_steps: usize,
    /// Preset guidance.
    pub default_cfg: f32,
    /// Preset sampler.
    pub default_sampler: String,
}

/// An uploaded file with the part name it came in.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Multipart field name (`init_audio`, `inpaint_audio`, `steer0`, …).
    pub field: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

fn bad(field: &str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(field, msg)
}

fn decode_b64(field: &str, s: &str, limits: &Limits) -> Result<Vec<u8>, ApiError> {
    // Base64 is 4/3 of the bytes; refuse before decoding.
    if s.len() / 4 * 3 > limits.upload_bytes + 3 {
        return Err(ApiError::limit(
            "upload_bytes",
            format!(
                "{field}: upload of about {} bytes exceeds upload_bytes = {}",
                s.len() / 4 * 3,
                limits.upload_bytes
            ),
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| bad(field, format!("{field}: not valid base64: {e}")))
}

fn take_upload(uploads: &mut Vec<Upload>, field: &str) -> Option<Vec<u8>> {
    let i = uploads.iter().position(|u| u.field == field)?;
    Some(uploads.swap_remove(i).bytes)
}

/// A file name that stays inside its folder: no separators, no `..`, no leading dot.
fn safe_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '));
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("{field}: `{name}` is not a plain file name of the allow-listed folder"),
        ))
    }
}

/// The allow-listed file `name` (with or without `.safetensors`) in `dir`.
pub fn allow_listed(field: &str, dir: Option<&Path>, name: &str) -> Result<PathBuf, ApiError> {
    safe_name(field, name)?;
    let dir = dir.ok_or_else(|| {
        bad(
            field,
            format!("{field}: this server has no folder of allow-listed files"),
        )
    })?;
    let direct = dir.join(name);
    let with_ext = dir.join(format!("{name}.safetensors"));
    [direct, with_ext]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| bad(field, format!("{field}: no file `{name}` is allow-listed")))
}

/// The files a request's uploads are saved to before its job is submitted.
#[derive(Debug, Default)]
pub struct SavedInputs {
    /// `(relative file name, bytes)` to write under the results directory.
    pub files: Vec<(String, Vec<u8>)>,
}

/// What a request is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Checks<'a> {
    /// The limits.
    pub limits: &'a Limits,
    /// The model's.
    pub model: &'a ModelLimits,
    /// Allow-listed LoRA files.
    pub lora_dir: Option<&'a Path>,
    /// Allow-listed direction files.
    pub steer_dir: Option<&'a Path>,
    /// Whether uploaded directions are accepted.
    pub steer_uploads: bool,
    /// Whether a warm-start cache is configured.
    pub warm_available: bool,
}

/// Check `body` (and its multipart `uploads`) against `checks`, and build the job's spec;
/// uploads to save go to `saved` under names derived from `job_id`.
pub fn validate(
    body: GenerateBody,
    mut uploads: Vec<Upload>,
    job_id: &str,
    checks: &Checks<'_>,
    saved: &mut SavedInputs,
) -> Result<JobSpec, ApiError> {
    let Checks {
        limits,
        model,
        lora_dir,
        steer_dir,
        steer_uploads,
        warm_available,
    } = *checks;
    let chars = |s: &str| s.chars().count();
    if body.prompt.trim().is_empty() {
        return Err(bad("prompt", "prompt: must not be empty"));
    }
    for (field, text) in [
        ("prompt", Some(&body.prompt)),
        ("negative_prompt", body.negative_prompt.as_ref()),
    ] {
        if let Some(t) = text {
            if chars(t) > limits.prompt_chars {
                return Err(ApiError::limit(
                    "prompt_chars",
                    format!(
                        "{field}: {} characters exceed prompt_chars = {}",
                        chars(t),
                        limits.prompt_chars
                    ),
                ));
            }
        }
    }
    let max_seconds = limits
        .max_seconds
        .map_or(model.max_seconds, |m| m.min(model.max_seconds));
    let seconds = body.seconds.unwrap_or(10f64.min(max_seconds));
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(bad(
            "seconds",
            format!("seconds: must be a positive number, got {seconds}"),
        ));
    }
    if seconds > max_seconds {
        return Err(ApiError::limit(
            "seconds",
            format!("seconds: {seconds} exceeds the maximum of {max_seconds:.2} s"),
        ));
    }
    let steps = body.steps.unwrap_or(model.default_steps);
    if steps == 0 {
        return Err(bad("steps", "steps: must be at least 1"));
    }
    if steps > limits.max_steps {
        return Err(ApiError::limit(
            "steps",
            format!("steps: {steps} exceeds max_steps = {}", limits.max_steps),
        ));
    }
    let cfg = body.cfg.unwrap_or(model.default_cfg);
    if !cfg.is_finite() || !(0.0..=100.0).contains(&cfg) {
        return Err(bad("cfg", format!("cfg: must be in [0, 100], got {cfg}")));
    }
    let sampler = match &body.sampler {
        Some(s) => {
            aria::SamplerKind::parse(s).map_err(|e| bad("sampler", format!("sampler: {e}")))?;
            s.clone()
        }
        None => model.default_sampler.clone(),
    };
    let seed = body.seed.unwrap_or_else(random_seed);

    let mut audio_input =
        |field: &str, part: &str, data: Option<&String>| -> Result<String, ApiError> {
            let bytes = match (data, take_upload(&mut uploads, part)) {
                (Some(_), Some(_)) => {
                    return Err(bad(
                        field,
                        format!("{field}: given both as base64 `data` and as the part `{part}`"),
                    ))
                }
                (Some(d), None) => decode_b64(field, d, limits)?,
                (None, Some(b)) => b,
                (None, None) => {
                    return Err(bad(
                        field,
                        format!("{field}: needs the audio as base64 `data` or a part `{part}`"),
                    ))
                }
            };
            if bytes.len() > limits.upload_bytes {
                return Err(ApiError::limit(
                    "upload_bytes",
                    format!(
                        "{field}: {} bytes exceed upload_bytes = {}",
                        bytes.len(),
                        limits.upload_bytes
                    ),
                ));
            }
            let name = format!("inputs/{job_id}.{part}");
            saved.files.push((name.clone(), bytes));
            Ok(name)
        };
    let init = match &body.init_audio {
        Some(i) => {
            let level = i.noise_level.unwrap_or(0.9);
            if !(level > 0.0 && level <= 1.0) {
                return Err(bad(
                    "init_audio.noise_level",
                    format!("init_audio.noise_level: must be in (0, 1], got {level}"),
                ));
            }
            Some(AudioInput {
                file: audio_input("init_audio", "init_audio", i.data.as_ref())?,
                noise_level: level,
                ranges: Vec::new(),
            })
        }
        None => None,
    };
    let inpaint = match &body.inpaint {
        Some(i) => {
            if i.ranges.is_empty() {
                return Err(bad(
                    "inpaint.ranges",
                    "inpaint.ranges: needs at least one range",
                ));
            }
            for r in &i.ranges {
                if !(r[0] >= 0.0 && r[0] < r[1] && r[1] <= seconds) {
                    return Err(bad(
                        "inpaint.ranges",
                        format!(
                            "inpaint.ranges: [{}, {}] must satisfy 0 <= start < end <= seconds \
                             ({seconds})",
                            r[0], r[1]
                        ),
                    ));
                }
            }
            Some(AudioInput {
                file: audio_input("inpaint", "inpaint_audio", i.data.as_ref())?,
                noise_level: 1.0,
                ranges: i.ranges.iter().map(|r| (r[0], r[1])).collect(),
            })
        }
        None => None,
    };
    if init.is_some() && body.warm_start {
        return Err(bad(
            "warm_start",
            "warm_start: does not combine with init_audio",
        ));
    }
    if body.loras.len() > limits.max_loras {
        return Err(ApiError::limit(
            "loras",
            format!(
                "loras: {} adapters exceed max_loras = {}",
                body.loras.len(),
                limits.max_loras
            ),
        ));
    }
    for (i, l) in body.loras.iter().enumerate() {
        let field = format!("loras[{i}]");
        if !l.strength.is_finite() || l.strength.abs() > 10.0 {
            return Err(bad(
                &field,
                format!(
                    "{field}.strength: must be finite in [-10, 10], got {}",
                    l.strength
                ),
            ));
        }
        allow_listed(&field, lora_dir, &l.name)?;
    }
    if body.steer.len() > limits.max_steer {
        return Err(ApiError::limit(
            "steer",
            format!(
                "steer: {} directions exceed max_steer = {}",
                body.steer.len(),
                limits.max_steer
            ),
        ));
    }
    let mut steer = Vec::with_capacity(body.steer.len());
    for (i, s) in body.steer.iter().enumerate() {
        let field = format!("steer[{i}]");
        let part = format!("steer{i}");
        let upload = take_upload(&mut uploads, &part);
        let source = match (&s.name, &s.data, upload) {
            (Some(n), None, None) => {
                allow_listed(&field, steer_dir, n)?;
                SteerSource::Name(n.clone())
            }
            (None, Some(_), None) | (None, None, Some(_)) if !steer_uploads => {
                return Err(bad(
                    &field,
                    format!("{field}: this server does not accept uploaded directions"),
                ))
            }
            (None, Some(d), None) => {
                let bytes = decode_b64(&field, d, limits)?;
                let name = format!("inputs/{job_id}.{part}.safetensors");
                saved.files.push((name.clone(), bytes));
                SteerSource::Upload(name)
            }
            (None, None, Some(bytes)) => {
                if bytes.len() > limits.upload_bytes {
                    return Err(ApiError::limit(
                        "upload_bytes",
                        format!(
                            "{field}: {} bytes exceed upload_bytes = {}",
                            bytes.len(),
                            limits.upload_bytes
                        ),
                    ));
                }
                let name = format!("inputs/{job_id}.{part}.safetensors");
                saved.files.push((name.clone(), bytes));
                SteerSource::Upload(name)
            }
            _ => {
                return Err(bad(
                    &field,
                    format!("{field}: give exactly one of `name`, `data` or a part `{part}`"),
                ))
            }
        };
        if let Some(st) = s.strength {
            if !st.is_finite() || st.abs() > 1000.0 {
                return Err(bad(
                    &field,
                    format!("{field}.strength: must be finite in [-1000, 1000], got {st}"),
                ));
            }
        }
        if let Some(m) = &s.mode {
            if m != "add" && m != "project" {
                return Err(bad(
                    &field,
                    format!("{field}.mode: `{m}` is not `add` or `project`"),
                ));
            }
        }
        if let Some(site) = &s.site {
            if !matches!(site.as_str(), "residual" | "latent" | "text") {
                return Err(bad(
                    &field,
                    format!("{field}.site: `{site}` is not residual, latent or text"),
                ));
            }
        }
        if let Some([lo, hi]) = s.steps {
            if lo > hi || hi >= steps {
                return Err(bad(
                    &field,
                    format!("{field}.steps: [{lo}, {hi}] must satisfy lo <= hi < steps ({steps})"),
                ));
            }
        }
        steer.push(SteerChoice {
            source,
            site: s.site.clone(),
            block: s.block,
            strength: s.strength,
            mode: s.mode.clone(),
            steps: s.steps,
        });
    }
    if body.warm_start && !warm_available {
        return Err(bad(
            "warm_start",
            "warm_start: this server has no warm-start cache (start it with --cache)",
        ));
    }
    if body.warm_start && (!steer.is_empty() || inpaint.is_some()) {
        return Err(bad(
            "warm_start",
            "warm_start: does not combine with steer or inpaint",
        ));
    }
    if let Some(u) = uploads.first() {
        return Err(bad(
            &u.field,
            format!("{}: no request field takes this part", u.field),
        ));
    }
    Ok(JobSpec {
        prompt: body.prompt,
        negative_prompt: body.negative_prompt,
        seconds,
        steps,
        cfg,
        seed,
        sampler,
        init,
        inpaint,
        loras: body.loras,
        steer,
        warm_start: body.warm_start,
        owner: None,
    })
}

/// A seed from the clock (when a request gives none).
pub fn random_seed() -> u64 {
    let id = crate::jobs::new_job_id();
    u64::from_str_radix(&id[..12], 16).unwrap_or(0) % 1_000_000_000
}
