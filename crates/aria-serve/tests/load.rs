//! Load and abuse on loopback: 64 concurrent clients mixing valid requests, malformed JSON,
//! fuzzed fields, absurd durations, 10 MB bodies and slow senders against a server running the
//! tiny demo model with a small queue. Bounded in count (64 × OPS_PER_CLIENT requests) and time
//! (the whole test under `DEADLINE`).
//!
//! Required: no 5xx and no dropped connection on a well-formed request; every accepted job ends
//! `done` (or `cancelled`, where a client cancelled it); 429 with `Retry-After` once the queue is
//! full; the server still healthy at the end. Reported: p50/p99 latency and throughput.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CLIENTS: usize = 64;
const OPS_PER_CLIENT: usize = 6;
const QUEUE_MAX: usize = 8;
const DEADLINE: Duration = Duration::from_secs(90);
const BODY_LIMIT: usize = 1 << 20;

/// A response, or what happened instead.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// A tiny deterministic generator (xorshift64*), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
            let size_str = std::str::from_utf8(&rest[..nl]).ok()?;
            let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
            if size == 0 || rest.len() < nl + 2 + size {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + size]);
            rest = &rest[(nl + 4 + size).min(rest.len())..];
        }
        body = out;
    }
    Some(Reply {
        status,
        headers,
        body,
    })
}

/// One request on its own connection (`Connection: close`); `None` when the server closed the
/// connection without a response.
async fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(b) = body {
        head += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        );
    }
    head += "\r\n";
    let (mut rd, mut wr) = s.split();
    let write = async {
        wr.write_all(head.as_bytes()).await?;
        if let Some(b) = body {
            wr.write_all(b).await?;
        }
        wr.flush().await
    };
    let read = async {
        let mut raw = Vec::new();
        let _ = rd.read_to_end(&mut raw).await;
        raw
    };
    // The server may answer (413) before the body is all sent: read while writing.
    let (_, raw) = tokio::join!(write, read);
    parse_reply(&raw)
}

/// Headers complete, then the body one byte per `gap`, until the server answers or closes.
async fn slow_body(addr: SocketAddr, gap: Duration) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let body = br#"{"prompt": "slow sender", "seconds": 1, "steps": 2}"#;
    let head = format!(
        "POST /v1/generate HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len() * 100
    );
    let (mut rd, mut wr) = s.split();
    wr.write_all(head.as_bytes()).await.ok()?;
    let trickle = async {
        for b in body.iter().cycle() {
            if wr.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
    };
    let mut raw = Vec::new();
    tokio::select! {
        _ = rd.read_to_end(&mut raw) => {},
        _ = trickle => {},
    }
    parse_reply(&raw)
}

/// The request line and headers, one byte per `gap`.
async fn slow_headers(addr: SocketAddr, gap: Duration) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let head = "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".to_string() + &"a".repeat(400);
    let (mut rd, mut wr) = s.split();
    let trickle = async {
        for b in head.bytes() {
            if wr.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
    };
    let mut raw = Vec::new();
    tokio::select! {
        _ = rd.read_to_end(&mut raw) => {},
        _ = trickle => {},
    }
    parse_reply(&raw)
}

fn valid_body(rng: &mut Rng) -> Value {
    json!({
        "prompt": format!("load test tone {}", rng.below(1000)),
        "seconds": 0.5 + rng.below(3) as f64 * 0.5,
        "steps": 2 + rng.below(3),
        "seed": rng.below(1 << 20),
    })
}

/// A valid body with one field broken (or a valid oddity).
fn fuzzed_body(rng: &mut Rng) -> Vec<u8> {
    let mut b = valid_body(rng);
    match rng.below(12) {
        0 => b["steps"] = json!(-3),
        1 => b["steps"] = json!("four"),
        2 => b["cfg"] = json!(1e30),
        3 => b["prompt"] = json!(""),
        4 => b["prompt"] = json!("x".repeat(5000)),
        5 => b["seed"] = json!(-1),
        6 => b["loras"] = json!([{ "name": "../../etc/passwd", "strength": 1 }]),
        7 => b["steer"] = json!([{ "name": "nope", "strength": "loud" }]),
        8 => b["unknown_field"] = json!(true),
        9 => b["negative_prompt"] = json!(["not", "a", "string"]),
        10 => b["steps"] = json!(10_000_000),
        _ => b["prompt"] = json!("\u{0}\u{ffff}☃ control \u{1b}[31m chars"),
    }
    b.to_string().into_bytes()
}

fn malformed(rng: &mut Rng) -> Vec<u8> {
    let v = valid_body(rng).to_string();
    match rng.below(4) {
        0 => v.as_bytes()[..v.len() / 2].to_vec(),
        1 => b"{\"prompt\": \"a\",,}".to_vec(),
        2 => (0..200).map(|_| rng.below(256) as u8).collect(),
        _ => b"[1, 2, 3]".to_vec(),
    }
}

#[derive(Default)]
struct Tally {
    /// (category, status or 0 for closed) → count.
    statuses: BTreeMap<(&'static str, u16), usize>,
    /// Latency of the requests that are answered promptly (not slow senders), seconds.
    latencies: Vec<f64>,
    /// Latency of valid submits.
    submit_latencies: Vec<f64>,
    /// Accepted jobs and whether a client asked to cancel them.
    accepted: Vec<(String, bool)>,
    failures: Vec<String>,
    retry_after_missing: usize,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn client(addr: SocketAddr, k: usize, tally: Arc<Mutex<Tally>>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (k as u64 + 1).wrapping_mul(0x1234_5678_9ABC));
    let mut mine: Vec<String> = Vec::new();
    for op in 0..OPS_PER_CLIENT {
        // Everyone starts with a valid submit at once: the queue fills and 429s follow.
        let pick = if op == 0 { 0 } else { rng.below(100) };
        let t0 = Instant::now();
        let (cat, reply): (&'static str, Option<Reply>) = match pick {
            0..=34 => {
                let b = valid_body(&mut rng).to_string();
                (
                    "valid",
                    request(addr, "POST", "/v1/generate", Some(b.as_bytes())).await,
                )
            }
            35..=44 => (
                "malformed",
                request(addr, "POST", "/v1/generate", Some(&malformed(&mut rng))).await,
            ),
            45..=59 => (
                "fuzzed",
                request(addr, "POST", "/v1/generate", Some(&fuzzed_body(&mut rng))).await,
            ),
            60..=69 => {
                let s = [1e12, -5.0, 0.0, 1e300, 86_400.0][rng.below(5) as usize];
                let b = json!({ "prompt": "absurd", "seconds": s }).to_string();
                (
                    "absurd_seconds",
                    request(addr, "POST", "/v1/generate", Some(b.as_bytes())).await,
                )
            }
            70..=73 => {
                let mut b = br#"{"prompt": ""#.to_vec();
                b.resize(10 << 20, b'a');
                b.extend_from_slice(br#""}"#);
                (
                    "10mb_body",
                    request(addr, "POST", "/v1/generate", Some(&b)).await,
                )
            }
            74..=77 => (
                "slow_body",
                slow_body(addr, Duration::from_millis(150)).await,
            ),
            78..=79 => (
                "slow_headers",
                slow_headers(addr, Duration::from_millis(150)).await,
            ),
            80..=87 if !mine.is_empty() => {
                let id = mine[rng.below(mine.len() as u64) as usize].clone();
                (
                    "poll",
                    request(addr, "GET", &format!("/v1/jobs/{id}"), None).await,
                )
            }
            88..=91 if !mine.is_empty() => {
                let id = mine.remove(rng.below(mine.len() as u64) as usize);
                let r = request(addr, "DELETE", &format!("/v1/jobs/{id}"), None).await;
                let mut t = tally.lock().expect("tally");
                if let Some(a) = t.accepted.iter_mut().find(|a| a.0 == id) {
                    a.1 = true;
                }
                drop(t);
                ("cancel", r)
            }
            _ => {
                let path = [
                    "/health",
                    "/info",
                    "/metrics",
                    "/v1/jobs?limit=5",
                    "/openapi.json",
                ][rng.below(5) as usize];
                ("read", request(addr, "GET", path, None).await)
            }
        };
        let dt = t0.elapsed().as_secs_f64();
        let mut t = tally.lock().expect("tally");
        let status = reply.as_ref().map_or(0, |r| r.status);
        *t.statuses.entry((cat, status)).or_default() += 1;
        if !cat.starts_with("slow") {
            t.latencies.push(dt);
        }
        let ok = match (cat, status) {
            (_, 500..=599) => false,
            ("valid", 202) => {
                t.submit_latencies.push(dt);
                let id = reply
                    .as_ref()
                    .map(|r| r.json()["id"].as_str().unwrap_or("").to_string());
                if let Some(id) = id.filter(|i| !i.is_empty()) {
                    t.accepted.push((id.clone(), false));
                    mine.push(id);
                }
                true
            }
            ("valid", 429) => {
                t.submit_latencies.push(dt);
                if !reply
                    .as_ref()
                    .is_some_and(|r| r.headers.contains_key("retry-after"))
                {
                    t.retry_after_missing += 1;
                }
                true
            }
            ("valid" | "poll" | "read", _) => status == 200,
            ("cancel", _) => matches!(status, 200 | 202 | 409),
            ("malformed", _) => status == 400,
            ("absurd_seconds", _) => {
                let r = reply.as_ref().map(Reply::json).unwrap_or(Value::Null);
                status == 400 && (r["limit"] == "seconds" || r["field"] == "seconds")
            }
            ("fuzzed", 202) => {
                // A fuzz that happens to be valid (control characters in the prompt) is a job.
                let id = reply
                    .as_ref()
                    .map(|r| r.json()["id"].as_str().unwrap_or("").to_string());
                if let Some(id) = id.filter(|i| !i.is_empty()) {
                    t.accepted.push((id.clone(), false));
                    mine.push(id);
                }
                true
            }
            ("fuzzed", s) => (400..500).contains(&s),
            ("10mb_body", s) => s == 413 || s == 0,
            ("slow_body" | "slow_headers", s) => s == 408 || s == 0 || s == 400,
            _ => false,
        };
        if !ok {
            let body = reply
                .as_ref()
                .map(|r| {
                    String::from_utf8_lossy(&r.body)
                        .chars()
                        .take(200)
                        .collect::<String>()
                })
                .unwrap_or_default();
            t.failures
                .push(format!("client {k} op {op}: {cat} got {status}: {body}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_mixed_abuse() {
    let dir = aria_testing::TempDir::new("serve-load");
    let mut cfg = aria_serve::ServeConfig::demo(&dir);
    cfg.queue_max = QUEUE_MAX;
    cfg.max_batch = 4;
    cfg.limits.body_bytes = BODY_LIMIT;
    cfg.limits.prompt_chars = 1000;
    cfg.limits.max_steps = 50;
    cfg.limits.header_timeout = Duration::from_secs(2);
    cfg.limits.body_timeout = Duration::from_secs(2);
    let server = aria_serve::start(cfg)
        .await
        .expect("the demo server starts");
    let addr = server.addr();

    let tally = Arc::new(Mutex::new(Tally::default()));
    let t0 = Instant::now();
    let run = async {
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|k| tokio::spawn(client(addr, k, tally.clone())))
            .collect();
        for t in tasks {
            t.await.expect("a client task");
        }
    };
    tokio::time::timeout(DEADLINE, run)
        .await
        .expect("the clients finished within the deadline");
    let clients_s = t0.elapsed().as_secs_f64();

    // Every accepted job ends: done, or cancelled where a client asked.
    let accepted = tally.lock().expect("tally").accepted.clone();
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    let left = DEADLINE.saturating_sub(t0.elapsed());
    let drain_deadline = Instant::now() + left.max(Duration::from_secs(20));
    for (id, cancelled) in &accepted {
        let state = loop {
            let r = request(addr, "GET", &format!("/v1/jobs/{id}"), None).await;
            let j = r.map(|r| r.json()).unwrap_or(Value::Null);
            let s = j["state"].as_str().unwrap_or("?").to_string();
            if matches!(s.as_str(), "done" | "failed" | "cancelled") {
                if s == "failed" {
                    bad.push(format!("{id} failed: {}", j["error"]));
                }
                break s;
            }
            if Instant::now() > drain_deadline {
                bad.push(format!("{id} still {s} at the deadline"));
                break s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if state == "cancelled" && !cancelled {
            bad.push(format!("{id} cancelled, but no client cancelled it"));
        }
        *states.entry(state).or_default() += 1;
    }
    let total_s = t0.elapsed().as_secs_f64();

    // The audio of a finished job is a WAV; the server is still healthy.
    if states.get("done").copied().unwrap_or(0) > 0 {
        let mut found = false;
        for (id, _) in &accepted {
            let r = request(addr, "GET", &format!("/v1/jobs/{id}/audio"), None).await;
            if let Some(r) = r.filter(|r| r.status == 200) {
                assert!(r.body.starts_with(b"RIFF"), "{id}: the audio is not a WAV");
                found = true;
                break;
            }
        }
        assert!(found, "no finished job's audio could be fetched");
    }
    let health = request(addr, "GET", "/health", None)
        .await
        .expect("health answers");
    assert_eq!(health.status, 200);
    let metrics = request(addr, "GET", "/metrics", None)
        .await
        .expect("metrics answer");
    assert_eq!(metrics.status, 200);

    // Every client is done: take the tally out of its lock (no guard across the awaits below).
    let mut t = std::mem::take(&mut *tally.lock().expect("tally"));
    let n_requests: usize = t.statuses.values().sum();
    eprintln!("load: {CLIENTS} clients × {OPS_PER_CLIENT} ops, queue_max {QUEUE_MAX}");
    for ((cat, status), n) in &t.statuses {
        let s = if *status == 0 {
            "closed".to_string()
        } else {
            status.to_string()
        };
        eprintln!("  {cat:<15} {s:>6}  ×{n}");
    }
    let (p50, p99) = (pct(&mut t.latencies, 0.5), pct(&mut t.latencies, 0.99));
    let (s50, s99) = (
        pct(&mut t.submit_latencies, 0.5),
        pct(&mut t.submit_latencies, 0.99),
    );
    let done = states.get("done").copied().unwrap_or(0);
    eprintln!(
        "  latency (prompt requests, n={}): p50 {:.1} ms, p99 {:.1} ms",
        t.latencies.len(),
        p50 * 1e3,
        p99 * 1e3
    );
    eprintln!(
        "  latency (valid submits, n={}): p50 {:.1} ms, p99 {:.1} ms",
        t.submit_latencies.len(),
        s50 * 1e3,
        s99 * 1e3
    );
    eprintln!(
        "  throughput: {n_requests} requests in {clients_s:.1} s = {:.0} req/s; \
         {} accepted jobs ({states:?}), {done} done in {total_s:.1} s = {:.2} jobs/s",
        n_requests as f64 / clients_s,
        accepted.len(),
        done as f64 / total_s
    );

    assert!(
        t.failures.is_empty(),
        "unexpected answers:\n{}",
        t.failures.join("\n")
    );
    assert!(
        bad.is_empty(),
        "accepted jobs that did not end well:\n{}",
        bad.join("\n")
    );
    let n429 = t.statuses.get(&("valid", 429)).copied().unwrap_or(0);
    assert!(
        n429 > 0,
        "a queue of {QUEUE_MAX} under {CLIENTS} clients never answered 429"
    );
    assert_eq!(t.retry_after_missing, 0, "429 answers without Retry-After");
    assert!(!accepted.is_empty(), "no job was accepted");
    server.shutdown().await.expect("clean shutdown");
}
