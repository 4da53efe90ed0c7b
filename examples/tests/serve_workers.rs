//! Several `aria serve` processes sharing one PostgreSQL job queue and one warm-start store:
//! jobs spread across them, none runs twice, and the jobs a worker holds when it is killed
//! with SIGKILL are retried and finished by the others once its lease has passed.
//!
//! Needs a server: `ARIA_PG_URL` (e.g. `bash .ci/postgres.sh cargo test -p aria-cli --features
//! postgres --test serve_workers`). Without it the test skips with a message, except under
//! `CI=true`, where it fails. The test works in a schema of its own.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aria_serve::jobs::postgres::PgJobStore;
use aria_serve::jobs::{JobRecord, JobState, JobStore, ListFilter};
use aria_testing::TempDir;
use serde_json::{json, Value};

/// Jobs posted, workers started, sampler steps per job and the pause after each step.
const JOBS: usize = 8;
const WORKERS: usize = 3;
const STEPS: u32 = 8;
const THROTTLE_MS: u64 = 150;
/// The lease of a claimed job, in seconds (renewed every third of it).
const LEASE_S: f64 = 4.0;
/// Everything, from the first start to the last check.
const BUDGET: Duration = Duration::from_secs(240);

/// The server's URL, or `None` (with a message) when there is none; panics under `CI=true`.
fn pg_url() -> Option<String> {
    match std::env::var("ARIA_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            let msg = "ARIA_PG_URL is not set (run under `bash .ci/postgres.sh`)";
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!("{msg}; PostgreSQL is required under CI=true");
            }
            aria_testing::skip(msg);
            None
        }
    }
}

/// `url` with its connections' `search_path` set to `schema`.
fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// One HTTP/1.1 exchange on a fresh connection: the status and the (de-chunked) body.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let what = format!("{method} http://{addr}{path}");
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{what}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if body.is_some() {
        req += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        );
    }
    req += "\r\n";
    req += &payload;
    s.write_all(req.as_bytes())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{what}: no HTTP response ({} bytes)", raw.len()));
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: bad status line in {head}"));
    let mut body = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
            let n = std::str::from_utf8(&rest[..nl])
                .ok()
                .and_then(|h| usize::from_str_radix(h.split(';').next()?.trim(), 16).ok())
                .unwrap_or(0);
            if n == 0 || rest.len() < nl + 2 + n {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
            rest = &rest[(nl + 4 + n).min(rest.len())..];
        }
        body = out;
    }
    (status, body)
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(b) }))
}

/// The worker processes; killed (SIGKILL) when dropped, so a failing check leaves none behind.
struct Workers {
    names: Vec<String>,
    children: Vec<Option<Child>>,
    addrs: Vec<SocketAddr>,
    logs: Vec<PathBuf>,
}

impl Workers {
    /// The last lines of worker `i`'s stderr, for failure messages.
    fn log(&self, i: usize) -> String {
        let s = std::fs::read_to_string(&self.logs[i]).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    fn logs(&self) -> String {
        (0..self.names.len())
            .map(|i| format!("--- {} stderr:\n{}", self.names[i], self.log(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            c.kill().unwrap();
            let _ = c.wait();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// Start `aria serve` worker `name` on a free loopback port; its address once it listens.
fn start_worker(
    name: &str,
    model: &Path,
    store: &str,
    results: &Path,
    log: &Path,
) -> (Child, SocketAddr) {
    let lease = LEASE_S.to_string();
    let throttle = THROTTLE_MS.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aria"))
        .args(["--json", "--threads", "1", "serve", "--bind", "127.0.0.1:0"])
        .arg("--model")
        .arg(model)
        .args(["--store", store, "--cache", store, "--worker-id", name])
        .args(["--lease", &lease, "--max-batch", "2", "--drain", "1"])
        .args(["--throttle-ms", &throttle])
        .arg("--results")
        .arg(results)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(a) = v["addr"]
                .as_str()
                .and_then(|a| a.parse::<SocketAddr>().ok())
            {
                let _ = tx.send(a);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(a) => (child, a),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "worker {name} did not report its address within 120 s; stderr:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        }
    }
}

fn all_jobs(s: &PgJobStore) -> Vec<JobRecord> {
    s.list(&ListFilter {
        state: None,
        limit: 1000,
        before_seq: None,
    })
    .unwrap()
}

#[test]
fn workers_share_the_queue_and_finish_a_killed_workers_jobs() {
    let Some(url) = pg_url() else { return };
    let t0 = Instant::now();
    let schema = format!("w_serve_{}", std::process::id());
    PgJobStore::open_in_schema(&url, &schema)
        .unwrap()
        .drop_schema()
        .unwrap();
    let s = PgJobStore::open_in_schema(&url, &schema).unwrap();
    let store = in_schema(&url, &schema);

    // Declared before the workers, so they are killed (dropped) before these folders go.
    let model = TempDir::new("serve-workers-model");
    aria::synth::write_model(
        &model,
        aria::synth::Preset::Tiny,
        aria_core::DType::F32,
        5,
        &mut |_, _| {},
    )
    .unwrap();
    let results = TempDir::new("serve-workers-results");
    let names: Vec<String> = (0..WORKERS).map(|i| format!("w{i}")).collect();
    let mut w = Workers {
        names: names.clone(),
        children: Vec::new(),
        addrs: Vec::new(),
        logs: Vec::new(),
    };
    for n in &names {
        let log = results.join(format!("{n}.log"));
        let (c, a) = start_worker(n, &model, &store, &results, &log);
        w.children.push(Some(c));
        w.addrs.push(a);
        w.logs.push(log);
    }

    // Post the jobs round-robin; two of them ask for a warm start (the shared cache store).
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let body = json!({
            "prompt": format!("worker test job {i}: soft rain on a window"),
            "seconds": 1.0,
            "steps": STEPS,
            "seed": i,
            "warm_start": i % 4 == 3,
        });
        let (st, b) = http(w.addrs[i % WORKERS], "POST", "/v1/generate", Some(&body));
        let v = json_of(&b);
        assert_eq!(
            st,
            202,
            "submit {i} to {}: {v}\n{}",
            names[i % WORKERS],
            w.logs()
        );
        ids.push(v["id"].as_str().unwrap().to_string());
    }

    // Kill w0 while it runs a job (past its first step, well before its end).
    let victims: BTreeSet<String> = loop {
        assert!(
            t0.elapsed() < BUDGET / 2,
            "w0 never ran a job; jobs: {:?}\n{}",
            all_jobs(&s)
                .iter()
                .map(|j| (j.id.clone(), j.state, j.worker.clone()))
                .collect::<Vec<_>>(),
            w.logs()
        );
        let held = all_jobs(&s).into_iter().any(|j| {
            j.state == JobState::Running
                && j.worker.as_deref() == Some("w0")
                && (1..STEPS / 2).contains(&j.step)
        });
        if held {
            w.kill(0);
            // w0 is dead: what it holds now stays held until its lease passes.
            break all_jobs(&s)
                .into_iter()
                .filter(|j| j.state == JobState::Running && j.worker.as_deref() == Some("w0"))
                .map(|j| j.id)
                .collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let killed_at = t0.elapsed();
    assert!(
        !victims.is_empty(),
        "w0 finished its job between the check and the kill; rerun"
    );

    // The survivors finish everything, the victims once their lease has passed.
    loop {
        let c = s.counts().unwrap();
        if c.done + c.failed + c.cancelled == JOBS as u64 {
            break;
        }
        assert!(
            t0.elapsed() < BUDGET,
            "jobs unfinished after {:?}: {c:?}\n{}",
            BUDGET,
            w.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let done_at = t0.elapsed();

    let jobs: BTreeMap<String, JobRecord> = all_jobs(&s)
        .into_iter()
        .map(|j| (j.id.clone(), j))
        .collect();
    assert_eq!(jobs.len(), JOBS, "{jobs:?}");
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for id in &ids {
        let j = &jobs[id];
        let who = j.worker.clone().unwrap_or_default();
        assert_eq!(
            j.state,
            JobState::Done,
            "{id} ended {:?} by {who}: {:?}\n{}",
            j.state,
            j.error,
            w.logs()
        );
        *per.entry(who.clone()).or_default() += 1;
        if victims.contains(id) {
            // Started by w0, which died; retried once and finished by another.
            assert_eq!(j.attempts, 2, "victim {id} (finished by {who})");
            assert_ne!(who, "w0", "victim {id} finished by the dead worker");
        } else {
            // Claimed once and finished by whoever claimed it: it ran once.
            assert_eq!(
                j.attempts, 1,
                "{id} claimed {} times (by {who})",
                j.attempts
            );
        }
        assert!(
            j.finished_ms.unwrap() >= j.started_ms.unwrap(),
            "{id}: finished before it started"
        );
        // Any survivor serves the audio (shared store and results directory).
        let (st, wav) = http(w.addrs[1], "GET", &format!("/v1/jobs/{id}/audio"), None);
        assert!(
            st == 200 && wav.starts_with(b"RIFF") && wav.len() > 44,
            "{id}: audio HTTP {st}, {} bytes",
            wav.len()
        );
    }
    // Every worker claimed jobs (w0: at least the ones it died with), and the two survivors
    // each finished some.
    let mut claimed: BTreeSet<&str> = per.keys().map(String::as_str).collect();
    claimed.insert("w0");
    assert_eq!(
        claimed.len(),
        WORKERS,
        "jobs did not spread over the {WORKERS} workers: finished per worker {per:?}"
    );
    assert!(
        names[1..]
            .iter()
            .all(|n| per.get(n).copied().unwrap_or(0) >= 1),
        "a surviving worker finished nothing: {per:?}"
    );
    eprintln!(
        "{JOBS} jobs ({STEPS} steps of >= {THROTTLE_MS} ms) on {WORKERS} `aria serve` workers: \
         w0 SIGKILLed at {:.2} s holding {victims:?}, lease {LEASE_S} s; all done at {:.2} s; \
         finished per worker {per:?}",
        killed_at.as_secs_f64(),
        done_at.as_secs_f64()
    );
    drop(w);
    s.drop_schema().unwrap();
}
