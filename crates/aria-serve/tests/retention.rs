//! Retention of the results directory, over real TCP against the tiny demo model: an upload
//! is deleted once its job ends (done, or cancelled while running), a result older than the
//! retention is removed by the sweep at start (its job then answers `410 Gone`), and orphan
//! files are removed at start while the uploads of jobs still queued are kept.
#![allow(clippy::unwrap_used)]

#[path = "support/blocking_http.rs"]
mod web;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aria_serve::jobs::sqlite::SqliteStore;
use aria_serve::jobs::{JobState, JobStore, NewJob};
use aria_serve::{start, ModelSource, ServeConfig, StoreSpec};
use aria_testing::TempDir;
use base64::Engine;
use serde_json::json;

fn config(dir: &TempDir) -> ServeConfig {
    let model = dir.join("model");
    if !model.join("model_config.json").exists() {
        aria::synth::write_model(
            &model,
            aria::synth::Preset::Tiny,
            aria_core::DType::F32,
            0,
            &mut |_, _| {},
        )
        .unwrap();
    }
    let mut c = ServeConfig::demo(dir.join("srv"));
    c.model = ModelSource::DemoTiny(model);
    c.drain_timeout = Duration::ZERO;
    c.lease = Duration::from_millis(600);
    c
}

/// The file names in `dir` (none when it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn age(path: &Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

fn id_of(r: &web::Resp) -> String {
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    r.json()["id"].as_str().unwrap().to_string()
}

#[test]
fn uploads_are_deleted_when_their_job_ends() {
    let dir = TempDir::new("serve-ret-uploads");
    let mut cfg = config(&dir);
    cfg.max_batch = 1;
    cfg.throttle = Some(Duration::from_millis(40));
    let inputs = cfg.results_dir.join("inputs");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(start(cfg)).unwrap();
    let a = srv.addr();
    let wav = base64::engine::general_purpose::STANDARD.encode(web::wav_bytes(0.5));
    let upload = |steps: u32| {
        json!({"prompt": "x", "seconds": 1.0, "steps": steps,
               "init_audio": {"data": wav, "noise_level": 0.7}})
    };
    // A long job ahead keeps the next ones queued while their uploads are checked.
    let first = id_of(&web::post(
        a,
        &json!({"prompt": "long", "seconds": 1.0, "steps": 30}),
    ));
    let done = id_of(&web::post(a, &upload(2)));
    let cancelled = id_of(&web::post(a, &upload(40)));
    let have = names(&inputs);
    assert!(
        have.iter().any(|n| n.starts_with(&format!("{done}.")))
            && have.iter().any(|n| n.starts_with(&format!("{cancelled}."))),
        "{have:?}"
    );
    web::wait_state(a, &first, &["done"], Duration::from_secs(60));
    web::wait_state(a, &done, &["done"], Duration::from_secs(60));
    assert!(
        !names(&inputs).iter().any(|n| n.starts_with(&done)),
        "{:?}",
        names(&inputs)
    );
    // Cancelled while it runs: its worker ends it, and the upload goes.
    web::wait_state(a, &cancelled, &["running"], Duration::from_secs(60));
    let r = web::http(a, "DELETE", &format!("/v1/jobs/{cancelled}"), "", b"");
    assert!(r.status == 202 || r.status == 200, "{}", r.status);
    web::wait_state(a, &cancelled, &["cancelled"], Duration::from_secs(60));
    let t0 = std::time::Instant::now();
    while !names(&inputs).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}",
            names(&inputs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn a_result_older_than_the_retention_is_removed_at_start() {
    let dir = TempDir::new("serve-ret-results");
    let cfg = config(&dir);
    let results = cfg.results_dir.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(start(cfg.clone())).unwrap();
    let id = id_of(&web::post(
        srv.addr(),
        &json!({"prompt": "x", "seconds": 1.0, "steps": 2}),
    ));
    web::wait_state(srv.addr(), &id, &["done"], Duration::from_secs(60));
    let wav: PathBuf = results.join(format!("{id}.wav"));
    assert!(wav.exists());
    rt.block_on(srv.shutdown()).unwrap();
    // Restarted with the default retention (24 h): kept.
    let srv = rt.block_on(start(cfg.clone())).unwrap();
    assert!(wav.exists());
    assert_eq!(
        web::get(srv.addr(), &format!("/v1/jobs/{id}/audio")).status,
        200
    );
    rt.block_on(srv.shutdown()).unwrap();
    // Restarted with a retention shorter than the result's age: removed by the sweep at
    // start (before the first periodic one, a second later).
    std::thread::sleep(Duration::from_millis(1500));
    let mut short = cfg;
    short.result_retention = Duration::from_secs(1);
    let srv = rt.block_on(start(short)).unwrap();
    assert!(!wav.exists(), "{:?}", names(&results));
    let r = web::get(srv.addr(), &format!("/v1/jobs/{id}/audio"));
    let j = r.json();
    assert_eq!(
        (r.status, j["code"].as_str()),
        (410, Some("expired")),
        "{j}"
    );
    assert!(j["error"].as_str().unwrap().contains(&id), "{j}");
    assert_eq!(
        web::get(srv.addr(), &format!("/v1/jobs/{id}/waveform.png")).status,
        410
    );
    let j = web::get(srv.addr(), &format!("/v1/jobs/{id}")).json();
    assert_eq!(j["state"], "done", "{j}");
    assert!(j["error"].as_str().unwrap().contains("expired"), "{j}");
    rt.block_on(srv.shutdown()).unwrap();
}

#[test]
fn orphan_files_are_removed_at_start() {
    let dir = TempDir::new("serve-ret-orphans");
    let cfg = config(&dir);
    let StoreSpec::Sqlite(path) = &cfg.store else {
        unreachable!()
    };
    let inputs = cfg.results_dir.join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    let hour = Duration::from_secs(3600);
    // A sweep keeps the uploads of a job still queued and deletes those of an ended one.
    let ended = inputs.join("ended-job.init_audio");
    let queued = inputs.join("queued-job.init_audio");
    std::fs::write(&ended, b"x").unwrap();
    std::fs::write(&queued, b"x").unwrap();
    {
        let st = SqliteStore::open(path).unwrap();
        for id in ["ended-job", "queued-job"] {
            let j = NewJob {
                id: id.into(),
                spec: json!({"prompt": "never runs"}).to_string(),
                batch_key: None,
                steps: 2,
            };
            st.submit(&j, 10).unwrap();
        }
        st.cancel("ended-job").unwrap();
        assert_eq!(
            st.get("ended-job").unwrap().unwrap().state,
            JobState::Cancelled
        );
        let swept = aria_serve::jobs::retention::sweep(&st, &cfg.results_dir, 24 * hour).unwrap();
        assert_eq!(swept.uploads, 1);
        assert!(!ended.exists() && queued.exists());
        // (The server below fails the queued job at once: its spec is not a request.)
        st.cancel("queued-job").unwrap();
        std::fs::remove_file(&queued).unwrap();
    }
    // No job: an old upload goes at start, a fresh one (a submit may be under way) stays.
    let old_orphan = inputs.join(format!("{}.init_audio", "a".repeat(32)));
    let new_orphan = inputs.join(format!("{}.init_audio", "b".repeat(32)));
    // An old result no job refers to goes; a fresh one stays.
    let old_wav = cfg.results_dir.join(format!("{}.wav", "c".repeat(32)));
    let new_wav = cfg.results_dir.join(format!("{}.wav", "d".repeat(32)));
    for p in [&old_orphan, &new_orphan, &old_wav, &new_wav] {
        std::fs::write(p, b"x").unwrap();
    }
    age(&old_orphan, hour);
    age(&old_wav, 48 * hour);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let srv = rt.block_on(start(cfg)).unwrap();
    assert!(!old_orphan.exists(), "{:?}", names(&inputs));
    assert!(!old_wav.exists());
    assert!(new_orphan.exists() && new_wav.exists());
    rt.block_on(srv.shutdown()).unwrap();
}
