//! Finding a CLAP checkpoint folder: a path, or a repository id (`laion/clap-htsat-unfused`,
//! or just `clap-htsat-unfused`) in the Hugging Face hub caches (`$HF_HUB_CACHE`,
//! `$HF_HOME/hub`, `~/.cache/huggingface/hub`).

use std::path::{Path, PathBuf};

use crate::{ClapError, Result};

/// The environment variable naming the default CLAP folder or repository.
pub const ENV: &str = "ARIA_CLAP";

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
    for cache in aria_core::hub::caches() {
        for repo in &repos {
            for snap in aria_core::hub::snapshots(&cache, repo) {
                if snap.join("config.json").is_file() {
                    return Ok(snap);
                }
                looked.push(format!("{} (no config.json)", snap.display()));
            }
            looked.push(aria_core::hub::repo_dir(&cache, repo).display().to_string());
        }
    }
    Err(ClapError::config(
        "CLAP model",
        format!("`{spec}` not found; looked at: {}", looked.join(", ")),
    ))
}
