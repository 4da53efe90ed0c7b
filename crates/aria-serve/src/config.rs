//! What a server is started with: [`ServeConfig`] and its [`Limits`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::jobs::JobStore;

/// The limits a request must stay within. Each has a name (the field name), which a refusal
/// carries in its JSON error as `limit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `body_bytes`: largest request body (JSON or multipart, uploads included).
    pub body_bytes: usize,
    /// `seconds`: longest duration a request may ask for; never above the model's maximum
    /// (`None`: the model's maximum).
    pub max_seconds: Option<f64>,
    /// `prompt_chars`: longest prompt and negative prompt, in characters.
    pub prompt_chars: usize,
    /// `steps`: most sampler steps.
    pub max_steps: usize,
    /// `upload_bytes`: largest single uploaded file (audio or direction file).
    pub upload_bytes: usize,
    /// `upload_seconds`: longest uploaded audio clip.
    pub upload_seconds: f64,
    /// `loras`: most LoRA adapters in one request.
    pub max_loras: usize,
    /// `steer`: most steering directions in one request.
    pub max_steer: usize,
    /// `header_timeout`: time a client has to send the request line and headers (a late first
    /// request is answered `408` naming it); also how long an idle keep-alive connection is
    /// kept.
    pub header_timeout: Duration,
    /// `body_timeout`: time a client has to send the whole body once the headers are in.
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 32 << 20,
            max_seconds: None,
            prompt_chars: 2000,
            max_steps: 200,
            upload_bytes: 24 << 20,
            upload_seconds: 190.0,
            max_loras: 8,
            max_steer: 8,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The model a server runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// The tiny random-weight demo model, written to this folder if missing (tests, demos).
    DemoTiny(PathBuf),
    /// A model name or folder, resolved by [`aria::discover::resolve_model`].
    Spec(String),
}

/// Where the job queue lives.
#[derive(Clone)]
pub enum StoreSpec {
    /// A SQLite file (created if missing).
    Sqlite(PathBuf),
    /// A store built by the caller (e.g. PostgreSQL, or one shared by tests).
    Custom(Arc<dyn JobStore>),
}

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StoreSpec::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Everything [`crate::start`] needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The model.
    pub model: ModelSource,
    /// How to load it (device, precision, …). Its `loras` are ignored: requests name theirs.
    pub load: aria::LoadOptions,
    /// Address to bind (`127.0.0.1:0` picks a free port). Anything but a loopback address
    /// needs [`Self::token`].
    pub bind: SocketAddr,
    /// Bearer token the API requires (`Authorization: Bearer …`, or `?token=` for links the
    /// browser follows). Required off loopback; optional on it.
    pub token: Option<String>,
    /// Admin token: a request carrying it (`Authorization: Bearer …` or `?token=`) sees and
    /// cancels every client's jobs; other requests see only the jobs of their own client key
    /// (`X-Aria-Client`), or, without a key, the jobs submitted without one. It also passes
    /// the [`Self::token`] check. `None`: no admin.
    pub admin_token: Option<String>,
    /// Most queued jobs; a submit beyond gets `429` with `Retry-After`.
    pub queue_max: usize,
    /// Most jobs run as one batch.
    pub max_batch: usize,
    /// The job store.
    pub store: StoreSpec,
    /// Results directory (WAV files and uploads), shared by the workers of one host.
    pub results_dir: PathBuf,
    /// Allow-listed LoRA files: requests name files in this folder (`None`: no LoRA).
    pub lora_dir: Option<PathBuf>,
    /// Allow-listed direction files: requests name files in this folder (`None`: uploads
    /// only).
    pub steer_dir: Option<PathBuf>,
    /// Whether uploaded direction files are accepted.
    pub steer_uploads: bool,
    /// Warm-start cache store (`aria_cache::store::open` form); `None`: `warm_start` requests
    /// are refused.
    pub cache: Option<String>,
    /// Bounds of the warm-start cache (default [`aria_cache::manager::Capacity::DEFAULT`]:
    /// 1 000 entries, 4 GiB); beyond them the least important entries are evicted.
    pub cache_capacity: aria_cache::manager::Capacity,
    /// How many steps a cache hit skips (default: the skip gater, which learns from each
    /// result and keeps its state in the cache's store, shared by the workers).
    pub cache_skip: aria_cache::SkipPolicy,
    /// The cache's refinement worker: entries reused but weak in quality are regenerated
    /// within a share of the time, requests first (`None`: no refinement). Default
    /// [`aria_cache::manager::RefineConfig::default`] (best of 3, at most 5 attempts an
    /// entry, 10 % of the time).
    pub cache_refine: Option<aria_cache::manager::RefineConfig>,
    /// This worker's id in the store. [`ServeConfig::demo`] (and `aria serve` without
    /// `--worker-id`) picks one unique to the process (`HOST-PID-RANDOM`). The id is
    /// registered in the store and renewed with the lease: a start with an id another live
    /// process holds is refused; one whose process died (not renewed for a lease) is taken
    /// over. A process restarted with the same explicit id takes back the jobs it held, the
    /// attempt each was on counting (only a clean shutdown gives it back), so a job that
    /// crashes the process fails after [`Self::max_attempts`].
    pub worker_id: String,
    /// Lease of a claimed job; renewed every third of it.
    pub lease: Duration,
    /// How many times a job is claimed before a lost lease (or a crash of its process) fails
    /// it.
    pub max_attempts: u32,
    /// On shutdown, how long running jobs may take to finish before they are stopped and
    /// handed back to the queue.
    pub drain_timeout: Duration,
    /// Most HTTP connections served at once. A connection counts from the moment its first
    /// request head has arrived (idle or half-open connections do not take a place); one
    /// beyond the cap is answered `503` with `Retry-After` and closed. Connections still
    /// waiting for a request head are limited to four times this (at least 1 024); beyond
    /// that a new connection is answered `503` at once.
    pub max_connections: usize,
    /// Whether `SIGINT`/`SIGTERM` shut the server down (the `aria serve` program); tests use
    /// [`crate::RunningServer::shutdown`].
    pub handle_signals: bool,
    /// The request limits.
    pub limits: Limits,
    /// A pause after every sampler step, which makes the model look slower than it is (tests
    /// and load rehearsals with the tiny demo model; `None` in production).
    pub throttle: Option<Duration>,
    /// How long results (`{id}.wav` in [`Self::results_dir`]) are kept after their job ends;
    /// then a sweep (at start and every quarter of it, at most every 10 min) deletes them and
    /// marks their jobs expired (the audio answers `410 Gone`). Uploads are deleted as soon as
    /// their job ends. `Duration::ZERO` keeps results forever. Default 24 h.
    pub result_retention: Duration,
}

impl ServeConfig {
    /// A configuration for the demo model in `dir` (results under `dir/results`, jobs in
    /// `dir/jobs.sqlite`), bound to `127.0.0.1:0`.
    pub fn demo(dir: impl Into<PathBuf>) -> ServeConfig {
        let dir = dir.into();
        ServeConfig {
            model: ModelSource::DemoTiny(dir.join("model")),
            load: aria::LoadOptions::default(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            admin_token: None,
            queue_max: 64,
            max_batch: 4,
            store: StoreSpec::Sqlite(dir.join("jobs.sqlite")),
            results_dir: dir.join("results"),
            lora_dir: None,
            steer_dir: None,
            steer_uploads: true,
            cache: None,
            cache_capacity: aria_cache::manager::Capacity::DEFAULT,
            cache_skip: aria_cache::SkipPolicy::Gated(Default::default()),
            cache_refine: Some(aria_cache::manager::RefineConfig::default()),
            worker_id: crate::jobs::default_worker_id(),
            lease: Duration::from_secs(30),
            max_attempts: 3,
            drain_timeout: Duration::from_secs(30),
            max_connections: 256,
            handle_signals: false,
            limits: Limits::default(),
            throttle: None,
            result_retention: Duration::from_secs(24 * 3600),
        }
    }
}
