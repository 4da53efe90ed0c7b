//! Locating a model folder from a path or a name.
//!
//! A model folder is laid out like the official release: `model_config.json`,
//! `model.safetensors` (or a `model.safetensors.index.json` shard index), and the text-encoder
//! folder `t5gemma-b-b-ul2/` (`config.json`, `model.safetensors`, `tokenizer.json`). A name
//! (`small-music`, `small-sfx`, `medium`, their `-base` variants, or a repository id such as
//! `stabilityai/stable-audio-3-small-music`) is looked up in the Hugging Face cache
//! (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`:
//! `models--<owner>--<repo>/snapshots/<revision>/`) and in the working directory.

use std::path::{Path, PathBuf};

use crate::synth::T5_FOLDER;
use crate::{Error, Result};

/// The files of a located model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The model folder.
    pub dir: PathBuf,
    /// `model_config.json`.
    pub config: PathBuf,
    /// `model.safetensors` (or its shard index).
    pub weights: PathBuf,
    /// The text-encoder folder.
    pub t5_dir: PathBuf,
}

/// Where names are looked up.
#[derive(Debug, Clone, Default)]
pub struct SearchPaths {
    /// Hugging Face hub cache folders (each holding `models--*` folders), in order.
    pub hub_caches: Vec<PathBuf>,
    /// Plain folders that may hold a model folder named after the model.
    pub local_roots: Vec<PathBuf>,
}

impl SearchPaths {
    /// The standard places: `$HF_HUB_CACHE`, `$HF_HOME/hub` (else `~/.cache/huggingface/hub`),
    /// and the working directory.
    pub fn from_env() -> SearchPaths {
        let hub_caches = aria_core::hub::caches();
        let local_roots = std::env::current_dir().map(|d| vec![d]).unwrap_or_default();
        SearchPaths {
            hub_caches,
            local_roots,
        }
    }
}

/// The Hugging Face repository id for a model name (`small-music` →
/// `stabilityai/stable-audio-3-small-music`); a name with a `/` is taken as a repository id.
pub fn repo_id_for(name: &str) -> Option<String> {
    if name.contains('/') {
        return Some(name.to_string());
    }
    aria_dit::config::ModelConfig::PRESETS
        .contains(&name)
        .then(|| format!("stabilityai/stable-audio-3-{name}"))
}

/// What a candidate folder lacks (empty: complete).
pub fn missing_files(dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    if !dir.join("model_config.json").is_file() {
        missing.push("model_config.json".to_string());
    }
    if !dir.join("model.safetensors").is_file()
        && !dir.join("model.safetensors.index.json").is_file()
    {
        missing.push("model.safetensors".to_string());
    }
    let t5 = t5_folder(dir);
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        if !t5.join(f).is_file() {
            let rel = t5.strip_prefix(dir).unwrap_or(&t5).join(f);
            missing.push(rel.display().to_string());
        }
    }
    missing
}

/// The text-encoder folder of a model folder: the prompt conditioner's `model_path` or
/// `subfolder` in `model_config.json` (relative to the folder), else `t5gemma-b-b-ul2`.
pub fn t5_folder(dir: &Path) -> PathBuf {
    let cfg = std::fs::read_to_string(dir.join("model_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let rel = cfg.as_ref().and_then(|c| {
        c.pointer("/model/conditioning/configs")?
            .as_array()?
            .iter()
            .find_map(|e| {
                if e.get("type")?.as_str()? != "t5gemma" {
                    return None;
                }
                let c = e.get("config")?;
                c.get("model_path")
                    .or_else(|| c.get("subfolder"))?
                    .as_str()
                    .map(str::to_string)
            })
    });
    dir.join(rel.unwrap_or_else(|| T5_FOLDER.to_string()))
}

fn complete(dir: &Path) -> Option<ModelFiles> {
    if !missing_files(dir).is_empty() {
        return None;
    }
    let weights = if dir.join("model.safetensors").is_file() {
        dir.join("model.safetensors")
    } else {
        dir.join("model.safetensors.index.json")
    };
    Some(ModelFiles {
        dir: dir.to_path_buf(),
        config: dir.join("model_config.json"),
        weights,
        t5_dir: t5_folder(dir),
    })
}

/// Resolve `spec` (a folder, a `model_config.json` path, a model name or a repository id).
/// When nothing is found the error lists every place looked at and what was missing there.
pub fn resolve_model(spec: &str, search: &SearchPaths) -> Result<ModelFiles> {
    let as_path = Path::new(spec);
    let looks_like_path =
        as_path.exists() || spec.starts_with('.') || spec.starts_with('/') || spec.contains('\\');
    if looks_like_path {
        let dir = if as_path.is_file() {
            as_path.parent().unwrap_or(Path::new("."))
        } else {
            as_path
        };
        if !dir.is_dir() {
            return Err(Error::ModelNotFound {
                spec: spec.into(),
                details: format!("{} is not a folder", dir.display()),
            });
        }
        return complete(dir).ok_or_else(|| Error::ModelNotFound {
            spec: spec.into(),
            details: format!("{} lacks {}", dir.display(), missing_files(dir).join(", ")),
        });
    }
    let mut looked: Vec<String> = Vec::new();
    let repo = repo_id_for(spec);
    if let Some(repo) = &repo {
        for cache in &search.hub_caches {
            let snaps = aria_core::hub::snapshots(cache, repo);
            if snaps.is_empty() {
                looked.push(format!(
                    "{} (no snapshot)",
                    aria_core::hub::repo_dir(cache, repo).display()
                ));
            }
            for s in snaps {
                match complete(&s) {
                    Some(f) => return Ok(f),
                    None => looked.push(format!(
                        "{} (lacks {})",
                        s.display(),
                        missing_files(&s).join(", ")
                    )),
                }
            }
        }
    }
    let base = spec.rsplit('/').next().unwrap_or(spec);
    let mut names = vec![base.to_string()];
    if let Some(repo) = &repo {
        names.push(repo.rsplit('/').next().unwrap_or(repo).to_string());
    }
    names.dedup();
    for root in &search.local_roots {
        for n in &names {
            let d = root.join(n);
            if d.is_dir() {
                match complete(&d) {
                    Some(f) => return Ok(f),
                    None => looked.push(format!(
                        "{} (lacks {})",
                        d.display(),
                        missing_files(&d).join(", ")
                    )),
                }
            } else {
                looked.push(format!("{} (no folder)", d.display()));
            }
        }
    }
    let hint = match &repo {
        Some(r) => {
            format!(
                "; download it with `huggingface-cli download {r}`, or give the folder it is in"
            )
        }
        None => "; give a model folder, or one of small-music, small-sfx, medium".to_string(),
    };
    Err(Error::ModelNotFound {
        spec: spec.into(),
        details: format!("looked in {}{hint}", looked.join("; ")),
    })
}

/// Where [`find_models`] found a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// A snapshot in a Hugging Face hub cache.
    HubCache,
    /// A folder under one of [`SearchPaths::local_roots`].
    Local,
}

/// A complete model folder found by [`find_models`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundModel {
    /// What to pass to [`resolve_model`] (`small-music`, a repository id, or a folder name).
    pub name: String,
    /// Where it was found.
    pub source: ModelSource,
    /// Its files.
    pub files: ModelFiles,
}

/// Every complete model folder in the hub caches (`models--*` with a complete snapshot, the one
/// [`resolve_model`] would pick) and directly under the local roots, in that order. Incomplete
/// folders are left out (`resolve_model` says what they lack).
pub fn find_models(search: &SearchPaths) -> Vec<FoundModel> {
    let mut found = Vec::new();
    for cache in &search.hub_caches {
        let mut repos: Vec<String> = std::fs::read_dir(cache)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.strip_prefix("models--").map(|r| r.replacen("--", "/", 1))
                    })
                    .collect()
            })
            .unwrap_or_default();
        repos.sort();
        for repo in repos {
            if let Some(files) = aria_core::hub::snapshots(cache, &repo)
                .iter()
                .find_map(|s| complete(s))
            {
                let name = repo
                    .strip_prefix("stabilityai/stable-audio-3-")
                    .filter(|n| aria_dit::config::ModelConfig::PRESETS.contains(n))
                    .map_or_else(|| repo.clone(), str::to_string);
                if !found.iter().any(|f: &FoundModel| f.files == files) {
                    found.push(FoundModel {
                        name,
                        source: ModelSource::HubCache,
                        files,
                    });
                }
            }
        }
    }
    for root in &search.local_roots {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        dirs.sort();
        for d in dirs.into_iter().filter(|d| d.is_dir()) {
            if let Some(files) = complete(&d) {
                if !found.iter().any(|f| f.files == files) {
                    found.push(FoundModel {
                        name: d.display().to_string(),
                        source: ModelSource::Local,
                        files,
                    });
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"{}").unwrap();
    }

    #[test]
    fn finds_a_hub_snapshot_and_reports_what_is_missing() {
        let root = aria_testing::TempDir::new("discover");
        let cache = root.join("hub");
        let snap = cache.join("models--stabilityai--stable-audio-3-small-music/snapshots/abc");
        touch(&snap.join("model_config.json"));
        let search = SearchPaths {
            hub_caches: vec![cache.clone()],
            local_roots: vec![root.to_path_buf()],
        };
        let err = resolve_model("small-music", &search)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("model.safetensors") && err.contains("abc"),
            "{err}"
        );
        assert!(err.contains("t5gemma-b-b-ul2/tokenizer.json"), "{err}");
        touch(&snap.join("model.safetensors"));
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            touch(&snap.join("t5gemma-b-b-ul2").join(f));
        }
        let found = resolve_model("small-music", &search).unwrap();
        assert_eq!(found.dir, snap);
        let listed = find_models(&search);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].name, "small-music");
        assert_eq!(listed[0].source, ModelSource::HubCache);
        assert_eq!(listed[0].files, found);
        assert_eq!(found.t5_dir, snap.join("t5gemma-b-b-ul2"));
        let err = resolve_model("medium", &search).unwrap_err().to_string();
        assert!(
            err.contains("models--stabilityai--stable-audio-3-medium"),
            "{err}"
        );
        let err = resolve_model("no-such-model", &search)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no-such-model"), "{err}");
    }
}
