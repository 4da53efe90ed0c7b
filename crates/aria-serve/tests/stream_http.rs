//! `/v1/stream` over a real TCP connection against the tiny demo model: a WAV of unknown
//! length sent chunk by chunk (HTTP chunked transfer), a prompt change while it runs, the
//! generation stopping when the client leaves, an exact bounded total in raw PCM, and the
//! limits named in each refusal.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_serve::{start, ModelSource, ServeConfig};
use aria_testing::{SharedTempDir, TempDir};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The demo model, shared by the tests of this binary that run at the same time (removed when
/// the last of them finishes).
fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("serve-stream-model");
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
    let dir = TempDir::new(&format!("serve-stream-{name}"));
    let model = model_dir();
    let mut c = ServeConfig::demo(&dir);
    c.model = ModelSource::DemoTiny(model.to_path_buf());
    c.drain_timeout = Duration::ZERO;
    let dirs = Dirs {
        _scratch: dir,
        _model: model,
    };
    (c, dirs)
}

fn request(method: &str, path: &str, body: Option<&Value>) -> Vec<u8> {
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if body.is_some() {
        r += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        );
    }
    r += "\r\n";
    r += &payload;
    r.into_bytes()
}

/// A whole exchange: status, lower-cased head, de-chunked body.
async fn call(
    a: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(&request(method, path, body)).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(120), s.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no full answer in 120 s"))
        .unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut p = ChunkParser::default();
        let mut out = Vec::new();
        p.feed(&body, &mut out);
        assert!(p.ended, "{method} {path}: the chunked body has no end");
        body = out;
    }
    (status, head, body)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}

/// Incremental parser of an HTTP chunked body.
#[derive(Default)]
struct ChunkParser {
    buf: Vec<u8>,
    /// Data bytes still due in the current chunk (+2 for its CRLF).
    due: usize,
    ended: bool,
    frames: usize,
}

impl ChunkParser {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        self.buf.extend_from_slice(bytes);
        loop {
            if self.ended {
                return;
            }
            if self.due > 0 {
                let take = self.due.min(self.buf.len());
                if take == 0 {
                    return;
                }
                // The final two bytes of a chunk are its CRLF.
                let data = take.min(self.due.saturating_sub(2));
                out.extend_from_slice(&self.buf[..data]);
                self.buf.drain(..take);
                self.due -= take;
                continue;
            }
            let Some(nl) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let line = String::from_utf8_lossy(&self.buf[..nl]).to_string();
            let n = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line `{line}`"));
            self.buf.drain(..nl + 2);
            if n == 0 {
                self.ended = true;
                return;
            }
            self.frames += 1;
            self.due = n + 2;
        }
    }
}

/// An open stream: the connection, its head, and a parser of its body.
struct Open {
    conn: TcpStream,
    head: String,
    parser: ChunkParser,
    body: Vec<u8>,
}

async fn open(a: SocketAddr, body: &Value) -> Open {
    let mut conn = TcpStream::connect(a).await.unwrap();
    conn.write_all(&request("POST", "/v1/stream", Some(body)))
        .await
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        if let Some(e) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break e;
        }
        let n = tokio::time::timeout(Duration::from_secs(60), conn.read(&mut buf))
            .await
            .expect("no response head in 60 s")
            .unwrap();
        assert!(
            n > 0,
            "closed before the head: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let mut o = Open {
        conn,
        head,
        parser: ChunkParser::default(),
        body: Vec::new(),
    };
    let rest = raw[end + 4..].to_vec();
    o.parser.feed(&rest, &mut o.body);
    o
}

impl Open {
    /// Read until the body holds at least `n` bytes.
    async fn read_until(&mut self, n: usize) {
        let mut buf = vec![0u8; 64 << 10];
        while self.body.len() < n {
            assert!(
                !self.parser.ended,
                "the stream ended at {} bytes",
                self.body.len()
            );
            let got = tokio::time::timeout(Duration::from_secs(120), self.conn.read(&mut buf))
                .await
                .expect("no stream data in 120 s")
                .unwrap();
            assert!(
                got > 0,
                "connection closed at {} body bytes",
                self.body.len()
            );
            self.parser.feed(&buf[..got], &mut self.body);
        }
    }
}

fn samples(b: &[u8]) -> Vec<i16> {
    b.chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_arrives_chunk_by_chunk_follows_a_new_prompt_and_stops_with_its_client() {
    let (cfg, _dirs) = config("live");
    let server = start(cfg).await.unwrap();
    let a = server.addr();
    let mut o = open(
        a,
        &json!({"prompt": "slow ambient drone", "seconds": 600, "chunk": 1.0, "context": 0.5,
                "steps": 4, "seed": 3}),
    )
    .await;
    let head = o.head.clone();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(header(&head, "content-type"), Some("audio/wav"), "{head}");
    assert_eq!(
        header(&head, "transfer-encoding"),
        Some("chunked"),
        "{head}"
    );
    assert!(header(&head, "content-length").is_none(), "{head}");
    let id = header(&head, "x-aria-stream-id").unwrap().to_string();
    let sr: usize = header(&head, "x-aria-sample-rate")
        .unwrap()
        .parse()
        .unwrap();
    let ch: usize = header(&head, "x-aria-channels").unwrap().parse().unwrap();
    let c: usize = header(&head, "x-aria-chunk-samples")
        .unwrap()
        .parse()
        .unwrap();
    let total: usize = header(&head, "x-aria-chunks").unwrap().parse().unwrap();
    assert!(c >= sr && c < 2 * sr, "chunk of {c} samples at {sr} Hz");
    assert_eq!(total, (600 * sr).div_ceil(c));
    let chunk_bytes = c * ch * 2;

    // The header (unknown length), then the first two chunks, frame by frame.
    o.read_until(44 + 2 * chunk_bytes).await;
    let h = &o.body[..44];
    assert_eq!(&h[0..4], b"RIFF");
    assert_eq!(&h[4..8], &[0xff; 4], "RIFF size should say unknown");
    assert_eq!(&h[8..12], b"WAVE");
    assert_eq!(u16::from_le_bytes([h[22], h[23]]) as usize, ch);
    assert_eq!(
        u32::from_le_bytes([h[24], h[25], h[26], h[27]]) as usize,
        sr
    );
    assert_eq!(u16::from_le_bytes([h[34], h[35]]), 16);
    assert_eq!(&h[40..44], &[0xff; 4], "data size should say unknown");
    assert!(o.parser.frames >= 3, "{} HTTP chunks", o.parser.frames);
    let first = samples(&o.body[44..44 + 2 * chunk_bytes]);
    let nonzero = first.iter().filter(|&&x| x != 0).count();
    assert!(
        nonzero > first.len() / 2,
        "{nonzero} of {} samples non-zero",
        first.len()
    );

    // A prompt change while it runs takes effect at a later chunk.
    let (st, _, b) = call(
        a,
        "POST",
        &format!("/v1/stream/{id}/prompt"),
        Some(&json!({"prompt": "the drone turns into bright bells"})),
    )
    .await;
    assert_eq!(st, 202, "{}", String::from_utf8_lossy(&b));
    // Keep reading (the generator stays at most a chunk or so ahead of its client) until the
    // change shows in the stream's status.
    let t0 = Instant::now();
    let applied = loop {
        let have = o.body.len();
        o.read_until(have + chunk_bytes).await;
        let (st, _, b) = call(a, "GET", &format!("/v1/stream/{id}"), None).await;
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
        let v: Value = serde_json::from_slice(&b).unwrap();
        let prompts = v["prompts"].as_array().unwrap().clone();
        if prompts.len() == 2 {
            assert_eq!(prompts[0]["prompt"], "slow ambient drone");
            assert_eq!(prompts[1]["prompt"], "the drone turns into bright bells");
            break prompts[1]["from_chunk"].as_u64().unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "prompt never applied: {v}"
        );
    };
    assert!(
        applied >= 2,
        "applied from chunk {applied}, after two chunks were out"
    );

    // The client leaves: the generation stops long before the 600 s it asked for.
    let sent_before = (o.body.len() - 44) / chunk_bytes;
    drop(o);
    let t0 = Instant::now();
    let last = loop {
        let (st, _, b) = call(a, "GET", &format!("/v1/stream/{id}"), None).await;
        if st == 404 {
            break t0.elapsed();
        }
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the stream still runs 60 s after its client left: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "stream {id}: {sent_before} chunks of {c} samples read, prompt applied from chunk \
         {applied}, generation ended {:.2} s after the client left",
        last.as_secs_f64()
    );
    // Streams are free again: two may start.
    let (st, head, body) = call(
        a,
        "GET",
        "/v1/stream?prompt=rain&seconds=0.5&chunk=1&context=0.5&steps=2&format=pcm",
        None,
    )
    .await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert!(header(&head, "content-type")
        .unwrap()
        .starts_with("audio/l16; rate="));
    assert_eq!(body.len(), (sr as f64 * 0.5).round() as usize * ch * 2);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_has_an_exact_total_and_limits_named_in_refusals() {
    let (cfg, _dirs) = config("limits");
    let server = start(cfg).await.unwrap();
    let a = server.addr();
    // GET form (a browser's <audio src>), raw big-endian PCM, 2.3 s: cut to the sample.
    let (st, head, body) = call(
        a,
        "GET",
        "/v1/stream?prompt=soft%20rain&seconds=2.3&chunk=1&context=0.5&steps=2&seed=4&format=pcm",
        None,
    )
    .await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let sr: usize = header(&head, "x-aria-sample-rate")
        .unwrap()
        .parse()
        .unwrap();
    let ch: usize = header(&head, "x-aria-channels").unwrap().parse().unwrap();
    assert_eq!(
        header(&head, "content-type"),
        Some(format!("audio/l16; rate={sr}; channels={ch}").as_str())
    );
    assert_eq!(body.len(), (sr as f64 * 2.3).round() as usize * ch * 2);

    let refusals = [
        (
            json!({"prompt": "x", "seconds": 4000}),
            400,
            "stream_seconds",
        ),
        (
            json!({"prompt": "x", "chunk": 500, "context": 1}),
            400,
            "seconds",
        ),
        (json!({"prompt": "x", "steps": 100000}), 400, "steps"),
        (json!({"prompt": "x".repeat(5000)}), 400, "prompt_chars"),
    ];
    for (body, status, limit) in refusals {
        let (st, _, b) = call(a, "POST", "/v1/stream", Some(&body)).await;
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(st, status, "{v}");
        assert_eq!(v["limit"], limit, "{v}");
        assert!(v["error"].as_str().unwrap().contains(limit), "{v}");
    }
    for (body, field) in [
        (json!({"prompt": "x", "format": "mp3"}), "format"),
        (json!({"prompt": "x", "seconds": -1}), "seconds"),
        (json!({"prompt": ""}), "prompt"),
        (json!({"prompt": "x", "bogus": 1}), "body"),
    ] {
        let (st, _, b) = call(a, "POST", "/v1/stream", Some(&body)).await;
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!((st, v["field"].as_str()), (400, Some(field)), "{v}");
    }
    // The OpenAPI document describes the endpoints.
    let (st, _, b) = call(a, "GET", "/openapi.json", None).await;
    assert_eq!(st, 200);
    let oa: Value = serde_json::from_slice(&b).unwrap();
    for (path, method) in [
        ("/v1/stream", "post"),
        ("/v1/stream", "get"),
        ("/v1/stream/{id}", "get"),
        ("/v1/stream/{id}/prompt", "post"),
    ] {
        assert!(
            oa["paths"][path][method].is_object(),
            "{method} {path} not in /openapi.json"
        );
    }
    let (st, _, _) = call(a, "GET", "/v1/stream/nope", None).await;
    assert_eq!(st, 404);
    let (st, _, _) = call(
        a,
        "POST",
        "/v1/stream/nope/prompt",
        Some(&json!({"prompt": "y"})),
    )
    .await;
    assert_eq!(st, 404);

    // Two streams run at once; a third is refused with 429 naming `streams`.
    let long = json!({"prompt": "hold", "seconds": 600, "chunk": 1.0, "context": 0.5,
                      "steps": 2});
    let mut held = Vec::new();
    for _ in 0..aria_serve::api::MAX_STREAMS {
        let o = open(a, &long).await;
        assert!(o.head.starts_with("http/1.1 200"), "{}", o.head);
        held.push(o);
    }
    let (st, head, b) = call(a, "POST", "/v1/stream", Some(&long)).await;
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((st, v["limit"].as_str()), (429, Some("streams")), "{v}");
    assert!(header(&head, "retry-after").is_some(), "{head}");
    // Both streams still deliver.
    for o in &mut held {
        o.read_until(44 + 1000).await;
        assert_eq!(&o.body[..4], b"RIFF");
    }
    drop(held);
    server.shutdown().await.unwrap();
}
