//! The SQLite store: round trips, WAL, removal, and a reopened cache yielding the same entries
//! and the same search results.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aria_cache::store::{self, NewEntry, SqliteStore, Store, StoredLatents};
use aria_cache::{Audio, Cache, CacheConfig, Embedder, Result};
use aria_testing::TempDir;

/// Bag-of-words hashing into 32 dimensions, normalized: close prompts share words.
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

#[test]
fn entries_round_trip_and_survive_reopening() {
    let dir = TempDir::new("cache-rt");
    let path = dir.join("c.sqlite");
    let ids: Vec<u64> = {
        let mut s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.journal_mode().unwrap(), "wal");
        (0..3).map(|i| s.insert(&entry(i)).unwrap()).collect()
    };
    let mut s = SqliteStore::open(&path).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let e = s.get(id).unwrap().unwrap();
        assert_eq!(e.data, entry(i), "entry {i}");
        assert_eq!(e.hits, 0);
        assert!(e.created_ms > 0 && e.used_ms == e.created_ms);
    }
    assert!(s.get(999).unwrap().is_none());
    // The listing has no payload; the embeddings come back by embedder.
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

    s.record_hit(ids[0], 16.0, 123).unwrap();
    s.record_hit(ids[0], 4.0, 456).unwrap();
    assert!(s.record_hit(999, 1.0, 1).is_err());
    let e = s.get(ids[0]).unwrap().unwrap();
    assert_eq!((e.hits, e.used_ms), (2, 456));
    // The first hit predates the entry (no decay); the second decays it over 333 ms.
    let want = aria_cache::store::decayed_importance(16.0, 123, 456) + 4.0;
    assert!(
        want < 20.0 && (e.data.importance - want).abs() < 1e-12,
        "{}",
        e.data.importance
    );

    let st = s.stats().unwrap();
    assert_eq!(
        (st.entries, st.with_audio, st.with_latents, st.hits),
        (3, 2, 2, 2)
    );
    assert_eq!(st.payload_bytes, 2 * 16 * 4 + 2 * 6 * 4);
    assert_eq!(st.embedders, vec![("e".to_string(), 3)]);

    // Removal cascades to the embeddings; clear empties the store.
    assert!(s.remove(ids[1]).unwrap());
    assert!(!s.remove(ids[1]).unwrap());
    assert_eq!(s.embeddings("e").unwrap().len(), 2);
    assert_eq!(s.clear().unwrap(), 2);
    assert_eq!(s.stats().unwrap().entries, 0);
    drop(s);
}

#[test]
fn a_reopened_cache_has_the_same_entries_and_index() {
    let dir = TempDir::new("cache-reopen");
    let prompts = [
        "a dog barks in the distance",
        "rain falls on a tin roof",
        "a dog barks while rain falls",
        "an engine idles and revs",
        "birds chirp in the morning",
    ];
    let queries = [
        "dog barking",
        "rain on a roof",
        "engine revving",
        "chirping birds",
    ];
    let emb: Arc<dyn Embedder> = Arc::new(Words);
    let (before, listing) = {
        let mut c = Cache::open(
            store::open(dir.to_str().unwrap()).unwrap(),
            emb.clone(),
            CacheConfig::default(),
        )
        .unwrap();
        for (i, p) in prompts.iter().enumerate() {
            let a = Audio::new(vec![i as f32 * 0.01; 2 * 4410], 2, 44_100).unwrap();
            c.import(p, a).unwrap();
        }
        assert_eq!(c.len(), 5);
        let q: Vec<_> = queries
            .iter()
            .map(|q| {
                let v = emb.embed_texts(&[q]).unwrap().pop().unwrap();
                c.search(&v, 3).unwrap()
            })
            .collect();
        (q, c.list().unwrap())
    };
    assert!(dir.join("cache.sqlite").is_file());
    let c = Cache::open(
        store::open(dir.to_str().unwrap()).unwrap(),
        emb.clone(),
        CacheConfig::default(),
    )
    .unwrap();
    assert_eq!(c.len(), 5);
    assert_eq!(c.list().unwrap(), listing);
    for (q, b) in queries.iter().zip(&before) {
        let v = emb.embed_texts(&[q]).unwrap().pop().unwrap();
        assert_eq!(&c.search(&v, 3).unwrap(), b, "query `{q}`");
    }
    let e = c.get(listing[1].id).unwrap().unwrap();
    assert_eq!(e.data.origin, "import");
    assert!((e.data.seconds - 0.1).abs() < 1e-12);
    assert_eq!(e.data.audio.unwrap().samples, vec![0.01; 2 * 4410]);
    drop(c);
    let e = store::open("postgres://host/db").err().unwrap().to_string();
    assert!(e.contains("postgres"), "{e}");
}

/// Counters add up across connections and threads (each addition in the store), survive
/// reopening and `clear`, and skip zero deltas.
#[test]
fn counters_add_up_across_connections_and_survive_reopening() {
    let dir = TempDir::new("cache-counters");
    let path = dir.join("c.sqlite");
    let mut s = SqliteStore::open(&path).unwrap();
    assert!(s.counters().unwrap().is_empty());
    s.add_counters(&[("a", 0)]).unwrap();
    assert!(
        s.counters().unwrap().is_empty(),
        "a zero delta writes nothing"
    );
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut s = SqliteStore::open(&path).unwrap();
                for _ in 0..25 {
                    s.add_counters(&[("a", 1), ("b", 2)]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.clear().unwrap();
    drop(s);
    let s = SqliteStore::open(&path).unwrap();
    let c = s.counters().unwrap();
    assert_eq!(c.get("a"), Some(&100));
    assert_eq!(c.get("b"), Some(&200));
}
