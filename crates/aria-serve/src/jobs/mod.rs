//! The durable job queue: every accepted request is a row of a [`JobStore`] before its `202` is
//! sent, and leaves the queue only as `done`, `failed` or `cancelled`.
//!
//! A job moves through these states:
//!
//! ```text
//!   submit ──► queued ──claim──► running ──finish──► done | failed | cancelled
//!                │  ▲               │
//!         cancel │  └── requeue_expired / release / release_crashed
//!                ▼
//!            cancelled
//! ```
//!
//! Workers (one per process, each with its own id) *claim* queued jobs under a *lease*: a
//! deadline they keep pushing back with [`JobStore::heartbeat`] while they run. A worker that
//! dies stops renewing; once the lease has passed, [`JobStore::requeue_expired`] (called
//! periodically by every worker) puts its jobs back at the head of the queue, or fails them
//! after too many attempts. A worker that stops cleanly hands its jobs back at once with
//! [`JobStore::release`], and the attempt it was on does not count. A process that crashes
//! does not: when a process with the same id starts again it settles the jobs left under
//! that id with [`JobStore::release_crashed`], the attempt counting, so a job that crashes
//! its worker fails after `max_attempts` instead of being retried forever. So no accepted job
//! is lost and none runs to completion twice: a [`JobStore::finish`] from a worker that no
//! longer holds the job is refused.
//!
//! Worker ids are registered ([`JobStore::register_worker`]) and renewed with the lease, so a
//! second live process with the same id is refused at start; a registration older than its
//! lease belongs to a dead process and is taken over.
//!
//! The store is synchronous; the HTTP side calls it through `tokio::task::spawn_blocking`.
//! Implementations: [`sqlite::SqliteStore`] (one host) and, with the `postgres` feature, a
//! PostgreSQL store for several workers. Times are Unix milliseconds from the store's clock
//! ([`now_ms`] for the SQLite store).

#[cfg(feature = "postgres")]
pub mod postgres;
pub mod registry;
pub mod retention;
pub mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::{Result, ServeError};

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Accepted, waiting for a worker.
    Queued,
    /// Claimed by a worker (which holds a lease on it).
    Running,
    /// Finished; the audio is in the results directory.
    Done,
    /// Finished with an error.
    Failed,
    /// Cancelled before or while it ran.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The name stored and shown in the API (`queued`, `running`, `done`, `failed`,
    /// `cancelled`).
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The state named `s` (as [`Self::name`] writes it).
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the job is finished (done, failed or cancelled): nothing changes it any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

/// A job to submit.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Its id (unique; chosen by the caller, see [`new_job_id`]).
    pub id: String,
    /// The validated request, as JSON (opaque to the store).
    pub spec: String,
    /// Jobs with equal `Some` keys may run together as one batch; `None`: always alone.
    pub batch_key: Option<String>,
    /// Sampler steps it will run (for progress before it starts).
    pub steps: u32,
}

/// A job as the store holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRecord {
    /// Its id.
    pub id: String,
    /// Submission order (strictly increasing across the store; FIFO order of the queue).
    pub seq: i64,
    /// Current state.
    pub state: JobState,
    /// The request as JSON ([`NewJob::spec`]).
    #[serde(skip)]
    pub spec: String,
    /// The batching key ([`NewJob::batch_key`]).
    #[serde(skip)]
    pub batch_key: Option<String>,
    /// When it was submitted.
    pub created_ms: i64,
    /// When the current (or last) attempt was claimed.
    pub started_ms: Option<i64>,
    /// When it reached a terminal state.
    pub finished_ms: Option<i64>,
    /// The worker holding it (running), or the one that finished it.
    pub worker: Option<String>,
    /// End of the current lease (running only).
    pub lease_until_ms: Option<i64>,
    /// How many times it was claimed.
    pub attempts: u32,
    /// Sampler steps done.
    pub step: u32,
    /// Sampler steps in all.
    pub steps: u32,
    /// Progress in `0..=1` (conditioning, steps and decoding together).
    pub progress: f32,
    /// File name of the result in the results directory (done only).
    pub result: Option<String>,
    /// What went wrong (failed), or why it was cancelled.
    pub error: Option<String>,
    /// Stage timings as JSON, when the worker reported them.
    #[serde(skip)]
    pub timings: Option<String>,
    /// Whether a cancel was asked for while it ran (the worker stops at the next step).
    pub cancel_requested: bool,
}

/// How a claimed job ended, as its worker reports it to [`JobStore::finish`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The audio was written.
    Done {
        /// File name in the results directory.
        result: String,
        /// Stage timings as JSON.
        timings: String,
    },
    /// It failed; the message says why (shown to the client).
    Failed(String),
    /// It stopped because it was cancelled.
    Cancelled,
}

/// What [`JobStore::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was queued: it is now `cancelled` and will never run.
    Removed,
    /// It is running: `cancel_requested` is set; its worker stops it at the next step (seen
    /// through [`JobStore::progress`] / [`JobStore::heartbeat`]) and finishes it `cancelled`.
    Requested,
    /// It had already finished in this state; nothing changed.
    AlreadyFinished(JobState),
    /// No job has this id.
    NotFound,
}

/// What [`JobStore::requeue_expired`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requeued {
    /// Jobs put back in the queue.
    pub requeued: Vec<String>,
    /// Jobs failed because they had used up their attempts.
    pub failed: Vec<String>,
    /// Jobs whose cancel had been asked for: now `cancelled`.
    pub cancelled: Vec<String>,
}

/// How many jobs are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// Queued jobs (the queue depth).
    pub queued: u64,
    /// Running jobs.
    pub running: u64,
    /// Done jobs.
    pub done: u64,
    /// Failed jobs.
    pub failed: u64,
    /// Cancelled jobs.
    pub cancelled: u64,
}

impl StateCounts {
    /// The count of `state`.
    pub fn get(&self, state: JobState) -> u64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Done => self.done,
            JobState::Failed => self.failed,
            JobState::Cancelled => self.cancelled,
        }
    }
}

/// Which jobs [`JobStore::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only jobs in this state (`None`: all).
    pub state: Option<JobState>,
    /// At most this many (newest first).
    pub limit: usize,
    /// Only jobs submitted before this `seq` (`None`: from the newest); paging.
    pub before_seq: Option<i64>,
}

/// The job queue, shared by the HTTP side (submit, get, cancel, list) and the workers (claim,
/// heartbeat, progress, finish, requeue). Every method is atomic: it either happens completely
/// and durably before returning, or returns an error and changes nothing. Implementations are
/// `Send + Sync` and may be called from many threads at once.
pub trait JobStore: Send + Sync {
    /// Add `job` to the tail of the queue if fewer than `max_queued` jobs are queued (running
    /// ones do not count), and return its queue position (0-based: the number of queued jobs
    /// ahead of it). The row is durable (committed) when this returns. Errors:
    /// [`crate::ServeError::QueueFull`] when `max_queued` jobs are already queued;
    /// [`crate::ServeError::Store`] when the id exists or the store fails.
    fn submit(&self, job: &NewJob, max_queued: usize) -> Result<usize>;

    /// Claim for `worker` the oldest queued job and, when it has a batch key, up to `max - 1`
    /// more queued jobs with the same key (in queue order); `max == 0` claims nothing. Each
    /// claimed job becomes `running` with `worker`, `started_ms = now`, `lease_until_ms = now +
    /// lease`, `attempts + 1`, `step = 0`, `progress = 0`. Returns them in queue order (empty
    /// when the queue is empty). Two concurrent claims never return the same job.
    fn claim(&self, worker: &str, max: usize, lease: Duration) -> Result<Vec<JobRecord>>;

    /// Push the lease of every job in `ids` that `worker` still holds (running, same worker)
    /// to `now + lease`. Returns the ids, among those, whose cancel was asked for. Jobs it no
    /// longer holds are skipped (their ids are in neither list; [`Self::get`] tells why).
    fn heartbeat(&self, worker: &str, ids: &[String], lease: Duration) -> Result<Vec<String>>;

    /// Record the progress of a job `worker` holds (`step` of `steps` sampler steps,
    /// `progress` in `0..=1`, clamped). Returns `Ok(true)` when its cancel was asked for (stop
    /// and finish it [`Outcome::Cancelled`]), `Ok(false)` otherwise, including when the worker
    /// no longer holds it (nothing is written then).
    fn progress(
        &self,
        id: &str,
        worker: &str,
        step: u32,
        steps: u32,
        progress: f32,
    ) -> Result<bool>;

    /// Finish a job `worker` holds: `done` (with `result`, `timings`, progress 1), `failed`
    /// (with the message as `error`) or `cancelled`; sets `finished_ms`, clears the lease.
    /// Returns `Ok(false)` and changes nothing when the job is not running under `worker`
    /// (its lease expired and it was requeued, claimed elsewhere, or it does not exist); the
    /// worker should then discard its result.
    fn finish(&self, id: &str, worker: &str, outcome: &Outcome) -> Result<bool>;

    /// Cancel a job: see [`CancelOutcome`] for each case.
    fn cancel(&self, id: &str) -> Result<CancelOutcome>;

    /// The job with this id, if any.
    fn get(&self, id: &str) -> Result<Option<JobRecord>>;

    /// The queue position of a queued job (0: next to be claimed), `None` when it is not
    /// queued or does not exist.
    fn position(&self, id: &str) -> Result<Option<usize>>;

    /// Jobs matching `filter`, newest (highest `seq`) first, at most `filter.limit`.
    fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>>;

    /// How many jobs are in each state.
    fn counts(&self) -> Result<StateCounts>;

    /// Every running job whose lease has passed: `cancelled` if its cancel was asked for;
    /// else `failed` (error names the attempts) when it was claimed `max_attempts` times
    /// already; else back to `queued` (keeping its `seq`, so at the head of the queue; worker
    /// and lease cleared, step and progress reset). Safe to call from every worker at once.
    fn requeue_expired(&self, max_attempts: u32) -> Result<Requeued>;

    /// Hand back every job `worker` holds, lease or not, on a clean shutdown (the running
    /// batch stopped by the drain timeout): each goes back to `queued` at its old position, or
    /// to `cancelled` if its cancel was asked for. The attempt it was on does not count.
    /// Returns how many were handed back.
    fn release(&self, worker: &str) -> Result<usize>;

    /// Settle every job `worker` holds, lease or not, left by a process with this id that
    /// stopped without a clean shutdown (a crash, a kill): as [`Self::requeue_expired`] does
    /// for an expired lease, the attempt it was on counts — `cancelled` if its cancel was
    /// asked for, `failed` (error names the attempts) when it was claimed `max_attempts` times,
    /// else back to `queued` at its old position. Called at start, once the id is registered.
    fn release_crashed(&self, worker: &str, max_attempts: u32) -> Result<Requeued>;

    /// Register `worker` as live for `lease`, by the process `instance` (a token unique to
    /// the process). Refused with [`crate::ServeError::Config`] naming the id when another
    /// instance holds it and renewed it less than its lease ago; an expired registration is
    /// taken over. Returns `true` when a registration was taken over (its process is gone).
    fn register_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool>;

    /// Push the registration of `worker` by `instance` to `now + lease`. `Ok(false)` when it
    /// no longer holds it (another instance took the id over after it expired).
    fn renew_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool>;

    /// Remove the registration of `worker` by `instance` (a clean shutdown); nothing when
    /// another instance holds the id.
    fn unregister_worker(&self, worker: &str, instance: &str) -> Result<()>;

    /// Mark every `done` job that finished more than `older_than` ago and still has a result
    /// as expired: its `result` is cleared and `error` says the result was removed after the
    /// retention. Returns `(id, result file name)` of each, for the caller to delete.
    fn expire_results(&self, older_than: Duration) -> Result<Vec<(String, String)>>;
}

/// The `error` of a job whose result was removed after the retention (see
/// [`JobStore::expire_results`]); the API answers `410 Gone` for its audio.
pub const EXPIRED: &str = "expired: its result was removed after the result retention";

/// The `error` of a job failed because its attempts are used up: its worker (`worker`)
/// stopped renewing its lease, or (`crashed`) stopped while running it and was restarted.
fn used_up(worker: &str, crashed: bool, attempts: i64, max_attempts: u32) -> String {
    let why = if crashed {
        "stopped while running it (a crash or a kill) and was restarted"
    } else {
        "stopped renewing its lease"
    };
    format!(
        "its worker (`{worker}`) {why}; {attempts} attempts used of max_attempts = {max_attempts}"
    )
}

/// The refusal of a worker id another live process holds.
fn in_use(worker: &str, left_ms: i64) -> ServeError {
    ServeError::Config(format!(
        "worker_id `{worker}` is in use by another live process (its registration is renewed \
         with the lease and expires in {:.1} s): give each process sharing the store an id of \
         its own, or leave worker_id unset for a unique one",
        left_ms.max(0) as f64 / 1000.0
    ))
}

/// A worker id unique to this process: `HOST-PID-RANDOM` (the host name, the process id and
/// 8 hex digits), for a server started without an explicit id.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let host = if host.is_empty() { "host".into() } else { host };
    let rand = new_job_id();
    format!("{host}-{}-{}", std::process::id(), &rand[..8])
}

/// The current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A fresh job id: 32 hex digits (time, process, counter and address entropy).
pub fn new_job_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    let mix = |mut x: u64| {
        // splitmix64 finalizer
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    let a = mix(t ^ (u64::from(std::process::id()) << 32));
    let b = mix(n.wrapping_add(addr).wrapping_add(a.rotate_left(17)));
    format!("{a:016x}{b:016x}")
}

/// Whether `s` has the shape of a job id (1..=64 ASCII letters, digits, `-` or `_`): what the
/// API accepts before asking the store.
pub fn is_valid_job_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The store `spec` names: `postgres://…` / `postgresql://…` (the `postgres` feature), or a
/// SQLite file (`sqlite://PATH` or a plain path).
pub fn open_store(spec: &str) -> Result<Arc<dyn JobStore>> {
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            return Ok(Arc::new(postgres::PgJobStore::open(spec)?));
        }
        #[cfg(not(feature = "postgres"))]
        {
            return Err(ServeError::Config(format!(
                "store `{spec}`: this build has no PostgreSQL job store (build aria-serve with \
                 the `postgres` feature)"
            )));
        }
    }
    let path = spec.strip_prefix("sqlite://").unwrap_or(spec);
    Ok(Arc::new(sqlite::SqliteStore::open(std::path::Path::new(
        path,
    ))?))
}
