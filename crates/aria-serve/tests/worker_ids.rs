//! Worker ids: a second server with the id of a live one on the same store is refused (and
//! starts once the first has stopped cleanly), servers left on the default id get distinct
//! ones, a dead process's registration is taken over after its lease, and jobs left by a
//! crashed process count their attempt while a clean release gives it back — on SQLite, and on
//! PostgreSQL when `ARIA_PG_URL` is set (`bash .ci/postgres.sh cargo test -p aria-serve
//! --features postgres --test worker_ids`; without it those tests skip with a message, except
//! under `CI=true`, where they fail).
#![allow(clippy::unwrap_used)]

#[path = "support/blocking_http.rs"]
mod web;

use std::time::Duration;

use aria_serve::jobs::sqlite::SqliteStore;
use aria_serve::jobs::{JobState, JobStore, NewJob};
use aria_serve::{ModelSource, ServeConfig, StoreSpec};
use aria_testing::TempDir;

fn job(id: &str) -> NewJob {
    NewJob {
        id: id.into(),
        spec: "{}".into(),
        batch_key: None,
        steps: 2,
    }
}

/// Registration, takeover and the two ways of handing jobs back, on an empty store.
fn registry_and_release(st: &dyn JobStore) {
    let short = Duration::from_millis(300);
    assert!(!st.register_worker("w", "i1", short).unwrap());
    let e = st
        .register_worker("w", "i2", short)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`w`") && e.contains("in use"), "{e}");
    // Renewed, it stays live past its first lease.
    std::thread::sleep(Duration::from_millis(200));
    assert!(st.renew_worker("w", "i1", short).unwrap());
    std::thread::sleep(Duration::from_millis(200));
    assert!(st.register_worker("w", "i2", short).is_err());
    // Not renewed for a lease: taken over.
    std::thread::sleep(Duration::from_millis(400));
    assert!(st.register_worker("w", "i2", short).unwrap());
    assert!(
        !st.renew_worker("w", "i1", short).unwrap(),
        "the old holder renewed"
    );
    st.unregister_worker("w", "i1").unwrap();
    assert!(
        st.register_worker("w", "i3", short).is_err(),
        "an old holder's unregister removed the new one"
    );
    st.unregister_worker("w", "i2").unwrap();
    assert!(!st.register_worker("w", "i3", short).unwrap());
    st.unregister_worker("w", "i3").unwrap();

    // A clean release gives the attempt back; a crash keeps it, up to max_attempts.
    let long = Duration::from_secs(60);
    st.submit(&job("r1"), 10).unwrap();
    assert_eq!(st.claim("w", 1, long).unwrap()[0].attempts, 1);
    assert_eq!(st.release("w").unwrap(), 1);
    assert_eq!(st.get("r1").unwrap().unwrap().attempts, 0);
    assert_eq!(st.claim("w", 1, long).unwrap()[0].attempts, 1);
    let r = st.release_crashed("w", 2).unwrap();
    assert_eq!(r.requeued, ["r1"]);
    let j = st.get("r1").unwrap().unwrap();
    assert_eq!((j.state, j.attempts, j.worker), (JobState::Queued, 1, None));
    assert_eq!(st.claim("w", 1, long).unwrap()[0].attempts, 2);
    // Another worker's crash does not touch it.
    assert!(st.release_crashed("other", 2).unwrap().requeued.is_empty());
    let r = st.release_crashed("w", 2).unwrap();
    assert_eq!(r.failed, ["r1"]);
    let j = st.get("r1").unwrap().unwrap();
    assert_eq!(j.state, JobState::Failed);
    let err = j.error.unwrap();
    assert!(
        err.contains("2 attempts used of max_attempts = 2") && err.contains("`w`"),
        "{err}"
    );
    // A cancel asked for before the crash ends it cancelled.
    st.submit(&job("r2"), 10).unwrap();
    st.claim("w", 1, long).unwrap();
    st.cancel("r2").unwrap();
    assert_eq!(st.release_crashed("w", 5).unwrap().cancelled, ["r2"]);
}

#[test]
fn sqlite_registry_and_crash_release() {
    registry_and_release(&SqliteStore::in_memory().unwrap());
}

#[cfg(feature = "postgres")]
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

#[cfg(feature = "postgres")]
fn pg_store(url: &str, name: &str) -> aria_serve::jobs::postgres::PgJobStore {
    use aria_serve::jobs::postgres::PgJobStore;
    let schema = format!("wid_{name}_{}", std::process::id());
    PgJobStore::open_in_schema(url, &schema)
        .unwrap()
        .drop_schema()
        .unwrap();
    PgJobStore::open_in_schema(url, &schema).unwrap()
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_registry_and_crash_release() {
    let Some(url) = pg_url() else { return };
    let st = pg_store(&url, "reg");
    registry_and_release(&st);
    st.drop_schema().unwrap();
}

fn demo_model(dir: &TempDir) -> std::path::PathBuf {
    let m = dir.join("model");
    aria::synth::write_model(
        &m,
        aria::synth::Preset::Tiny,
        aria_core::DType::F32,
        0,
        &mut |_, _| {},
    )
    .unwrap();
    m
}

/// Servers on one store: a live id is refused, default ids are distinct.
fn live_ids_are_refused(dir: &TempDir, store: StoreSpec) {
    let model = demo_model(dir);
    let cfg = |name: &str| {
        let mut c = ServeConfig::demo(dir.join(name));
        c.model = ModelSource::DemoTiny(model.clone());
        c.store = store.clone();
        c.drain_timeout = Duration::ZERO;
        c.lease = Duration::from_secs(5);
        c
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut a = cfg("a");
    a.worker_id = "dup".into();
    let srv_a = rt.block_on(aria_serve::start(a)).unwrap();
    let mut b = cfg("b");
    b.worker_id = "dup".into();
    let e = rt
        .block_on(aria_serve::start(b.clone()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`dup`") && e.contains("in use"), "{e}");

    // Left on their defaults, two servers get ids of their own.
    let srv_c = rt.block_on(aria_serve::start(cfg("c"))).unwrap();
    let srv_d = rt.block_on(aria_serve::start(cfg("d"))).unwrap();
    let id_of = |addr| {
        let j = web::get(addr, "/info").json();
        j["worker"].as_str().unwrap().to_string()
    };
    let (c, d) = (id_of(srv_c.addr()), id_of(srv_d.addr()));
    assert_ne!(c, d);
    let pid = format!("-{}-", std::process::id());
    assert!(c.contains(&pid) && d.contains(&pid), "{c} {d}");
    assert_eq!(id_of(srv_a.addr()), "dup");

    // Once the first has stopped cleanly, the id is free.
    rt.block_on(srv_a.shutdown()).unwrap();
    let srv_b = rt.block_on(aria_serve::start(b)).unwrap();
    assert_eq!(id_of(srv_b.addr()), "dup");
    for s in [srv_b, srv_c, srv_d] {
        rt.block_on(s.shutdown()).unwrap();
    }
}

#[test]
fn sqlite_live_ids_are_refused_and_defaults_distinct() {
    let dir = TempDir::new("serve-ids-sqlite");
    let store = StoreSpec::Sqlite(dir.join("jobs.sqlite"));
    live_ids_are_refused(&dir, store);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_live_ids_are_refused_and_defaults_distinct() {
    let Some(url) = pg_url() else { return };
    let st = std::sync::Arc::new(pg_store(&url, "live"));
    let dir = TempDir::new("serve-ids-pg");
    live_ids_are_refused(&dir, StoreSpec::Custom(st.clone()));
    if let Ok(st) = std::sync::Arc::try_unwrap(st) {
        st.drop_schema().unwrap();
    }
}
