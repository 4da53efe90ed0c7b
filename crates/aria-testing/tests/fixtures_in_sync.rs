//! The repository's `fixtures/` folder holds every file of the shared fixtures folder beside the
//! checkout (`../shared/fixtures`, where new cases arrive first), byte for byte. Without that
//! folder there is nothing to compare, and the test only checks the repository's copy exists.

use std::path::{Path, PathBuf};

use aria_testing::fixtures::repository_fixtures;

/// Every file under `root`, as paths relative to it, sorted.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("fixtures folder readable") {
            let path = entry.expect("fixtures folder entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path.strip_prefix(root).expect("under root").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// FNV-1a (64 bit) of a file's bytes.
fn hash(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("fixture file readable");
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The files of `shared` that `repo` lacks or holds with other bytes (size, then hash).
fn stale(shared: &Path, repo: &Path) -> Vec<String> {
    files(shared)
        .into_iter()
        .filter_map(|rel| {
            let (a, b) = (shared.join(&rel), repo.join(&rel));
            let why = match (std::fs::metadata(&a), std::fs::metadata(&b)) {
                (_, Err(_)) => "missing",
                (Ok(ma), Ok(mb)) if ma.len() != mb.len() => "size differs",
                _ if hash(&a) != hash(&b) => "bytes differ",
                _ => return None,
            };
            Some(format!("{} ({why})", rel.display()))
        })
        .collect()
}

#[test]
fn the_repository_holds_every_shared_fixture_byte_for_byte() {
    let repo = repository_fixtures();
    assert!(
        repo.join("README.md").is_file(),
        "the repository's fixtures folder {} is missing; run scripts/sync-fixtures.sh",
        repo.display()
    );
    // crates/aria-testing -> the workspace root -> the folder beside the checkout
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures");
    if !shared.join("README.md").is_file() {
        eprintln!(
            "no shared fixtures folder beside the checkout: the repository's copy is the only one"
        );
        return;
    }
    let stale = stale(&shared, &repo);
    assert!(
        stale.is_empty(),
        "the repository's fixtures are stale against {}; run scripts/sync-fixtures.sh:\n  {}",
        shared.display(),
        stale.join("\n  ")
    );
}

#[test]
fn a_changed_missing_or_resized_file_is_named_stale() {
    let dir = aria_testing::TempDir::new("fixtures-sync");
    let (shared, repo) = (dir.path().join("shared"), dir.path().join("repo"));
    for root in [&shared, &repo] {
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("same.json"), b"{}").expect("write");
    }
    assert!(stale(&shared, &repo).is_empty());
    std::fs::write(shared.join("sub/new.safetensors"), b"abc").expect("write");
    std::fs::write(shared.join("same.json"), b"{1}").expect("write");
    std::fs::write(shared.join("flip.md"), b"ab").expect("write");
    std::fs::write(repo.join("flip.md"), b"ba").expect("write");
    assert_eq!(
        stale(&shared, &repo),
        [
            "flip.md (bytes differ)",
            "same.json (size differs)",
            "sub/new.safetensors (missing)"
        ]
    );
}
