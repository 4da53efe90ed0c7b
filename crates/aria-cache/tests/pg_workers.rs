//! The PostgreSQL store shared by several worker processes: entries one worker admits reach
//! the others' in-memory indexes through LISTEN/NOTIFY and the change log, concurrent inserts,
//! removes and hits lose nothing, and state blobs round-trip. Plus the store's own round trips.
//!
//! Needs a server: `ARIA_PG_URL` (e.g. `bash .ci/postgres.sh cargo test -p aria-cache
//! --features postgres --test pg_workers`). Without it the tests skip with a message, except
//! under `CI=true`, where they fail. Each test works in a schema of its own.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aria_cache::store::PostgresStore;
use aria_cache::store::{self, decayed_importance, Change, NewEntry, Store, StoredLatents};
use aria_cache::{Audio, Cache, CacheConfig, Embedder, Result};

const WORKERS: usize = 3;
const PER_WORKER: usize = 30;
const HITS_PER_WORKER: usize = 20;

/// Bag-of-words hashing into 32 dimensions, normalized.
struct Words;

impl Embedder for Words {
    fn name(&self) -> &str {
        "words-32"
    }
    fn dim(&self) -> usize {
        32
    }
    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 32];
                for w in t.split_whitespace() {
                    let h = w.to_lowercase().bytes().fold(2166136261u32, |h, b| {
                        (h ^ u32::from(b)).wrapping_mul(16777619)
                    });
                    v[(h % 32) as usize] += 1.0;
                }
                aria_cache::embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

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

/// A schema of this test process's own, emptied.
fn schema(name: &str) -> String {
    format!("t_{name}_{}", std::process::id())
}

/// A store in a fresh schema `name` of the server at `url`.
fn fresh(url: &str, name: &str) -> PostgresStore {
    PostgresStore::open_in_schema(url, &schema(name))
        .unwrap()
        .drop_schema()
        .unwrap();
    PostgresStore::open_in_schema(url, &schema(name)).unwrap()
}

fn entry(i: usize) -> NewEntry {
    let mut embeddings = BTreeMap::new();
    embeddings.insert("e".to_string(), vec![i as f32, 1.0, -0.5]);
    let mut quality = BTreeMap::new();
    quality.insert("s_neg:e".to_string(), 0.25 * i as f32);
    NewEntry {
        prompt: format!("prompt {i}"),
        negative_prompt: i.is_multiple_of(2).then(|| "noise".to_string()),
        seconds: 1.5 + i as f64,
        audio: (i != 1).then(|| Audio::new(vec![0.1 * i as f32; 2 * 8], 2, 44_100).unwrap()),
        latents: (i != 2).then(|| StoredLatents {
            generator: "g".into(),
            shape: vec![1, 2, 3],
            data: (0..6).map(|k| (k * i) as f32).collect(),
        }),
        embeddings,
        quality,
        importance: 0.0,
        steps: 8,
        seed: Some(u64::MAX - i as u64),
        origin: "generated".into(),
    }
}

fn open_cache(url: &str, schema: &str) -> Cache {
    Cache::open(
        Box::new(PostgresStore::open_in_schema(url, schema).unwrap()),
        Arc::new(Words),
        CacheConfig::default(),
    )
    .unwrap()
}

/// Every id in the cache's in-memory index.
fn indexed(c: &Cache) -> BTreeSet<u64> {
    let q = Words.embed_texts(&["anything"]).unwrap().pop().unwrap();
    c.search(&q, 1_000_000)
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

fn clip(i: usize) -> Audio {
    Audio::new(vec![i as f32 * 1e-3; 2 * 441], 2, 44_100).unwrap()
}

#[test]
fn entries_round_trip_through_postgres() {
    let Some(url) = pg_url() else { return };
    let ids: Vec<u64> = {
        let mut s = fresh(&url, "rt");
        (0..3).map(|i| s.insert(&entry(i)).unwrap()).collect()
    };
    let mut s = PostgresStore::open_in_schema(&url, &schema("rt")).unwrap();
    // The location names the user, host, database and schema, never the password.
    let loc = s.location();
    assert!(
        loc.starts_with("postgres://") && loc.contains(&schema("rt")),
        "{loc}"
    );
    if let Some((_, pw)) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
    {
        assert!(!loc.contains(pw), "{loc}");
    }
    for (i, &id) in ids.iter().enumerate() {
        let e = s.get(id).unwrap().unwrap();
        assert_eq!(e.data, entry(i), "entry {i}");
        assert_eq!(e.hits, 0);
        assert!(e.created_ms > 0 && e.used_ms == e.created_ms);
    }
    assert!(s.get(999_999).unwrap().is_none());
    let l = s.list().unwrap();
    assert_eq!(l.len(), 3);
    assert!(l
        .iter()
        .all(|e| e.data.audio.is_none() && e.data.latents.is_none()));
    assert_eq!(l[1].data.quality["s_neg:e"], 0.25);
    let em = s.embeddings("e").unwrap();
    assert_eq!(em.len(), 3);
    assert_eq!(em[2], (ids[2], vec![2.0, 1.0, -0.5]));
    assert!(s.embeddings("other").unwrap().is_empty());

    let created = s.get(ids[0]).unwrap().unwrap().used_ms;
    let v0 = s.version().unwrap();
    s.record_hit(ids[0], 16.0, created + 1000).unwrap();
    s.record_hit(ids[0], 4.0, created + 3_601_000).unwrap();
    assert!(s.record_hit(999_999, 1.0, 1).is_err());
    assert_eq!(s.version().unwrap(), v0 + 2, "hits advance the version");
    let e = s.get(ids[0]).unwrap().unwrap();
    let want = decayed_importance(16.0, created + 1000, created + 3_601_000) + 4.0;
    assert_eq!(
        (e.hits, e.data.importance, e.used_ms),
        (2, want, created + 3_601_000)
    );
    assert!((want - (16.0 * 0.9 + 4.0)).abs() < 1e-9);

    let st = s.stats().unwrap();
    assert_eq!(
        (st.entries, st.with_audio, st.with_latents, st.hits),
        (3, 2, 2, 2)
    );
    assert_eq!(st.payload_bytes, 2 * 16 * 4 + 2 * 6 * 4);
    assert_eq!(st.embedders, vec![("e".to_string(), 3)]);

    // An embedding added later, then a replacement: the id, hits, importance and timestamps
    // stay; everything else is the new clip's.
    s.put_embedding(ids[1], "other", &[0.5, 0.5]).unwrap();
    assert!(s.put_embedding(999_999, "other", &[1.0]).is_err());
    assert_eq!(
        s.embeddings("other").unwrap(),
        vec![(ids[1], vec![0.5, 0.5])]
    );
    let mut new = entry(5);
    new.importance = 123.0;
    assert!(s.replace(ids[0], &new).unwrap());
    assert!(!s.replace(999_999, &new).unwrap());
    let r = s.get(ids[0]).unwrap().unwrap();
    assert_eq!((r.id, r.hits, r.used_ms), (ids[0], 2, created + 3_601_000));
    assert_eq!(r.data.importance, want);
    let mut expect = entry(5);
    expect.importance = want;
    assert_eq!(r.data, expect);

    // Removal cascades to the embeddings; clear empties the store.
    assert!(s.remove(ids[1]).unwrap());
    assert!(!s.remove(ids[1]).unwrap());
    assert_eq!(s.embeddings("e").unwrap().len(), 2);
    assert!(s.embeddings("other").unwrap().is_empty());
    assert_eq!(s.clear().unwrap(), 2);
    assert_eq!(s.stats().unwrap().entries, 0);
    s.drop_schema().unwrap();
}

#[test]
fn changes_are_logged_in_commit_order() {
    let Some(url) = pg_url() else { return };
    let mut s = fresh(&url, "log");
    assert_eq!(s.version().unwrap(), 0);
    assert_eq!(s.changes_since(0).unwrap(), (0, vec![]));
    let a = s.insert(&entry(0)).unwrap();
    let b = s.insert(&entry(1)).unwrap();
    s.record_hit(a, 1.0, 1).unwrap();
    assert!(s.remove(b).unwrap());
    assert!(!s.remove(b).unwrap(), "a remove of nothing changes nothing");
    assert!(s.replace(a, &entry(2)).unwrap());
    let (v, ch) = s.changes_since(0).unwrap();
    assert_eq!(v, 5);
    assert_eq!(
        ch,
        vec![
            Change::Upsert(a),
            Change::Upsert(b),
            Change::Remove(b),
            Change::Upsert(a)
        ]
    );
    assert_eq!(
        s.changes_since(3).unwrap(),
        (5, vec![Change::Remove(b), Change::Upsert(a)])
    );
    assert_eq!(s.changes_since(5).unwrap(), (5, vec![]));
    // A follower ahead of the store (another database) starts over.
    assert_eq!(
        s.changes_since(99).unwrap(),
        (5, vec![Change::Clear, Change::Upsert(a)])
    );
    s.insert(&entry(3)).unwrap();
    assert_eq!(s.clear().unwrap(), 2);
    assert_eq!(s.changes_since(0).unwrap(), (7, vec![Change::Clear]));
    assert_eq!(s.changes_since(5).unwrap(), (7, vec![Change::Clear]));
    s.drop_schema().unwrap();
}

#[test]
fn a_follower_cache_sees_admits_replacements_removals_and_clears() {
    let Some(url) = pg_url() else { return };
    let mut s = fresh(&url, "follow");
    let mut a = open_cache(&url, &schema("follow"));
    let mut b = open_cache(&url, &schema("follow"));
    let mut listener = s.listener().unwrap();
    let x = a.import("a dog barks in the distance", clip(1)).unwrap();
    let y = a.import("rain falls on a tin roof", clip(2)).unwrap();
    assert!(listener.wait(Duration::from_secs(5)).unwrap().is_some());
    assert!(indexed(&b).is_empty());
    assert_eq!(b.sync().unwrap(), 2);
    assert_eq!(indexed(&b), BTreeSet::from([x, y]));
    let q = Words
        .embed_texts(&["rain on a roof"])
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(a.search(&q, 2).unwrap(), b.search(&q, 2).unwrap());
    // `a` syncing its own admits reloads nothing but stays consistent.
    assert_eq!(a.sync().unwrap(), 2);
    assert_eq!(indexed(&a), BTreeSet::from([x, y]));

    // A refinement replaces `y`'s clip and vector: `b` re-indexes it.
    let mut new = s.get(y).unwrap().unwrap().data;
    let v = Words
        .embed_texts(&["an engine idles and revs"])
        .unwrap()
        .pop()
        .unwrap();
    new.embeddings.insert("words-32".into(), v.clone());
    assert!(s.replace(y, &new).unwrap());
    assert!(s.remove(x).unwrap());
    b.sync().unwrap();
    assert_eq!(indexed(&b), BTreeSet::from([y]));
    assert_eq!(b.search(&v, 1).unwrap()[0].0, y);
    assert!((b.search(&v, 1).unwrap()[0].1 - 1.0).abs() < 1e-5);

    assert_eq!(b.sync().unwrap(), 0, "nothing new");
    s.clear().unwrap();
    let z = s
        .insert(&NewEntry {
            prompt: "after the clear".into(),
            seconds: 1.0,
            embeddings: BTreeMap::from([("words-32".to_string(), v)]),
            origin: "import".into(),
            ..Default::default()
        })
        .unwrap();
    b.sync().unwrap();
    a.sync().unwrap();
    assert_eq!(indexed(&b), BTreeSet::from([z]));
    assert_eq!(indexed(&a), BTreeSet::from([z]));
    assert_eq!(a.synced_version(), s.version().unwrap());
    drop((a, b, listener));
    s.drop_schema().unwrap();
}

/// Counters add up across connections and threads (each addition in the server).
#[test]
fn counters_add_up_across_connections() {
    let Some(url) = pg_url() else { return };
    let mut s = fresh(&url, "counters");
    assert!(s.counters().unwrap().is_empty());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut s = PostgresStore::open_in_schema(&url, &schema("counters")).unwrap();
                for _ in 0..25 {
                    s.add_counters(&[("a", 1), ("b", 2)]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.add_counters(&[("a", 0)]).unwrap();
    let c = s.counters().unwrap();
    assert_eq!((c.get("a"), c.get("b")), (Some(&100), Some(&200)));
    s.drop_schema().unwrap();
}

#[test]
fn state_blobs_round_trip() {
    let Some(url) = pg_url() else { return };
    let mut s = fresh(&url, "state");
    assert_eq!(s.get_state("gater").unwrap(), None);
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    s.put_state("gater", &[0, 1, 2, 0, 255]).unwrap();
    s.put_state("big", &big).unwrap();
    s.put_state("empty", &[]).unwrap();
    let other = PostgresStore::open_in_schema(&url, &schema("state")).unwrap();
    assert_eq!(
        other.get_state("gater").unwrap(),
        Some(vec![0, 1, 2, 0, 255])
    );
    assert_eq!(other.get_state("big").unwrap().as_deref(), Some(&big[..]));
    assert_eq!(other.get_state("empty").unwrap(), Some(vec![]));
    s.put_state("gater", b"v2").unwrap();
    assert_eq!(other.get_state("gater").unwrap(), Some(b"v2".to_vec()));
    drop(other);
    s.drop_schema().unwrap();
}

#[test]
fn an_unreachable_server_is_an_error_without_the_password() {
    let e = store::open("postgres://aria:hunter2@127.0.0.1:1/db")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("127.0.0.1:1"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
}

/// What a worker reports on stdout.
fn report_line(map: serde_json::Value) {
    println!("PGW {map}");
}

/// The environment of a worker process (see [`worker`]).
const WORKER: &str = "ARIA_PG_WORKER";

/// A worker process, sharing the store with the others: the test binary re-run on
/// `three_workers_share_one_store` alone with [`WORKER`] (its number) and
/// `ARIA_PG_WORKER_{URL,SCHEMA,SHARED}` set, which then plays this role instead of the test's.
fn worker(i: &str) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker {i}: {k} is not set"));
    let (url, sc) = (var("ARIA_PG_WORKER_URL"), var("ARIA_PG_WORKER_SCHEMA"));
    let shared: u64 = var("ARIA_PG_WORKER_SHARED").parse().unwrap();
    let i: usize = i.parse().unwrap();
    let mut cache = open_cache(&url, &sc);
    let mut st = PostgresStore::open_in_schema(&url, &sc).unwrap();
    let mut listener = st.listener().unwrap();
    // Start together, so that the writes overlap.
    st.put_state(&format!("ready:{i}"), b"1").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..WORKERS).any(|w| st.get_state(&format!("ready:{w}")).unwrap().is_none()) {
        assert!(
            Instant::now() < deadline,
            "worker {i}: the others never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut inserted = Vec::new();
    let mut removed = Vec::new();
    let mut synced_changes = 0;
    for k in 0..PER_WORKER {
        let id = cache
            .import(&format!("worker{i} clip{k} sound"), clip(k))
            .unwrap();
        inserted.push(id);
        if k % 3 == 2 {
            assert!(st.remove(id).unwrap(), "worker {i}: remove {id}");
            removed.push(id);
        }
        if k < HITS_PER_WORKER {
            st.record_hit(shared, 1.0, aria_cache::store::now_ms())
                .unwrap();
        }
        // Follow the others as the writes go.
        synced_changes += cache.sync().unwrap();
    }
    st.put_state(&format!("blob:{i}"), &[i as u8; 1000])
        .unwrap();
    st.put_state(&format!("done:{i}"), b"1").unwrap();
    // Wait (woken by notifications) until every worker is done, then follow the last changes.
    let mut wakeups = 0;
    loop {
        if listener.wait(Duration::from_millis(200)).unwrap().is_some() {
            wakeups += 1;
        }
        let all_done = (0..WORKERS).all(|w| st.get_state(&format!("done:{w}")).unwrap().is_some());
        synced_changes += cache.sync().unwrap();
        if all_done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker {i}: the others never finished"
        );
    }
    let t0 = Instant::now();
    synced_changes += cache.sync().unwrap();
    let last_sync_us = t0.elapsed().as_micros();
    for w in 0..WORKERS {
        assert_eq!(
            st.get_state(&format!("blob:{w}")).unwrap(),
            Some(vec![w as u8; 1000]),
            "worker {i}: blob of worker {w}"
        );
    }
    report_line(serde_json::json!({
        "worker": i,
        "inserted": inserted,
        "removed": removed,
        "indexed": indexed(&cache).into_iter().collect::<Vec<_>>(),
        "version": cache.synced_version(),
        "changes": synced_changes,
        "wakeups": wakeups,
        "idle_sync_us": last_sync_us,
    }));
}

#[test]
fn three_workers_share_one_store() {
    if let Ok(i) = std::env::var(WORKER) {
        return worker(&i);
    }
    let Some(url) = pg_url() else { return };
    let mut s = fresh(&url, "workers");
    let shared = s.insert(&entry(0)).unwrap();
    let t0 = Instant::now();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "three_workers_share_one_store",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER, i.to_string())
                .env("ARIA_PG_WORKER_URL", &url)
                .env("ARIA_PG_WORKER_SCHEMA", schema("workers"))
                .env("ARIA_PG_WORKER_SHARED", shared.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut reports = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker {i} failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("PGW ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("worker {i} reported nothing:\n{stdout}"));
        reports.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
    }
    let elapsed = t0.elapsed();
    let ids = |r: &serde_json::Value, k: &str| -> BTreeSet<u64> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let mut expect = BTreeSet::from([shared]);
    let mut all_inserted = BTreeSet::new();
    for r in &reports {
        let ins = ids(r, "inserted");
        assert_eq!(ins.len(), PER_WORKER);
        all_inserted.extend(ins.iter().copied());
        expect.extend(ins);
    }
    assert_eq!(all_inserted.len(), WORKERS * PER_WORKER, "ids are unique");
    for r in &reports {
        for id in ids(r, "removed") {
            expect.remove(&id);
        }
    }
    let in_db: BTreeSet<u64> = s.list().unwrap().iter().map(|e| e.id).collect();
    assert_eq!(
        in_db, expect,
        "the database holds every insert minus every remove"
    );
    assert_eq!(in_db.len(), 1 + WORKERS * (PER_WORKER - PER_WORKER / 3));
    // The shared entry has no `words-32` vector: the indexes hold the workers' entries.
    let mut want_indexed = expect.clone();
    want_indexed.remove(&shared);
    let version = s.version().unwrap();
    for r in &reports {
        assert_eq!(ids(r, "indexed"), want_indexed, "worker {}", r["worker"]);
        assert_eq!(
            r["version"].as_u64().unwrap(),
            version,
            "worker {}",
            r["worker"]
        );
    }
    let hits = s.get(shared).unwrap().unwrap().hits;
    assert_eq!(hits, (WORKERS * HITS_PER_WORKER) as u64, "no hit is lost");
    eprintln!(
        "{WORKERS} workers x {PER_WORKER} admits ({} removes, {} hits) in {:.2} s; final \
         version {version}; wakeups {:?}; idle sync {:?} us",
        WORKERS * (PER_WORKER / 3),
        WORKERS * HITS_PER_WORKER,
        elapsed.as_secs_f64(),
        reports
            .iter()
            .map(|r| r["wakeups"].clone())
            .collect::<Vec<_>>(),
        reports
            .iter()
            .map(|r| r["idle_sync_us"].clone())
            .collect::<Vec<_>>(),
    );
    s.drop_schema().unwrap();
}
