//! The Hugging Face hub cache layout, for finding released model folders by repository id:
//! `<cache>/models--<owner>--<name>/snapshots/<revision>/…`, with `refs/main` naming the
//! current revision.

use std::path::{Path, PathBuf};

/// The hub cache folders, in the order the hub's own tools use: `$HF_HUB_CACHE`, then
/// `$HF_HOME/hub` (else `~/.cache/huggingface/hub`).
pub fn caches() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("HF_HUB_CACHE") {
        v.push(PathBuf::from(p));
    }
    match std::env::var_os("HF_HOME") {
        Some(h) => v.push(PathBuf::from(h).join("hub")),
        None => {
            if let Some(home) = std::env::var_os("HOME") {
                v.push(PathBuf::from(home).join(".cache/huggingface/hub"));
            }
        }
    }
    v
}

/// The folder of `repo` (`owner/name`) in `cache` (whether or not it exists).
pub fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

/// Snapshot folders of `repo` in `cache`: the one `refs/main` names first, then the others,
/// newest first.
pub fn snapshots(cache: &Path, repo: &str) -> Vec<PathBuf> {
    let root = repo_dir(cache, repo);
    let mut found: Vec<(std::time::SystemTime, PathBuf)> =
        std::fs::read_dir(root.join("snapshots"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| {
                        let t = e
                            .metadata()
                            .and_then(|m| m.modified())
                            .unwrap_or(std::time::UNIX_EPOCH);
                        (t, e.path())
                    })
                    .collect()
            })
            .unwrap_or_default();
    found.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut dirs: Vec<PathBuf> = found.into_iter().map(|(_, p)| p).collect();
    if let Ok(main) = std::fs::read_to_string(root.join("refs/main")) {
        let main = root.join("snapshots").join(main.trim());
        if let Some(i) = dirs.iter().position(|d| *d == main) {
            let d = dirs.remove(i);
            dirs.insert(0, d);
        }
    }
    dirs
}
