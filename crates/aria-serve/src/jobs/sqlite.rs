//! [`JobStore`] in one SQLite file (WAL, `synchronous = FULL`: a submit is on disk when it
//! returns). Several processes on one host may share the file; each method is one immediate
//! transaction.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::{
    now_ms, CancelOutcome, JobRecord, JobState, JobStore, ListFilter, NewJob, Outcome, Requeued,
    StateCounts,
};
use crate::{Result, ServeError};

fn err(e: rusqlite::Error) -> ServeError {
    ServeError::Store(format!("sqlite job store: {e}"))
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aria_jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    batch_key TEXT,
    created_ms INTEGER NOT NULL,
    started_ms INTEGER,
    finished_ms INTEGER,
    worker TEXT,
    lease_until_ms INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    step INTEGER NOT NULL DEFAULT 0,
    steps INTEGER NOT NULL DEFAULT 0,
    progress REAL NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    timings TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS aria_jobs_state_seq ON aria_jobs(state, seq);
CREATE TABLE IF NOT EXISTS aria_workers (
    worker TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    alive_until_ms INTEGER NOT NULL
);
";

const COLUMNS: &str = "id, seq, state, spec, batch_key, created_ms, started_ms, finished_ms, \
     worker, lease_until_ms, attempts, step, steps, progress, result, error, timings, \
     cancel_requested";

/// The SQLite job store.
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

fn record(r: &Row<'_>) -> rusqlite::Result<JobRecord> {
    let state: String = r.get(2)?;
    let state = JobState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Text,
            format!("unknown job state `{state}`").into(),
        )
    })?;
    Ok(JobRecord {
        id: r.get(0)?,
        seq: r.get(1)?,
        state,
        spec: r.get(3)?,
        batch_key: r.get(4)?,
        created_ms: r.get(5)?,
        started_ms: r.get(6)?,
        finished_ms: r.get(7)?,
        worker: r.get(8)?,
        lease_until_ms: r.get(9)?,
        attempts: r.get(10)?,
        step: r.get(11)?,
        steps: r.get(12)?,
        progress: r.get::<_, f64>(13)? as f32,
        result: r.get(14)?,
        error: r.get(15)?,
        timings: r.get(16)?,
        cancel_requested: r.get::<_, i64>(17)? != 0,
    })
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 4)
}

impl SqliteStore {
    /// Open (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                ServeError::Store(format!("job store directory {}: {e}", dir.display()))
            })?;
        }
        let conn = Connection::open(path)
            .map_err(|e| ServeError::Store(format!("job store {}: {e}", path.display())))?;
        Self::init(conn)
    }

    /// A store in memory (tests; nothing survives the process).
    pub fn in_memory() -> Result<SqliteStore> {
        Self::init(Connection::open_in_memory().map_err(err)?)
    }

    fn init(conn: Connection) -> Result<SqliteStore> {
        conn.busy_timeout(Duration::from_secs(10)).map_err(err)?;
        // `journal_mode` returns a row; in memory it stays `memory`.
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err)?;
        conn.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    /// Run `f` in one immediate (write-locking) transaction.
    fn tx<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut c = self.conn.lock().map_err(|_| {
            ServeError::Store("sqlite job store: a thread panicked holding it".into())
        })?;
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err)?;
        let out = f(&tx).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(out)
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let c = self.conn.lock().map_err(|_| {
            ServeError::Store("sqlite job store: a thread panicked holding it".into())
        })?;
        f(&c).map_err(err)
    }
}

fn get(c: &Connection, id: &str) -> rusqlite::Result<Option<JobRecord>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM aria_jobs WHERE id = ?1"),
        [id],
        record,
    )
    .optional()
}

/// A running job to settle: id, attempts, cancel asked for, worker.
type Held = (String, u32, i64, Option<String>);

/// Settle running jobs whose worker is gone: cancelled if asked for, failed when their
/// attempts are used up, else back to the queue (the attempt counted). `crashed`: their
/// process was restarted (else their lease passed).
fn settle(
    c: &Connection,
    held: Vec<Held>,
    max_attempts: u32,
    now: i64,
    crashed: bool,
) -> rusqlite::Result<Requeued> {
    let mut out = Requeued::default();
    for (id, attempts, cancel, worker) in held {
        let worker = worker.unwrap_or_default();
        if cancel != 0 {
            c.execute(
                "UPDATE aria_jobs SET state = 'cancelled', finished_ms = ?2, \
                 lease_until_ms = NULL, error = 'cancelled; its worker stopped' \
                 WHERE id = ?1",
                params![id, now],
            )?;
            out.cancelled.push(id);
        } else if attempts >= max_attempts {
            let msg = super::used_up(&worker, crashed, i64::from(attempts), max_attempts);
            c.execute(
                "UPDATE aria_jobs SET state = 'failed', finished_ms = ?2, \
                 lease_until_ms = NULL, error = ?3 WHERE id = ?1",
                params![id, now, msg],
            )?;
            out.failed.push(id);
        } else {
            c.execute(
                "UPDATE aria_jobs SET state = 'queued', worker = NULL, \
                 lease_until_ms = NULL, step = 0, progress = 0 WHERE id = ?1",
                [&id],
            )?;
            out.requeued.push(id);
        }
    }
    Ok(out)
}

fn queued_ahead(c: &Connection, seq: i64) -> rusqlite::Result<usize> {
    c.query_row(
        "SELECT COUNT(*) FROM aria_jobs WHERE state = 'queued' AND seq < ?1",
        [seq],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n as usize)
}

impl JobStore for SqliteStore {
    fn submit(&self, job: &NewJob, max_queued: usize) -> Result<usize> {
        let mut full = None;
        let pos = self.tx(|c| {
            let depth: i64 = c.query_row(
                "SELECT COUNT(*) FROM aria_jobs WHERE state = 'queued'",
                [],
                |r| r.get(0),
            )?;
            if depth as usize >= max_queued {
                full = Some(depth as usize);
                return Ok(0);
            }
            c.execute(
                "INSERT INTO aria_jobs (id, state, spec, batch_key, created_ms, steps) \
                 VALUES (?1, 'queued', ?2, ?3, ?4, ?5)",
                params![job.id, job.spec, job.batch_key, now_ms(), job.steps],
            )?;
            Ok(depth as usize)
        })?;
        match full {
            Some(depth) => Err(ServeError::QueueFull {
                depth,
                max: max_queued,
            }),
            None => Ok(pos),
        }
    }

    fn claim(&self, worker: &str, max: usize, lease: Duration) -> Result<Vec<JobRecord>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.tx(|c| {
            let first = c
                .query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM aria_jobs WHERE state = 'queued' \
                         ORDER BY seq LIMIT 1"
                    ),
                    [],
                    record,
                )
                .optional()?;
            let Some(first) = first else {
                return Ok(Vec::new());
            };
            let mut jobs = vec![first];
            if let Some(key) = jobs[0].batch_key.clone() {
                let mut st = c.prepare(&format!(
                    "SELECT {COLUMNS} FROM aria_jobs WHERE state = 'queued' AND batch_key = ?1 \
                     AND seq > ?2 ORDER BY seq LIMIT ?3"
                ))?;
                let more = st.query_map(params![key, jobs[0].seq, (max - 1) as i64], record)?;
                for j in more {
                    jobs.push(j?);
                }
            }
            let now = now_ms();
            let until = now.saturating_add(lease_ms(lease));
            for j in &mut jobs {
                c.execute(
                    "UPDATE aria_jobs SET state = 'running', worker = ?2, started_ms = ?3, \
                     lease_until_ms = ?4, attempts = attempts + 1, step = 0, progress = 0 \
                     WHERE id = ?1",
                    params![j.id, worker, now, until],
                )?;
                j.state = JobState::Running;
                j.worker = Some(worker.to_string());
                j.started_ms = Some(now);
                j.lease_until_ms = Some(until);
                j.attempts += 1;
                j.step = 0;
                j.progress = 0.0;
            }
            Ok(jobs)
        })
    }

    fn heartbeat(&self, worker: &str, ids: &[String], lease: Duration) -> Result<Vec<String>> {
        let until = now_ms().saturating_add(lease_ms(lease));
        self.tx(|c| {
            let mut cancelled = Vec::new();
            for id in ids {
                let n = c.execute(
                    "UPDATE aria_jobs SET lease_until_ms = ?3 \
                     WHERE id = ?1 AND state = 'running' AND worker = ?2",
                    params![id, worker, until],
                )?;
                if n == 1 {
                    let flag: i64 = c.query_row(
                        "SELECT cancel_requested FROM aria_jobs WHERE id = ?1",
                        [id],
                        |r| r.get(0),
                    )?;
                    if flag != 0 {
                        cancelled.push(id.clone());
                    }
                }
            }
            Ok(cancelled)
        })
    }

    fn progress(
        &self,
        id: &str,
        worker: &str,
        step: u32,
        steps: u32,
        progress: f32,
    ) -> Result<bool> {
        let p = if progress.is_finite() {
            f64::from(progress.clamp(0.0, 1.0))
        } else {
            0.0
        };
        self.tx(|c| {
            let n = c.execute(
                "UPDATE aria_jobs SET step = ?3, steps = ?4, progress = ?5 \
                 WHERE id = ?1 AND state = 'running' AND worker = ?2",
                params![id, worker, step, steps, p],
            )?;
            if n == 0 {
                return Ok(false);
            }
            let flag: i64 = c.query_row(
                "SELECT cancel_requested FROM aria_jobs WHERE id = ?1",
                [id],
                |r| r.get(0),
            )?;
            Ok(flag != 0)
        })
    }

    fn finish(&self, id: &str, worker: &str, outcome: &Outcome) -> Result<bool> {
        let now = now_ms();
        self.tx(|c| {
            let n = match outcome {
                Outcome::Done { result, timings } => c.execute(
                    "UPDATE aria_jobs SET state = 'done', result = ?3, timings = ?4, \
                     progress = 1, step = steps, finished_ms = ?5, lease_until_ms = NULL \
                     WHERE id = ?1 AND state = 'running' AND worker = ?2",
                    params![id, worker, result, timings, now],
                )?,
                Outcome::Failed(msg) => c.execute(
                    "UPDATE aria_jobs SET state = 'failed', error = ?3, finished_ms = ?4, \
                     lease_until_ms = NULL \
                     WHERE id = ?1 AND state = 'running' AND worker = ?2",
                    params![id, worker, msg, now],
                )?,
                Outcome::Cancelled => c.execute(
                    "UPDATE aria_jobs SET state = 'cancelled', \
                     error = COALESCE(error, 'cancelled while running'), finished_ms = ?3, \
                     lease_until_ms = NULL \
                     WHERE id = ?1 AND state = 'running' AND worker = ?2",
                    params![id, worker, now],
                )?,
            };
            Ok(n == 1)
        })
    }

    fn cancel(&self, id: &str) -> Result<CancelOutcome> {
        let now = now_ms();
        self.tx(|c| {
            let Some(j) = get(c, id)? else {
                return Ok(CancelOutcome::NotFound);
            };
            Ok(match j.state {
                JobState::Queued => {
                    c.execute(
                        "UPDATE aria_jobs SET state = 'cancelled', cancel_requested = 1, \
                         error = 'cancelled while queued', finished_ms = ?2 WHERE id = ?1",
                        params![id, now],
                    )?;
                    CancelOutcome::Removed
                }
                JobState::Running => {
                    c.execute(
                        "UPDATE aria_jobs SET cancel_requested = 1 WHERE id = ?1",
                        [id],
                    )?;
                    CancelOutcome::Requested
                }
                s => CancelOutcome::AlreadyFinished(s),
            })
        })
    }

    fn get(&self, id: &str) -> Result<Option<JobRecord>> {
        self.read(|c| get(c, id))
    }

    fn position(&self, id: &str) -> Result<Option<usize>> {
        self.read(|c| {
            let seq = c
                .query_row(
                    "SELECT seq FROM aria_jobs WHERE id = ?1 AND state = 'queued'",
                    [id],
                    |r| r.get::<_, i64>(0),
                )
                .optional()?;
            seq.map(|s| queued_ahead(c, s)).transpose()
        })
    }

    fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>> {
        self.read(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {COLUMNS} FROM aria_jobs \
                 WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR seq < ?2) \
                 ORDER BY seq DESC LIMIT ?3"
            ))?;
            let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
            let rows = st.query_map(
                params![filter.state.map(JobState::name), filter.before_seq, limit],
                record,
            )?;
            rows.collect()
        })
    }

    fn counts(&self) -> Result<StateCounts> {
        self.read(|c| {
            let mut out = StateCounts::default();
            let mut st = c.prepare("SELECT state, COUNT(*) FROM aria_jobs GROUP BY state")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (s, n) = row?;
                let n = n as u64;
                match JobState::parse(&s) {
                    Some(JobState::Queued) => out.queued = n,
                    Some(JobState::Running) => out.running = n,
                    Some(JobState::Done) => out.done = n,
                    Some(JobState::Failed) => out.failed = n,
                    Some(JobState::Cancelled) => out.cancelled = n,
                    None => {}
                }
            }
            Ok(out)
        })
    }

    fn requeue_expired(&self, max_attempts: u32) -> Result<Requeued> {
        let now = now_ms();
        self.tx(|c| {
            let mut st = c.prepare(
                "SELECT id, attempts, cancel_requested, worker FROM aria_jobs \
                 WHERE state = 'running' AND lease_until_ms < ?1 ORDER BY seq",
            )?;
            let expired: Vec<Held> = st
                .query_map([now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            settle(c, expired, max_attempts, now, false)
        })
    }

    fn release_crashed(&self, worker: &str, max_attempts: u32) -> Result<Requeued> {
        let now = now_ms();
        self.tx(|c| {
            let mut st = c.prepare(
                "SELECT id, attempts, cancel_requested, worker FROM aria_jobs \
                 WHERE state = 'running' AND worker = ?1 ORDER BY seq",
            )?;
            let held: Vec<Held> = st
                .query_map([worker], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            settle(c, held, max_attempts, now, true)
        })
    }

    fn register_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool> {
        let now = now_ms();
        let until = now.saturating_add(lease_ms(lease));
        let out = self.tx(|c| {
            let row: Option<(String, i64)> = c
                .query_row(
                    "SELECT instance, alive_until_ms FROM aria_workers WHERE worker = ?1",
                    [worker],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((other, alive_until)) = &row {
                if other != instance && *alive_until >= now {
                    return Ok(Err(*alive_until - now));
                }
            }
            c.execute(
                "INSERT INTO aria_workers (worker, instance, started_ms, alive_until_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (worker) DO UPDATE SET \
                 instance = excluded.instance, started_ms = excluded.started_ms, \
                 alive_until_ms = excluded.alive_until_ms",
                params![worker, instance, now, until],
            )?;
            Ok(Ok(row.is_some_and(|(other, _)| other != instance)))
        })?;
        out.map_err(|left_ms| super::in_use(worker, left_ms))
    }

    fn renew_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool> {
        let until = now_ms().saturating_add(lease_ms(lease));
        self.tx(|c| {
            c.execute(
                "UPDATE aria_workers SET alive_until_ms = ?3 WHERE worker = ?1 AND instance = ?2",
                params![worker, instance, until],
            )
            .map(|n| n == 1)
        })
    }

    fn unregister_worker(&self, worker: &str, instance: &str) -> Result<()> {
        self.tx(|c| {
            c.execute(
                "DELETE FROM aria_workers WHERE worker = ?1 AND instance = ?2",
                params![worker, instance],
            )
            .map(|_| ())
        })
    }

    fn expire_results(&self, older_than: Duration) -> Result<Vec<(String, String)>> {
        let cutoff = now_ms().saturating_sub(lease_ms(older_than));
        self.tx(|c| {
            let mut st = c.prepare(
                "SELECT id, result FROM aria_jobs WHERE state = 'done' \
                 AND result IS NOT NULL AND finished_ms < ?1 ORDER BY seq",
            )?;
            let rows: Vec<(String, String)> = st
                .query_map([cutoff], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (id, _) in &rows {
                c.execute(
                    "UPDATE aria_jobs SET result = NULL, error = ?2 WHERE id = ?1",
                    params![id, super::EXPIRED],
                )?;
            }
            Ok(rows)
        })
    }

    fn release(&self, worker: &str) -> Result<usize> {
        let now = now_ms();
        self.tx(|c| {
            let a = c.execute(
                "UPDATE aria_jobs SET state = 'cancelled', finished_ms = ?2, \
                 lease_until_ms = NULL, error = 'cancelled while running' \
                 WHERE state = 'running' AND worker = ?1 AND cancel_requested != 0",
                params![worker, now],
            )?;
            let b = c.execute(
                "UPDATE aria_jobs SET state = 'queued', worker = NULL, lease_until_ms = NULL, \
                 step = 0, progress = 0, attempts = MAX(attempts - 1, 0) \
                 WHERE state = 'running' AND worker = ?1",
                [worker],
            )?;
            Ok(a + b)
        })
    }
}
