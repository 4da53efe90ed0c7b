//! What the HTTP side and the worker share.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use aria::CancelToken;
use serde::Serialize;

use crate::config::ServeConfig;
use crate::jobs::JobStore;
use crate::live::LiveJobs;
use crate::metrics::Metrics;
use crate::request::ModelLimits;

/// What `GET /info` says of the model.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The model folder's name.
    pub name: String,
    /// DiT weight precision.
    pub precision: String,
    /// Device.
    pub device: String,
    /// Output sample rate.
    pub sample_rate: u32,
    /// Output channels.
    pub channels: usize,
    /// The model's longest duration.
    pub max_seconds: f64,
    /// Preset steps.
    pub default_steps: usize,
    /// Preset guidance.
    pub default_cfg: f32,
    /// Preset sampler.
    pub default_sampler: String,
}

impl ModelInfo {
    /// The part the request checks need.
    pub fn limits(&self) -> ModelLimits {
        ModelLimits {
            max_seconds: self.max_seconds,
            default_steps: self.default_steps,
            default_cfg: self.default_cfg,
            default_sampler: self.default_sampler.clone(),
        }
    }
}

/// Wakes the worker when a job is submitted.
#[derive(Debug, Default)]
pub struct Wake {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Wake {
    /// Wake the worker.
    pub fn notify(&self) {
        if let Ok(mut f) = self.flag.lock() {
            *f = true;
            self.cv.notify_all();
        }
    }

    /// Wait for a notification, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        if let Ok(f) = self.flag.lock() {
            if let Ok((mut f, _)) = self.cv.wait_timeout_while(f, timeout, |f| !*f) {
                *f = false;
            }
        }
    }
}

/// State shared by the HTTP handlers and the worker thread.
pub struct Shared {
    /// The job queue.
    pub store: Arc<dyn JobStore>,
    /// The configuration.
    pub cfg: ServeConfig,
    /// Jobs running here.
    pub live: LiveJobs,
    /// Counters.
    pub metrics: Metrics,
    /// The model.
    pub model: ModelInfo,
    /// Wakes the worker.
    pub wake: Wake,
    /// Stop claiming jobs.
    pub stop: AtomicBool,
    /// Stop the running batch (its jobs are handed back to the queue).
    pub abort: CancelToken,
    /// Names of the allow-listed LoRA and direction files.
    pub allow_listed: (Vec<String>, Vec<String>),
}

/// The `.safetensors` file names (without extension) of `dir`, sorted.
pub fn list_dir(dir: Option<&std::path::Path>) -> Vec<String> {
    let Some(dir) = dir else {
        return Vec::new();
    };
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "safetensors")
                .then(|| p.file_stem()?.to_str().map(str::to_string))
                .flatten()
        })
        .collect();
    out.sort();
    out
}
