//! Plain blocking HTTP/1.1 for tests that drive a server from an ordinary thread (a server in
//! a child process, or on a runtime of its own): one exchange per connection.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};

/// A response: status, headers (lowercase names) and the de-chunked body.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as JSON (`{"raw": …}` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&self.body) }))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One exchange: `method path` with `extra` header lines (each ending in `\r\n`) and `body`.
pub fn http(addr: SocketAddr, method: &str, path: &str, extra: &str, body: &[u8]) -> Resp {
    let what = format!("{method} http://{addr}{path}");
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{what}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{what}: no HTTP response ({} bytes)", raw.len()));
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: bad status line in {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
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
    Resp {
        status,
        headers,
        body,
    }
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, "", b"")
}

/// `POST /v1/generate` with a JSON body.
pub fn post(addr: SocketAddr, body: &Value) -> Resp {
    let b = serde_json::to_vec(body).unwrap();
    http(
        addr,
        "POST",
        "/v1/generate",
        "Content-Type: application/json\r\n",
        &b,
    )
}

/// Poll `GET /v1/jobs/{id}` until its state is one of `want`; panics after `within`.
pub fn wait_state(addr: SocketAddr, id: &str, want: &[&str], within: Duration) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let j = get(addr, &format!("/v1/jobs/{id}")).json();
        if want.iter().any(|w| j["state"] == *w) {
            return j;
        }
        assert!(t0.elapsed() < within, "job {id} still {j} after {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 16-bit stereo 44.1 kHz WAV of `seconds` of a quiet tone.
pub fn wav_bytes(seconds: f64) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44100,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cur = std::io::Cursor::new(Vec::new());
    {
        let mut w = hound::WavWriter::new(&mut cur, spec).unwrap();
        let n = (seconds * 44100.0) as usize;
        for i in 0..n {
            let v = ((i as f64 * 0.05).sin() * 3000.0) as i16;
            w.write_sample(v).unwrap();
            w.write_sample(v).unwrap();
        }
        w.finalize().unwrap();
    }
    cur.into_inner()
}
