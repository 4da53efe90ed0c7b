//! CLAP as the cache's embedder: an entry is indexed by the CLAP embedding of its audio, so the
//! selector's `s_pos` is the similarity of the candidate's sound to the prompt (SoundWeaver's
//! eq. 1), and `s_neg` its similarity to the negative prompt (eq. 2).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use aria_cache::embed::ClapEmbedder;
use aria_cache::store::SqliteStore;
use aria_cache::{Audio, Cache, CacheConfig, Embedder, Request};
use aria_clap::synth::{write_random, Preset};
use aria_testing::TempDir;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn entries_are_selected_by_their_audio() {
    let tmp = TempDir::new("cache-clap");
    let dir = tmp.path().join("clap");
    write_random(&dir, &Preset::Tiny.config(), 4, None).unwrap();
    let emb = Arc::new(ClapEmbedder::load(&dir).unwrap());
    let mut cache = Cache::open(
        Box::new(SqliteStore::open(tmp.path().join("c.sqlite")).unwrap()),
        emb.clone(),
        CacheConfig::default(),
    )
    .unwrap();
    // Two seconds of a stereo tone, channel after channel.
    let n = 44_100 * 2;
    let mut planar = Vec::with_capacity(2 * n);
    for c in 0..2 {
        planar.extend((0..n).map(|i| (0.3 + 0.1 * c as f32) * (i as f32 * 0.05).sin()));
    }
    let audio = Audio::new(planar.clone(), 2, 44_100).unwrap();
    let id = cache.import("rain on a tin roof", audio).unwrap();
    let entry = cache.get(id).unwrap().unwrap();
    let stored = &entry.data.embeddings[emb.name()];
    let interleaved: Vec<f32> = (0..2 * n).map(|k| planar[(k % 2) * n + k / 2]).collect();
    let audio_v = emb.embed_audio(&interleaved, 2, 44_100).unwrap().unwrap();
    assert_eq!(
        stored, &audio_v,
        "the entry is indexed by its audio's CLAP vector"
    );
    let text_v = &emb.embed_texts(&["rain on a tin roof"]).unwrap()[0];
    assert_ne!(stored, text_v, "not by its prompt's");

    let found = cache
        .lookup(&Request::new("heavy rain", 2.0, 8, 1))
        .unwrap();
    let q = &emb.embed_texts(&["heavy rain"]).unwrap()[0];
    let c = found.candidates.iter().find(|c| c.id == id).unwrap();
    assert!(
        (c.s_pos - dot(q, &audio_v)).abs() < 1e-5,
        "s_pos = CLAP(audio, prompt)"
    );
    let neg = &emb
        .embed_texts(&[aria_cache::select::NEGATIVE_PROMPT])
        .unwrap()[0];
    assert!(
        (c.s_neg - dot(neg, &audio_v)).abs() < 1e-5,
        "s_neg = CLAP(audio, negative)"
    );
}
