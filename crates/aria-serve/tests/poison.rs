//! A job that crashes its server process (a "poison" job) is not retried forever: every start
//! of a process that dies while running it counts as an attempt, also when the process is
//! restarted with the same worker id, and after `max_attempts` starts the job is `failed` and
//! the server stays up. On SQLite, and on PostgreSQL when `ARIA_PG_URL` is set (e.g. `bash
//! .ci/postgres.sh cargo test -p aria-serve --features postgres --test poison`; without it
//! that test skips with a message, except under `CI=true`, where it fails).
//!
//! The server runs in a child process (this test binary run again with a filter, see
//! `poison_server_child`), started with the test hook `ARIA_TEST_ABORT_ON_PROMPT`: it aborts
//! (`std::process::abort`) when it is about to run a job with that prompt.
#![allow(clippy::unwrap_used)]

#[path = "support/blocking_http.rs"]
mod web;

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_serve::jobs::sqlite::SqliteStore;
use aria_serve::jobs::{JobState, JobStore, NewJob};
use aria_serve::{ModelSource, ServeConfig, StoreSpec};
use aria_testing::TempDir;

const PROMPT: &str = "poison pill";
const WORKER: &str = "poison-w";
const MAX_ATTEMPTS: u32 = 2;
const LEASE: Duration = Duration::from_millis(1000);

/// The child server: does nothing in a plain test run. Started by the tests below with
/// `ARIA_POISON_CHILD` set, it serves until killed (or until its job aborts it), printing
/// `POISON ADDR host:port` once it listens.
#[test]
fn poison_server_child() {
    let Ok(dir) = std::env::var("ARIA_POISON_CHILD") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let dir = std::path::PathBuf::from(dir);
    let store: Arc<dyn JobStore> = match std::env::var("ARIA_POISON_PG_SCHEMA") {
        #[cfg(feature = "postgres")]
        Ok(schema) => Arc::new(
            aria_serve::jobs::postgres::PgJobStore::open_in_schema(
                &var("ARIA_POISON_PG_URL"),
                &schema,
            )
            .unwrap(),
        ),
        _ => Arc::new(SqliteStore::open(&dir.join("jobs.sqlite")).unwrap()),
    };
    let mut cfg = ServeConfig::demo(&dir);
    cfg.model = ModelSource::DemoTiny(dir.join("model"));
    cfg.store = StoreSpec::Custom(store);
    cfg.worker_id = var("ARIA_POISON_WORKER");
    cfg.lease = LEASE;
    cfg.max_attempts = MAX_ATTEMPTS;
    cfg.drain_timeout = Duration::ZERO;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let srv = match aria_serve::start(cfg).await {
            Ok(s) => s,
            Err(e) => panic!("POISON START FAILED: {e}"),
        };
        println!("POISON ADDR {}", srv.addr());
        srv.wait().await.unwrap();
    });
}

/// The request of the poison job, as the store holds it.
fn poison_job(id: &str) -> NewJob {
    let spec = serde_json::json!({"prompt": PROMPT, "negative_prompt": null, "seconds": 1.0,
        "steps": 2, "cfg": 1.0, "seed": 9, "sampler": "pingpong", "init": null,
        "inpaint": null, "loras": [], "steer": [], "warm_start": false});
    NewJob {
        id: id.into(),
        spec: spec.to_string(),
        batch_key: None,
        steps: 2,
    }
}

/// A child server (killed when dropped) and the lines it prints.
struct Server {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    log: std::path::PathBuf,
}

impl Server {
    fn start(dir: &std::path::Path, env: &[(&str, String)], n: usize) -> Server {
        let exe = std::env::current_exe().unwrap();
        let log = dir.join(format!("child-{n}.log"));
        // No core file of the aborts.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -c 0; exec \"$0\" \"$@\""])
            .arg(exe)
            .args([
                "poison_server_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("ARIA_POISON_CHILD", dir)
            .env("ARIA_POISON_WORKER", WORKER)
            .env("ARIA_TEST_ABORT_ON_PROMPT", PROMPT)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Server {
            child: Some(child),
            lines,
            log,
        }
    }

    fn log(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        // From the first panic on (its message and where), else the last lines.
        let lines: Vec<&str> = s.lines().collect();
        let from = lines
            .iter()
            .position(|l| l.contains("panicked"))
            .unwrap_or(lines.len().saturating_sub(20));
        lines[from..(from + 30).min(lines.len())].join("\n")
    }

    /// Wait until it exits on its own; panics after `within`.
    fn exit(&mut self, within: Duration) -> ExitStatus {
        let c = self.child.as_mut().unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(
                t0.elapsed() < within,
                "the server is still up after {within:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address it listens on; panics when it exits first or after `within`.
    fn addr(&mut self, within: Duration) -> SocketAddr {
        let t0 = Instant::now();
        loop {
            while let Ok(l) = self.lines.try_recv() {
                if let Some(a) = l.split_once("POISON ADDR ").map(|(_, a)| a) {
                    return a.trim().parse().unwrap();
                }
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "the server exited ({st}) before it listened:\n{}",
                    self.log()
                );
            }
            assert!(t0.elapsed() < within, "no address after {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(unix)]
fn aborted(st: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    st.signal() == Some(6)
}

#[cfg(not(unix))]
fn aborted(st: &ExitStatus) -> bool {
    !st.success()
}

/// Submit the poison job to `store`, then start servers with the same worker id on it until
/// it fails: each of the first `MAX_ATTEMPTS` aborts while running it (the attempt counted),
/// the next one fails it at start and stays up.
fn poison_fails_after_max_attempts(dir: &TempDir, store: &dyn JobStore, env: &[(&str, String)]) {
    aria::synth::write_model(
        &dir.join("model"),
        aria::synth::Preset::Tiny,
        aria_core::DType::F32,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    let id = "poison-job-1";
    store.submit(&poison_job(id), 10).unwrap();
    for k in 1..=MAX_ATTEMPTS {
        let mut srv = Server::start(dir, env, k as usize);
        let st = srv.exit(Duration::from_secs(120));
        assert!(aborted(&st), "start {k}: {st}:\n{}", srv.log());
        let j = store.get(id).unwrap().unwrap();
        assert_eq!(
            (j.state, j.attempts, j.worker.as_deref()),
            (JobState::Running, k, Some(WORKER)),
            "start {k}: {j:?}"
        );
        // The dead process's registration of the id expires after the lease.
        std::thread::sleep(LEASE + LEASE / 2);
    }
    let mut srv = Server::start(dir, env, MAX_ATTEMPTS as usize + 1);
    let addr = srv.addr(Duration::from_secs(120));
    let j = web::wait_state(addr, id, &["failed", "done"], Duration::from_secs(30));
    assert_eq!(j["state"], "failed", "{j}");
    assert_eq!(j["attempts"], MAX_ATTEMPTS, "{j}");
    let err = j["error"].as_str().unwrap();
    assert!(
        err.contains(&format!(
            "{MAX_ATTEMPTS} attempts used of max_attempts = {MAX_ATTEMPTS}"
        )) && err.contains(WORKER),
        "{err}"
    );
    // It stays up and serves.
    std::thread::sleep(Duration::from_millis(300));
    assert!(srv.running(), "the server stopped:\n{}", srv.log());
    assert_eq!(web::get(addr, "/health").status, 200);
    let r = store.get(id).unwrap().unwrap();
    assert_eq!((r.state, r.attempts), (JobState::Failed, MAX_ATTEMPTS));
}

#[test]
fn a_poison_job_fails_after_max_attempts_on_sqlite() {
    let dir = TempDir::new("serve-poison-sqlite");
    let store = SqliteStore::open(&dir.join("jobs.sqlite")).unwrap();
    poison_fails_after_max_attempts(&dir, &store, &[]);
}

#[cfg(feature = "postgres")]
#[test]
fn a_poison_job_fails_after_max_attempts_on_postgres() {
    use aria_serve::jobs::postgres::PgJobStore;
    let url = match std::env::var("ARIA_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            let msg = "ARIA_PG_URL is not set (run under `bash .ci/postgres.sh`)";
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!("{msg}; PostgreSQL is required under CI=true");
            }
            aria_testing::skip(msg);
            return;
        }
    };
    let schema = format!("poison_{}", std::process::id());
    PgJobStore::open_in_schema(&url, &schema)
        .unwrap()
        .drop_schema()
        .unwrap();
    let store = PgJobStore::open_in_schema(&url, &schema).unwrap();
    let dir = TempDir::new("serve-poison-pg");
    let env = [
        ("ARIA_POISON_PG_URL", url.clone()),
        ("ARIA_POISON_PG_SCHEMA", schema.clone()),
    ];
    poison_fails_after_max_attempts(&dir, &store, &env);
    store.drop_schema().unwrap();
}
