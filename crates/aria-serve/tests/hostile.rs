//! The server against hostile or careless clients over real TCP on 127.0.0.1:0: large
//! multipart uploads, absurd sample rates, slow and idle connections, the connection cap,
//! server paths in errors, per-client job ownership, the token in the query, and the JSON
//! shape of every error.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_serve::{start, ModelSource, ServeConfig};
use aria_testing::{SharedTempDir, TempDir};
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("serve-hostile-model");
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

struct Dirs {
    scratch: TempDir,
    _model: Arc<TempDir>,
}

fn config(name: &str) -> (ServeConfig, Dirs) {
    let dir = TempDir::new(&format!("serve-hostile-{name}"));
    let model = model_dir();
    let mut c = ServeConfig::demo(&dir);
    c.model = ModelSource::DemoTiny(model.to_path_buf());
    c.drain_timeout = Duration::ZERO;
    // Jobs stay queued: these tests look at the HTTP side only.
    c.throttle = Some(Duration::from_millis(200));
    let dirs = Dirs {
        scratch: dir,
        _model: model,
    };
    (c, dirs)
}

#[derive(Debug)]
struct Resp {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.head,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    fn header(&self, name: &str) -> Option<String> {
        self.head
            .split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    }
}

fn parse(buf: &[u8]) -> Resp {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Resp {
        status,
        head,
        body: buf[end + 4..].to_vec(),
    }
}

/// Read one response with a `content-length` from a connection that stays open.
async fn read_one(s: &mut TcpStream) -> Resp {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let r = parse(&buf);
            let n: usize = r.header("content-length").unwrap().parse().unwrap();
            if buf.len() >= end + 4 + n {
                return parse(&buf[..end + 4 + n]);
            }
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request on its own connection (`Connection: close`), the answer read to the end while
/// the body is still being written.
async fn http(addr: SocketAddr, method: &str, path: &str, extra: &str, body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let (mut rd, mut wr) = s.split();
    let write = async {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(body).await;
    };
    let read = async {
        let mut buf = Vec::new();
        let _ = rd.read_to_end(&mut buf).await;
        buf
    };
    let (_, buf) = tokio::join!(write, read);
    parse(&buf)
}

/// A 16-bit PCM WAV with any sample rate in its header.
fn wav(rate: u32, channels: u16, frames: usize) -> Vec<u8> {
    let data = frames * usize::from(channels) * 2;
    let mut b = Vec::with_capacity(44 + data);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&((36 + data) as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate.wrapping_mul(u32::from(channels) * 2)).to_le_bytes());
    b.extend_from_slice(&(channels * 2).to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data as u32).to_le_bytes());
    for i in 0..frames * usize::from(channels) {
        let v = ((i as f32 * 0.01).sin() * 6000.0) as i16;
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// A multipart body: the `request` JSON and one file part.
fn multipart(req: &Value, part: &str, file: &[u8]) -> Vec<u8> {
    let mut mp = Vec::with_capacity(file.len() + 512);
    mp.extend_from_slice(b"--XyZ\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n");
    mp.extend_from_slice(req.to_string().as_bytes());
    mp.extend_from_slice(
        format!(
            "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"{part}\"; \
             filename=\"f.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    mp.extend_from_slice(file);
    mp.extend_from_slice(b"\r\n--XyZ--\r\n");
    mp
}

const MP: &str = "Content-Type: multipart/form-data; boundary=XyZ\r\n";
const JSON_CT: &str = "Content-Type: application/json\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_uploads_up_to_the_limit_are_accepted() {
    let (cfg, _dirs) = config("multipart-big");
    let (upload, body) = (cfg.limits.upload_bytes, cfg.limits.body_bytes);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let req = json!({"prompt": "x", "seconds": 1.0, "steps": 2,
                     "init_audio": {"noise_level": 0.7}});
    // 48 kHz stereo 16-bit: 192 000 bytes a second.
    for mb in [5usize, 20] {
        let file = wav(48_000, 2, (mb << 20) / 4);
        let r = http(
            a,
            "POST",
            "/v1/generate",
            MP,
            &multipart(&req, "init_audio", &file),
        )
        .await;
        assert_eq!(
            r.status,
            202,
            "{mb} MB: {}",
            String::from_utf8_lossy(&r.body)
        );
        let id = r.json()["id"].as_str().unwrap().to_string();
        let c = http(a, "DELETE", &format!("/v1/jobs/{id}"), "", b"").await;
        assert!(matches!(c.status, 200 | 202), "{}", c.status);
    }
    // Over upload_bytes, within body_bytes.
    let file = wav(48_000, 2, (upload + (1 << 20)) / 4);
    assert!(file.len() < body);
    let r = http(
        a,
        "POST",
        "/v1/generate",
        MP,
        &multipart(&req, "init_audio", &file),
    )
    .await;
    let j = r.json();
    assert_eq!(
        (r.status, j["limit"].as_str()),
        (413, Some("upload_bytes")),
        "{j}"
    );
    assert!(j["error"].as_str().unwrap().contains("upload_bytes"), "{j}");
    // Over body_bytes.
    let file = wav(48_000, 2, (body + (1 << 20)) / 4);
    let r = http(
        a,
        "POST",
        "/v1/generate",
        MP,
        &multipart(&req, "init_audio", &file),
    )
    .await;
    let j = r.json();
    assert_eq!(
        (r.status, j["limit"].as_str()),
        (413, Some("body_bytes")),
        "{j}"
    );
    assert!(j["error"].as_str().unwrap().contains("body_bytes"), "{j}");
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_and_absurd_sample_rates_are_refused() {
    let (cfg, _dirs) = config("rates");
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let req = json!({"prompt": "x", "seconds": 1.0, "steps": 2,
                     "init_audio": {"noise_level": 0.7}});
    for rate in [0u32, 10, 2_000_000] {
        let file = wav(rate, 1, 1000);
        let r = http(
            a,
            "POST",
            "/v1/generate",
            MP,
            &multipart(&req, "init_audio", &file),
        )
        .await;
        let j = r.json();
        assert!(matches!(r.status, 400 | 422), "{rate} Hz: {j}");
        assert_eq!(j["field"], "init_audio", "{j}");
        assert!(j["error"].as_str().unwrap().contains("sample rate"), "{j}");
        // The same as base64 JSON.
        let b64 = base64::engine::general_purpose::STANDARD.encode(&file);
        let body = json!({"prompt": "x", "seconds": 1.0, "steps": 2,
                          "init_audio": {"data": b64}});
        let r = http(
            a,
            "POST",
            "/v1/generate",
            JSON_CT,
            body.to_string().as_bytes(),
        )
        .await;
        let j = r.json();
        assert!(matches!(r.status, 400 | 422), "{rate} Hz: {j}");
        assert!(j["error"].as_str().unwrap().contains("sample rate"), "{j}");
    }
    // A usual rate passes.
    let r = http(
        a,
        "POST",
        "/v1/generate",
        MP,
        &multipart(&req, "init_audio", &wav(44_100, 1, 4410)),
    )
    .await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    srv.shutdown().await.unwrap();
}

/// Send `bytes` one per `gap` until the server answers; what it answered.
async fn trickle(addr: SocketAddr, bytes: &[u8], gap: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.split();
    let send = async {
        for b in bytes {
            if wr.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
        // Then nothing more.
        std::future::pending::<()>().await;
    };
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut buf));
    tokio::select! {
        r = read => { r.expect("no answer within 10 s").unwrap(); }
        _ = send => {}
    }
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_get_408_naming_header_timeout() {
    let (mut cfg, _dirs) = config("slow-headers");
    cfg.limits.header_timeout = Duration::from_millis(300);
    cfg.limits.body_timeout = Duration::from_millis(300);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    // Headers one byte per 100 ms (the whole head would take seconds).
    let r = parse(&trickle(a, head, Duration::from_millis(100)).await);
    assert_eq!(r.status, 408, "{}", r.head);
    let j = r.json();
    assert_eq!(j["limit"], "header_timeout", "{j}");
    assert_eq!(j["code"], "limit_exceeded", "{j}");
    assert!(
        j["error"].as_str().unwrap().contains("header_timeout"),
        "{j}"
    );
    // A client that sends nothing at all.
    let r = parse(&trickle(a, b"", Duration::ZERO).await);
    assert_eq!(r.status, 408, "{}", r.head);
    assert_eq!(r.json()["limit"], "header_timeout");
    // The body too slow: 408 naming body_timeout.
    let body_head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                      Content-Length: 100\r\n\r\n{\"prompt\":";
    let r = parse(&trickle(a, body_head, Duration::ZERO).await);
    assert_eq!(r.status, 408, "{}", r.head);
    assert_eq!(r.json()["limit"], "body_timeout");
    // A prompt client is served as before.
    let r = http(a, "GET", "/health", "", b"").await;
    assert_eq!(r.status, 200);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_stall_health() {
    let (cfg, _dirs) = config("idle");
    assert!(cfg.max_connections < 300);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(a).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let t0 = Instant::now();
        let r = http(a, "GET", "/health", "", b"").await;
        worst = worst.max(t0.elapsed());
        assert_eq!(r.status, 200, "{}", r.head);
    }
    assert!(
        worst < Duration::from_millis(100),
        "/health took up to {worst:?} with 300 idle connections"
    );
    drop(idle);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_get_503() {
    let (mut cfg, _dirs) = config("cap");
    cfg.max_connections = 2;
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    // Two keep-alive connections, each having made a request, hold the two places.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(a).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_one(&mut s).await.status, 200);
        held.push(s);
    }
    let r = http(a, "GET", "/health", "", b"").await;
    assert_eq!(r.status, 503, "{}", r.head);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    let j = r.json();
    assert_eq!(j["limit"], "max_connections", "{j}");
    // A held connection goes on being served; once one closes, a new one is.
    let s = &mut held[0];
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_one(s).await.status, 200);
    drop(held);
    let t0 = Instant::now();
    loop {
        let r = http(a, "GET", "/health", "", b"").await;
        if r.status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", r.head);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_no_server_path() {
    let (cfg, dirs) = config("paths");
    let results = cfg.results_dir.display().to_string();
    let scratch = dirs.scratch.to_path_buf().display().to_string();
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let check = |r: &Resp| {
        let j = r.json();
        let e = j["error"].as_str().unwrap().to_string();
        assert_eq!(r.status, 400, "{j}");
        assert!(e.contains("steer[0]"), "{e}");
        assert!(!e.contains(&results) && !e.contains(&scratch), "{e}");
        assert!(
            !e.split_whitespace()
                .any(|w| w.trim_start_matches(['`', '\'', '"', '(']).starts_with('/')),
            "an absolute path in {e}"
        );
        assert!(!r
            .body
            .windows(scratch.len())
            .any(|w| w == scratch.as_bytes()));
    };
    let req = json!({"prompt": "x", "steps": 2, "steer": [{"strength": 1.0}]});
    let r = http(
        a,
        "POST",
        "/v1/generate",
        MP,
        &multipart(&req, "steer0", b"this is not a safetensors file at all"),
    )
    .await;
    check(&r);
    let b64 =
        base64::engine::general_purpose::STANDARD.encode(b"\x08\x00\x00\x00\x00\x00\x00\x00{}");
    let body = json!({"prompt": "x", "steps": 2, "steer": [{"data": b64}]});
    let r = http(
        a,
        "POST",
        "/v1/generate",
        JSON_CT,
        body.to_string().as_bytes(),
    )
    .await;
    check(&r);
    srv.shutdown().await.unwrap();
}

fn bearer(t: &str) -> String {
    format!("Authorization: Bearer {t}\r\n")
}

fn ids(r: &Resp) -> Vec<String> {
    r.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_visible_to_their_owner_only() {
    let (mut cfg, _dirs) = config("owners");
    let token = "t+k/n=%z";
    cfg.token = Some(token.into());
    cfg.admin_token = Some("the-admin".into());
    cfg.throttle = Some(Duration::from_secs(1));
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    // The token in the query is percent-decoded.
    let r = http(a, "GET", "/info?token=t%2Bk%2Fn%3D%25z", "", b"").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = http(a, "GET", "/info?token=t%2Bk%2Fn%3D%25y", "", b"").await;
    assert_eq!(r.status, 401);
    let auth = bearer(token);
    let who = |k: &str| format!("{auth}X-Aria-Client: {k}\r\n");
    let body = br#"{"prompt": "x", "seconds": 1.0, "steps": 2}"#;
    let submit = |extra: String| async move {
        let r = http(
            a,
            "POST",
            "/v1/generate",
            &format!("{extra}{JSON_CT}"),
            body,
        )
        .await;
        assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
        r.json()["id"].as_str().unwrap().to_string()
    };
    let ja = submit(who("alice-key")).await;
    let jb = submit(who("bob-key")).await;
    let janon = submit(auth.clone()).await;
    // Each client lists only its own jobs.
    let list = |extra: String| async move { ids(&http(a, "GET", "/v1/jobs", &extra, b"").await) };
    assert_eq!(list(who("alice-key")).await, vec![ja.clone()]);
    assert_eq!(list(who("bob-key")).await, vec![jb.clone()]);
    assert_eq!(list(auth.clone()).await, vec![janon.clone()]);
    let mut all = list(bearer("the-admin")).await;
    all.sort();
    let mut want = vec![ja.clone(), jb.clone(), janon.clone()];
    want.sort();
    assert_eq!(all, want);
    // Another client's job: not found to read, cancel, or fetch audio and pictures.
    for path in [
        format!("/v1/jobs/{ja}"),
        format!("/v1/jobs/{ja}/audio"),
        format!("/v1/jobs/{ja}/waveform.png"),
    ] {
        let r = http(a, "GET", &path, &who("bob-key"), b"").await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["code"], "not_found");
    }
    let r = http(a, "DELETE", &format!("/v1/jobs/{ja}"), &who("bob-key"), b"").await;
    assert_eq!(r.status, 404);
    // Its owner reads it by header or by ?client= (a link the browser follows).
    let r = http(a, "GET", &format!("/v1/jobs/{ja}"), &who("alice-key"), b"").await;
    assert_eq!(r.status, 200);
    let r = http(
        a,
        "GET",
        &format!("/v1/jobs/{ja}?client=alice-key"),
        &auth,
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    let r = http(
        a,
        "DELETE",
        &format!("/v1/jobs/{ja}"),
        &who("alice-key"),
        b"",
    )
    .await;
    assert!(matches!(r.status, 200 | 202), "{}", r.status);
    // The admin cancels anyone's.
    let r = http(
        a,
        "DELETE",
        &format!("/v1/jobs/{jb}"),
        &bearer("the-admin"),
        b"",
    )
    .await;
    assert!(matches!(r.status, 200 | 202), "{}", r.status);
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_json() {
    let (cfg, _dirs) = config("json-errors");
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    /// Method, path, extra headers, body, status, code.
    type Case<'a> = (&'a str, &'a str, &'a str, &'a [u8], u16, &'a str);
    let cases: Vec<Case> = vec![
        ("GET", "/v1/jobs?limit=-1", "", b"", 400, "invalid_request"),
        (
            "GET",
            "/v1/jobs?before=soon",
            "",
            b"",
            400,
            "invalid_request",
        ),
        ("GET", "/v1/jobs/not-a-job", "", b"", 404, "not_found"),
        ("GET", "/v1/jobs/%FF%FE", "", b"", 400, "invalid_request"),
        (
            "POST",
            "/v1/generate",
            JSON_CT,
            b"{\"prompt\": ",
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/stream",
            "Content-Type: text/plain\r\n",
            b"prompt=x",
            400,
            "invalid_request",
        ),
        ("GET", "/nowhere", "", b"", 404, "not_found"),
        ("PUT", "/v1/jobs", "", b"", 405, "method_not_allowed"),
        ("PATCH", "/health", "", b"", 405, "method_not_allowed"),
    ];
    for (method, path, extra, body, status, code) in cases {
        let r = http(a, method, path, extra, body).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.head);
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "{method} {path}: {}",
            r.head
        );
        let j = r.json();
        assert_eq!(j["code"], code, "{method} {path}: {j}");
        assert!(!j["error"].as_str().unwrap().is_empty(), "{j}");
    }
    srv.shutdown().await.unwrap();
}
