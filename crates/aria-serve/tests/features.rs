//! The request features beyond a plain prompt, through the HTTP API on the tiny demo model:
//! a LoRA of the server's LoRA folder (strength 0 gives the bytes of no LoRA, strength 1
//! changes them), a steering direction of the allow-listed folder (strength 0 gives the same
//! bytes, a nonzero strength changes them, a name that leaves the folder is refused with the
//! field named), and warm start (a second near-identical request reports the cached reference
//! and the skipped steps in its job status).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria::discover::{resolve_model, SearchPaths};
use aria_core::{Tensor, WeightLoader};
use aria_serve::{start, ModelSource, ServeConfig};
use aria_steer::direction::{ContrastSet, FORMAT_VERSION};
use aria_steer::{
    DirectionEntry, DirectionFile, DirectionMeta, ModelIdentity, NormScope, Site,
    StrengthConvention,
};
use aria_testing::{SharedTempDir, TempDir};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The demo model, shared by the tests of this binary that run at the same time (each holds
/// it for as long as its server runs; removed when the last of them finishes).
fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("serve-feat-model");
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

fn config(dir: &Path, model: &Path) -> ServeConfig {
    let mut c = ServeConfig::demo(dir);
    c.model = ModelSource::DemoTiny(model.to_path_buf());
    c.drain_timeout = Duration::ZERO;
    c.max_batch = 1;
    c
}

/// A small deterministic pseudo-random sequence in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = aria_core::rng::Rng::new(seed);
    (0..n)
        .map(|_| rng.normal().clamp(-3.0, 3.0) / 3.0)
        .collect()
}

/// A rank-2 `lora` file for the tiny model: adapters on the global and timestep embedders of
/// the DiT (modules `model.to_global_embed.0`, `model.to_timestep_embed.0`).
fn write_lora(path: &Path) {
    let files = resolve_model(&model_dir().display().to_string(), &SearchPaths::default()).unwrap();
    let w = WeightLoader::open(&[&files.weights]).unwrap();
    let rank = 2;
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (k, module) in ["to_global_embed.0", "to_timestep_embed.0"]
        .iter()
        .enumerate()
    {
        let name = format!("model.model.{module}.weight");
        let shape = w.get_any(&name).unwrap().shape().to_vec();
        let (out, inp) = (shape[0], shape[1]);
        let a = Tensor::from_vec(values(rank * inp, 10 + k as u64), &[rank, inp]).unwrap();
        let b = Tensor::from_vec(values(out * rank, 20 + k as u64), &[out, rank]).unwrap();
        let stem = format!("model.{module}.parametrizations.weight.0");
        tensors.push((format!("{stem}.lora_A"), a));
        tensors.push((format!("{stem}.lora_B"), b));
    }
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let meta: HashMap<String, String> = [(
        "lora_config".to_string(),
        json!({"rank": rank, "alpha": 4.0, "adapter_type": "lora", "dropout": 0.0,
               "include": null, "exclude": null})
        .to_string(),
    )]
    .into_iter()
    .collect();
    aria_core::save_safetensors(path, &refs, Some(&meta)).unwrap();
}

/// A residual direction at block 0 of the tiny model (unit norm, mean norm 4).
fn write_direction(path: &Path) {
    let files = resolve_model(&model_dir().display().to_string(), &SearchPaths::default()).unwrap();
    let id = ModelIdentity::from_model_files(&files.config, &files.weights).unwrap();
    let raw = values(id.dims.embed_dim, 31);
    let norm = raw.iter().map(|v| v * v).sum::<f32>().sqrt();
    let direction: Vec<f32> = raw.iter().map(|v| v / norm).collect();
    let file = DirectionFile {
        meta: DirectionMeta {
            format_version: FORMAT_VERSION,
            entries: vec![Site::Residual(0)],
            model: id,
            method: "synthetic".into(),
            positive: Some(ContrastSet {
                name: "test".into(),
                count: 0,
            }),
            negative: None,
            strength_convention: StrengthConvention::MeanNorm,
            norm_scope: NormScope::AllTokens,
            probe_accuracy: vec![],
            best_block: None,
            default_strength: None,
            settings: None,
        },
        entries: vec![DirectionEntry {
            site: Site::Residual(0),
            direction,
            mean_norm: 4.0,
        }],
    };
    file.save(path).unwrap();
}

struct Resp {
    status: u16,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..nl]).unwrap();
        let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
    out
}

async fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Resp {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&req).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = buf[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Resp { status, body }
}

async fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, b"").await
}

async fn post(addr: SocketAddr, body: &Value) -> Resp {
    http(
        addr,
        "POST",
        "/v1/generate",
        &serde_json::to_vec(body).unwrap(),
    )
    .await
}

async fn wait_done(addr: SocketAddr, id: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let j = get(addr, &format!("/v1/jobs/{id}")).await.json();
        match j["state"].as_str().unwrap() {
            "done" => return j,
            "failed" | "cancelled" => panic!("job {id} ended: {j}"),
            _ => {}
        }
        assert!(t0.elapsed() < Duration::from_secs(180), "job {id}: {j}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submit, wait, and fetch the WAV bytes (and the final job status).
async fn audio(addr: SocketAddr, body: Value) -> (Vec<u8>, Value) {
    let r = post(addr, &body).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let id = r.json()["id"].as_str().unwrap().to_string();
    let j = wait_done(addr, &id).await;
    let a = get(addr, &format!("/v1/jobs/{id}/audio")).await;
    assert_eq!(a.status, 200);
    assert!(a.body.len() > 44 && &a.body[..4] == b"RIFF");
    (a.body, j)
}

fn base(seed: u64) -> Value {
    json!({"prompt": "rain on a tin roof", "seconds": 1.0, "steps": 3, "seed": seed})
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v[key] = val;
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_from_the_folder() {
    let model = model_dir();
    let dir = TempDir::new("serve-feat-lora");
    let loras = dir.join("loras");
    std::fs::create_dir_all(&loras).unwrap();
    write_lora(&loras.join("grit.safetensors"));
    let mut cfg = config(&dir, &model);
    cfg.lora_dir = Some(loras);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let (plain, _) = audio(a, base(4)).await;
    let lora = |s: f32| json!([{"name": "grit", "strength": s}]);
    let (on, _) = audio(a, with(base(4), "loras", lora(1.0))).await;
    let (zero, _) = audio(a, with(base(4), "loras", lora(0.0))).await;
    // The name with its extension, and back to no LoRA after one was loaded.
    let ext = json!([{"name": "grit.safetensors", "strength": 1.0}]);
    let (on_ext, _) = audio(a, with(base(4), "loras", ext)).await;
    let (plain_again, _) = audio(a, base(4)).await;
    assert_ne!(on, plain, "the LoRA at strength 1 changes the audio");
    assert_eq!(zero, plain, "strength 0 gives the bytes of no LoRA");
    assert_eq!(on_ext, on);
    assert_eq!(
        plain_again, plain,
        "removing the LoRA restores the base model"
    );
    // A file that is not in the folder, or a name that leaves it, is refused.
    for name in ["missing", "../grit.safetensors"] {
        let r = post(
            a,
            &with(base(4), "loras", json!([{"name": name, "strength": 1.0}])),
        )
        .await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["field"], "loras[0]", "{}", r.json());
    }
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_from_the_allow_listed_folder() {
    let model = model_dir();
    let dir = TempDir::new("serve-feat-steer");
    let dirs = dir.join("directions");
    std::fs::create_dir_all(&dirs).unwrap();
    write_direction(&dirs.join("bright.safetensors"));
    // A valid direction file outside the allow-listed folder.
    write_direction(&dir.join("outside.safetensors"));
    let mut cfg = config(&dir, &model);
    cfg.steer_dir = Some(dirs);
    cfg.steer_uploads = false;
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let info = get(a, "/info").await.json();
    assert!(info.to_string().contains("bright"), "{info}");
    let steer = |s: f32| json!([{"name": "bright", "block": 0, "strength": s}]);
    let (plain, _) = audio(a, base(8)).await;
    let (zero, _) = audio(a, with(base(8), "steer", steer(0.0))).await;
    let (pushed, _) = audio(a, with(base(8), "steer", steer(2.0))).await;
    assert_eq!(zero, plain, "strength 0 leaves every byte as it was");
    assert_ne!(pushed, plain, "a nonzero strength changes the audio");
    // Outside the allow-list: refused, naming the field.
    let outside = dir.join("outside.safetensors").display().to_string();
    for name in [outside.as_str(), "../outside.safetensors", "..", "nope"] {
        let r = post(
            a,
            &with(base(8), "steer", json!([{"name": name, "strength": 1.0}])),
        )
        .await;
        let j = r.json();
        assert_eq!(r.status, 400, "{name}: {j}");
        assert_eq!(j["code"], "invalid_request", "{j}");
        assert_eq!(j["field"], "steer[0]", "{j}");
        assert!(j["error"].as_str().unwrap().contains("steer[0]"), "{j}");
    }
    // Uploads are off on this server: refused too.
    let r = post(
        a,
        &with(base(8), "steer", json!([{"data": "AAAA", "strength": 1.0}])),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["field"].as_str()),
        (400, Some("steer[0]"))
    );
    srv.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_start_reports_the_cache_hit() {
    let model = model_dir();
    let dir = TempDir::new("serve-feat-warm");
    let mut cfg = config(&dir, &model);
    cfg.cache = Some(dir.join("cache").display().to_string());
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    let body = |prompt: &str, seed: u64| json!({"prompt": prompt, "seconds": 1.0, "steps": 6, "seed": seed, "warm_start": true});
    // An empty cache: a cold run from step 0 (and its result is admitted).
    let (_, first) = audio(a, body("rain on a tin roof", 1)).await;
    let ws = &first["timings"]["stages"]["warm_start"];
    assert!(ws["reference"].is_null(), "{first}");
    assert_eq!(ws["start_step"], 0, "{first}");
    assert_eq!(ws["steps_run"], 6, "{first}");
    assert_eq!(first["request"]["warm_start"], true);
    assert_eq!(ws["start"], "cold", "{first}");
    // A near-identical request: a hit, from the stored latents of the same duration, some
    // steps skipped (the skip gater decides, by default).
    let (_, second) = audio(a, body("rain on a tin roof.", 2)).await;
    let ws = &second["timings"]["stages"]["warm_start"];
    assert!(!ws["reference"].is_null(), "no cache hit: {second}");
    assert_eq!(ws["start"], "stored_latents", "{second}");
    let start_step = ws["start_step"].as_u64().unwrap();
    assert!(start_step > 0, "{second}");
    assert_eq!(
        ws["steps_run"].as_u64().unwrap(),
        6 - start_step,
        "{second}"
    );
    // /metrics counts both requests, the hit, how it started, the steps it skipped and the
    // step the gater chose.
    let m = String::from_utf8(get(a, "/metrics").await.body).unwrap();
    for line in [
        "aria_cache_requests_total 2".to_string(),
        "aria_cache_hits_total 1".to_string(),
        "aria_cache_admitted_total 2".to_string(),
        "aria_cache_evictions_total 0".to_string(),
        "aria_cache_segment_hits_total 0".to_string(),
        format!("aria_cache_skipped_steps_total {start_step}"),
        "aria_cache_hit_starts_total{start=\"stored_latents\"} 1".to_string(),
        "aria_cache_hit_starts_total{start=\"fitted_latents\"} 0".to_string(),
        format!("aria_cache_start_step_total{{step=\"{start_step}\"}} 1"),
    ] {
        assert!(m.lines().any(|l| l == line), "`{line}` missing from:\n{m}");
    }
    // The refinement worker runs (on by default) and its counters are exported.
    for line in [
        "# TYPE aria_cache_refine_attempts_total counter",
        "# TYPE aria_cache_refine_replaced_total counter",
    ] {
        assert!(m.lines().any(|l| l == line), "`{line}` missing from:\n{m}");
    }
    srv.shutdown().await.unwrap();
}

/// The server's cache is bounded: with room for one entry, each admitted result evicts the
/// older one, and `/metrics` counts the evictions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warm_start_cache_evicts_beyond_its_capacity() {
    let model = model_dir();
    let dir = TempDir::new("serve-feat-evict");
    let mut cfg = config(&dir, &model);
    cfg.cache = Some(dir.join("cache").display().to_string());
    assert_eq!(cfg.cache_capacity, aria_cache::manager::Capacity::DEFAULT);
    cfg.cache_capacity = aria_cache::manager::Capacity::entries(1);
    let srv = start(cfg).await.unwrap();
    let a = srv.addr();
    for (i, prompt) in ["dog barking", "church bells", "rain on a tin roof"]
        .iter()
        .enumerate()
    {
        let body =
            json!({"prompt": prompt, "seconds": 1.0, "steps": 4, "seed": i, "warm_start": true});
        let (_, v) = audio(a, body).await;
        let ws = &v["timings"]["stages"]["warm_start"];
        assert_eq!(ws["evicted"], u64::from(i > 0), "{v}");
    }
    let m = String::from_utf8(get(a, "/metrics").await.body).unwrap();
    assert!(
        m.lines().any(|l| l == "aria_cache_evictions_total 2"),
        "{m}"
    );
    srv.shutdown().await.unwrap();
}
