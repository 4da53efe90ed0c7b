//! Retention of the files in the results directory: uploads (`inputs/{id}.…`) live as long
//! as their job runs, results (`{id}.wav`) for [`crate::ServeConfig::result_retention`].
//!
//! The worker deletes a job's uploads as soon as it ends; [`sweep`], run at start and then
//! periodically ([`Sweeper`]), catches the rest: uploads of ended jobs and orphan uploads
//! (no job), results older than the retention (their jobs are marked expired, see
//! [`JobStore::expire_results`]), result files no job refers to and partial files of jobs
//! that no longer run.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{is_valid_job_id, JobState, JobStore};
use crate::{Result, ServeError};

/// How old an upload or partial result file with no job (or no running job) must be before a
/// sweep deletes it: a submit writes its uploads just before it stores the job, and another
/// process on the host may be doing so.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(600);

/// What a [`sweep`] deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Upload files deleted (of ended jobs, or orphans).
    pub uploads: usize,
    /// Result files deleted (expired, or orphans), partial ones included.
    pub results: usize,
    /// Jobs whose results expired in this sweep.
    pub expired: Vec<String>,
}

fn age(meta: &std::fs::Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO)
}

/// The job id a file in the results directory belongs to (the name up to its first `.`).
fn job_of(name: &str) -> Option<&str> {
    name.split('.').next().filter(|id| is_valid_job_id(id))
}

/// Delete a job's uploads (`inputs/{id}.…` in `results_dir`); returns how many.
pub fn remove_uploads(results_dir: &Path, id: &str) -> usize {
    let prefix = format!("{id}.");
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(results_dir.join("inputs")) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix)
                && std::fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// One pass over `results_dir`: deletes the uploads of ended jobs and orphan uploads older
/// than [`ORPHAN_GRACE`]; marks the results older than `retention` expired and deletes their
/// files; deletes `.wav` files older than `retention` that no done job refers to, and
/// `.wav.part` files older than [`ORPHAN_GRACE`] whose job is not running. A zero `retention`
/// keeps results forever. Files it cannot delete are left for the next pass.
pub fn sweep(store: &dyn JobStore, results_dir: &Path, retention: Duration) -> Result<Swept> {
    let mut out = Swept::default();
    if let Ok(rd) = std::fs::read_dir(results_dir.join("inputs")) {
        for e in rd.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let job = match job_of(&name) {
                Some(id) => store.get(id)?,
                None => None,
            };
            let remove = match job {
                Some(j) => j.state.is_terminal(),
                None => age(&meta) >= ORPHAN_GRACE,
            };
            if remove && std::fs::remove_file(e.path()).is_ok() {
                out.uploads += 1;
            }
        }
    }
    if !retention.is_zero() {
        for (id, result) in store.expire_results(retention)? {
            // Only a plain file name of the results directory.
            let plain = Path::new(&result)
                .file_name()
                .is_some_and(|f| *f == *result);
            if plain && std::fs::remove_file(results_dir.join(&result)).is_ok() {
                out.results += 1;
            }
            out.expired.push(id);
        }
    }
    let rd = std::fs::read_dir(results_dir)
        .map_err(|e| ServeError::io(format!("results directory {}", results_dir.display()), e))?;
    for e in rd.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let old = age(&meta);
        let remove = if name.ends_with(".wav.part") {
            old >= ORPHAN_GRACE
                && match job_of(&name) {
                    Some(id) => store.get(id)?.is_none_or(|j| j.state != JobState::Running),
                    None => true,
                }
        } else if name.ends_with(".wav") {
            !retention.is_zero()
                && old >= retention
                && match job_of(&name) {
                    Some(id) => store.get(id)?.is_none_or(|j| {
                        j.state != JobState::Done || j.result.as_deref() != Some(name.as_str())
                    }),
                    None => false,
                }
        } else {
            false
        };
        if remove && std::fs::remove_file(e.path()).is_ok() {
            out.results += 1;
        }
    }
    Ok(out)
}

/// How often a running server sweeps: a quarter of the retention, between 1 s and 10 min
/// (10 min when results are kept forever).
pub fn sweep_period(retention: Duration) -> Duration {
    if retention.is_zero() {
        return Duration::from_secs(600);
    }
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// A thread that runs [`sweep`] every [`sweep_period`]; dropping it stops the thread.
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper").finish_non_exhaustive()
    }
}

impl Sweeper {
    /// Start sweeping `results_dir` (the first pass one period from now).
    pub fn start(
        store: Arc<dyn JobStore>,
        results_dir: &Path,
        retention: Duration,
    ) -> Result<Sweeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let dir = results_dir.to_path_buf();
        let every = sweep_period(retention);
        let thread = std::thread::Builder::new()
            .name("aria-serve-sweep".into())
            .spawn(move || {
                let mut last = Instant::now();
                while !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                    if last.elapsed() >= every {
                        // A failed pass (the store unreachable) is retried at the next one.
                        let _ = sweep(store.as_ref(), &dir, retention);
                        last = Instant::now();
                    }
                }
            })
            .map_err(|e| ServeError::io("starting the results sweep thread", e))?;
        Ok(Sweeper {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
