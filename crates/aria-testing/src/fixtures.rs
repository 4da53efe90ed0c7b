//! Locating parity fixtures and comparing against them (for tests of every aria crate).
//!
//! The fixtures live in the repository's `fixtures/` folder (a copy of the shared fixtures
//! folder, where new cases arrive first; `scripts/sync-fixtures.sh` copies them in), or
//! wherever `ARIA_FIXTURES` points. When they are absent a test is skipped and the skip is
//! recorded (see [`crate::skip`](mod@crate::skip)), except under `CI=true`, where absence is a failure.

use std::path::PathBuf;

use aria_core::{Result, Tensor, WeightLoader};

/// The repository's own copy of the fixtures (`<workspace>/fixtures`).
pub fn repository_fixtures() -> PathBuf {
    // crates/aria-testing -> the workspace root
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The fixtures root, if present: `ARIA_FIXTURES` when set, else the repository's
/// `fixtures/` folder (a root holds a `README.md`).
pub fn fixtures_root() -> Option<PathBuf> {
    let root = match std::env::var_os("ARIA_FIXTURES") {
        Some(p) => PathBuf::from(p),
        None => repository_fixtures(),
    };
    root.join("README.md").is_file().then_some(root)
}

/// A fixture path (file or folder) relative to the fixtures root. Returns `None` (and records
/// the skip) when it is absent and `CI` is not `true`; panics when it is absent under `CI=true`.
pub fn fixture(rel: &str) -> Option<PathBuf> {
    let p = fixtures_root().map(|r| r.join(rel));
    match p {
        Some(p) if p.exists() => Some(p),
        _ => {
            crate::skip::skip(format!(
                "fixture `{rel}` not found (set ARIA_FIXTURES or run scripts/sync-fixtures.sh)"
            ));
            None
        }
    }
}

/// Open a fixture safetensors file (see [`fixture`]).
pub fn fixture_tensors(rel: &str) -> Option<Result<WeightLoader>> {
    fixture(rel).map(|p| WeightLoader::open(&[p]))
}

/// `max|a − b| / max|b|` over all elements (the fixtures' relative error measure).
///
/// Infinite — so that `rel_err(..) <= tol` is false and a running maximum keeps it — when the
/// lengths differ or any value of either side is not finite (`f32::max` would drop a NaN and
/// let an all-NaN output score 0).
pub fn rel_err(actual: &[f32], reference: &[f32]) -> f32 {
    if actual.len() != reference.len() {
        return f32::INFINITY;
    }
    let mut num = 0f32;
    let mut den = 0f32;
    for (a, r) in actual.iter().zip(reference) {
        if !a.is_finite() || !r.is_finite() {
            return f32::INFINITY;
        }
        num = num.max((a - r).abs());
        den = den.max(r.abs());
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// `max|a − b|` over all elements: infinite when the lengths differ or any value of either
/// side is not finite (see [`rel_err`]).
pub fn max_abs_diff(actual: &[f32], reference: &[f32]) -> f32 {
    if actual.len() != reference.len() {
        return f32::INFINITY;
    }
    let mut worst = 0f32;
    for (a, r) in actual.iter().zip(reference) {
        if !a.is_finite() || !r.is_finite() {
            return f32::INFINITY;
        }
        worst = worst.max((a - r).abs());
    }
    worst
}

/// Assert that `actual` matches `reference` in shape and within `tol` relative error
/// (`max|Δ| / max|ref|`); fails on any non-finite value. Panics with a description (tests
/// only).
pub fn assert_close(what: &str, actual: &Tensor, reference: &Tensor, tol: f32) {
    assert_eq!(actual.shape(), reference.shape(), "{what}: shape mismatch");
    let a = actual.to_vec_f32().expect("actual readable");
    let r = reference.to_vec_f32().expect("reference readable");
    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite values");
    assert!(
        r.iter().all(|v| v.is_finite()),
        "{what}: non-finite values in the reference"
    );
    let e = rel_err(&a, &r);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
}
