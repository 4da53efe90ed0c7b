//! Tokenizer parity: the real Gemma tokenizer against the ids the HF `tokenizers` library
//! produced for 3 012 texts, and the fixture stand-in tokenizer against the stored ids.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use aria_dit::tokenizer::{PromptTokenizer, TokenBatch};
use aria_testing::fixtures::{fixture, fixture_tensors};

fn under_ci() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

/// The Gemma `tokenizer.json`: `ARIA_GEMMA_TOKENIZER`, else the cache `.ci/fetch-tokenizer.sh`
/// writes to. `None` (with a message) when absent; a failure under `CI=true`.
fn gemma_tokenizer() -> Option<PathBuf> {
    let path = match std::env::var_os("ARIA_GEMMA_TOKENIZER") {
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("aria/gemma-tokenizer/tokenizer.json")),
    };
    match path {
        Some(p) if p.is_file() => Some(p),
        _ => {
            let msg = "Gemma tokenizer not found (run .ci/fetch-tokenizer.sh or set ARIA_GEMMA_TOKENIZER)";
            assert!(!under_ci(), "{msg}; required under CI=true");
            aria_testing::skip(msg);
            None
        }
    }
}

#[test]
fn gemma_tokenizer_matches_reference_ids() {
    let Some(tok_path) = gemma_tokenizer() else {
        return;
    };
    let Some(cases) = fixture("tokenizer/gemma-audiocaps.jsonl") else {
        return;
    };
    let tok = PromptTokenizer::from_file(&tok_path, 256).unwrap();
    assert_eq!(tok.pad_id(), 0);
    assert_eq!(tok.vocab_size(), 256_000);
    let text = std::fs::read_to_string(cases).unwrap();
    let mut n = 0;
    let mut texts = Vec::new();
    let mut expected = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["text"].as_str().unwrap().to_string();
        let ids: Vec<u32> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(&t).unwrap();
        assert_eq!(got, ids, "ids differ for {t:?}");
        texts.push(t);
        expected.push(ids);
        n += 1;
    }
    assert_eq!(n, 3012);
    // The padded batch form: right padding with 0 and the mask, for a slice of the cases
    // (including the empty text and the over-long one).
    let refs: Vec<&str> = texts.iter().take(12).map(String::as_str).collect();
    let batch = tok.encode_batch(&refs).unwrap();
    assert_eq!((batch.batch, batch.len), (12, 256));
    for (b, ids) in expected.iter().take(12).enumerate() {
        let row = batch.row_ids(b);
        let mask = batch.row_mask(b);
        for j in 0..256 {
            if j < ids.len() {
                assert_eq!((row[j], mask[j]), (i64::from(ids[j]), 1));
            } else {
                assert_eq!((row[j], mask[j]), (0, 0));
            }
        }
    }
    assert!(
        expected.iter().any(|ids| ids.len() == 256),
        "an over-long case is truncated to 256"
    );
}

fn stand_in_case(model: &str) {
    let Some(dir) = fixture(&format!("{model}/t5gemma-b-b-ul2")) else {
        return;
    };
    let Some(tensors) = fixture_tensors(&format!("{model}/text.safetensors")) else {
        return;
    };
    let tensors = tensors.unwrap();
    let ids = tensors.get_any("input_ids").unwrap();
    let mask = tensors.get_any("attention_mask").unwrap();
    let want = TokenBatch::from_tensors(&ids, &mask).unwrap();
    let tok = PromptTokenizer::from_file(dir.join("tokenizer.json"), want.len).unwrap();
    let got = tok
        .encode_batch(&["lofi house loop", "Amen break 174 BPM, dusty vinyl drums"])
        .unwrap();
    assert_eq!(got, want);
    // Padding and the mask on a short text: <bos> + 2 bytes, then pads.
    let short = tok.encode_batch(&["ab", ""]).unwrap();
    assert_eq!(&short.row_ids(0)[..4], &[2, 4 + 97, 4 + 98, 0]);
    assert_eq!(&short.row_mask(0)[..4], &[1, 1, 1, 0]);
    assert_eq!(&short.row_ids(1)[..2], &[2, 0]);
    assert_eq!(
        short.row_mask(1).iter().map(|&m| m as usize).sum::<usize>(),
        1
    );
}

#[test]
fn stand_in_tokenizer_matches_fixture_ids() {
    stand_in_case("sa3-tiny");
    stand_in_case("sa3-tiny-medium");
}

#[test]
fn missing_tokenizer_is_an_error_naming_the_file() {
    let e = PromptTokenizer::from_file("/nonexistent/tokenizer.json", 16).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/tokenizer.json"), "{e}");
}
