//! [`JobStore`] in PostgreSQL (the `postgres` feature): one queue shared by several `aria serve`
//! processes, on one host or several.
//!
//! - Claims lock the queue's oldest rows with `SELECT … FOR UPDATE SKIP LOCKED`: concurrent
//!   claims pass each other's rows by instead of waiting, and never return the same job.
//! - Every state change of a job is one `UPDATE … WHERE state = … AND worker = …` (or runs
//!   under a row lock), so a worker that lost its lease cannot finish, and two workers that
//!   requeue the same expired job do it once.
//! - Times (leases included) are the database server's clock, so workers on hosts with skewed
//!   clocks agree on when a lease has passed.
//! - Submits take a transaction-scoped advisory lock, so the queue bound is exact and `seq`
//!   follows commit order (FIFO as clients saw their `202`s).
//! - A submit notifies [`CHANNEL`]; idle workers wait on it ([`PgJobStore::listener`]) instead
//!   of polling fast.
//!
//! Connections are plain TCP or a Unix socket without TLS (a loopback or private network);
//! a small pool lets the HTTP side and the worker call the store at the same time.

use std::sync::Mutex;
use std::time::Duration;

use aria_cache::store::postgres::conn::{wait_notifications, PgTarget};
use aria_cache::CacheError;
use postgres::{Client, Row, Transaction};

use super::{
    CancelOutcome, JobRecord, JobState, JobStore, ListFilter, NewJob, Outcome, Requeued,
    StateCounts,
};
use crate::{Result, ServeError};

/// The `LISTEN`/`NOTIFY` channel a submit notifies.
pub const CHANNEL: &str = "aria_jobs";

/// Advisory lock keys: schema creation, submits.
const SCHEMA_LOCK: i64 = 0x6172_6961_6a6f_6273;
const SUBMIT_LOCK: i64 = 0x6172_6961_7375_626d;
/// Advisory lock class of worker registrations (the second key is a hash of the id).
const WORKER_LOCK: i32 = 0x6172_6977;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aria_jobs (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL
        CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    spec TEXT NOT NULL,
    batch_key TEXT,
    created_ms BIGINT NOT NULL,
    started_ms BIGINT,
    finished_ms BIGINT,
    worker TEXT,
    lease_until_ms BIGINT,
    attempts BIGINT NOT NULL DEFAULT 0,
    step BIGINT NOT NULL DEFAULT 0,
    steps BIGINT NOT NULL DEFAULT 0,
    progress DOUBLE PRECISION NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    timings TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX IF NOT EXISTS aria_jobs_state_seq ON aria_jobs(state, seq);
CREATE INDEX IF NOT EXISTS aria_jobs_worker ON aria_jobs(worker) WHERE state = 'running';
CREATE TABLE IF NOT EXISTS aria_workers (
    worker TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    alive_until_ms BIGINT NOT NULL
);
";

const COLUMNS: &str = "id, seq, state, spec, batch_key, created_ms, started_ms, finished_ms, \
     worker, lease_until_ms, attempts, step, steps, progress, result, error, timings, \
     cancel_requested";

/// The server clock in Unix milliseconds (`clock_timestamp`: the time of the statement, not of
/// the transaction's start).
const NOW_MS: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

fn err(e: postgres::Error) -> ServeError {
    // The server's own message (a bare "db error" otherwise).
    match e.as_db_error() {
        Some(d) => ServeError::Store(format!("postgres job store: {d}")),
        None => ServeError::Store(format!("postgres job store: {e}")),
    }
}

/// A connection failure of the shared PostgreSQL code (it names where), as a job store error.
fn store_err(e: CacheError) -> ServeError {
    let m = match e {
        CacheError::Store(m) => m,
        other => other.to_string(),
    };
    ServeError::Store(format!("job store {m}"))
}

fn u32_of(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn record(r: &Row) -> Result<JobRecord> {
    let state: String = r.get(2);
    let state = JobState::parse(&state).ok_or_else(|| {
        ServeError::Store(format!("postgres job store: unknown job state `{state}`"))
    })?;
    Ok(JobRecord {
        id: r.get(0),
        seq: r.get(1),
        state,
        spec: r.get(3),
        batch_key: r.get(4),
        created_ms: r.get(5),
        started_ms: r.get(6),
        finished_ms: r.get(7),
        worker: r.get(8),
        lease_until_ms: r.get(9),
        attempts: u32_of(r.get(10)),
        step: u32_of(r.get(11)),
        steps: u32_of(r.get(12)),
        progress: r.get::<_, f64>(13) as f32,
        result: r.get(14),
        error: r.get(15),
        timings: r.get(16),
        cancel_requested: r.get(17),
    })
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX / 4)
}

fn now(t: &mut Transaction<'_>) -> std::result::Result<i64, postgres::Error> {
    Ok(t.query_one(NOW_MS, &[])?.get(0))
}

/// Settle running jobs whose worker is gone (rows of `id, attempts, cancel_requested,
/// worker`, locked): cancelled if asked for, failed when their attempts are used up, else
/// back to the queue (the attempt counted). `crashed`: their process was restarted (else
/// their lease passed).
fn settle(
    t: &mut Transaction<'_>,
    rows: &[Row],
    max_attempts: u32,
    now: i64,
    crashed: bool,
) -> std::result::Result<Requeued, postgres::Error> {
    let mut out = Requeued::default();
    for r in rows {
        let id: String = r.get(0);
        let attempts: i64 = r.get(1);
        let cancel: bool = r.get(2);
        let worker: Option<String> = r.get(3);
        let worker = worker.unwrap_or_default();
        if cancel {
            t.execute(
                "UPDATE aria_jobs SET state = 'cancelled', finished_ms = $2, \
                 lease_until_ms = NULL, error = 'cancelled; its worker stopped' \
                 WHERE id = $1",
                &[&id, &now],
            )?;
            out.cancelled.push(id);
        } else if attempts >= i64::from(max_attempts) {
            let msg = super::used_up(&worker, crashed, attempts, max_attempts);
            t.execute(
                "UPDATE aria_jobs SET state = 'failed', finished_ms = $2, \
                 lease_until_ms = NULL, error = $3 WHERE id = $1",
                &[&id, &now, &msg],
            )?;
            out.failed.push(id);
        } else {
            t.execute(
                "UPDATE aria_jobs SET state = 'queued', worker = NULL, \
                 lease_until_ms = NULL, step = 0, progress = 0 WHERE id = $1",
                &[&id],
            )?;
            out.requeued.push(id);
        }
    }
    Ok(out)
}

/// The PostgreSQL job store.
pub struct PgJobStore {
    target: PgTarget,
    location: String,
    idle: Mutex<Vec<Client>>,
}

impl std::fmt::Debug for PgJobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJobStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PgJobStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`, `postgresql://…`, or a
    /// key=value connection string; `host` may be a Unix socket directory) and creates the
    /// table when absent, where the connection's `search_path` puts it.
    pub fn open(url: &str) -> Result<PgJobStore> {
        Self::open_with(url, None)
    }

    /// [`PgJobStore::open`] with the table in schema `schema` (created when absent). `schema`
    /// is a plain lowercase identifier (a-z, 0-9, `_`; at most 63 characters).
    pub fn open_in_schema(url: &str, schema: &str) -> Result<PgJobStore> {
        Self::open_with(url, Some(schema))
    }

    fn open_with(url: &str, schema: Option<&str>) -> Result<PgJobStore> {
        let target = PgTarget::parse(url, "aria-serve", schema)
            .map_err(|e| ServeError::Config(format!("postgres job store: {e}")))?;
        let store = PgJobStore {
            location: target.location().to_string(),
            target,
            idle: Mutex::new(Vec::new()),
        };
        store
            .tx(|t| store.target.create_tables(t, SCHEMA_LOCK, SCHEMA))
            .map_err(|e| {
                ServeError::Store(format!(
                    "job store {}: creating the table: {e}",
                    store.location
                ))
            })?;
        Ok(store)
    }

    /// Where it is, for messages (no password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Runs `f` on a pooled connection (an idle one, else a new one), which goes back to the
    /// pool afterwards unless it was closed.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let reused = self.idle.lock().ok().and_then(|mut v| v.pop());
        let mut client = match reused {
            Some(c) if !c.is_closed() => c,
            _ => self.target.connect().map_err(store_err)?,
        };
        let out = f(&mut client);
        if !client.is_closed() {
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < MAX_IDLE {
                    idle.push(client);
                }
            }
        }
        out.map_err(err)
    }

    /// Runs `f` in one transaction, committed when it returns `Ok` (rolled back otherwise).
    fn tx<T>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.with(|c| {
            let mut t = c.transaction()?;
            let v = f(&mut t)?;
            t.commit()?;
            Ok(v)
        })
    }

    /// A connection listening on [`CHANNEL`]: [`JobListener::wait`] returns when a job is
    /// submitted (by any process).
    pub fn listener(&self) -> Result<JobListener> {
        Ok(JobListener {
            client: self.target.listen(CHANNEL).map_err(store_err)?,
        })
    }

    /// Drops the schema this store was opened in ([`PgJobStore::open_in_schema`]) with every
    /// job in it. Refused for a store opened without one.
    pub fn drop_schema(self) -> Result<()> {
        let Some(sql) = self.target.drop_schema_sql() else {
            return Err(ServeError::Store(format!(
                "job store {}: opened without a schema of its own; nothing to drop",
                self.location
            )));
        };
        self.with(|c| c.batch_execute(&sql))
    }
}

impl Drop for PgJobStore {
    fn drop(&mut self) {
        let idle = match self.idle.get_mut() {
            Ok(v) => std::mem::take(v),
            Err(p) => std::mem::take(p.into_inner()),
        };
        // A `postgres::Client` closes on a runtime of its own, which cannot start on a thread
        // that drives async tasks (a server dropping its store as it stops): close them on a
        // thread of their own there.
        if !idle.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::Builder::new()
                .name("aria-serve-pg-close".into())
                .spawn(move || drop(idle));
        }
    }
}

/// A connection that `LISTEN`s for submitted jobs.
pub struct JobListener {
    client: Client,
}

impl std::fmt::Debug for JobListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobListener").finish_non_exhaustive()
    }
}

impl JobListener {
    /// Waits up to `timeout` for a submit; `true` when one (or more: all pending are drained)
    /// came, `false` on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool> {
        Ok(!wait_notifications(&mut self.client, timeout)
            .map_err(err)?
            .is_empty())
    }
}

impl JobStore for PgJobStore {
    fn submit(&self, job: &NewJob, max_queued: usize) -> Result<usize> {
        let depth = self.tx(|t| {
            t.execute("SELECT pg_advisory_xact_lock($1)", &[&SUBMIT_LOCK])?;
            let depth: i64 = t
                .query_one("SELECT COUNT(*) FROM aria_jobs WHERE state = 'queued'", &[])?
                .get(0);
            let depth = depth as usize;
            if depth >= max_queued {
                return Ok(Err(depth));
            }
            let inserted = t.execute(
                &format!(
                    "INSERT INTO aria_jobs (id, state, spec, batch_key, created_ms, steps) \
                     VALUES ($1, 'queued', $2, $3, ({NOW_MS}), $4) ON CONFLICT (id) DO NOTHING"
                ),
                &[&job.id, &job.spec, &job.batch_key, &i64::from(job.steps)],
            )?;
            if inserted == 0 {
                return Ok(Ok(None));
            }
            t.execute("SELECT pg_notify($1, '')", &[&CHANNEL])?;
            Ok(Ok(Some(depth)))
        })?;
        match depth {
            Ok(Some(pos)) => Ok(pos),
            Ok(None) => Err(ServeError::Store(format!(
                "job store {}: a job with id `{}` exists",
                self.location, job.id
            ))),
            Err(depth) => Err(ServeError::QueueFull {
                depth,
                max: max_queued,
            }),
        }
    }

    fn claim(&self, worker: &str, max: usize, lease: Duration) -> Result<Vec<JobRecord>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let rows = self.tx(|t| {
            let first = t.query_opt(
                "SELECT seq, batch_key FROM aria_jobs WHERE state = 'queued' \
                 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[],
            )?;
            let Some(first) = first else {
                return Ok(Vec::new());
            };
            let seq: i64 = first.get(0);
            let key: Option<String> = first.get(1);
            let mut seqs = vec![seq];
            if let Some(key) = key {
                let more = t.query(
                    "SELECT seq FROM aria_jobs WHERE state = 'queued' AND batch_key = $1 \
                     AND seq > $2 ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED",
                    &[&key, &seq, &((max - 1) as i64)],
                )?;
                seqs.extend(more.iter().map(|r| r.get::<_, i64>(0)));
            }
            let now = now(t)?;
            let until = now.saturating_add(lease_ms(lease));
            t.query(
                &format!(
                    "UPDATE aria_jobs SET state = 'running', worker = $2, started_ms = $3, \
                     lease_until_ms = $4, attempts = attempts + 1, step = 0, progress = 0 \
                     WHERE seq = ANY($1) RETURNING {COLUMNS}"
                ),
                &[&seqs, &worker, &now, &until],
            )
        })?;
        let mut jobs = rows.iter().map(record).collect::<Result<Vec<_>>>()?;
        jobs.sort_by_key(|j| j.seq);
        Ok(jobs)
    }

    fn heartbeat(&self, worker: &str, ids: &[String], lease: Duration) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let lease = lease_ms(lease);
        let rows = self.tx(|t| {
            t.query(
                &format!(
                    "UPDATE aria_jobs SET lease_until_ms = ({NOW_MS}) + $3 \
                     WHERE id = ANY($1) AND state = 'running' AND worker = $2 \
                     RETURNING id, cancel_requested"
                ),
                &[&ids, &worker, &lease],
            )
        })?;
        let flagged: Vec<String> = rows
            .iter()
            .filter(|r| r.get::<_, bool>(1))
            .map(|r| r.get(0))
            .collect();
        // In the order asked.
        Ok(ids
            .iter()
            .filter(|i| flagged.contains(i))
            .cloned()
            .collect())
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
        let row = self.tx(|t| {
            t.query_opt(
                "UPDATE aria_jobs SET step = $3, steps = $4, progress = $5 \
                 WHERE id = $1 AND state = 'running' AND worker = $2 RETURNING cancel_requested",
                &[&id, &worker, &i64::from(step), &i64::from(steps), &p],
            )
        })?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    }

    fn finish(&self, id: &str, worker: &str, outcome: &Outcome) -> Result<bool> {
        let n = self.tx(|t| {
            let now = now(t)?;
            match outcome {
                Outcome::Done { result, timings } => t.execute(
                    "UPDATE aria_jobs SET state = 'done', result = $3, timings = $4, \
                     progress = 1, step = steps, finished_ms = $5, lease_until_ms = NULL \
                     WHERE id = $1 AND state = 'running' AND worker = $2",
                    &[&id, &worker, result, timings, &now],
                ),
                Outcome::Failed(msg) => t.execute(
                    "UPDATE aria_jobs SET state = 'failed', error = $3, finished_ms = $4, \
                     lease_until_ms = NULL \
                     WHERE id = $1 AND state = 'running' AND worker = $2",
                    &[&id, &worker, msg, &now],
                ),
                Outcome::Cancelled => t.execute(
                    "UPDATE aria_jobs SET state = 'cancelled', \
                     error = COALESCE(error, 'cancelled while running'), finished_ms = $3, \
                     lease_until_ms = NULL \
                     WHERE id = $1 AND state = 'running' AND worker = $2",
                    &[&id, &worker, &now],
                ),
            }
        })?;
        Ok(n == 1)
    }

    fn cancel(&self, id: &str) -> Result<CancelOutcome> {
        self.tx(|t| {
            let Some(r) = t.query_opt(
                "SELECT state FROM aria_jobs WHERE id = $1 FOR UPDATE",
                &[&id],
            )?
            else {
                return Ok(CancelOutcome::NotFound);
            };
            let state: String = r.get(0);
            Ok(match JobState::parse(&state) {
                Some(JobState::Queued) => {
                    let now = now(t)?;
                    t.execute(
                        "UPDATE aria_jobs SET state = 'cancelled', cancel_requested = TRUE, \
                         error = 'cancelled while queued', finished_ms = $2 WHERE id = $1",
                        &[&id, &now],
                    )?;
                    CancelOutcome::Removed
                }
                Some(JobState::Running) => {
                    t.execute(
                        "UPDATE aria_jobs SET cancel_requested = TRUE WHERE id = $1",
                        &[&id],
                    )?;
                    CancelOutcome::Requested
                }
                Some(s) => CancelOutcome::AlreadyFinished(s),
                // The table's CHECK constraint admits no other state.
                None => CancelOutcome::NotFound,
            })
        })
    }

    fn get(&self, id: &str) -> Result<Option<JobRecord>> {
        let row = self.with(|c| {
            c.query_opt(
                &format!("SELECT {COLUMNS} FROM aria_jobs WHERE id = $1"),
                &[&id],
            )
        })?;
        row.as_ref().map(record).transpose()
    }

    fn position(&self, id: &str) -> Result<Option<usize>> {
        let row = self.with(|c| {
            c.query_opt(
                "SELECT (SELECT COUNT(*) FROM aria_jobs q WHERE q.state = 'queued' \
                 AND q.seq < j.seq) FROM aria_jobs j WHERE j.id = $1 AND j.state = 'queued'",
                &[&id],
            )
        })?;
        Ok(row.map(|r| r.get::<_, i64>(0) as usize))
    }

    fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>> {
        let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
        let rows = self.with(|c| {
            c.query(
                &format!(
                    "SELECT {COLUMNS} FROM aria_jobs \
                     WHERE ($1::TEXT IS NULL OR state = $1) AND ($2::BIGINT IS NULL OR seq < $2) \
                     ORDER BY seq DESC LIMIT $3"
                ),
                &[
                    &filter.state.map(JobState::name),
                    &filter.before_seq,
                    &limit,
                ],
            )
        })?;
        rows.iter().map(record).collect()
    }

    fn counts(&self) -> Result<StateCounts> {
        let rows =
            self.with(|c| c.query("SELECT state, COUNT(*) FROM aria_jobs GROUP BY state", &[]))?;
        let mut out = StateCounts::default();
        for r in &rows {
            let n = r.get::<_, i64>(1) as u64;
            match JobState::parse(r.get(0)) {
                Some(JobState::Queued) => out.queued = n,
                Some(JobState::Running) => out.running = n,
                Some(JobState::Done) => out.done = n,
                Some(JobState::Failed) => out.failed = n,
                Some(JobState::Cancelled) => out.cancelled = n,
                None => {}
            }
        }
        Ok(out)
    }

    fn requeue_expired(&self, max_attempts: u32) -> Result<Requeued> {
        self.tx(|t| {
            let now = now(t)?;
            // Rows another worker is requeueing (or renewing) right now are skipped; a renewal
            // committed meanwhile is re-checked against the lease condition.
            let expired = t.query(
                "SELECT id, attempts, cancel_requested, worker FROM aria_jobs \
                 WHERE state = 'running' AND lease_until_ms < $1 ORDER BY seq \
                 FOR UPDATE SKIP LOCKED",
                &[&now],
            )?;
            settle(t, &expired, max_attempts, now, false)
        })
    }

    fn release_crashed(&self, worker: &str, max_attempts: u32) -> Result<Requeued> {
        self.tx(|t| {
            let now = now(t)?;
            let held = t.query(
                "SELECT id, attempts, cancel_requested, worker FROM aria_jobs \
                 WHERE state = 'running' AND worker = $1 ORDER BY seq FOR UPDATE",
                &[&worker],
            )?;
            settle(t, &held, max_attempts, now, true)
        })
    }

    fn register_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool> {
        let lease = lease_ms(lease);
        let out = self.tx(|t| {
            // Serializes registrations of one id (the row may not exist yet to lock).
            t.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                &[&WORKER_LOCK, &worker],
            )?;
            let now = now(t)?;
            let row = t.query_opt(
                "SELECT instance, alive_until_ms FROM aria_workers WHERE worker = $1 FOR UPDATE",
                &[&worker],
            )?;
            let mut took_over = false;
            if let Some(r) = &row {
                let other: String = r.get(0);
                let alive_until: i64 = r.get(1);
                if other != instance && alive_until >= now {
                    return Ok(Err(alive_until - now));
                }
                took_over = other != instance;
            }
            t.execute(
                "INSERT INTO aria_workers (worker, instance, started_ms, alive_until_ms) \
                 VALUES ($1, $2, $3, $3::BIGINT + $4::BIGINT) ON CONFLICT (worker) DO UPDATE SET \
                 instance = EXCLUDED.instance, started_ms = EXCLUDED.started_ms, \
                 alive_until_ms = EXCLUDED.alive_until_ms",
                &[&worker, &instance, &now, &lease],
            )?;
            Ok(Ok(took_over))
        })?;
        out.map_err(|left_ms| super::in_use(worker, left_ms))
    }

    fn renew_worker(&self, worker: &str, instance: &str, lease: Duration) -> Result<bool> {
        let lease = lease_ms(lease);
        let n = self.tx(|t| {
            t.execute(
                &format!(
                    "UPDATE aria_workers SET alive_until_ms = ({NOW_MS}) + $3 \
                     WHERE worker = $1 AND instance = $2"
                ),
                &[&worker, &instance, &lease],
            )
        })?;
        Ok(n == 1)
    }

    fn unregister_worker(&self, worker: &str, instance: &str) -> Result<()> {
        self.tx(|t| {
            t.execute(
                "DELETE FROM aria_workers WHERE worker = $1 AND instance = $2",
                &[&worker, &instance],
            )
            .map(|_| ())
        })
    }

    fn expire_results(&self, older_than: Duration) -> Result<Vec<(String, String)>> {
        let older = lease_ms(older_than);
        let rows = self.tx(|t| {
            let now = now(t)?;
            t.query(
                "WITH old AS (SELECT id, result FROM aria_jobs WHERE state = 'done' \
                 AND result IS NOT NULL AND finished_ms < $1 FOR UPDATE SKIP LOCKED) \
                 UPDATE aria_jobs j SET result = NULL, error = $2 FROM old \
                 WHERE j.id = old.id RETURNING old.id, old.result",
                &[&now.saturating_sub(older), &super::EXPIRED],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn release(&self, worker: &str) -> Result<usize> {
        self.tx(|t| {
            let now = now(t)?;
            let a = t.execute(
                "UPDATE aria_jobs SET state = 'cancelled', finished_ms = $2, \
                 lease_until_ms = NULL, error = 'cancelled while running' \
                 WHERE state = 'running' AND worker = $1 AND cancel_requested",
                &[&worker, &now],
            )?;
            let b = t.execute(
                "UPDATE aria_jobs SET state = 'queued', worker = NULL, lease_until_ms = NULL, \
                 step = 0, progress = 0, attempts = GREATEST(attempts - 1, 0) \
                 WHERE state = 'running' AND worker = $1",
                &[&worker],
            )?;
            Ok((a + b) as usize)
        })
    }
}
