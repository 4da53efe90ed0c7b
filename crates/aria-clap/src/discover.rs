//! Finding a CLAP checkpoint folder: a path, or a repository id (`laion/clap-htsat-unfused`,
//! or just `clap-htsat-unfused`) in the Hugging Face hub caches (`$HF_HUB_CACHE`,
//! `$HF_HOME/hub`, `~/.cache/huggingface/hub`).

use std::path::{Path, PathBuf};

use crate::{ClapError, Result};

/// The environment variable naming the default CLAP folder or repository.
pub const ENV: &str = "ARIA_CLAP";

fn hub_caches() -> Vec<PathBuf> {
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

/// Snapshots of `repo` in `cache`: the one `refs/main` names first, then the newest.
fn snapshots(cache: &Path, repo: &str) -> Vec<PathBuf> {
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
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

/// The checkpoint folder `spec` names (a folder holding `config.json`, or a repository id
/// found in a hub cache); with `spec` = `None`, the one [`ENV`] names. The error lists every
/// place looked at.
pub fn find(spec: Option<&str>) -> Result<PathBuf> {
    let spec = match spec {
        Some(s) => s.to_string(),
        None => std::env::var(ENV).map_err(|_| {
            ClapError::config(
                "CLAP model",
                format!(
                    "none given: pass a CLAP checkpoint folder or repository id (e.g. \
                     laion/clap-htsat-unfused), or set {ENV}"
                ),
            )
        })?,
    };
    let p = Path::new(&spec);
    if p.is_dir() {
        return Ok(p.to_path_buf());
    }
    let repos = if spec.contains('/') {
        vec![spec.clone()]
    } else {
        vec![format!("laion/{spec}"), spec.clone()]
    };
    let mut looked = vec![format!("{spec} (not a folder)")];
    for cache in hub_caches() {
        for repo in &repos {
            for snap in snapshots(&cache, repo) {
                if snap.join("config.json").is_file() {
                    return Ok(snap);
                }
                looked.push(format!("{} (no config.json)", snap.display()));
            }
            looked.push(format!(
                "{}",
                cache
                    .join(format!("models--{}", repo.replace('/', "--")))
                    .display()
            ));
        }
    }
    Err(ClapError::config(
        "CLAP model",
        format!("`{spec}` not found; looked at: {}", looked.join(", ")),
    ))
}
