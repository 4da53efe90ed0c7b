//! Helpers to read JSON configuration files (`model_config.json`, `config.json`) with errors
//! that name the file and the key.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::{CoreError, Result};

/// Read and parse a JSON file.
pub fn read_json(path: impl AsRef<Path>) -> Result<serde_json::Value> {
    read_config(path)
}

/// Read a JSON file into a typed config. Parser errors (unknown or missing keys, wrong types)
/// carry the file name and serde's description of the key.
pub fn read_config<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| CoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| CoreError::Json {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Follow a `/`-separated key path in a JSON value, with an error naming the file and the key.
pub fn json_path<'a>(
    v: &'a serde_json::Value,
    path: &Path,
    keys: &str,
) -> Result<&'a serde_json::Value> {
    let mut cur = v;
    for k in keys.split('/') {
        cur = cur.get(k).ok_or_else(|| CoreError::Json {
            path: path.to_path_buf(),
            reason: format!("missing key `{keys}`"),
        })?;
    }
    Ok(cur)
}
