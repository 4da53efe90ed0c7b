//! Locating parity fixtures and comparing against them (for tests of every aria crate).
//!
//! Fixtures live in `../shared/fixtures` relative to the workspace root, or wherever
//! `ARIA_FIXTURES` points. When they are absent a test is skipped with a visible message, except
//! under `CI=true`, where absence is a failure.

use std::path::PathBuf;

use aria_core::{Result, Tensor, WeightLoader};

/// The fixtures root, if present. Panics under `CI=true` when absent (tests only).
pub fn fixtures_root() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var_os("ARIA_FIXTURES") {
        Some(p) => vec![PathBuf::from(p)],
        None => {
            let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            // crates/aria-testing -> workspace root -> ../shared/fixtures
            here.ancestors()
                .map(|a| a.join("../shared/fixtures"))
                .take(4)
                .collect()
        }
    };
    candidates
        .into_iter()
        .find(|c| c.join("README.md").is_file())
}

/// A fixture path (file or folder) relative to the fixtures root. Returns `None` (and prints
/// why) when it is absent and `CI` is not `true`; panics when it is absent under `CI=true`.
pub fn fixture(rel: &str) -> Option<PathBuf> {
    let p = fixtures_root().map(|r| r.join(rel));
    match p {
        Some(p) if p.exists() => Some(p),
        _ => {
            let msg = format!(
                "fixture `{rel}` not found (set ARIA_FIXTURES or place fixtures in ../shared/fixtures)"
            );
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!("{msg}; fixtures are required under CI=true");
            }
            eprintln!("SKIPPED: {msg}");
            None
        }
    }
}

/// Open a fixture safetensors file (see [`fixture`]).
pub fn fixture_tensors(rel: &str) -> Option<Result<WeightLoader>> {
    fixture(rel).map(|p| WeightLoader::open(&[p]))
}

/// `max|a − b| / max|b|` over all elements (the fixtures' relative error measure).
pub fn rel_err(actual: &[f32], reference: &[f32]) -> f32 {
    let mut num = 0f32;
    let mut den = 0f32;
    for (a, r) in actual.iter().zip(reference) {
        num = num.max((a - r).abs());
        den = den.max(r.abs());
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Assert that `actual` matches `reference` in shape and within `tol` relative error
/// (`max|Δ| / max|ref|`). Panics with a description (tests only).
pub fn assert_close(what: &str, actual: &Tensor, reference: &Tensor, tol: f32) {
    assert_eq!(actual.shape(), reference.shape(), "{what}: shape mismatch");
    let a = actual.to_vec_f32().expect("actual readable");
    let r = reference.to_vec_f32().expect("reference readable");
    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite values");
    let e = rel_err(&a, &r);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
}
