//! The HTTP API against the tiny demo model on 127.0.0.1:0: submit → progress → audio, cancel,
//! 429 when full, each limit's error, malformed JSON, the token off loopback, and jobs kept
//! across a restart or a lost worker.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_serve::jobs::sqlite::SqliteStore;
use aria_serve::jobs::{JobState, JobStore, NewJob};
use aria_serve::{start, ModelSource, ServeConfig, StoreSpec};
use aria_testing::{SharedTempDir, TempDir};
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The demo model, shared by the tests of this binary that run at the same time (removed when
/// the last of them finishes).
fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("serve-test-model");
    DIR.get(|d| {
        aria::synth::write_model(
            d,
            aria::synth::Preset::Tiny,
            aria_core::DType::F32,
            0,
            &mut |_, _| {},
        )
        .unwrap();
    })
}

/// The folders a test's server uses (its scratch folder and the model); keep them alive until
/// the server is shut down.
struct Dirs {
    _scratch: TempDir,
    _model: Arc<TempDir>,
}

fn config(name: &str) -> (ServeConfig, Dirs) {
    let dir = TempDir::new(&format!("serve-test-{name}"));
    let model = model_dir();
    let mut c = ServeConfig::demo(&dir);
    c.model = ModelSource::DemoTiny(model.to_path_buf());
    c.drain_timeout = Duration::ZERO;
    c.lease = Duration::from_millis(600);
    let dirs = Dirs {
        _scratch: dir,
        _model: model,
    };
    (c, dirs)
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&b[..nl])
            .unwrap()
            .split(';')
            .next()
            .unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

/// One HTTP/1.1 request on its own connection (raw bytes: lets tests send what clients
/// should not).
async fn raw(addr: SocketAddr, bytes: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

async fn http(addr: SocketAddr, method: &str, path: &str, extra: &str, body: &[u8]) -> Resp {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    raw(addr, &req).await
}

async fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, "", b"").await
}

async fn post(addr: SocketAddr, body: &Value) -> Resp {
    let b = serde_json::to_vec(body).unwrap();
    http(
        addr,
        "POST",
        "/v1/generate",
        "Content-Type: application/json\r\n",
        &b,
    )
    .await
}

async fn wait_state(addr: SocketAddr, id: &str, want: &[&str], within: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let j = get(addr, &format!("/v1/jobs/{id}")).await.json();
        if want.contains(&j["state"].as_str().unwrap()) {
            return j;
        }
        assert!(t0.elapsed() < within, "job {id} still {j} after {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Check a 16-bit stereo WAV of about `seconds`.
fn check_wav(b: &[u8], seconds: f64) {
    assert!(b.len() > 44, "WAV of {} bytes", b.len());
    assert_eq!(&b[0..4], b"RIFF");
    assert_eq!(&b[8..12], b"WAVE");
    assert_eq!(&b[36..40], b"data");
    let data = u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize;
    assert_eq!(data, b.len() - 44, "data size in the header vs bytes sent");
    let riff = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    assert_eq!(riff, b.len() - 8);
    let ch = u16::from_le_bytes(b[22..24].try_into().unwrap()) as usize;
    let sr = u32::from_le_bytes(b[24..28].try_into().unwrap());
    assert_eq!((ch, sr), (2, 44100));
    let frames = data / (2 * ch);
    let want = seconds * f64::from(sr);
    assert!(
        (frames as f64 - want).abs() <= 1.0,
        "{frames} frames for {seconds} s"
    );
    // The reader agrees.
    let r = hound::WavReader::new(std::io::Cursor::new(b)).unwrap();
    assert_eq!(r.duration() as usize, frames);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_progress_audio_and_pictures() {
    let (mut cfg, _dirs) = config("submit");
    cfg.throttle = Some(Duration::from_millis(40));
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let r = post(
        a,
        &json!({"prompt": "rain on a tin roof", "seconds": 1.5, "steps": 6, "seed": 3}),
    )
    .await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let id = j["id"].as_str().unwrap().to_string();
    assert_eq!(j["position"], 0);
    assert_eq!(j["links"]["audio"], format!("/v1/jobs/{id}/audio"));
    assert_eq!(
        r.header("location"),
        Some(format!("/v1/jobs/{id}").as_str())
    );
    // Progress is seen part way.
    let mid = wait_state(a, &id, &["running", "done"], Duration::from_secs(60)).await;
    let mut seen_partial = mid["state"] == "running" && mid["progress"].as_f64().unwrap() < 1.0;
    let t0 = Instant::now();
    while !seen_partial && t0.elapsed() < Duration::from_secs(30) {
        let j = get(a, &format!("/v1/jobs/{id}")).await.json();
        let p = j["progress"].as_f64().unwrap();
        if j["state"] == "running" && p > 0.0 && p < 1.0 && j["step"].as_u64().unwrap() > 0 {
            seen_partial = true;
        }
        if j["state"] == "done" {
            break;
        }
    }
    assert!(seen_partial, "no partial progress seen");
    // The audio, streamed while the job runs (or from the file once done).
    let audio = get(a, &format!("/v1/jobs/{id}/audio")).await;
    assert_eq!(audio.status, 200);
    assert_eq!(audio.header("content-type"), Some("audio/wav"));
    check_wav(&audio.body, 1.5);
    let done = wait_state(a, &id, &["done"], Duration::from_secs(60)).await;
    assert_eq!(done["progress"], 1.0);
    assert_eq!(done["step"], 6);
    assert_eq!(done["steps"], 6);
    assert!(done["timings"]["stages"]["total_s"].as_f64().unwrap() > 0.0);
    // From the file: the same bytes.
    let again = get(a, &format!("/v1/jobs/{id}/audio")).await;
    assert_eq!(again.body, audio.body);
    let flac = get(a, &format!("/v1/jobs/{id}/audio?format=flac")).await;
    assert_eq!(flac.status, 200);
    assert_eq!(&flac.body[..4], b"fLaC");
    for pic in ["waveform.png", "spectrogram.png"] {
        let p = get(a, &format!("/v1/jobs/{id}/{pic}")).await;
        assert_eq!(p.status, 200, "{pic}");
        assert_eq!(p.header("content-type"), Some("image/png"));
    }
    let list = get(a, "/v1/jobs").await.json();
    assert_eq!(list["jobs"][0]["id"], id.as_str());
    let m = String::from_utf8(get(a, "/metrics").await.body).unwrap();
    assert!(m.contains("aria_jobs{state=\"done\"} 1"), "{m}");
    assert!(m.contains("aria_job_latency_seconds_count 1"), "{m}");
    assert!(m.contains("aria_queue_depth 0"), "{m}");
    let info = get(a, "/info").await.json();
    assert!(info["limits"]["seconds"].as_f64().unwrap() > 29.0);
    assert_eq!(info["model"]["sample_rate"], 44100);
    let oa = get(a, "/openapi.json").await.json();
    assert_eq!(oa["openapi"], "3.0.3");
    assert!(oa["paths"]["/v1/generate"]["post"].is_object());
    let page = get(a, "/").await;
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(get(a, "/health").await.status, 200);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_compatible_jobs() {
    let (mut cfg, _dirs) = config("batch");
    cfg.max_batch = 3;
    cfg.throttle = Some(Duration::from_millis(30));
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    // A job to keep the worker busy while three compatible ones queue up.
    let first = post(
        a,
        &json!({"prompt": "busy", "seconds": 1.0, "steps": 8, "seed": 1}),
    )
    .await;
    let first = first.json()["id"].as_str().unwrap().to_string();
    wait_state(a, &first, &["running"], Duration::from_secs(60)).await;
    let mut ids = Vec::new();
    for seed in [5, 6, 5] {
        let r = post(
            a,
            &json!({"prompt": "same", "seconds": 1.0, "steps": 2, "seed": seed}),
        )
        .await;
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let mut audio = Vec::new();
    for id in &ids {
        let j = wait_state(a, id, &["done"], Duration::from_secs(120)).await;
        assert_eq!(j["timings"]["stages"]["batch"], 3, "{j}");
        audio.push(get(a, &format!("/v1/jobs/{id}/audio")).await.body);
    }
    // Every item of the batch got its own complete audio, drawn from its own seed: equal
    // seeds give equal bytes, and the same request run alone gives them too.
    for a in &audio {
        check_wav(a, 1.0);
    }
    assert_ne!(audio[0], audio[1]);
    assert_eq!(audio[0], audio[2], "two jobs with one seed in one batch");
    let alone = post(
        a,
        &json!({"prompt": "same", "seconds": 1.0, "steps": 2, "seed": 5}),
    )
    .await;
    let alone = alone.json()["id"].as_str().unwrap().to_string();
    let j = wait_state(a, &alone, &["done"], Duration::from_secs(120)).await;
    assert_eq!(j["timings"]["stages"]["batch"], 1, "{j}");
    let alone = get(a, &format!("/v1/jobs/{alone}/audio")).await.body;
    assert_eq!(alone, audio[0], "a batch item vs the same job alone");
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_one_member_of_a_running_batch() {
    let (mut cfg, _dirs) = config("cancel-member");
    cfg.max_batch = 3;
    cfg.throttle = Some(Duration::from_millis(60));
    let results = cfg.results_dir.clone();
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    // Keep the worker busy while three compatible jobs queue up, so they run as one batch.
    let busy = post(
        a,
        &json!({"prompt": "busy", "seconds": 1.0, "steps": 6, "seed": 1}),
    )
    .await;
    let busy = busy.json()["id"].as_str().unwrap().to_string();
    wait_state(a, &busy, &["running"], Duration::from_secs(60)).await;
    let mut ids = Vec::new();
    for seed in [21, 22, 23] {
        let r = post(
            a,
            &json!({"prompt": "member", "seconds": 1.0, "steps": 30, "seed": seed}),
        )
        .await;
        assert_eq!(r.status, 202);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        wait_state(a, id, &["running"], Duration::from_secs(60)).await;
    }
    // Part way through the batch, cancel the middle member only.
    let t0 = Instant::now();
    loop {
        let j = get(a, &format!("/v1/jobs/{}", ids[1])).await.json();
        if j["step"].as_u64().unwrap() >= 3 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = http(a, "DELETE", &format!("/v1/jobs/{}", ids[1]), "", b"").await;
    assert_eq!(d.status, 202);
    let c = wait_state(a, &ids[1], &["cancelled"], Duration::from_secs(30)).await;
    assert!(c["step"].as_u64().unwrap() < 30, "{c}");
    // It is reported cancelled while the others are still running.
    for k in [0, 2] {
        let j = get(a, &format!("/v1/jobs/{}", ids[k])).await.json();
        assert_eq!(j["state"], "running", "member {k}: {j}");
    }
    for k in [0, 2] {
        let j = wait_state(
            a,
            &ids[k],
            &["done", "failed", "cancelled"],
            Duration::from_secs(120),
        )
        .await;
        assert_eq!(j["state"], "done", "member {k}: {j}");
        assert_eq!(j["timings"]["stages"]["batch"], 3, "{j}");
        check_wav(
            &get(a, &format!("/v1/jobs/{}/audio", ids[k])).await.body,
            1.0,
        );
    }
    // The cancelled member's result was discarded and it stays cancelled.
    assert_eq!(
        get(a, &format!("/v1/jobs/{}", ids[1])).await.json()["state"],
        "cancelled"
    );
    assert_eq!(
        get(a, &format!("/v1/jobs/{}/audio", ids[1])).await.status,
        409
    );
    assert!(!results.join(format!("{}.wav", ids[1])).exists());
    assert!(!results.join(format!("{}.wav.part", ids[1])).exists());
    assert!(results.join(format!("{}.wav", ids[0])).exists());
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_queued_and_running() {
    let (mut cfg, _dirs) = config("cancel");
    cfg.throttle = Some(Duration::from_millis(100));
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let run = post(a, &json!({"prompt": "long", "seconds": 1.0, "steps": 100}))
        .await
        .json();
    let run = run["id"].as_str().unwrap().to_string();
    wait_state(a, &run, &["running"], Duration::from_secs(60)).await;
    let q = post(
        a,
        &json!({"prompt": "waiting", "seconds": 1.0, "steps": 100}),
    )
    .await
    .json();
    let q = q["id"].as_str().unwrap().to_string();
    assert_eq!(get(a, &format!("/v1/jobs/{q}")).await.json()["position"], 0);
    let d = http(a, "DELETE", &format!("/v1/jobs/{q}"), "", b"").await;
    assert_eq!(d.status, 200);
    assert_eq!(
        get(a, &format!("/v1/jobs/{q}")).await.json()["state"],
        "cancelled"
    );
    let d = http(a, "DELETE", &format!("/v1/jobs/{run}"), "", b"").await;
    assert_eq!(d.status, 202);
    let j = wait_state(a, &run, &["cancelled"], Duration::from_secs(30)).await;
    assert!(j["step"].as_u64().unwrap() < 100);
    let again = http(a, "DELETE", &format!("/v1/jobs/{run}"), "", b"").await;
    assert_eq!(again.status, 409);
    assert_eq!(get(a, &format!("/v1/jobs/{run}/audio")).await.status, 409);
    assert_eq!(
        http(a, "DELETE", "/v1/jobs/nope", "", b"").await.status,
        404
    );
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_429_with_retry_after() {
    let (mut cfg, _dirs) = config("full");
    cfg.queue_max = 2;
    cfg.max_batch = 1;
    cfg.throttle = Some(Duration::from_millis(200));
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let mut accepted = 0;
    let mut full = None;
    for _ in 0..6 {
        let r = post(a, &json!({"prompt": "x", "seconds": 1.0, "steps": 50})).await;
        match r.status {
            202 => accepted += 1,
            429 => full = Some(r),
            s => panic!("status {s}"),
        }
    }
    // At most one running plus queue_max queued.
    assert!(accepted <= 3, "{accepted} accepted");
    let full = full.expect("no 429");
    assert!(full.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    let j = full.json();
    assert_eq!(j["code"], "queue_full");
    assert_eq!(j["limit"], "queue_max");
    srv.shutdown().await.unwrap();
}

fn wav_bytes(seconds: f64) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 8000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut c = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut c, spec).unwrap();
    for i in 0..(seconds * 8000.0) as usize {
        w.write_sample(((i as f32 * 0.05).sin() * 8000.0) as i16)
            .unwrap();
    }
    w.finalize().unwrap();
    c.into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_is_named() {
    let (mut cfg, _dirs) = config("limits");
    cfg.limits.body_bytes = 64 << 10;
    cfg.limits.upload_bytes = 40 << 10;
    cfg.limits.upload_seconds = 1.0;
    cfg.limits.prompt_chars = 100;
    cfg.limits.max_steps = 50;
    cfg.limits.max_loras = 1;
    cfg.limits.max_steer = 1;
    cfg.limits.max_seconds = Some(5.0);
    cfg.limits.body_timeout = Duration::from_millis(400);
    cfg.limits.header_timeout = Duration::from_millis(400);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"prompt": "x", "seconds": 6.0}), 400, "seconds"),
        (json!({"prompt": "x", "seconds": 1e9}), 400, "seconds"),
        (json!({"prompt": "x".repeat(101)}), 400, "prompt_chars"),
        (
            json!({"prompt": "x", "negative_prompt": "y".repeat(101)}),
            400,
            "prompt_chars",
        ),
        (json!({"prompt": "x", "steps": 51}), 400, "steps"),
        (
            json!({"prompt": "x", "loras": [{"name": "a"}, {"name": "b"}]}),
            400,
            "loras",
        ),
        (
            json!({"prompt": "x", "steer": [{"name": "a"}, {"name": "b"}]}),
            400,
            "steer",
        ),
        (
            json!({"prompt": "x", "init_audio": {"data": b64(&vec![0u8; 45 << 10])}}),
            413,
            "upload_bytes",
        ),
        (
            json!({"prompt": "x", "seconds": 2.0, "init_audio": {"data": b64(&wav_bytes(2.0))}}),
            400,
            "upload_seconds",
        ),
    ];
    for (body, status, limit) in cases {
        let r = post(a, &body).await;
        let j = r.json();
        assert_eq!(
            (r.status, j["limit"].as_str()),
            (status, Some(limit)),
            "{j}"
        );
        assert_eq!(j["code"], "limit_exceeded");
        assert!(j["error"].as_str().unwrap().contains(limit), "{j}");
    }
    // A body over body_bytes.
    let big = json!({"prompt": "x".repeat(70 << 10)});
    let r = post(a, &big).await;
    assert_eq!(
        (r.status, r.json()["limit"].as_str()),
        (413, Some("body_bytes"))
    );
    // A slow sender: headers, then half the body, then nothing.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    // Headers that never end: the connection is closed.
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "a slow header sender was not cut off");
    // A job with init audio within the limits is accepted.
    let ok = json!({"prompt": "x", "seconds": 1.0, "steps": 2,
                    "init_audio": {"data": b64(&wav_bytes(0.5)), "noise_level": 0.7}});
    let r = post(a, &ok).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    wait_state(a, &id, &["done"], Duration::from_secs(60)).await;
    // The same as a multipart upload: a `request` part and an `inpaint_audio` file part.
    let mut mp = Vec::new();
    let req = json!({"prompt": "x", "seconds": 1.0, "steps": 2,
                     "inpaint": {"ranges": [[0.2, 0.6]]}});
    mp.extend_from_slice(b"--XyZ\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n");
    mp.extend_from_slice(req.to_string().as_bytes());
    mp.extend_from_slice(
        b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"inpaint_audio\"; \
        filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n",
    );
    mp.extend_from_slice(&wav_bytes(0.8));
    mp.extend_from_slice(b"\r\n--XyZ--\r\n");
    let ct = "Content-Type: multipart/form-data; boundary=XyZ\r\n";
    let r = http(a, "POST", "/v1/generate", ct, &mp).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    wait_state(a, &id, &["done"], Duration::from_secs(60)).await;
    check_wav(&get(a, &format!("/v1/jobs/{id}/audio")).await.body, 1.0);
    // A multipart part no field takes is named.
    let bad = mp
        .windows(13)
        .position(|w| w == b"inpaint_audio")
        .map(|i| [&mp[..i], &b"other_upload1"[..], &mp[i + 13..]].concat())
        .unwrap();
    let r = http(a, "POST", "/v1/generate", ct, &bad).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["field"], "inpaint");
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_name_the_field() {
    let (cfg, _dirs) = config("malformed");
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let json_ct = "Content-Type: application/json\r\n";
    let cases: Vec<(&[u8], &str)> = vec![
        (b"{\"prompt\": ", "json"),
        (b"not json at all", "json"),
        (b"{\"prompt\": 5}", "body"),
        (b"{\"prompt\": \"x\", \"bogus\": 1}", "body"),
        (b"{\"prompt\": \"x\", \"seconds\": \"long\"}", "body"),
        (b"{\"prompt\": \"\"}", "prompt"),
        (b"{\"prompt\": \"x\", \"seconds\": -1}", "seconds"),
        (b"{\"prompt\": \"x\", \"steps\": 0}", "steps"),
        (b"{\"prompt\": \"x\", \"sampler\": \"magic\"}", "sampler"),
        (
            b"{\"prompt\": \"x\", \"loras\": [{\"name\": \"../etc/passwd\"}]}",
            "loras[0]",
        ),
        (
            b"{\"prompt\": \"x\", \"init_audio\": {\"data\": \"@@@\"}}",
            "init_audio",
        ),
        (b"{\"prompt\": \"x\", \"warm_start\": true}", "warm_start"),
    ];
    for (body, field) in cases {
        let r = http(a, "POST", "/v1/generate", json_ct, body).await;
        let j = r.json();
        assert_eq!(r.status, 400, "{j}");
        assert_eq!(j["code"], "invalid_request", "{j}");
        assert_eq!(
            j["field"],
            field,
            "{} -> {j}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(get(a, "/v1/jobs/not-a-job").await.status, 404);
    assert_eq!(get(a, "/v1/jobs/..%2F..").await.status, 404);
    assert_eq!(get(a, "/nowhere").await.json()["code"], "not_found");
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_required_off_loopback_and_checked() {
    let (mut cfg, _dirs) = config("token-off");
    cfg.bind = "0.0.0.0:0".parse().unwrap();
    let e = start(cfg.clone()).await.unwrap_err().to_string();
    assert!(e.contains("token"), "{e}");
    cfg.token = Some("   ".into());
    assert!(start(cfg).await.is_err());

    let (mut cfg, _dirs) = config("token-on");
    cfg.token = Some("s3cret".into());
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let r = get(a, "/info").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["code"], "unauthorized");
    let wrong = http(a, "GET", "/info", "Authorization: Bearer nope\r\n", b"").await;
    assert_eq!(wrong.status, 401);
    let ok = http(a, "GET", "/info", "Authorization: Bearer s3cret\r\n", b"").await;
    assert_eq!(ok.status, 200);
    assert_eq!(get(a, "/info?token=s3cret").await.status, 200);
    let body = br#"{"prompt": "x", "seconds": 1.0, "steps": 2}"#;
    let r = http(
        a,
        "POST",
        "/v1/generate",
        "Content-Type: application/json\r\n",
        body,
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(get(a, "/health").await.status, 200);
    assert_eq!(get(a, "/").await.status, 200);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_jobs() {
    let (mut cfg, _dirs) = config("restart");
    let store_path = match &cfg.store {
        StoreSpec::Sqlite(p) => p.clone(),
        StoreSpec::Custom(_) => unreachable!(),
    };
    cfg.throttle = Some(Duration::from_millis(200));
    let srv = start(cfg.clone()).await.unwrap();
    let a = srv.addr();
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = post(
            a,
            &json!({"prompt": format!("job {i}"), "seconds": 1.0, "steps": 40}),
        )
        .await;
        assert_eq!(r.status, 202);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    wait_state(a, &ids[0], &["running"], Duration::from_secs(60)).await;
    // Stop while the first runs: it goes back to the queue with the others.
    srv.shutdown().await.unwrap();
    {
        let st = SqliteStore::open(&store_path).unwrap();
        for id in &ids {
            let r = st.get(id).unwrap().unwrap();
            assert_eq!(r.state, JobState::Queued, "{id}");
        }
        assert_eq!(st.position(&ids[0]).unwrap(), Some(0));
    }
    cfg.throttle = None;
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    for id in &ids {
        wait_state(a, id, &["done"], Duration::from_secs(120)).await;
        check_wav(&get(a, &format!("/v1/jobs/{id}/audio")).await.body, 1.0);
    }
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_workers_job_is_retried() {
    let (cfg, _dirs) = config("lost");
    let StoreSpec::Sqlite(path) = &cfg.store else {
        unreachable!()
    };
    // A worker that claims a job and dies.
    let st = SqliteStore::open(path).unwrap();
    let spec = json!({"prompt": "orphan", "negative_prompt": null, "seconds": 1.0, "steps": 2,
        "cfg": 1.0, "seed": 9, "sampler": "pingpong", "init": null, "inpaint": null,
        "loras": [], "steer": [], "warm_start": false});
    let job = NewJob {
        id: "orphan-1".into(),
        spec: spec.to_string(),
        batch_key: None,
        steps: 2,
    };
    st.submit(&job, 10).unwrap();
    let claimed = st.claim("ghost", 1, Duration::from_millis(300)).unwrap();
    assert_eq!(claimed.len(), 1);
    drop(st);
    let me = cfg.worker_id.clone();
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let j = wait_state(a, "orphan-1", &["done", "failed"], Duration::from_secs(60)).await;
    assert_eq!(j["state"], "done", "{j}");
    assert_eq!(j["attempts"], 2);
    assert_eq!(j["worker"], me.as_str());
    srv.shutdown().await.unwrap();
}

/// `POST /v1/audio/generate` with the request bodies of vllm-omni's own tests: the audio
/// itself in the asked format, the job's id in `X-Aria-Job` (owned, listed, counted like any
/// job), 422 for what the route cannot honour, streaming with `stream_format=audio`, and the
/// route in the OpenAPI document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_audio_generate_route() {
    let (cfg, _dirs) = config("audio-generate");
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let post_audio = |body: Value| async move {
        let b = serde_json::to_vec(&body).unwrap();
        http(
            a,
            "POST",
            "/v1/audio/generate",
            "Content-Type: application/json\r\n",
            &b,
        )
        .await
    };
    // `test_wav_response`, with a short clip for the tiny model.
    let r = post_audio(
        json!({"input": "a gentle rain", "response_format": "wav", "audio_length": 1.0}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("audio/wav"));
    check_wav(&r.body, 1.0);
    let id = r.header("x-aria-job").unwrap().to_string();
    let j = get(a, &format!("/v1/jobs/{id}")).await.json();
    assert_eq!(j["state"], "done");
    assert_eq!(j["request"]["prompt"], "a gentle rain");
    // `test_flac_response` and the fields of `test_fields_are_wired_correctly` (start 0: the
    // model conditions on the total length only).
    let r = post_audio(json!({
        "input": "rain sounds", "model": "stable-audio", "response_format": "flac",
        "audio_length": 1.0, "audio_start": 0.0, "negative_prompt": "noise",
        "guidance_scale": 7.5, "num_inference_steps": 3, "seed": 42
    }))
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("audio/flac"));
    assert_eq!(&r.body[..4], b"fLaC");
    let id = r.header("x-aria-job").unwrap().to_string();
    let j = get(a, &format!("/v1/jobs/{id}")).await.json();
    assert_eq!(j["request"]["steps"], 3);
    assert_eq!(j["request"]["seed"], 42);
    // `test_invalid_format_rejected`, `test_stream_format_sse_rejected`, and what this model
    // cannot honour.
    for body in [
        json!({"input": "test", "response_format": "banana"}),
        json!({"input": "test", "response_format": "mp3"}),
        json!({"input": "test", "stream_format": "sse"}),
        json!({"input": "test", "speed": 2.5}),
        json!({"input": "test", "audio_start": 2.0}),
        json!({"input": "test", "audio_length": -3.0}),
        json!({"prompt": "no input field"}),
    ] {
        let r = post_audio(body.clone()).await;
        assert_eq!(
            r.status,
            422,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(r.json()["error"].is_string(), "{body}");
    }
    // `test_stream_format_audio_accepted`: a WAV streamed while it decodes.
    let r =
        post_audio(json!({"input": "test", "stream_format": "audio", "audio_length": 1.0})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("audio/wav"));
    assert_eq!(&r.body[..4], b"RIFF");
    let oa = get(a, "/openapi.json").await.json();
    assert!(oa["paths"]["/v1/audio/generate"]["post"].is_object());
    srv.shutdown().await.unwrap();
}
