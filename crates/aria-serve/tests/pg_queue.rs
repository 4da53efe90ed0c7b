//! The PostgreSQL job queue: its semantics, concurrent claims, and 3 worker processes sharing
//! one queue — jobs spread across them, none runs to completion twice, and the jobs of a worker
//! killed with SIGKILL are retried by the others once its lease has passed.
//!
//! Needs a server: `ARIA_PG_URL` (e.g. `bash .ci/postgres.sh cargo test -p aria-serve
//! --features postgres --test pg_queue`). Without it the tests skip with a message, except
//! under `CI=true`, where they fail. Each test works in a schema of its own.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_serve::jobs::postgres::PgJobStore;
use aria_serve::jobs::{
    CancelOutcome, JobState, JobStore, ListFilter, NewJob, Outcome, StateCounts,
};
use aria_serve::ServeError;

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

fn schema(name: &str) -> String {
    format!("q_{name}_{}", std::process::id())
}

/// A store in a fresh schema `name`.
fn fresh(url: &str, name: &str) -> PgJobStore {
    PgJobStore::open_in_schema(url, &schema(name))
        .unwrap()
        .drop_schema()
        .unwrap();
    PgJobStore::open_in_schema(url, &schema(name)).unwrap()
}

fn job(id: &str, key: Option<&str>) -> NewJob {
    NewJob {
        id: id.into(),
        spec: format!("{{\"prompt\":\"{id}\"}}"),
        batch_key: key.map(str::to_string),
        steps: 8,
    }
}

fn done() -> Outcome {
    Outcome::Done {
        result: "r.wav".into(),
        timings: "{}".into(),
    }
}

#[test]
fn the_queue_behaves_as_documented() {
    let Some(url) = pg_url() else { return };
    let s = fresh(&url, "sem");
    assert_eq!(s.submit(&job("a", Some("k")), 3).unwrap(), 0);
    assert_eq!(s.submit(&job("b", None), 3).unwrap(), 1);
    assert_eq!(s.submit(&job("c", Some("k")), 3).unwrap(), 2);
    match s.submit(&job("d", None), 3) {
        Err(ServeError::QueueFull { depth: 3, max: 3 }) => {}
        other => panic!("expected a full queue, got {other:?}"),
    }
    let e = s.submit(&job("a", None), 10).unwrap_err().to_string();
    assert!(e.contains("`a` exists"), "{e}");
    assert_eq!(s.position("c").unwrap(), Some(2));
    assert_eq!(s.position("zzz").unwrap(), None);

    // A claim takes the oldest job and the queued ones with its batch key.
    assert!(s.claim("w1", 0, Duration::from_secs(5)).unwrap().is_empty());
    let got = s.claim("w1", 4, Duration::from_secs(5)).unwrap();
    assert_eq!(
        got.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["a", "c"]
    );
    let a = &got[0];
    assert_eq!(
        (a.state, a.attempts, a.worker.as_deref()),
        (JobState::Running, 1, Some("w1"))
    );
    assert!(a.lease_until_ms.unwrap() >= a.started_ms.unwrap() + 4_900);
    assert_eq!(s.position("b").unwrap(), Some(0));
    assert_eq!(s.get("a").unwrap().unwrap().state, JobState::Running);

    // Progress is clamped and only written by the holder.
    assert!(!s.progress("a", "w1", 3, 8, 7.0).unwrap());
    let r = s.get("a").unwrap().unwrap();
    assert_eq!((r.step, r.steps, r.progress), (3, 8, 1.0));
    assert!(!s.progress("a", "other", 5, 8, 0.5).unwrap());
    assert_eq!(s.get("a").unwrap().unwrap().step, 3);

    // Cancels: queued → removed; running → requested, seen by heartbeat and progress.
    assert_eq!(s.cancel("b").unwrap(), CancelOutcome::Removed);
    assert_eq!(s.cancel("c").unwrap(), CancelOutcome::Requested);
    assert_eq!(s.cancel("nope").unwrap(), CancelOutcome::NotFound);
    let ids = ["a".to_string(), "c".to_string(), "b".to_string()];
    assert_eq!(
        s.heartbeat("w1", &ids, Duration::from_secs(5)).unwrap(),
        ["c".to_string()]
    );
    assert!(s.progress("c", "w1", 1, 8, 0.1).unwrap());
    assert!(s.finish("c", "w1", &Outcome::Cancelled).unwrap());
    assert_eq!(
        s.cancel("c").unwrap(),
        CancelOutcome::AlreadyFinished(JobState::Cancelled)
    );

    // Only the holder finishes, once.
    assert!(!s.finish("a", "w2", &done()).unwrap());
    assert!(s.finish("a", "w1", &done()).unwrap());
    assert!(!s.finish("a", "w1", &done()).unwrap());
    let r = s.get("a").unwrap().unwrap();
    assert_eq!((r.state, r.progress, r.step), (JobState::Done, 1.0, 8));
    assert_eq!(r.result.as_deref(), Some("r.wav"));
    assert!(r.finished_ms.is_some() && r.lease_until_ms.is_none());

    // An expired lease is requeued (keeping its place), then failed after max_attempts.
    s.submit(&job("e", None), 10).unwrap();
    s.submit(&job("f", None), 10).unwrap();
    let e1 = s.claim("w1", 1, Duration::ZERO).unwrap();
    assert_eq!(e1[0].id, "e");
    std::thread::sleep(Duration::from_millis(5));
    let rq = s.requeue_expired(2).unwrap();
    assert_eq!(rq.requeued, ["e".to_string()]);
    assert_eq!(s.position("e").unwrap(), Some(0));
    assert!(
        !s.finish("e", "w1", &done()).unwrap(),
        "a lost lease cannot finish"
    );
    let e2 = s.claim("w2", 1, Duration::ZERO).unwrap();
    assert_eq!((e2[0].id.as_str(), e2[0].attempts), ("e", 2));
    std::thread::sleep(Duration::from_millis(5));
    let rq = s.requeue_expired(2).unwrap();
    assert_eq!(rq.failed, ["e".to_string()]);
    let err = s.get("e").unwrap().unwrap().error.unwrap();
    assert!(
        err.contains("max_attempts = 2") && err.contains("`w2`"),
        "{err}"
    );

    // Release hands a clean stop's jobs back without counting the attempt.
    let f = s.claim("w3", 1, Duration::from_secs(60)).unwrap();
    assert_eq!(f[0].id, "f");
    assert_eq!(s.release("w3").unwrap(), 1);
    let r = s.get("f").unwrap().unwrap();
    assert_eq!((r.state, r.attempts, r.worker), (JobState::Queued, 0, None));

    assert_eq!(
        s.counts().unwrap(),
        StateCounts {
            queued: 1,
            running: 0,
            done: 1,
            failed: 1,
            cancelled: 2
        }
    );
    let l = s
        .list(&ListFilter {
            state: None,
            limit: 2,
            before_seq: None,
        })
        .unwrap();
    assert_eq!(
        l.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["f", "e"]
    );
    let l2 = s
        .list(&ListFilter {
            state: Some(JobState::Cancelled),
            limit: 10,
            before_seq: Some(l[1].seq),
        })
        .unwrap();
    assert_eq!(
        l2.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["c", "b"]
    );
    s.drop_schema().unwrap();
}

#[test]
fn concurrent_claims_never_share_a_job() {
    let Some(url) = pg_url() else { return };
    let s = Arc::new(fresh(&url, "claims"));
    let n = 200;
    for i in 0..n {
        let key = (i % 3 == 0).then_some("batch");
        s.submit(&job(&format!("j{i:03}"), key), 1000).unwrap();
    }
    let threads: Vec<_> = (0..4)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                let name = format!("t{w}");
                let mut mine = Vec::new();
                loop {
                    let got = s.claim(&name, 3, Duration::from_secs(60)).unwrap();
                    if got.is_empty() {
                        break mine;
                    }
                    for j in got {
                        assert!(s.finish(&j.id, &name, &done()).unwrap());
                        mine.push(j.id);
                    }
                }
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    let mut per = Vec::new();
    for t in threads {
        let mine = t.join().unwrap();
        per.push(mine.len());
        for id in mine {
            assert!(all.insert(id.clone()), "{id} claimed twice");
        }
    }
    assert_eq!(all.len(), n);
    assert_eq!(s.counts().unwrap().done, n as u64);
    eprintln!("claims per thread: {per:?}");
    Arc::try_unwrap(s).unwrap().drop_schema().unwrap();
}

/// The environment of a worker process (see [`queue_worker`]).
const WORKER: &str = "ARIA_PGQ_WORKER";
/// In a worker: hold its second job (see [`queue_worker`]).
const HOLD: &str = "ARIA_PGQ_HOLD";

/// A worker process: the test binary re-run on
/// `workers_share_the_queue_and_retry_a_killed_workers_jobs` alone with [`WORKER`] (its name)
/// and `ARIA_PGQ_{URL,SCHEMA,WORK_MS,LEASE_MS}` set, which then plays this role instead of the
/// test's. Claims one job at a time, "runs" it for `ARIA_PGQ_WORK_MS` in steps with heartbeats,
/// and finishes it; prints `PGQ RUN id attempt` and `PGQ FIN id ok`. With [`HOLD`] set it stops
/// in its second job, after the first step: it prints `PGQ HOLD id` and keeps the lease alive
/// until it is killed (or its stdin closes, when it exits with a failure).
fn queue_worker(name: &str) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{name}: {k} is not set"));
    let (url, sc) = (var("ARIA_PGQ_URL"), var("ARIA_PGQ_SCHEMA"));
    let work = Duration::from_millis(var("ARIA_PGQ_WORK_MS").parse().unwrap());
    let lease = Duration::from_millis(var("ARIA_PGQ_LEASE_MS").parse().unwrap());
    let hold = std::env::var_os(HOLD).is_some();
    let s = PgJobStore::open_in_schema(&url, &sc).unwrap();
    let mut listener = s.listener().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut finished = 0;
    loop {
        assert!(Instant::now() < deadline, "{name}: the queue never drained");
        s.requeue_expired(5).unwrap();
        let jobs = s.claim(name, 1, lease).unwrap();
        if jobs.is_empty() {
            assert!(!hold, "{name}: no job to hold");
            let c = s.counts().unwrap();
            if c.queued == 0 && c.running == 0 {
                return;
            }
            // Woken by a submit, or look again for expired leases.
            listener.wait(Duration::from_millis(50)).unwrap();
            continue;
        }
        for j in jobs {
            println!("PGQ RUN {} {}", j.id, j.attempts);
            for step in 1..=5u32 {
                std::thread::sleep(work / 5);
                s.heartbeat(name, std::slice::from_ref(&j.id), lease)
                    .unwrap();
                s.progress(&j.id, name, step, 5, step as f32 / 5.0).unwrap();
                if hold && finished == 1 {
                    hold_until_killed(&s, name, &j.id, lease);
                }
            }
            let ok = s
                .finish(
                    &j.id,
                    name,
                    &Outcome::Done {
                        result: format!("{}.wav", j.id),
                        timings: "{}".into(),
                    },
                )
                .unwrap();
            println!("PGQ FIN {} {ok}", j.id);
            finished += 1;
        }
    }
}

/// Announces `PGQ HOLD id` and keeps the job's lease alive (so that nothing but the kill can
/// take the job from this worker) until the process is killed. The parent never writes to the
/// worker's stdin: when it closes (the parent is gone), the worker exits with a failure.
fn hold_until_killed(s: &PgJobStore, name: &str, id: &str, lease: Duration) -> ! {
    use std::io::{Read, Write};
    println!("PGQ HOLD {id}");
    std::io::stdout().flush().unwrap();
    std::thread::spawn(|| {
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        std::process::exit(3);
    });
    loop {
        s.heartbeat(name, &[id.to_string()], lease).unwrap();
        std::thread::sleep(lease / 10);
    }
}

#[test]
fn workers_share_the_queue_and_retry_a_killed_workers_jobs() {
    if let Ok(name) = std::env::var(WORKER) {
        return queue_worker(&name);
    }
    let Some(url) = pg_url() else { return };
    let s = fresh(&url, "workers");
    let n = 30;
    for i in 0..n {
        s.submit(&job(&format!("job{i:02}"), None), 1000).unwrap();
    }
    let t0 = Instant::now();
    let exe = std::env::current_exe().unwrap();
    let spawn = |name: &str| {
        let mut c = Command::new(&exe);
        c.args([
            "workers_share_the_queue_and_retry_a_killed_workers_jobs",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER, name)
        .env("ARIA_PGQ_URL", &url)
        .env("ARIA_PGQ_SCHEMA", schema("workers"))
        .env("ARIA_PGQ_WORK_MS", "150")
        .env("ARIA_PGQ_LEASE_MS", "5000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if name == "w0" {
            c.env(HOLD, "1");
        }
        c.spawn().unwrap()
    };
    let names = ["w0", "w1", "w2"];
    let mut children = vec![spawn(names[0])];

    // w0 finishes a job, then stops in the middle of its second one and says so; it keeps the
    // job's lease alive until it is killed. w1 and w2 start once it holds that job (so that it
    // surely gets one), and w0 is killed only then: no timing decides what the kill interrupts.
    // w0's lines are read as they come, up to the marker.
    let mut w0_out = BufReader::new(children[0].stdout.take().unwrap());
    let mut w0_lines = Vec::new();
    let observed = loop {
        let mut l = String::new();
        if w0_out.read_line(&mut l).unwrap() == 0 {
            let st = children[0].wait().unwrap();
            let mut err = String::new();
            children[0]
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("w0 exited ({st}) before holding a job: {w0_lines:?}\n{err}");
        }
        let l = l.trim_end().to_string();
        let hold = l.split_once("PGQ HOLD ").map(|(_, id)| id.to_string());
        w0_lines.push(l);
        if let Some(id) = hold {
            break id;
        }
    };
    children.extend(names[1..].iter().map(|&n| spawn(n)));
    // SIGKILL on Unix.
    children[0].kill().unwrap();
    let killed_at = t0.elapsed();
    let w0_status = children[0].wait().unwrap();
    assert!(!w0_status.success(), "w0 exited on its own: {w0_status}");
    w0_out.read_to_end(&mut Vec::new()).unwrap();
    // Dead now: what the store says w0 holds is what the kill interrupted.
    let held: Vec<String> = s
        .list(&ListFilter {
            state: Some(JobState::Running),
            limit: 100,
            before_seq: None,
        })
        .unwrap()
        .into_iter()
        .filter(|j| j.worker.as_deref() == Some("w0"))
        .map(|j| j.id)
        .collect();
    assert_eq!(
        held,
        std::slice::from_ref(&observed),
        "w0 was killed while running {observed}"
    );
    let victim = observed;

    let mut runs: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    let mut fins: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, c) in names.iter().zip(children.drain(..)) {
        let stdout = if *name == "w0" {
            w0_lines.join("\n")
        } else {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{name} failed: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
        };
        // The harness prints `test … ` before the first line of a test's own output.
        for l in stdout
            .lines()
            .filter_map(|l| l.split_once("PGQ ").map(|(_, r)| r))
        {
            let f: Vec<&str> = l.split(' ').collect();
            match f.as_slice() {
                ["RUN", id, attempt] => runs
                    .entry(id.to_string())
                    .or_default()
                    .push((name.to_string(), attempt.parse().unwrap())),
                ["FIN", id, "true"] => fins
                    .entry(id.to_string())
                    .or_default()
                    .push(name.to_string()),
                ["FIN", id, ok] => panic!("{name} could not finish {id} ({ok})"),
                _ => {}
            }
        }
    }
    let elapsed = t0.elapsed();

    let c = s.counts().unwrap();
    assert_eq!((c.done, c.queued, c.running, c.failed), (n as u64, 0, 0, 0));
    // None ran to completion twice, and the store agrees on who finished each.
    assert_eq!(fins.len(), n);
    for (id, who) in &fins {
        assert_eq!(who.len(), 1, "{id} finished by {who:?}");
        let r = s.get(id).unwrap().unwrap();
        assert_eq!(r.worker.as_deref(), Some(who[0].as_str()), "{id}");
        assert_eq!(r.result.as_deref(), Some(format!("{id}.wav").as_str()));
        // Every start is an attempt the store counted; only the victim's job ran twice.
        let starts = &runs[id];
        assert_eq!(starts.len() as u32, r.attempts, "{id}: {starts:?}");
        assert_eq!(
            r.attempts,
            if *id == victim { 2 } else { 1 },
            "{id}: {starts:?}"
        );
    }
    // The victim's job was started by w0, never finished there, and retried by another.
    let v = &runs[&victim];
    assert_eq!(v[0], ("w0".to_string(), 1), "{v:?}");
    assert_ne!(fins[&victim][0], "w0");
    // Jobs spread over all three workers.
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for who in fins.values() {
        *per.entry(who[0].as_str()).or_default() += 1;
    }
    assert!(
        names.iter().all(|n| per.get(n).copied().unwrap_or(0) >= 1),
        "{per:?}"
    );
    eprintln!(
        "{n} jobs of 150 ms on 3 workers: w0 SIGKILLed at {:.2} s during {victim}, retried by \
         {}; all done in {:.2} s; finished per worker {per:?}",
        killed_at.as_secs_f64(),
        fins[&victim][0],
        elapsed.as_secs_f64()
    );
    s.drop_schema().unwrap();
}
