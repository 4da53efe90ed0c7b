//! [`quantize_model`]: write a pre-quantized model folder.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use aria_core::{Tensor, WeightLoader};
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;
use aria_quant::io::{write_packed, Entry, PackMeta};
use aria_quant::{PackedMatrix, Xxh64};

use super::{qerr, WeightPrecision};
use crate::discover::ModelFiles;
use crate::{Error, Result};

/// What [`quantize_model`] wrote.
#[derive(Debug, Clone)]
pub struct QuantizeSummary {
    /// The new model folder.
    pub dir: PathBuf,
    /// The policy.
    pub precision: WeightPrecision,
    /// Packed tensors per format tag.
    pub formats: BTreeMap<String, usize>,
    /// Tensors written as they were.
    pub dense_tensors: usize,
    /// Bytes of the packed weights' source tensors.
    pub source_bytes: usize,
    /// Bytes of the packed weights.
    pub packed_bytes: usize,
    /// The source checksum recorded in the file (XXH64 of the source weight files).
    pub source: String,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// XXH64 of the bytes of `paths`, in order, read in 1 MiB pieces (nothing stays resident).
pub(super) fn source_checksum(paths: &[PathBuf]) -> Result<String> {
    let mut h = Xxh64::new(0);
    let mut buf = vec![0u8; 1 << 20];
    for p in paths {
        let mut f = std::fs::File::open(p).map_err(io_err(p))?;
        loop {
            let n = f.read(&mut buf).map_err(io_err(p))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(format!("{:016x}", h.finish()))
}

/// The weight files of a checkpoint (the file, or the shards of an index, sorted).
fn weight_files(weights: &Path) -> Result<Vec<PathBuf>> {
    if !weights.to_string_lossy().ends_with(".index.json") {
        return Ok(vec![weights.to_path_buf()]);
    }
    let v = aria_core::config::read_json(weights)?;
    let dir = weights.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.values()
                .filter_map(|f| f.as_str())
                .map(|f| dir.join(f))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Link `src` to `dst` (a hard link; a copy across file systems).
fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    if std::fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst).map_err(io_err(src))?;
    Ok(())
}

fn link_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst).map_err(io_err(dst))?;
    for e in std::fs::read_dir(src).map_err(io_err(src))? {
        let e = e.map_err(io_err(src))?;
        let p = e.path();
        let to = dst.join(e.file_name());
        if p.is_dir() {
            link_dir(&p, &to)?;
        } else {
            link_or_copy(&p, &to)?;
        }
    }
    Ok(())
}

/// Write a pre-quantized copy of the model folder `files` to `out` at a packed `precision`
/// (`q8`, `q4`, `q4-mixed`): `out/model.safetensors` holds the DiT linears the policy packs as
/// U8 blocks and every other tensor as it was, with the container version, policy and the
/// source checksum in its metadata; `model_config.json` and the text-encoder folder are
/// linked or copied. `out` must not hold a model already. `progress(done, total)` counts DiT
/// linears.
pub fn quantize_model(
    files: &ModelFiles,
    precision: WeightPrecision,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<QuantizeSummary> {
    let policy = precision.policy().ok_or_else(|| {
        Error::Input(format!(
            "quantize writes a packed precision (q8, q4, q4-mixed), not {precision}"
        ))
    })?;
    let target = out.join("model.safetensors");
    if target.exists() || out.join("model.safetensors.index.json").exists() {
        return Err(Error::Input(format!(
            "{} already holds a model; choose an empty or new folder",
            out.display()
        )));
    }
    let weights = WeightLoader::open_checkpoint(&files.weights)?;
    if let Some(p) = super::packed_policy(&weights)? {
        return Err(Error::Input(format!(
            "{} is already pre-quantized ({p}); quantize the original checkpoint",
            files.weights.display()
        )));
    }
    let source = source_checksum(&weight_files(&files.weights)?)?;
    let config = ModelConfig::from_file(&files.config)?;
    let dit = Dit::load(&config.model.diffusion.config, &weights.pp("model.model"))?;
    let layers: Vec<(String, [usize; 2])> = dit
        .linears()
        .into_iter()
        .map(|l| (format!("{}.weight", l.name()), l.weight().shape()))
        .collect();
    drop(dit);
    let mut packed: BTreeMap<String, PackedMatrix> = BTreeMap::new();
    let mut formats: BTreeMap<String, usize> = BTreeMap::new();
    let (mut source_bytes, mut packed_bytes) = (0usize, 0usize);
    let total = layers.len();
    for (i, (key, shape)) in layers.iter().enumerate() {
        progress(i, total);
        let Some(f) = policy.format_for(key, *shape) else {
            continue;
        };
        let w = weights.get_any(key)?;
        let w = if w.rank() == 3 { w.reshape(shape)? } else { w };
        let m = PackedMatrix::quantize(key, &w, f).map_err(qerr)?;
        source_bytes += w.elem_count() * w.dtype().size();
        packed_bytes += m.nbytes();
        drop(w);
        weights.release(key)?;
        *formats.entry(f.tag()).or_default() += 1;
        packed.insert(key.clone(), m);
    }
    progress(total, total);
    let names = weights.names();
    let dense: Vec<(String, Tensor)> = names
        .iter()
        .filter(|n| !packed.contains_key(*n))
        .map(|n| weights.get_any(n).map(|t| (n.clone(), t)))
        .collect::<aria_core::Result<_>>()?;
    let mut entries: Vec<(&str, Entry<'_>)> = Vec::with_capacity(names.len());
    for (n, m) in &packed {
        entries.push((n.as_str(), Entry::Packed(m)));
    }
    for (n, t) in &dense {
        entries.push((n.as_str(), Entry::Dense(t)));
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    write_packed(
        &target,
        &entries,
        &PackMeta {
            policy: policy.name().to_string(),
            source: source.clone(),
        },
    )
    .map_err(qerr)?;
    link_or_copy(&files.config, &out.join("model_config.json"))?;
    let t5_rel = files
        .t5_dir
        .strip_prefix(&files.dir)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(crate::synth::T5_FOLDER));
    link_dir(&files.t5_dir, &out.join(t5_rel))?;
    Ok(QuantizeSummary {
        dir: out.to_path_buf(),
        precision,
        formats,
        dense_tensors: dense.len(),
        source_bytes,
        packed_bytes,
        source,
    })
}
