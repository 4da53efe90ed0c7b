//! The identity of a model, as recorded in direction files: a signature of its DiT
//! configuration and tensor layout plus a checksum of the DiT weights.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::path::Path;

use aria_core::{CoreError, DType, WeightLoader};

use crate::{Result, SteerError};

/// Widths of the sites a direction can be applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDims {
    /// DiT width `E` (residual directions).
    pub embed_dim: usize,
    /// Number of DiT blocks.
    pub depth: usize,
    /// Latent channels `C` (latent directions).
    pub io_channels: usize,
    /// Width of the cross-attention conditioning `Dc` (text directions).
    pub cond_token_dim: usize,
}

/// Who a direction was extracted from.
///
/// * `signature`: FNV-1a 64 of the canonical (key-sorted, compact) JSON of the DiT
///   configuration, followed by every DiT tensor's name, dtype and shape in name order;
/// * `weight_checksum`: FNV-1a 64 over the DiT tensors' stored bytes in name order — the whole
///   tensor up to 64 KiB, else 32 windows of 2 KiB spread evenly over it (so it stays cheap on
///   multi-gigabyte checkpoints while any fine-tune, merge or re-quantization changes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// Site widths.
    pub dims: ModelDims,
    /// Configuration and tensor-layout signature (16 hex digits).
    pub signature: String,
    /// Weight checksum (16 hex digits).
    pub weight_checksum: String,
}

/// 64-bit FNV-1a, streamed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    pub(crate) fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(*k) {
                    canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

const WHOLE: usize = 64 * 1024;
const WINDOWS: usize = 32;
const WINDOW: usize = 2048;

impl ModelIdentity {
    /// The identity of a DiT: `config` is its configuration (the `model.diffusion.config`
    /// object of `model_config.json`), `dit` a loader scoped to its tensors (`model.model` of a
    /// full checkpoint). Tensors must be on the host (as loaded).
    pub fn compute(dims: ModelDims, config: &Value, dit: &WeightLoader) -> Result<Self> {
        let mut sig = Fnv::new();
        let mut text = String::new();
        canonical(config, &mut text);
        sig.bytes(text.as_bytes());
        let mut sum = Fnv::new();
        for name in dit.names() {
            let (_, info) = dit.info(&name)?;
            sig.bytes(name.as_bytes());
            sig.bytes(format!("|{}|{:?};", dtype_name(info.dtype), info.shape).as_bytes());
            let t = dit.with_dtype(None).get_any(&name)?;
            let b = t.as_bytes()?;
            if b.len() <= WHOLE {
                sum.bytes(b);
            } else {
                let stride = (b.len() - WINDOW) / (WINDOWS - 1);
                for w in 0..WINDOWS {
                    let s = w * stride;
                    sum.bytes(&b[s..s + WINDOW]);
                }
            }
        }
        Ok(ModelIdentity {
            dims,
            signature: sig.hex(),
            weight_checksum: sum.hex(),
        })
    }
}

impl ModelIdentity {
    /// The identity of the DiT of a model folder's files: `model_config.json` (its
    /// `model.diffusion.config` object) and the checkpoint (a `.safetensors` file or shard
    /// index; DiT tensors under `model.model`).
    pub fn from_model_files(config: &Path, weights: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(config).map_err(|source| CoreError::Io {
            path: config.to_path_buf(),
            source,
        })?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| SteerError::Invalid(format!("{}: not JSON: {e}", config.display())))?;
        let cfg = v
            .pointer("/model/diffusion/config")
            .ok_or_else(|| {
                SteerError::Invalid(format!(
                    "{}: no model.diffusion.config object",
                    config.display()
                ))
            })?
            .clone();
        let dim = |k: &str| -> Result<usize> {
            cfg.get(k)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| {
                    SteerError::Invalid(format!(
                        "{}: model.diffusion.config.{k} is missing or not an integer",
                        config.display()
                    ))
                })
        };
        let dims = ModelDims {
            embed_dim: dim("embed_dim")?,
            depth: dim("depth")?,
            io_channels: dim("io_channels")?,
            cond_token_dim: dim("cond_token_dim")?,
        };
        let loader = WeightLoader::open_checkpoint(weights)?.pp("model.model");
        if loader.names().is_empty() {
            return Err(SteerError::Invalid(format!(
                "{}: no DiT tensors under `model.model`",
                weights.display()
            )));
        }
        Self::compute(dims, &cfg, &loader)
    }
}

fn dtype_name(d: DType) -> String {
    format!("{d}")
}
