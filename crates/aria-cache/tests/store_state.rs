//! The SQLite store's state blobs, refinement (`replace`), importance decay and the migration
//! of a schema-1 file.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use aria_cache::store::{
    decayed_importance, Audio, NewEntry, SqliteStore, Store, StoredLatents,
    IMPORTANCE_DECAY_PER_HOUR,
};
use aria_testing::TempDir;

fn entry(prompt: &str, fill: f32) -> NewEntry {
    let mut embeddings = BTreeMap::new();
    embeddings.insert("e".to_string(), vec![fill, 1.0 - fill, 0.5]);
    let mut quality = BTreeMap::new();
    quality.insert("q".to_string(), fill);
    NewEntry {
        prompt: prompt.into(),
        seconds: 2.0,
        audio: Some(Audio::new(vec![fill; 8], 2, 4).unwrap()),
        latents: Some(StoredLatents {
            generator: "g".into(),
            shape: vec![1, 2, 3],
            data: vec![fill; 6],
        }),
        embeddings,
        quality,
        importance: 3.0,
        steps: 8,
        seed: Some(1),
        origin: "generated".into(),
        ..Default::default()
    }
}

#[test]
fn state_blobs_replace_atomically_and_survive_reopening() {
    let dir = TempDir::new("store-state-state");
    let path = dir.join("cache.sqlite");
    {
        let mut s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get_state("gater").unwrap(), None);
        s.put_state("gater", b"v1").unwrap();
        s.put_state("other", b"").unwrap();
        s.put_state("gater", b"version two").unwrap();
        assert_eq!(
            s.get_state("gater").unwrap().as_deref(),
            Some(&b"version two"[..])
        );
        // Clearing the entries leaves the state alone.
        s.clear().unwrap();
        assert_eq!(s.get_state("other").unwrap().as_deref(), Some(&b""[..]));
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(
        s.get_state("gater").unwrap().as_deref(),
        Some(&b"version two"[..])
    );
}

#[test]
fn replace_swaps_the_clip_and_keeps_the_bookkeeping() {
    let dir = TempDir::new("store-state-replace");
    let path = dir.join("cache.sqlite");
    let mut s = SqliteStore::open(&path).unwrap();
    let a = s.insert(&entry("first", 0.25)).unwrap();
    let b = s.insert(&entry("other", 0.5)).unwrap();
    s.record_hit(a, 4.0, i64::MAX / 2).unwrap();
    let before = s.get(a).unwrap().unwrap();
    let mut new = entry("first", 0.75);
    new.embeddings.insert("second".into(), vec![1.0, 0.0]);
    new.importance = 1e9; // ignored
    new.origin = "refined".into();
    new.seed = Some(99);
    assert!(s.replace(a, &new).unwrap());
    assert!(!s.replace(12345, &new).unwrap());
    let after = s.get(a).unwrap().unwrap();
    assert_eq!(
        (after.id, after.hits, after.created_ms, after.used_ms),
        (before.id, before.hits, before.created_ms, before.used_ms)
    );
    assert_eq!(after.data.importance, before.data.importance);
    let mut want = new.clone();
    want.importance = before.data.importance;
    assert_eq!(after.data, want);
    // The old embedding set is gone, the new one complete; the other entry untouched.
    assert_eq!(s.embeddings("second").unwrap(), vec![(a, vec![1.0, 0.0])]);
    assert_eq!(s.embeddings("e").unwrap()[0], (a, vec![0.75, 0.25, 0.5]));
    assert_eq!(s.get(b).unwrap().unwrap().data.prompt, "other");
    // Bad latents are refused before anything is written.
    let mut bad = entry("first", 0.1);
    bad.latents.as_mut().unwrap().shape = vec![7];
    assert!(s.replace(a, &bad).is_err());
    assert_eq!(s.get(a).unwrap().unwrap().data, want);
}

#[test]
fn hits_decay_the_importance_by_point_nine_per_hour() {
    let dir = TempDir::new("store-state-decay");
    let path = dir.join("cache.sqlite");
    let mut s = SqliteStore::open(&path).unwrap();
    let mut e = entry("x", 0.5);
    e.importance = 0.0;
    let id = s.insert(&e).unwrap();
    let t0 = s.get(id).unwrap().unwrap().used_ms;
    let hour = 3_600_000;
    s.record_hit(id, 10.0, t0 + hour).unwrap();
    s.record_hit(id, 5.0, t0 + 3 * hour).unwrap();
    let got = s.get(id).unwrap().unwrap().data.importance;
    let want = 10.0 * IMPORTANCE_DECAY_PER_HOUR.powi(2) + 5.0;
    assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    assert!((decayed_importance(got, t0 + 3 * hour, t0 + 4 * hour) - want * 0.9).abs() < 1e-9);
    assert_eq!(decayed_importance(2.0, 10, 5), 2.0);
}

#[test]
fn a_schema_one_file_opens_and_migrates() {
    let dir = TempDir::new("store-state-migrate");
    let path = dir.join("cache.sqlite");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE entries (
                id INTEGER PRIMARY KEY AUTOINCREMENT, prompt TEXT NOT NULL, negative_prompt TEXT,
                seconds REAL NOT NULL, origin TEXT NOT NULL, steps INTEGER NOT NULL, seed INTEGER,
                sample_rate INTEGER, channels INTEGER, audio BLOB, latent_generator TEXT,
                latent_shape TEXT, latents BLOB, quality TEXT NOT NULL, importance REAL NOT NULL,
                hits INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
                used_ms INTEGER NOT NULL);
             CREATE TABLE embeddings (
                entry_id INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
                embedder TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (entry_id, embedder));
             INSERT INTO entries (prompt, seconds, origin, steps, quality, importance, hits,
                created_ms, used_ms) VALUES ('old', 1.5, 'import', 0, '{}', 2.5, 3, 10, 20);
             PRAGMA user_version=1;",
        )
        .unwrap();
    }
    let mut s = SqliteStore::open(&path).unwrap();
    let l = s.list().unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(
        (l[0].data.prompt.as_str(), l[0].hits, l[0].data.importance),
        ("old", 3, 2.5)
    );
    s.put_state("k", b"v").unwrap();
    drop(s);
    let c = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 2);
}
